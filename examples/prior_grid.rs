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
//! round, `batch = N`; `vF` spends the last share `F` of the budget verifying the top-k,
//! `verify = F`; `nS` takes the share `S` of the feedback prior from the relevant
//! documents' neighbourhoods, `feedback_neighbours = S`: auto is `feedback:2:auto:n0.3`). `PRIOR_GRID_BASE=CONFIG` compares with that
//! config in place of BoundaryMORPH's defaults (`mips:1`); `PRIOR_GRID_SEED=S` draws a set's
//! simulated cross-encoder noise from seed `S` (default 1, `ctxprune eval`'s); `PRIOR_GRID_PER=1` prints every
//! cell's per-problem differences to stderr. For every config it prints the mean CE-nCG@k difference from
//! BoundaryMORPH's defaults over the cells B in {25, 50, 100} x k in {50, 100}, the
//! worst cell with the standard error of its mean difference (the per-problem
//! differences' standard deviation over the square root of their count: how far a cell's
//! mean moves with the problems' luck), the cells more than 0.005 below, and the mean at
//! each B; then every cell's difference (and standard error) for every config.
//!
//! `PRIOR_GRID_SEEDS=S1,S2,...` (in place of `PRIOR_GRID_SEED`; a set's groups only, as
//! the generated problems have no draws) runs that output once a draw, after a line
//! `draw seed S`, and then, for every config, the means over the draws with their
//! standard errors (the per-draw means' standard deviation over the square root of the
//! draws) and the range of the per-draw means, the range of the cells' means over the
//! draws, and how many cells of single draws are more than 0.005 below, with the lowest:
//!
//! ```text
//! PRIOR_GRID_SEEDS=1,1001,2001 cargo run --release --example prior_grid -- \
//!     target/pytext.safetensors 0.05,0.15,0.3 feedback:2:auto:n0.3
//! ```
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
            x if x.starts_with('v') => cfg.verify = x[1..].parse().unwrap(),
            x if x.starts_with('n') => cfg.feedback_neighbours = x[1..].parse().unwrap(),
            x => panic!("unknown config field {x}"),
        }
    }

    cfg
}

fn problems(set: &ProblemSet, group: &str, seed: u64) -> Vec<Problem> {
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
                .map(|i| set.problem(i, noise, seed).unwrap())
                .collect()
        }
    }
}

/// The seeds of a set's simulated cross-encoder, one a draw (`PRIOR_GRID_SEEDS`, else
/// `PRIOR_GRID_SEED`, by default 1 as in `ctxprune eval`): problem `i` of the draw with
/// seed `s` draws its noise from `s + i`.
fn seeds() -> Vec<u64> {
    let one = |s: &str, var: &str| -> u64 {
        s.trim()
            .parse()
            .unwrap_or_else(|_| panic!("{var}: {s:?} is not a seed (an unsigned integer)"))
    };
    match (
        std::env::var("PRIOR_GRID_SEEDS"),
        std::env::var("PRIOR_GRID_SEED"),
    ) {
        (Ok(_), Ok(_)) => panic!("PRIOR_GRID_SEEDS and PRIOR_GRID_SEED are both set: set one"),
        (Ok(list), _) => {
            let v: Vec<u64> = list.split(',').map(|s| one(s, "PRIOR_GRID_SEEDS")).collect();
            if let Some(d) = v
                .iter()
                .enumerate()
                .find_map(|(i, s)| v[..i].contains(s).then_some(s))
            {
                panic!("PRIOR_GRID_SEEDS: seed {d} is given twice");
            }
            v
        }
        (_, Ok(s)) => vec![one(&s, "PRIOR_GRID_SEED")],
        _ => vec![1],
    }
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
    let seeds = seeds();
    let generated = args[1]
        .split(',')
        .any(|g| matches!(g.split(':').next(), Some("diffuse" | "trap")));
    assert!(
        seeds.len() == 1 || !generated,
        "PRIOR_GRID_SEEDS: the generated problems (diffuse, trap) have no draws of the noise; run them without it"
    );
    let mut draws: Vec<Vec<Cell>> = Vec::new();
    for &seed in &seeds {
        if seeds.len() > 1 {
            println!("draw seed {seed}");
        }
        let cells = grid(&set, &args[1], configs, &base, seed);
        report(&cells, configs);
        draws.push(cells);
    }
    if seeds.len() > 1 {
        over_draws(&draws, &seeds, configs);
    }
}

