//! The built-in evaluation of `ctxprune eval`: a seeded generator of diffuse queries and
//! a runner that scores every method per budget and capacity.
//!
//! Each problem: `N` documents in `d` dimensions around 24 topic centres; a diffuse query
//! between two topics; true relevance with three modes (`rel(x) = max_m w_m exp(6 (cos(x,
//! p_m) - 1))`); graded labels 0–3 from it; an oracle `clamp(rel + N(0, 0.05²), 0, 1)`;
//! and an imperfect MIPS order (`cos(x, q) + N(0, 0.05²)`), which is the pool's row order.
//! Each document also has a token count, `round(exp(N(ln 300, 0.6²)))` clamped to
//! `[20, 2000]`, drawn from a second stream (seed `seed ^ 0x7e57`), so the problems are the
//! same with or without them.
//!
//! Two modes ([`Mode`]):
//! - diffuse: the modes are the query's two topics (weights 1.0 and 0.8) and the topic
//!   farthest from the query (0.9);
//! - trap: the relevant mass sits away from the MIPS top: the query's two topics weigh 0.1
//!   each, and the 4th and 5th nearest other topics to the query 1.0 and 0.9. A MIPS prior
//!   holds the search where the oracle says little is.

use super::eval_set::ProblemSet;
use super::metrics::{ncg, ncg_tokens};
use super::{
    Acquisition, Hyperparameters, KernelChoice, Method, Precomputed, Prior, RerankConfig, Reranker,
    RowPrecision,
};
use crate::backend::Engine;
use crate::embeddings::Embeddings;
use crate::error::{Error, Result};
use crate::pool::Pool;
use crate::rng::Rng;
use crate::similarity::{Kernel, KernelKind};

/// Where a generated problem's relevance sits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// The query's two topics and one far topic.
    Diffuse,
    /// Mostly far from the query: the MIPS top is a trap.
    Trap,
}

impl Mode {
    /// The CLI name.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Mode::Diffuse => "diffuse",
            Mode::Trap => "trap",
        }
    }
}

impl std::str::FromStr for Mode {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "diffuse" => Ok(Mode::Diffuse),
            "trap" => Ok(Mode::Trap),
            _ => Err(Error::invalid(
                "modes",
                format!("unknown mode '{s}' (diffuse, trap)"),
            )),
        }
    }
}

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
    /// Token counts, in pool order.
    pub tokens: Vec<u64>,
}

fn unit(v: Vec<f64>) -> Vec<f64> {
    let n = v.iter().map(|x| x * x).sum::<f64>().sqrt().max(1e-300);
    v.into_iter().map(|x| x / n).collect()
}

