//! Budgeted top-k selection (boundarymorph-budgeted-reranking.txt §2–3, App. B–C;
//! SPEC §3): choose the `k` documents that enter a generator's context when the
//! cross-encoder (the oracle) may be called only `B` times.
//!
//! The pool arrives in MIPS order (row 0 = MIPS top-1). Methods:
//! - BoundaryMORPH: GP over the pool (vMF kernel, MIPS-percentile prior, the query as a
//!   zero-cost observation) with the boundary acquisition rule of SPEC §3;
//! - its ablations: zero prior ([`Prior::Zero`]) and UCB acquisition ([`Acquisition::Ucb`]);
//! - BAGEL: zero prior, GP-UCB with `beta_t = beta0 / sqrt(t + 1)`, warm start on the MIPS
//!   top-floor(B/2);
//! - single-stage rerank of the MIPS top-B;
//! - RGS: greedy expansion over a k-NN graph of the pool.
//!
//! Oracles: [`Precomputed`] scores for evaluation, and (feature `http`) clients for TEI
//! and Cohere-style rerank servers with a batching queue ([`http`]). [`eval`] is the
//! seeded benchmark behind `ctxprune eval`.

pub mod eval;
pub mod gp;
#[cfg(feature = "http")]
pub mod http;
pub mod metrics;
pub mod options;
pub mod oracle;
pub mod plot;

use crate::backend::{BackendKind, Engine};
use crate::error::{Error, Result};
use crate::pool::Pool;
use crate::similarity::{Kernel, KernelKind};
use gp::{Gp, KernelRows, PoolKernel};
pub use options::RerankOptions;
pub use oracle::{Oracle, Precomputed};

/// The pool's kernel read on demand (rows of `K(pool, pool)` computed when asked, the
/// query's row once): what the GP and RGS read, and what tests refit densely against.
pub fn kernel_rows<'p>(pool: &'p Pool, query: &[f32], kernel: Kernel) -> Result<PoolKernel<'p>> {
    PoolKernel::new(pool.rows(), query, kernel)
}

/// Which selector.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// GP with the boundary rule (and its ablations via prior / acquisition).
    BoundaryMorph,
    /// BAGEL: zero prior, GP-UCB, warm start.
    Bagel,
    /// Score the MIPS top-B, rank them above the tail.
    SingleStage,
    /// Greedy graph expansion.
    Rgs,
}

impl std::str::FromStr for Method {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Ok(match s {
            "boundary-morph" | "boundarymorph" => Method::BoundaryMorph,
            "bagel" => Method::Bagel,
            "single-stage" => Method::SingleStage,
            "rgs" => Method::Rgs,
            _ => {
                return Err(Error::invalid(
                    "method",
                    format!("unknown method '{s}' (boundary-morph, bagel, single-stage, rgs)"),
                ))
            }
        })
    }
}

impl Method {
    /// The CLI name.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Method::BoundaryMorph => "boundary-morph",
            Method::Bagel => "bagel",
            Method::SingleStage => "single-stage",
            Method::Rgs => "rgs",
        }
    }
}

/// The GP's prior mean.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prior {
    /// MIPS percentile `(N-1-pos)/(N-1)`; the query has `mu0 = 1`.
    Mips,
    /// Zero everywhere; the query's residual is 1.
    Zero,
}

/// How the next call is chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Acquisition {
    /// The boundary rule of SPEC §3.
    Boundary,
    /// `argmax mu + sqrt(beta_t) sigma` over unscored items.
    Ucb,
}

/// How the GP's kernel is chosen.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum KernelChoice {
    /// This family with its bandwidth from the median heuristic over the pool (SPEC §3;
    /// exact up to 200,000 pairs, else a fixed-seed sample of that many pairs).
    Median(KernelKind),
    /// This kernel as given.
    Fixed(Kernel),
}

/// A budgeted top-k run.
#[derive(Clone, Debug, PartialEq)]
pub struct RerankConfig {
    /// The selector.
    pub method: Method,
    /// Oracle calls allowed, `B`.
    pub budget: usize,
    /// Documents returned, `k`.
    pub capacity: usize,
    /// BoundaryMORPH's prior (BAGEL always uses zero).
    pub prior: Prior,
    /// BoundaryMORPH's acquisition (BAGEL always uses UCB).
    pub acquisition: Acquisition,
    /// UCB's `beta0`. By default 1.
    pub beta0: f64,
    /// RGS graph degree `R`. By default 16.
    pub graph_degree: usize,
    /// RGS heap cap `L_s`. By default 64.
    pub heap_cap: usize,
    /// The GP's kernel (and RGS's neighbourhoods). By default vMF with the median
    /// heuristic's `kappa`.
    pub kernel: KernelChoice,
}

