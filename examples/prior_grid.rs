//! BoundaryMORPH's prior and kernel concentration on a grid (dev aid; how auto's score
//! prior and doubled concentration were chosen, docs/rerank.md):
//!
//! ```text
//! cargo run --release --example prior_grid -- SET.safetensors GROUPS CONFIG...
//! ```
//!
//! `GROUPS` is a comma-separated list of noise levels of the problem set (its problems
//! at each) and of `diffuse` / `trap` (`ctxprune eval`'s 20 generated problems a mode),
//! optionally followed by `:even` or `:odd` for half of a set's problems. Each `CONFIG`
//! is `PRIOR:CONCENTRATION[:auto][:bf16|:f16]` (`mips`, `score`, `feedback`, `zero` or `adaptive`;
//! `auto` adds auto's switch; `bf16` / `f16` read kernel rows from that copy; `evidence`
//! fits the hyperparameters by the evidence; `qN` calls the oracle with `N` documents a
//! round, `batch = N`). `PRIOR_GRID_BASE=CONFIG` compares with that
//! config in place of BoundaryMORPH's defaults (`mips:1`); `PRIOR_GRID_SEED=S` draws a set's
//! simulated cross-encoder noise from seed `S` (default 1, `ctxprune eval`'s); `PRIOR_GRID_PER=1` prints every
//! cell's per-problem differences to stderr. For every config it prints the mean CE-nCG@k difference from
//! BoundaryMORPH's defaults over the cells B in {25, 50, 100} x k in {50, 100}, the
//! worst cell with the standard error of its mean difference (the per-problem
//! differences' standard deviation over the square root of their count: how far a cell's
//! mean moves with the problems' luck), the cells more than 0.005 below, and the mean at
//! each B; then every cell's difference (and standard error) for every config.
use ctxprune::rerank::eval::{generate_mode, Mode, Problem};
use ctxprune::rerank::eval_set::ProblemSet;
use ctxprune::rerank::metrics::ncg;
use ctxprune::rerank::{
    auto, Hyperparameters, KernelChoice, Method, Precomputed, Prior, RerankConfig, Reranker, RowPrecision,
};
use std::path::Path;

fn config(spec: &str, b: usize, k: usize, kernel: ctxprune::similarity::Kernel) -> RerankConfig {
    let f: Vec<&str> = spec.split(':').collect();
    let prior = match f[0] {
        "mips" => Prior::Mips,
        "score" => Prior::Score,
        "feedback" => Prior::Feedback,
        "zero" => Prior::Zero,
        "adaptive" => Prior::Adaptive,
        p => panic!("unknown prior {p}"),
    };
    let mut cfg = RerankConfig::new(Method::BoundaryMorph, b, k);
    cfg.prior = prior;
    cfg.kernel = KernelChoice::Fixed(kernel);
    cfg.concentration = f.get(1).map_or(1.0, |c| c.parse().expect("concentration"));
    for extra in f.iter().skip(2) {
        match *extra {
            "auto" => cfg.switch_below = Some(auto::AUTO_LOW_SCORE),
            "bf16" => cfg.row_precision = RowPrecision::Bf16,
            "f16" => cfg.row_precision = RowPrecision::F16,
            "evidence" => cfg.hyperparameters = Hyperparameters::Evidence,
            x if x.starts_with('q') => cfg.batch = x[1..].parse().unwrap(),
            x => panic!("unknown config field {x}"),
        }
    }

    cfg
}

fn problems(set: &ProblemSet, group: &str) -> Vec<Problem> {
    let (name, half) = group.split_once(':').unwrap_or((group, ""));
    let keep = |i: usize| match half {
        "even" => i % 2 == 0,
        "odd" => i % 2 == 1,
        _ => true,
    };
    match name {
        "diffuse" | "trap" => {
            assert!(
                half.is_empty(),
                "{group}: halves are of a set's questions, not of generated problems"
            );
            let mode = if name == "trap" { Mode::Trap } else { Mode::Diffuse };
            (1..=20)
                .map(|s| generate_mode(10_000, 64, s, mode).unwrap())
                .collect()
        }
        noise => {
            let noise: f64 = noise.parse().expect("a noise level, diffuse or trap");
            (0..set.len())
                .filter(|&i| keep(i))
                .map(|i| set.problem(i, noise, seed()).unwrap())
                .collect()
        }
    }
}