fn cos(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// A seeded diffuse problem of `n` documents in `d` dimensions.
pub fn generate(n: usize, d: usize, seed: u64) -> Result<Problem> {
    generate_mode(n, d, seed, Mode::Diffuse)
}

/// A seeded problem of `n` documents in `d` dimensions in `mode`.
pub fn generate_mode(n: usize, d: usize, seed: u64, mode: Mode) -> Result<Problem> {
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
    // The topics other than the query's two, nearest the query first (ties by index).
    let mut by_near: Vec<usize> = (2..topics).collect();
    by_near.sort_by(|&a, &b| {
        cos(&centres[b], &q)
            .total_cmp(&cos(&centres[a], &q))
            .then(a.cmp(&b))
    });
    let peaks: Vec<(usize, f64)> = match mode {
        Mode::Diffuse => vec![(0, 1.0), (1, 0.8), (far, 0.9)],
        Mode::Trap => vec![(0, 0.1), (1, 0.1), (by_near[3], 1.0), (by_near[4], 0.9)],
    };
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
    let mut trng = Rng::new(seed ^ 0x7e57);
    let tokens = (0..n)
        .map(|_| ((300f64.ln() + 0.6 * trng.normal()).exp().round()).clamp(20.0, 2000.0) as u64)
        .collect();
    Ok(Problem {
        pool,
        query,
        kernel,
        oracle,
        labels,
        tokens,
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
    batch: usize,
    /// Probes for the adaptive prior, as a share of the budget (`B / probes_div`; 0: none).
    probes_div: usize,
    hyperparameters: Hyperparameters,
    /// `method = "auto"`'s switch ([`RerankConfig::switch_below`]).
    switch_below: Option<f64>,
    /// The kernel's concentration ([`RerankConfig::concentration`]).
    concentration: f32,
    /// The feedback prior's neighbour share ([`RerankConfig::feedback_neighbours`]).
    neighbours: f64,
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
        batch: 1,
        probes_div: 0,
        hyperparameters: Hyperparameters::Paper,
        switch_below: None,
        concentration: 1.0,
        neighbours: 0.0,
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
        v(
            "rgs-simple",
            Method::RgsSimple,
            Prior::Mips,
            Acquisition::Boundary,
            1.0,
        ),
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
    out.push(v(
        "bm(prior=adaptive)",
        Method::BoundaryMorph,
        Prior::Adaptive,
        Acquisition::Boundary,
        1.0,
    ));
    out.push(v(
        "bm(prior=score)",
        Method::BoundaryMorph,
        Prior::Score,
        Acquisition::Boundary,
        1.0,
    ));
    out.push(v(
        "bm(prior=feedback)",
        Method::BoundaryMorph,
        Prior::Feedback,
        Acquisition::Boundary,
        1.0,
    ));
    let mut probed = v(
        "bm(adaptive,probes)",
        Method::BoundaryMorph,
        Prior::Adaptive,
        Acquisition::Boundary,
        1.0,
    );
    probed.probes_div = 10;
    out.push(probed);
    for (prior, name) in [
        (Prior::Mips, "bm(evidence)"),
        (Prior::Zero, "bm(evidence,no-prior)"),
    ] {
        let mut e = v(name, Method::BoundaryMorph, prior, Acquisition::Boundary, 1.0);
        e.hyperparameters = Hyperparameters::Evidence;
        out.push(e);
    }
    let mut auto = v(
        "auto",
        Method::BoundaryMorph,
        Prior::Feedback,
        Acquisition::Boundary,
        1.0,
    );
    auto.switch_below = Some(super::auto::AUTO_LOW_SCORE);
    auto.concentration = super::auto::AUTO_CONCENTRATION;
    auto.neighbours = super::auto::AUTO_NEIGHBOURS;
    out.push(auto);
    for (q, name) in [(4, "bm(q=4)"), (8, "bm(q=8)"), (16, "bm(q=16)")] {
        let mut b = v(
            name,
            Method::BoundaryMorph,
            Prior::Mips,
            Acquisition::Boundary,
            1.0,
        );
        b.batch = q;
        out.push(b);
    }
    out
}

/// Mean quality of one method in one cell.
#[derive(Clone, Debug, PartialEq)]
pub struct Cell {
    /// The problems' group: a generated mode's name (`diffuse`, `trap`), or a problem
    /// set's at a noise (`<set>@<noise>`, [`run_set`]).
    pub set: String,
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
    /// Per problem, CE-nCG@k (for paired comparisons).
    pub per_problem: Vec<f64>,
    /// Mean oracle calls (requests) per run.
    pub rounds: f64,
    /// The adaptive prior's mean final scale (`None` for the other methods).
    pub alpha: Option<f64>,
    /// `auto`: on how many problems the run went over to the zero prior and the evidence
    /// (`None` for the methods without the switch).
    pub switched: Option<usize>,
}

/// What [`run_spec`] runs.
#[derive(Clone, Debug, PartialEq)]
pub struct Spec {
    /// Problems per mode.
    pub problems: usize,
    /// Seed of the first problem.
    pub seed: u64,
    /// Documents per problem.
    pub n: usize,
    /// Oracle budgets.
    pub budgets: Vec<usize>,
    /// Capacities `k`.
    pub capacities: Vec<usize>,
    /// The modes, each with its own problems (the same seeds).
    pub modes: Vec<Mode>,
    /// A token capacity for every run: the metrics are then token-normalised
    /// ([`ncg_tokens`]).
    pub token_capacity: Option<u64>,
}

/// The outcome of [`run_spec`] or [`run_set`]: the cells, and per group (mode, or noise)
/// each problem's multimodal mass.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    /// Every (group, budget, capacity, method) cell.
    pub cells: Vec<Cell>,
    /// The groups' names, in run order: the [`Cell::set`] of their cells.
    pub groups: Vec<String>,
    /// Per group (in [`Spec::modes`] or noise order), the problems' multimodal mass
    /// ([`super::peaks`], App. E.1's settings).
    pub multimodal_mass: Vec<Vec<f64>>,
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

/// Checks [`run`]'s arguments before any work: [`seeds`]; `problems` at most
/// [`crate::limits::MAX_EVAL_PROBLEMS`] (results are kept per problem); `n >= 1`; every budget in
/// `0..=n` and every capacity in `1..=n` (a budget above the pool is an error, not capped),
/// neither list empty nor with a repeated element. Errors name `problems`, `seed`, `n`,
/// `budgets` or `capacities` and the element.
pub fn check(problems: usize, seed: u64, n: usize, budgets: &[usize], capacities: &[usize]) -> Result<()> {
    seeds(seed, problems)?;
    crate::limits::size("problems", problems, crate::limits::MAX_EVAL_PROBLEMS)?;
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

/// Runs every variant on `problems` seeded diffuse problems of `n` documents; `progress`
/// is told after each problem. As [`run_steps`].
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

/// Runs every variant on `problems` seeded diffuse problems of `n` documents (seeds
/// `seed`, `seed + 1`, ...), after [`check`]ing the arguments; `progress` is told after
/// each method run. As [`run_spec`].
pub fn run_steps(
    problems: usize,
    seed: u64,
    n: usize,
    budgets: &[usize],
    capacities: &[usize],
    progress: &mut dyn FnMut(&Step),
) -> Result<Vec<Cell>> {
    let spec = Spec {
        problems,
        seed,
        n,
        budgets: budgets.to_vec(),
        capacities: capacities.to_vec(),
        modes: vec![Mode::Diffuse],
        token_capacity: None,
    };
    Ok(run_spec(&spec, false, progress)?.cells)
}

/// Runs every variant on the problems of `spec` (per mode, seeds `seed`, `seed + 1`, ...;
/// a run with budget B costs O(B² N): at B in the thousands one takes seconds), after
/// [`check`]ing the arguments; with `peaks`, also each problem's multimodal mass.
/// `progress` is told after each method run.
pub fn run_spec(spec: &Spec, peaks: bool, progress: &mut dyn FnMut(&Step)) -> Result<Outcome> {
    run_spec_in(spec, RowPrecision::F32, peaks, progress)
}

/// [`run_spec`] with kernel rows read in `row_precision` by every method that reads them
/// (all but single-stage).
pub fn run_spec_in(
    spec: &Spec,
    row_precision: RowPrecision,
    peaks: bool,
    progress: &mut dyn FnMut(&Step),
) -> Result<Outcome> {
    let Spec {
        problems,
        seed,
        n,
        ref budgets,
        ref capacities,
        ref modes,
        token_capacity,
    } = *spec;
    check(problems, seed, n, budgets, capacities)?;
    if modes.is_empty() {
        return Err(Error::invalid("modes", "is empty"));
    }
    let grid = Grid {
        budgets: budgets.clone(),
        capacities: capacities.clone(),
        token_capacity,
        row_precision,
        peaks,
    };
    let seeds: Vec<u64> = seeds(seed, problems)?.collect();
    let mut out = Outcome {
        cells: Vec::new(),
        groups: Vec::new(),
        multimodal_mass: Vec::new(),
    };
    for &mode in modes {
        let (cells, mm) = run_group(mode.name(), problems, &grid, progress, &mut |p| {
            generate_mode(n, 64, seeds[p], mode)
        })?;
        out.cells.extend(cells);
        out.groups.push(mode.name().to_string());
        out.multimodal_mass.push(mm);
    }
    Ok(out)
}

/// What every group of problems runs: each variant at each budget and capacity, with a
/// token capacity or none, kernel rows read in `row_precision`, and with `peaks` each
/// problem's multimodal mass.
#[derive(Clone, Debug, PartialEq)]
pub struct Grid {
    /// Oracle budgets.
    pub budgets: Vec<usize>,
    /// Capacities `k`.
    pub capacities: Vec<usize>,
    /// A token capacity for every run ([`Spec::token_capacity`]).
    pub token_capacity: Option<u64>,
    /// The precision of the pool copy kernel rows are read from (all but single-stage).
    pub row_precision: RowPrecision,
    /// Measure each problem's multimodal mass.
    pub peaks: bool,
}

/// Runs every variant on each problem of `set` at each simulated cross-encoder noise in
/// `noises`, `draws` times, each draw with fresh noise: draw `d` of problem `i` is seeded
/// by `seed + d·Q + i` with `Q` the set's problems ([`ProblemSet::problem`]; one draw is
/// `seed + i`), so a cell's mean, its per-problem results (problem-major within each draw)
/// and the win counts are over `Q · draws` runs. The cells of noise `s` are named
/// `<set>@<s>`. Errors name `noises`, `draws`, `seed`, `budgets`, `capacities` (checked
/// against the set's pool size) or `token_capacity` (a set without token counts).
pub fn run_set(
    set: &ProblemSet,
    noises: &[f64],
    seed: u64,
    draws: usize,
    grid: &Grid,
    progress: &mut dyn FnMut(&Step),
) -> Result<Outcome> {
    check_set(set, noises, seed, draws, grid)?;
    let mut out = Outcome {
        cells: Vec::new(),
        groups: Vec::new(),
        multimodal_mass: Vec::new(),
    };
    let q = set.len();
    for &s in noises {
        let name = format!("{}@{s}", set.name());
        // Run p is problem p mod Q of draw p div Q: seed + p, checked not to overflow.
        let (cells, mm) = run_group(&name, q * draws, grid, progress, &mut |p| {
            set.problem(p % q, s, seed + (p - p % q) as u64)
        })?;
        out.cells.extend(cells);
        out.groups.push(name);
        out.multimodal_mass.push(mm);
    }
    Ok(out)
}

/// Checks [`run_set`]'s arguments before any work: `draws` at least 1, and the set's
/// problems times `draws` at most [`crate::limits::MAX_EVAL_PROBLEMS`]; [`check`] against
/// that many runs and the set's pool size; `noises` non-empty, each finite and at least 0,
/// none repeated; a token capacity only for a set with token counts.
pub fn check_set(set: &ProblemSet, noises: &[f64], seed: u64, draws: usize, grid: &Grid) -> Result<()> {
    if draws == 0 {
        return Err(Error::invalid("draws", "must be at least 1"));
    }
    let (q, max) = (set.len(), crate::limits::MAX_EVAL_PROBLEMS);
    if q > max {
        return Err(Error::invalid(
            "set",
            format!("{} holds {q} problems, more than {max}", set.name()),
        ));
    }
    let runs = q.checked_mul(draws).filter(|&r| r <= max).ok_or_else(|| {
        Error::invalid(
            "draws",
            format!("{draws} draws of the set's {q} problems exceed {max} runs"),
        )
    })?;
    if seeds(seed, runs).is_err() {
        return Err(Error::invalid(
            "seed",
            format!(
                "{seed} + {q} problems x {draws} draws - 1 exceeds the largest seed, {}",
                u64::MAX
            ),
        ));
    }
    check(runs, seed, set.pool_size(), &grid.budgets, &grid.capacities)?;
    if noises.is_empty() {
        return Err(Error::invalid("noise", "is empty"));
    }
    for (i, &s) in noises.iter().enumerate() {
        if !(s.is_finite() && s >= 0.0) {
            return Err(Error::invalid(
                "noise",
                format!("element {i} ({s}) is not a finite number >= 0"),
            ));
        }
        if let Some(j) = noises[..i].iter().position(|&t| t == s) {
            return Err(Error::invalid(
                "noise",
                format!("element {i} ({s}) repeats element {j}"),
            ));
        }
    }
    match grid.token_capacity {
        Some(0) => Err(Error::invalid("token_capacity", "must be at least 1")),
        Some(_) if !set.has_tokens() => Err(Error::invalid(
            "token_capacity",
            "the problem set has no 'tokens' tensor",
        )),
        _ => Ok(()),
    }
}

/// Every variant of [`variants`] on problems `0..problems` of one group (`problem(p)`
/// makes problem `p`), under `grid`: the group's cells, named `group`, and its problems'
/// multimodal masses (empty without `grid.peaks`).
fn run_group(
    group: &str,
    problems: usize,
    grid: &Grid,
    progress: &mut dyn FnMut(&Step),
    problem: &mut dyn FnMut(usize) -> Result<Problem>,
) -> Result<(Vec<Cell>, Vec<f64>)> {
    let Grid {
        ref budgets,
        ref capacities,
        token_capacity,
        row_precision,
        peaks,
    } = *grid;
    if token_capacity == Some(0) {
        return Err(Error::invalid("token_capacity", "must be at least 1"));
    }
    let vs = variants();
    let per_group = vs
        .len()
        .checked_mul(budgets.len())
        .and_then(|c| c.checked_mul(capacities.len()))
        .ok_or_else(|| Error::invalid("budgets", "too many budgets × capacities"))?;
    let mut per = vec![Vec::with_capacity(problems); per_group];
    let mut sums = vec![(0.0, 0.0, 0.0); per_group];
    let mut alphas = vec![None; per_group];
    let mut switched = vec![None; per_group];
    let mut mm = Vec::new();
    for p in 0..problems {
        let prob = problem(p)?;
        if peaks {
            let l = super::peaks::landscape(&prob.pool, &prob.oracle, Default::default())?;
            mm.push(l.multimodal_mass);
        }
        let mut slot = 0;
        for &b in budgets {
            for &k in capacities {
                for v in &vs {
                    let mut cfg = RerankConfig::new(v.method, b, k);
                    cfg.prior = v.prior;
                    cfg.acquisition = v.acquisition;
                    cfg.beta0 = v.beta0;
                    cfg.batch = v.batch;
                    cfg.prior_probes = b.checked_div(v.probes_div).unwrap_or(0);
                    cfg.hyperparameters = v.hyperparameters;
                    cfg.switch_below = v.switch_below;
                    cfg.concentration = v.concentration;
                    cfg.feedback_neighbours = v.neighbours;
                    cfg.token_capacity = token_capacity;
                    cfg.kernel = KernelChoice::Fixed(prob.kernel);
                    if v.method != Method::SingleStage {
                        cfg.row_precision = row_precision;
                    }
                    let mut o = Precomputed::new(prob.oracle.clone(), b)?;
                    let tokens = token_capacity.map(|_| &prob.tokens[..]);
                    let r = Reranker::new(prob.pool.engine(), cfg)?.rerank_tokens(
                        &prob.pool,
                        &prob.query,
                        tokens,
                        &mut o,
                    )?;
                    let (ce, g) = match token_capacity {
                        None => (ncg(&r.selected, &prob.oracle), ncg(&r.selected, &prob.labels)),
                        Some(t) => (
                            ncg_tokens(&r.selected, &prob.oracle, &prob.tokens, t),
                            ncg_tokens(&r.selected, &prob.labels, &prob.tokens, t),
                        ),
                    };
                    sums[slot].0 += ce;
                    sums[slot].1 += g;
                    sums[slot].2 += r.rounds as f64;
                    if let Some(a) = r.alpha {
                        *alphas[slot].get_or_insert(0.0) += a;
                    }
                    if v.switch_below.is_some() {
                        *switched[slot].get_or_insert(0) += usize::from(r.switched);
                    }
                    per[slot].push(ce);
                    slot += 1;
                    progress(&Step {
                        problem: p + 1,
                        problems,
                        method: v.name,
                        budget: b,
                        capacity: k,
                        run: slot,
                        runs: per_group,
                    });
                }
            }
        }
    }
    let mut cells = Vec::with_capacity(per_group);
    let mut slot = 0;
    for &b in budgets {
        for &k in capacities {
            for v in &vs {
                let (c, g, r) = sums[slot];
                cells.push(Cell {
                    set: group.to_string(),
                    method: v.name.to_string(),
                    budget: b,
                    capacity: k,
                    ce_ncg: c / problems as f64,
                    ncg: g / problems as f64,
                    per_problem: std::mem::take(&mut per[slot]),
                    rounds: r / problems as f64,
                    alpha: alphas[slot].map(|a: f64| a / problems as f64),
                    switched: switched[slot],
                });
                slot += 1;
            }
        }
    }
    Ok((cells, mm))
}

/// Spearman's rank correlation of `x` and `y` (average ranks for ties); `None` for fewer
/// than 3 pairs or a constant side.
#[must_use]
pub fn spearman(x: &[f64], y: &[f64]) -> Option<f64> {
    if x.len() != y.len() || x.len() < 3 {
        return None;
    }
    let ranks = |v: &[f64]| -> Vec<f64> {
        let mut o: Vec<usize> = (0..v.len()).collect();
        o.sort_by(|&a, &b| v[a].total_cmp(&v[b]).then(a.cmp(&b)));
        let mut r = vec![0.0; v.len()];
        let mut i = 0;
        while i < o.len() {
            let mut j = i;
            while j + 1 < o.len() && v[o[j + 1]] == v[o[i]] {
                j += 1;
            }
            let avg = (i + j) as f64 / 2.0 + 1.0;
            for &t in &o[i..=j] {
                r[t] = avg;
            }
            i = j + 1;
        }
        r
    };
    let (rx, ry) = (ranks(x), ranks(y));
    let n = x.len() as f64;
    let (mx, my) = (rx.iter().sum::<f64>() / n, ry.iter().sum::<f64>() / n);
    let cov: f64 = rx.iter().zip(&ry).map(|(a, b)| (a - mx) * (b - my)).sum();
    let vx: f64 = rx.iter().map(|a| (a - mx).powi(2)).sum();
    let vy: f64 = ry.iter().map(|b| (b - my).powi(2)).sum();
    if vx <= 0.0 || vy <= 0.0 {
        None
    } else {
        Some(cov / (vx * vy).sqrt())
    }
}