impl RerankConfig {
    /// `method` with budget `B`, capacity `k` and the defaults.
    #[must_use]
    pub fn new(method: Method, budget: usize, capacity: usize) -> Self {
        RerankConfig {
            method,
            budget,
            capacity,
            prior: Prior::Mips,
            acquisition: Acquisition::Boundary,
            beta0: 1.0,
            graph_degree: 16,
            heap_cap: 64,
            kernel: KernelChoice::Median(KernelKind::Vmf),
        }
    }
}

/// The outcome of a run.
#[derive(Clone, Debug, PartialEq)]
pub struct Reranked {
    /// The `k` documents, best first.
    pub selected: Vec<usize>,
    /// Documents sent to the oracle, in call order.
    pub scored: Vec<usize>,
    /// Their scores, in the same order.
    pub scores: Vec<f64>,
    /// The kernel the GP used.
    pub kernel: Kernel,
    /// Notes for the caller (a budget capped at the pool size, an early stop, a step that
    /// ran on the CPU).
    pub notes: Vec<String>,
    /// Where the GP's pool-sized work ran.
    pub backend: BackendKind,
}

impl Reranked {
    /// The JSON object `ctxprune rerank` prints (and `ctxprune serve` answers):
    /// `method`, `selected`, `scored`, `oracle_calls`, `scores`, `notes`, `kappa` (vMF's,
    /// else null), `backend`, `elapsed_ms` (without the oracle's time) and `oracle_ms`.
    #[must_use]
    pub fn to_json(&self, method: Method, elapsed_ms: f64, oracle_ms: f64) -> serde_json::Value {
        let kappa = match self.kernel {
            Kernel::Vmf { kappa } => serde_json::json!(kappa),
            _ => serde_json::Value::Null,
        };
        serde_json::json!({
            "method": method.name(),
            "selected": self.selected,
            "scored": self.scored,
            "oracle_calls": self.scored.len(),
            "scores": self.scores,
            "notes": self.notes,
            "kappa": kappa,
            "backend": self.backend.name(),
            "elapsed_ms": elapsed_ms,
            "oracle_ms": oracle_ms,
        })
    }
}

/// Ranking by (value desc, MIPS position asc).
fn rank(values: &[f64]) -> Vec<usize> {
    let mut o: Vec<usize> = (0..values.len()).collect();
    o.sort_by(|&a, &b| values[b].total_cmp(&values[a]).then(a.cmp(&b)));
    o
}

/// A [`RerankConfig`] checked once and bound to an engine: `rerank` from any thread over
/// resident pools, each call with its own query and oracle.
///
/// ```
/// use ctxprune::{Embeddings, Engine, Pool};
/// use ctxprune::rerank::{Method, Precomputed, RerankConfig, Reranker};
/// let engine = Engine::cpu();
/// let rows: Vec<f32> = (0..40).map(|i| ((i * 7 % 11) as f32) - 5.0 + (i % 4) as f32 * 0.1).collect();
/// let pool = Pool::new(&engine, Embeddings::new(10, 4, rows, "docs")?)?;
/// let scores: Vec<f64> = (0..10).map(|i| (10 - i) as f64 / 10.0).collect();
/// let r = Reranker::new(&engine, RerankConfig::new(Method::BoundaryMorph, 5, 3))?;
/// let out = r.rerank(&pool, &[1.0, 0.0, 0.0, 0.0], &mut Precomputed::new(scores, 5)?)?;
/// assert_eq!(out.selected.len(), 3);
/// assert!(out.scored.len() <= 5);
/// # Ok::<(), ctxprune::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Reranker {
    engine: Engine,
    cfg: RerankConfig,
}

impl Reranker {
    /// Checks `cfg` and binds it to `engine`.
    pub fn new(engine: &Engine, cfg: RerankConfig) -> Result<Reranker> {
        if cfg.capacity == 0 {
            return Err(Error::invalid("capacity", "must be at least 1"));
        }
        if !(cfg.beta0.is_finite() && cfg.beta0 >= 0.0) {
            return Err(Error::invalid(
                "beta0",
                format!("must be finite and >= 0, got {}", cfg.beta0),
            ));
        }
        if cfg.graph_degree == 0 {
            return Err(Error::invalid("graph-degree", "must be at least 1"));
        }
        if cfg.heap_cap == 0 {
            return Err(Error::invalid("heap-cap", "must be at least 1"));
        }
        if let KernelChoice::Fixed(k) = cfg.kernel {
            k.validate()?;
        }
        Ok(Reranker {
            engine: engine.clone(),
            cfg,
        })
    }

