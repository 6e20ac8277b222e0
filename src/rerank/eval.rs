//! The built-in evaluation of `ctxprune eval`: a seeded generator of diffuse queries and
//! a runner that scores every method per budget and capacity.
//!
//! Each problem: `N` documents in `d` dimensions around 24 topic centres; a diffuse query
//! between two topics; true relevance with three modes — the query's two topics and one
//! topic far from the query (`rel(x) = max_m w_m exp(6 (cos(x, p_m) - 1))`); graded
//! labels 0–3 from it; an oracle `clamp(rel + N(0, 0.05²), 0, 1)`; and an imperfect MIPS
//! order (`cos(x, q) + N(0, 0.05²)`), which is the pool's row order.

use super::metrics::ncg;
use super::{Acquisition, KernelChoice, Method, Precomputed, Prior, RerankConfig, Reranker};
use crate::backend::Engine;
use crate::embeddings::Embeddings;
use crate::error::{Error, Result};
use crate::pool::Pool;
use crate::rng::Rng;
use crate::similarity::{Kernel, KernelKind};

/// One generated problem.
pub struct Problem {
    /// The pool (rows in MIPS order), on the CPU engine.
    pub pool: Pool,
    /// The query (unit).
    pub query: Vec<f32>,
    /// The GP's kernel (vMF, median heuristic).
    pub kernel: Kernel,
    /// Oracle scores in `[0, 1]`, in pool order.
    pub oracle: Vec<f64>,
    /// Graded labels 0–3, in pool order.
    pub labels: Vec<f64>,
}

fn unit(v: Vec<f64>) -> Vec<f64> {
    let n = v.iter().map(|x| x * x).sum::<f64>().sqrt().max(1e-300);
    v.into_iter().map(|x| x / n).collect()
}

fn cos(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// A seeded problem of `n` documents in `d` dimensions.
pub fn generate(n: usize, d: usize, seed: u64) -> Result<Problem> {
    let mut rng = Rng::new(seed);
    let topics = 24;
    let g = |rng: &mut Rng| unit((0..d).map(|_| rng.normal()).collect());
    let centres: Vec<Vec<f64>> = (0..topics).map(|_| g(&mut rng)).collect();
    let q = unit(
        (0..d)
            .map(|k| centres[0][k] + centres[1][k] + 0.5 * rng.normal() / (d as f64).sqrt())
            .collect(),
    );
    let far = (2..topics).fold(2, |b, t| {
        if cos(&centres[t], &q) < cos(&centres[b], &q) {
            t
        } else {
            b
        }
    });
    let peaks = [(0usize, 1.0), (1, 0.8), (far, 0.9)];
    let mut docs = Vec::with_capacity(n);
    for _ in 0..n {
        let t = rng.below(topics);
        let spread = 0.8 + 0.8 * rng.uniform();
        docs.push(unit(
            (0..d)
                .map(|k| centres[t][k] + spread * rng.normal() / (d as f64).sqrt())
                .collect(),
        ));
    }
    let rel: Vec<f64> = docs
        .iter()
        .map(|x| {
            peaks
                .iter()
                .map(|&(p, w)| w * (6.0 * (cos(x, &centres[p]) - 1.0)).exp())
                .fold(0.0, f64::max)
        })
        .collect();
    let mips: Vec<f64> = docs.iter().map(|x| cos(x, &q) + 0.05 * rng.normal()).collect();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| mips[b].total_cmp(&mips[a]).then(a.cmp(&b)));
    let rows: Vec<Vec<f32>> = order
        .iter()
        .map(|&i| docs[i].iter().map(|&v| v as f32).collect())
        .collect();
    let e = Embeddings::from_rows(&rows, "eval")?;
    let pool = Pool::new(&Engine::cpu(), e)?;
    let query: Vec<f32> = q.iter().map(|&v| v as f32).collect();
    let kernel = Kernel::from_median(KernelKind::Vmf, pool.median_one_minus_cos()?);
    let oracle = order
        .iter()
        .map(|&i| (rel[i] + 0.05 * rng.normal()).clamp(0.0, 1.0))
        .collect();
    let labels = order
        .iter()
        .map(|&i| match rel[i] {
            r if r > 0.7 => 3.0,
            r if r > 0.5 => 2.0,
            r if r > 0.3 => 1.0,
            _ => 0.0,
        })
        .collect();
    Ok(Problem {
        pool,
        query,
        kernel,
        oracle,
        labels,
    })
}