/// The seed of a set's simulated cross-encoder (`PRIOR_GRID_SEED`, by default 1 as in
/// `ctxprune eval`): problem `i` draws its noise from `seed + i`.
fn seed() -> u64 {
    std::env::var("PRIOR_GRID_SEED").map_or(1, |s| s.parse().expect("PRIOR_GRID_SEED: an integer"))
}

/// A cell: its budget, each config's mean difference from BM with its standard error, and
/// its name.
type Cell = (usize, Vec<(f64, f64)>, String);

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    assert!(
        args.len() >= 3,
        "usage: prior_grid SET.safetensors GROUPS CONFIG..."
    );
    let set = ProblemSet::load(Path::new(&args[0])).unwrap();
    let configs = &args[2..];
    let base = std::env::var("PRIOR_GRID_BASE").unwrap_or_else(|_| "mips:1".into());
    let mut cells: Vec<Cell> = Vec::new();
    for group in args[1].split(',') {
        let probs = problems(&set, group);
        for b in [25usize, 50, 100] {
            for k in [50usize, 100] {
                let each = |spec: &str| -> Vec<f64> {
                    probs
                        .iter()
                        .map(|p| {
                            let cfg = config(spec, b, k, p.kernel);
                            let mut o = Precomputed::new(p.oracle.clone(), b).unwrap();
                            let r = Reranker::new(p.pool.engine(), cfg)
                                .unwrap()
                                .rerank(&p.pool, &p.query, &mut o)
                                .unwrap();
                            ncg(&r.selected, &p.oracle)
                        })
                        .collect()
                };
                let bm = each(&base);
                let diff = |spec: &str| {
                    let d: Vec<f64> = each(spec).iter().zip(&bm).map(|(c, b)| c - b).collect();
                    if std::env::var("PRIOR_GRID_PER").is_ok() {
                        let v: Vec<String> = d.iter().map(|x| format!("{x:+.2}")).collect();
                        eprintln!("{spec} B={b} k={k}: {}", v.join(" "));
                    }
                    let n = d.len() as f64;
                    let m = d.iter().sum::<f64>() / n;
                    let var = d.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (n - 1.0).max(1.0);
                    (m, (var / n).sqrt())
                };
                cells.push((
                    b,
                    configs.iter().map(|c| diff(c)).collect(),
                    format!("{group} B={b} k={k}"),
                ));
            }
        }
    }
    for (i, c) in configs.iter().enumerate() {
        let d: Vec<f64> = cells.iter().map(|x| x.1[i].0).collect();
        let at = |b: usize| {
            let v: Vec<f64> = cells.iter().filter(|x| x.0 == b).map(|x| x.1[i].0).collect();
            v.iter().sum::<f64>() / v.len() as f64
        };
        let worst = (0..d.len()).min_by(|&a, &b| d[a].total_cmp(&d[b])).unwrap();
        println!(
            "{c:18} mean {:+.4} worst {:+.4} (se {:.4}, {}) below -0.005: {:2} | B=25 {:+.4} B=50 {:+.4} B=100 {:+.4}",
            d.iter().sum::<f64>() / d.len() as f64,
            d[worst],
            cells[worst].1[i].1,
            cells[worst].2,
            d.iter().filter(|&&x| x < -0.005).count(),
            at(25),
            at(50),
            at(100)
        );
    }
    for (_, diffs, name) in &cells {
        let row: Vec<String> = diffs.iter().map(|(m, se)| format!("{m:+.4} ({se:.4})")).collect();
        println!("{name:24} {}", row.join("  "));
    }
}