    /// The configuration.
    #[must_use]
    pub fn config(&self) -> &RerankConfig {
        &self.cfg
    }

    /// Chooses `capacity` documents of `pool` (rows in MIPS order, row 0 = MIPS top-1) for
    /// `query`, calling `oracle` at most `budget` times.
    pub fn rerank(&self, pool: &Pool, query: &[f32], oracle: &mut dyn Oracle) -> Result<Reranked> {
        let cfg = &self.cfg;
        pool.check_engine(&self.engine, "reranker")?;
        let n = pool.len();
        if cfg.capacity > n {
            return Err(Error::invalid(
                "capacity",
                format!("must be in 1..={n} (the pool), got {}", cfg.capacity),
            ));
        }
        let kernel = match cfg.kernel {
            KernelChoice::Fixed(k) => k,
            KernelChoice::Median(kind) => Kernel::from_median(kind, pool.median_one_minus_cos()?),
        };
        let src = kernel_rows(pool, query, kernel)?;
        let mut notes = Vec::new();
        let budget = if cfg.budget > n {
            notes.push(format!(
                "budget {} is larger than the pool; capped at {n}",
                cfg.budget
            ));
            n
        } else {
            cfg.budget
        };
        let mut run = Run {
            n,
            scored: Vec::new(),
            scores: Vec::new(),
            y: vec![None; n],
            oracle,
        };
        let mut backend = BackendKind::Cpu;
        let final_values: Vec<f64> = match cfg.method {
            Method::SingleStage => {
                let top: Vec<usize> = (0..budget).collect();
                run.call(&top)?;
                // Scored items above the tail, by score; the tail in MIPS order.
                run.scored_above_tail()
            }
            Method::Rgs => {
                rgs(&mut run, &src, budget, cfg.graph_degree, cfg.heap_cap)?;
                run.scored_above_tail()
            }
            Method::BoundaryMorph | Method::Bagel => {
                let (prior, acq) = if cfg.method == Method::Bagel {
                    (Prior::Zero, Acquisition::Ucb)
                } else {
                    (cfg.prior, cfg.acquisition)
                };
                let mu0: Vec<f64> = match prior {
                    Prior::Mips if n > 1 => (0..n).map(|p| (n - 1 - p) as f64 / (n - 1) as f64).collect(),
                    Prior::Mips => vec![1.0],
                    Prior::Zero => vec![0.0; n],
                };
                let mu0_q = if prior == Prior::Mips { 1.0 } else { 0.0 };
                let store = self.engine.gp_store(&src, mu0.clone())?;
                backend = self.engine.kind();
                let mut gp = Gp::with_store(&src, store, mu0, mu0_q)?;
                if cfg.method == Method::Bagel {
                    let warm: Vec<usize> = (0..budget / 2).collect();
                    let ys = run.call(&warm)?;
                    for (&j, &y) in warm.iter().zip(&ys) {
                        gp.observe(j, y)?;
                    }
                }
                let (mut mean, mut var) = (vec![0.0; n], vec![0.0; n]);
                let mut scored = vec![false; n];
                run.scored.iter().for_each(|&j| scored[j] = true);
                while run.scored.len() < budget {
                    let next = match acq {
                        Acquisition::Boundary => {
                            gp.posterior(&mut mean, &mut var)?;
                            run.overlay(&mut mean, &mut var);
                            boundary_scan(&mean, &var, &run.y, cfg.capacity)
                        }
                        Acquisition::Ucb => {
                            let beta = cfg.beta0 / ((run.scored.len() + 1) as f64).sqrt();
                            gp.ucb(&scored, beta)?
                        }
                    };
                    let Some(j) = next else {
                        notes.push(format!(
                            "stopped after {} calls: no boundary pair left",
                            run.scored.len()
                        ));
                        break;
                    };
                    let y = run.call(&[j])?[0];
                    scored[j] = true;
                    gp.observe(j, y)?;
                }
                gp.posterior(&mut mean, &mut var)?;
                run.overlay(&mut mean, &mut var);
                mean
            }
        };
        if backend == BackendKind::Cpu && self.engine.kind() != BackendKind::Cpu {
            notes.push(format!(
                "{} runs on the CPU (no {} path for it)",
                cfg.method.name(),
                self.engine.name()
            ));
        }
        let order = rank(&final_values);
        Ok(Reranked {
            selected: order[..cfg.capacity].to_vec(),
            scored: run.scored,
            scores: run.scores,
            kernel,
            notes,
            backend,
        })
    }
}