/// A method as the evaluation runs it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Variant {
    /// Name in the table.
    pub name: &'static str,
    method: Method,
    prior: Prior,
    acquisition: Acquisition,
    beta0: f64,
}

/// BAGEL's `beta0` sweep (SPEC §3); the table keeps the best per cell.
pub const BAGEL_BETAS: [f64; 4] = [0.0, 0.5, 1.0, 2.0];

/// Every method and ablation the evaluation runs.
#[must_use]
pub fn variants() -> Vec<Variant> {
    let v = |name, method, prior, acquisition, beta0| Variant {
        name,
        method,
        prior,
        acquisition,
        beta0,
    };
    let mut out = vec![
        v(
            "single-stage",
            Method::SingleStage,
            Prior::Mips,
            Acquisition::Boundary,
            1.0,
        ),
        v("rgs", Method::Rgs, Prior::Mips, Acquisition::Boundary, 1.0),
    ];
    for (i, &b) in BAGEL_BETAS.iter().enumerate() {
        let name = ["bagel(b0=0)", "bagel(b0=0.5)", "bagel(b0=1)", "bagel(b0=2)"][i];
        out.push(v(name, Method::Bagel, Prior::Zero, Acquisition::Ucb, b));
    }
    out.push(v(
        "boundary-morph",
        Method::BoundaryMorph,
        Prior::Mips,
        Acquisition::Boundary,
        1.0,
    ));
    out.push(v(
        "ablation:no-prior",
        Method::BoundaryMorph,
        Prior::Zero,
        Acquisition::Boundary,
        1.0,
    ));
    out.push(v(
        "ablation:ucb",
        Method::BoundaryMorph,
        Prior::Mips,
        Acquisition::Ucb,
        1.0,
    ));
    out
}

/// Mean quality of one method in one cell.
#[derive(Clone, Debug, PartialEq)]
pub struct Cell {
    /// Method name.
    pub method: String,
    /// Oracle budget.
    pub budget: usize,
    /// Capacity.
    pub capacity: usize,
    /// Mean CE-nCG@k.
    pub ce_ncg: f64,
    /// Mean nCG@k against the graded labels.
    pub ncg: f64,
}

/// The seeds of `problems` problems from `seed` on: `seed..=seed + problems - 1`, checked
/// (errors name `problems`, at least 1, or `seed`, when the last seed would pass
/// `u64::MAX`).
pub fn seeds(seed: u64, problems: usize) -> Result<std::ops::RangeInclusive<u64>> {
    let more = problems
        .checked_sub(1)
        .ok_or_else(|| Error::invalid("problems", "must be at least 1"))?;
    let last = u64::try_from(more)
        .ok()
        .and_then(|m| seed.checked_add(m))
        .ok_or_else(|| {
            Error::invalid(
                "seed",
                format!(
                    "{seed} + {problems} problems - 1 exceeds the largest seed, {}",
                    u64::MAX
                ),
            )
        })?;
    Ok(seed..=last)
}