/// Every cell of `groups` at one draw (`seed`): each config's mean difference from `base`.
fn grid(set: &ProblemSet, groups: &str, configs: &[String], base: &str, seed: u64) -> Vec<Cell> {
    let mut cells: Vec<Cell> = Vec::new();
    for group in groups.split(',') {
        let probs = problems(set, group, seed);
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
                let bm = each(base);
                let diff = |spec: &str| {
                    let d: Vec<f64> = each(spec).iter().zip(&bm).map(|(c, b)| c - b).collect();
                    if std::env::var("PRIOR_GRID_PER").is_ok() {
                        let v: Vec<String> = d.iter().map(|x| format!("{x:+.2}")).collect();
                        eprintln!("{spec} B={b} k={k}: {}", v.join(" "));
                    }
                    mean_se(&d)
                };
                cells.push((
                    b,
                    configs.iter().map(|c| diff(c)).collect(),
                    format!("{group} B={b} k={k}"),
                ));
            }
        }
    }
    cells
}

/// The mean of `d` and its standard error (the sample standard deviation over `sqrt(n)`;
/// 0 for one value).
fn mean_se(d: &[f64]) -> (f64, f64) {
    let n = d.len() as f64;
    let m = d.iter().sum::<f64>() / n;
    let var = d.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (n - 1.0).max(1.0);
    (m, (var / n).sqrt())
}

/// Config `i`'s mean over `cells`, and over those at each budget.
fn means(cells: &[Cell], i: usize) -> [f64; 4] {
    let at = |keep: &dyn Fn(usize) -> bool| {
        let v: Vec<f64> = cells.iter().filter(|x| keep(x.0)).map(|x| x.1[i].0).collect();
        v.iter().sum::<f64>() / v.len() as f64
    };
    [
        at(&|_| true),
        at(&|b| b == 25),
        at(&|b| b == 50),
        at(&|b| b == 100),
    ]
}

/// One draw's summary line a config, then every cell.
fn report(cells: &[Cell], configs: &[String]) {
    for (i, c) in configs.iter().enumerate() {
        let d: Vec<f64> = cells.iter().map(|x| x.1[i].0).collect();
        let m = means(cells, i);
        let worst = (0..d.len()).min_by(|&a, &b| d[a].total_cmp(&d[b])).unwrap();
        println!(
            "{c:18} mean {:+.4} worst {:+.4} (se {:.4}, {}) below -0.005: {:2} | B=25 {:+.4} B=50 {:+.4} B=100 {:+.4}",
            m[0],
            d[worst],
            cells[worst].1[i].1,
            cells[worst].2,
            d.iter().filter(|&&x| x < -0.005).count(),
            m[1],
            m[2],
            m[3]
        );
    }
    for (_, diffs, name) in cells {
        let row: Vec<String> = diffs.iter().map(|(m, se)| format!("{m:+.4} ({se:.4})")).collect();
        println!("{name:24} {}", row.join("  "));
    }
}

/// Every config over the draws: the means with their standard errors over the draws, the
/// per-draw means' range, the cells' means over the draws, and the cells of single draws
/// more than 0.005 below.
fn over_draws(draws: &[Vec<Cell>], seeds: &[u64], configs: &[String]) {
    let list: Vec<String> = seeds.iter().map(u64::to_string).collect();
    println!("over {} draws (seeds {})", draws.len(), list.join(", "));
    for (i, c) in configs.iter().enumerate() {
        let per: Vec<[f64; 4]> = draws.iter().map(|cells| means(cells, i)).collect();
        let at = |j: usize| mean_se(&per.iter().map(|m| m[j]).collect::<Vec<f64>>());
        let (lo, hi) = per.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), m| {
            (a.min(m[0]), b.max(m[0]))
        });
        let names = &draws[0];
        let cell_means: Vec<f64> = (0..names.len())
            .map(|x| draws.iter().map(|cells| cells[x].1[i].0).sum::<f64>() / draws.len() as f64)
            .collect();
        let low = (0..cell_means.len())
            .min_by(|&a, &b| cell_means[a].total_cmp(&cell_means[b]))
            .unwrap();
        let high = (0..cell_means.len())
            .max_by(|&a, &b| cell_means[a].total_cmp(&cell_means[b]))
            .unwrap();
        let single: Vec<(f64, u64, &str)> = draws
            .iter()
            .zip(seeds)
            .flat_map(|(cells, &s)| cells.iter().map(move |x| (x.1[i].0, s, x.2.as_str())))
            .collect();
        let below = single.iter().filter(|x| x.0 < -0.005).count();
        let lowest = single.iter().min_by(|a, b| a.0.total_cmp(&b.0)).unwrap();
        let (m, b25, b50, b100) = (at(0), at(1), at(2), at(3));
        println!(
            "{c:18} mean {:+.4} ± {:.4} (draws {:+.4} … {:+.4}) | B=25 {:+.4} ± {:.4} B=50 {:+.4} ± {:.4} B=100 {:+.4} ± {:.4} | cell means {:+.4} ({}) … {:+.4} ({}) | single-draw cells below -0.005: {below} of {}, lowest {:+.4} (seed {}, {})",
            m.0, m.1, lo, hi, b25.0, b25.1, b50.0, b50.1, b100.0, b100.1,
            cell_means[low], names[low].2, cell_means[high], names[high].2,
            single.len(), lowest.0, lowest.1, lowest.2
        );
    }
}