/// Runs `cfg` over `pool` (on the pool's engine) for `query` with `oracle`: a thin
/// wrapper over [`Reranker`].
pub fn rerank(cfg: &RerankConfig, pool: &Pool, query: &[f32], oracle: &mut dyn Oracle) -> Result<Reranked> {
    Reranker::new(pool.engine(), cfg.clone())?.rerank(pool, query, oracle)
}

struct Run<'o> {
    n: usize,
    scored: Vec<usize>,
    scores: Vec<f64>,
    y: Vec<Option<f64>>,
    oracle: &'o mut dyn Oracle,
}

impl Run<'_> {
    fn call(&mut self, items: &[usize]) -> Result<Vec<f64>> {
        if items.is_empty() {
            return Ok(Vec::new());
        }
        let ys = self.oracle.score(items)?;
        let bad = |msg: String| Error::Oracle {
            oracle: "answer".into(),
            status: None,
            msg,
        };
        if ys.len() != items.len() {
            return Err(bad(format!(
                "returned {} scores for {} items",
                ys.len(),
                items.len()
            )));
        }
        for (&j, &y) in items.iter().zip(&ys) {
            if !(0.0..=1.0).contains(&y) {
                return Err(bad(format!("score of item {j} is {y}, outside [0, 1]")));
            }
            self.y[j] = Some(y);
            self.scored.push(j);
            self.scores.push(y);
        }
        Ok(ys)
    }

    /// Final values of the methods without a GP: scored documents above the tail, by
    /// score; the tail in MIPS order.
    fn scored_above_tail(&self) -> Vec<f64> {
        let n = self.n;
        (0..n)
            .map(|i| self.y[i].map_or(-1.0 - i as f64 / n as f64, |y| 1.0 + y))
            .collect()
    }

    /// A scored document's mean is its observation and its sigma 0 (SPEC §3).
    fn overlay(&self, mean: &mut [f64], var: &mut [f64]) {
        for i in 0..self.n {
            if let Some(y) = self.y[i] {
                mean[i] = y;
                var[i] = 0.0;
            }
        }
    }
}

/// The boundary rule of SPEC §3: incumbents = top-k by mean (ties by MIPS position);
/// over pairs (incumbent, challenger) with an unscored member, the smallest
/// `z = (mu_i - mu_j) / sqrt(s_i² + s_j² + 1e-12)`; ties to the first incumbent, then the
/// first challenger, in rank order. The call goes to the pair's unscored member with the
/// larger sigma (the incumbent when both are unscored with equal sigma). `None` when no
/// pair is left. `var` and `y` must have `mean`'s length.
pub fn boundary_pick(mean: &[f64], var: &[f64], y: &[Option<f64>], k: usize) -> Result<Option<usize>> {
    check_lengths(mean.len(), var.len(), y.len())?;
    Ok(boundary_scan(mean, var, y, k))
}

/// The same lengths for `mean`, `var` and the scores.
fn check_lengths(n: usize, var: usize, y: usize) -> Result<()> {
    if var != n || y != n {
        return Err(Error::invalid(
            "posterior",
            format!("{n} means, {var} variances and {y} scores (all must match)"),
        ));
    }
    Ok(())
}