/// Checks [`run`]'s arguments before any work: [`seeds`]; `n >= 1`; every budget in
/// `0..=n` and every capacity in `1..=n` (a budget above the pool is an error, not capped),
/// neither list empty nor with a repeated element. Errors name `problems`, `seed`, `n`,
/// `budgets` or `capacities` and the element.
pub fn check(problems: usize, seed: u64, n: usize, budgets: &[usize], capacities: &[usize]) -> Result<()> {
    seeds(seed, problems)?;
    if n == 0 {
        return Err(Error::invalid("n", "the pool must have at least 1 document"));
    }
    for (name, xs, lo) in [("budgets", budgets, 0), ("capacities", capacities, 1)] {
        if xs.is_empty() {
            return Err(Error::invalid(name, "is empty"));
        }
        for (i, &x) in xs.iter().enumerate() {
            if !(lo..=n).contains(&x) {
                return Err(Error::invalid(
                    name,
                    format!("element {i} ({x}) is outside {lo}..={n} (the pool has {n} documents)"),
                ));
            }
            if let Some(j) = xs[..i].iter().position(|&y| y == x) {
                return Err(Error::invalid(
                    name,
                    format!("element {i} ({x}) repeats element {j}"),
                ));
            }
        }
    }
    Ok(())
}

/// Where [`run_steps`] is: one method has just run on one problem.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Step {
    /// The problem (1-based) and how many there are.
    pub problem: usize,
    /// How many problems there are.
    pub problems: usize,
    /// The method that ran.
    pub method: &'static str,
    /// Its budget.
    pub budget: usize,
    /// Its capacity.
    pub capacity: usize,
    /// Method runs done on this problem (1-based).
    pub run: usize,
    /// Method runs per problem: budgets × capacities × variants.
    pub runs: usize,
}

/// Runs every variant on `problems` seeded problems of `n` documents; `progress` is told
/// after each problem. As [`run_steps`].
pub fn run(
    problems: usize,
    seed: u64,
    n: usize,
    budgets: &[usize],
    capacities: &[usize],
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Vec<Cell>> {
    run_steps(problems, seed, n, budgets, capacities, &mut |s| {
        if s.run == s.runs {
            progress(s.problem, s.problems);
        }
    })
}

/// Runs every variant on `problems` seeded problems of `n` documents (seeds `seed`,
/// `seed + 1`, ...), after [`check`]ing the arguments; `progress` is told after each method
/// run (a run with budget B costs O(B² N): at B in the thousands one takes seconds).
pub fn run_steps(
    problems: usize,
    seed: u64,
    n: usize,
    budgets: &[usize],
    capacities: &[usize],
    progress: &mut dyn FnMut(&Step),
) -> Result<Vec<Cell>> {
    check(problems, seed, n, budgets, capacities)?;
    let vs = variants();
    let cells = vs
        .len()
        .checked_mul(budgets.len())
        .and_then(|c| c.checked_mul(capacities.len()))
        .ok_or_else(|| Error::invalid("budgets", "too many budgets × capacities"))?;
    let mut sums = vec![(0.0, 0.0); cells];
    for (p, s) in seeds(seed, problems)?.enumerate() {
        let prob = generate(n, 64, s)?;
        let mut slot = 0;
        for &b in budgets {
            for &k in capacities {
                for v in &vs {
                    let mut cfg = RerankConfig::new(v.method, b, k);
                    cfg.prior = v.prior;
                    cfg.acquisition = v.acquisition;
                    cfg.beta0 = v.beta0;
                    cfg.kernel = KernelChoice::Fixed(prob.kernel);
                    let mut o = Precomputed::new(prob.oracle.clone(), b)?;
                    let r =
                        Reranker::new(prob.pool.engine(), cfg)?.rerank(&prob.pool, &prob.query, &mut o)?;
                    sums[slot].0 += ncg(&r.selected, &prob.oracle);
                    sums[slot].1 += ncg(&r.selected, &prob.labels);
                    slot += 1;
                    progress(&Step {
                        problem: p + 1,
                        problems,
                        method: v.name,
                        budget: b,
                        capacity: k,
                        run: slot,
                        runs: cells,
                    });
                }
            }
        }
    }
    let mut out = Vec::new();
    let mut slot = 0;
    for &b in budgets {
        for &k in capacities {
            for v in &vs {
                let (c, g) = sums[slot];
                out.push(Cell {
                    method: v.name.to_string(),
                    budget: b,
                    capacity: k,
                    ce_ncg: c / problems as f64,
                    ncg: g / problems as f64,
                });
                slot += 1;
            }
        }
    }
    Ok(out)
}