fn boundary_scan(mean: &[f64], var: &[f64], y: &[Option<f64>], k: usize) -> Option<usize> {
    use std::cmp::Ordering;
    use std::collections::BinaryHeap;
    let n = mean.len();
    if n <= k || k == 0 {
        return None;
    }
    // Rank order = mean descending, then MIPS position ascending.
    let before = |a: usize, b: usize| mean[b].total_cmp(&mean[a]).then(a.cmp(&b));
    let mut idx: Vec<usize> = (0..n).collect();
    idx.select_nth_unstable_by(k - 1, |&a, &b| before(a, b));
    let (inc, ch) = idx.split_at_mut(k);
    inc.sort_unstable_by(|&a, &b| before(a, b));
    // Challengers come off a heap in rank order, only as far as the scan needs them: the
    // gap to an incumbent only grows along the ranking, so once
    // gap / sqrt(s_i² + max challenger s² + 1e-12) reaches the best z, no later challenger
    // can beat it.
    struct C<'m>(usize, &'m [f64]);
    impl PartialEq for C<'_> {
        fn eq(&self, o: &Self) -> bool {
            self.cmp(o) == Ordering::Equal
        }
    }
    impl Eq for C<'_> {}
    impl PartialOrd for C<'_> {
        fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
            Some(self.cmp(o))
        }
    }
    impl Ord for C<'_> {
        fn cmp(&self, o: &Self) -> Ordering {
            self.1[self.0].total_cmp(&o.1[o.0]).then(o.0.cmp(&self.0))
        }
    }
    let smax2 = ch.iter().map(|&j| var[j]).fold(0.0f64, f64::max);
    let mut heap: BinaryHeap<C<'_>> = ch.iter().map(|&j| C(j, mean)).collect();
    let mut ranked: Vec<usize> = Vec::new();
    let mut best: Option<(f64, usize, usize)> = None;
    for &i in inc.iter() {
        let si2 = var[i];
        let mut p = 0;
        loop {
            if p == ranked.len() {
                match heap.pop() {
                    Some(c) => ranked.push(c.0),
                    None => break,
                }
            }
            let j = ranked[p];
            p += 1;
            let gap = mean[i] - mean[j];
            if let Some((bz, _, _)) = best {
                if gap / (si2 + smax2 + 1e-12).sqrt() >= bz {
                    break;
                }
            }
            if y[i].is_some() && y[j].is_some() {
                continue;
            }
            let z = gap / (si2 + var[j] + 1e-12).sqrt();
            if best.is_none_or(|(bz, _, _)| z < bz) {
                best = Some((z, i, j));
            }
        }
    }
    let (_, i, j) = best?;
    Some(match (y[i].is_none(), y[j].is_none()) {
        (true, false) => i,
        (false, true) => j,
        _ => {
            if var[j] > var[i] {
                j
            } else {
                i
            }
        }
    })
}

/// `argmax mu + sqrt(beta) sigma` over unscored items (`y[i]` is `None`), ties to the
/// lower index. `var` and `y` must have `mean`'s length.
pub fn ucb_pick(mean: &[f64], var: &[f64], y: &[Option<f64>], beta: f64) -> Result<Option<usize>> {
    check_lengths(mean.len(), var.len(), y.len())?;
    let scored: Vec<bool> = y.iter().map(Option::is_some).collect();
    Ok(crate::backend::gp::ucb_argmax(mean, var, &scored, beta))
}

/// RGS: seed with the MIPS top-1; repeatedly take the best-scored document whose
/// neighbours are not yet expanded (a max-heap by oracle score, capped at `heap_cap`),
/// score its unscored neighbours in the `degree`-NN graph (by kernel value), until the
/// budget is spent. When the heap empties, the next unscored document in MIPS order seeds.
/// The graph is never built whole: an expanded document's neighbours come from its kernel
/// row, read when it is expanded (at most `budget` rows, `O(N d)` each).
fn rgs(
    run: &mut Run<'_>,
    kernel: &dyn KernelRows,
    budget: usize,
    degree: usize,
    heap_cap: usize,
) -> Result<()> {
    let n = run.n;
    let mut row = vec![0.0f64; n];
    let mut neighbours = |j: usize| -> Vec<usize> {
        kernel.row(j, &mut row);
        let row = &row;
        let mut o: Vec<usize> = (0..n).filter(|&i| i != j).collect();
        let by = |a: &usize, b: &usize| row[*b].total_cmp(&row[*a]).then(a.cmp(b));
        if o.len() > degree {
            o.select_nth_unstable_by(degree - 1, by);
            o.truncate(degree);
        }
        o.sort_by(by);
        o
    };
    let mut heap: Vec<(f64, usize)> = Vec::new(); // kept sorted: best first
    let mut next_seed = 0;
    while run.scored.len() < budget {
        let Some((_, top)) = (if heap.is_empty() {
            None
        } else {
            Some(heap.remove(0))
        }) else {
            while next_seed < n && run.y[next_seed].is_some() {
                next_seed += 1;
            }
            if next_seed >= n {
                break;
            }
            let y = run.call(&[next_seed])?[0];
            heap.push((y, next_seed));
            continue;
        };
        let left = budget - run.scored.len();
        let fresh: Vec<usize> = neighbours(top)
            .into_iter()
            .filter(|&i| run.y[i].is_none())
            .take(left)
            .collect();
        let ys = run.call(&fresh)?;
        for (&j, &y) in fresh.iter().zip(&ys) {
            heap.push((y, j));
        }
        heap.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        heap.truncate(heap_cap);
    }
    Ok(())
}
