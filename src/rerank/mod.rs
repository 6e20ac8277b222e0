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
//! - RGS as in App. C.2 (MIPS seeds, then greedy expansion over a k-NN graph of the pool)
//!   and the simpler `rgs-simple` (one seed);
//!
//! and beyond the paper (issue 15; SPEC §3):
//! - batches: `batch = q` picks `q` documents per round and makes one oracle call with them.
//!   Inside a round each pick after the first sees the earlier ones as observed at their
//!   posterior mean (kriging believer: their variance falls to zero and their neighbours'
//!   with it), then the acquisition rule runs again; the oracle's scores then replace the
//!   fantasies as one rank-`q` update ([`gp::Gp::revise`]). `q = 1` is the paper's method
//!   call for call;
//! - an adaptive prior ([`Prior::Adaptive`]): the MIPS prior's scale fitted to the scores as
//!   they arrive, so a prior the oracle contradicts fades to zero;
//! - a token capacity: the selected set is the greedy fill of `T` tokens by posterior value
//!   per token, and the boundary rule compares the set's members with the rest on value per
//!   token.
//!
//! Oracles: [`Precomputed`] scores for evaluation, and (feature `http`) clients for TEI
//! and Cohere-style rerank servers with a batching queue ([`http`]). [`eval`] is the
//! seeded benchmark behind `ctxprune eval`.

mod estimate;
pub mod eval;
pub mod gp;
#[cfg(feature = "http")]
pub mod http;
pub mod metrics;
pub mod options;
pub mod oracle;
pub mod peaks;
pub mod plot;

use crate::backend::{BackendKind, Engine};
use crate::error::{Error, Result};
use crate::pool::Pool;
use crate::similarity::{Kernel, KernelKind};
pub use gp::RowPrecision;
use gp::{Gp, KernelRows, PoolKernel};
pub use options::RerankOptions;
pub use oracle::{Oracle, Precomputed};

/// The pool's kernel read on demand (rows of `K(pool, pool)` computed when asked, the
/// query's row once): what the GP and RGS read, and what tests refit densely against.
pub fn kernel_rows<'p>(pool: &'p Pool, query: &[f32], kernel: Kernel) -> Result<PoolKernel<'p>> {
    PoolKernel::new(pool.rows(), query, kernel)
}

/// [`kernel_rows`] read from a copy of the pool in `precision` ([`RowPrecision`]; f32 is
/// [`kernel_rows`] itself).
pub fn kernel_rows_in<'p>(
    pool: &'p Pool,
    query: &[f32],
    kernel: Kernel,
    precision: RowPrecision,
) -> Result<PoolKernel<'p>> {
    PoolKernel::with_precision(pool.rows(), query, kernel, precision)
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
    /// Greedy graph expansion as in App. C.2: the MIPS top-`round(B / seed_div)` as seeds,
    /// heap cap `max(seeds, round(frac B))`.
    Rgs,
    /// Greedy graph expansion from the MIPS top-1 alone, heap cap 64 (this crate's first
    /// RGS).
    RgsSimple,
}

impl std::str::FromStr for Method {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Ok(match s {
            "boundary-morph" | "boundarymorph" => Method::BoundaryMorph,
            "bagel" => Method::Bagel,
            "single-stage" => Method::SingleStage,
            "rgs" => Method::Rgs,
            "rgs-simple" => Method::RgsSimple,
            _ => {
                return Err(Error::invalid(
                    "method",
                    format!("unknown method '{s}' (boundary-morph, bagel, single-stage, rgs, rgs-simple)"),
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
            Method::RgsSimple => "rgs-simple",
        }
    }

    /// True for the methods with a GP (batches, priors and acquisitions apply).
    #[must_use]
    pub fn has_gp(self) -> bool {
        matches!(self, Method::BoundaryMorph | Method::Bagel)
    }
}

/// The GP's prior mean.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prior {
    /// MIPS percentile `(N-1-pos)/(N-1)`; the query has `mu0 = 1`.
    Mips,
    /// Zero everywhere; the query's residual is 1.
    Zero,
    /// `alpha` times the MIPS percentile, `alpha` in `[0, 1]` re-fitted after every call by
    /// generalised least squares with a ridge toward 1 ([`gp::Gp::set_adaptive`]): the paper's
    /// prior while the scores agree with it, fading to zero as they contradict it.
    Adaptive,
}

/// The adaptive prior's ridge toward `alpha = 1` ([`gp::Gp::set_adaptive`]).
pub const ADAPTIVE_RIDGE: f64 = 1.0;

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
    /// RGS graph degree `R`. By default 10 (App. C.2's selected value); 16 for rgs-simple.
    pub graph_degree: usize,
    /// rgs-simple's heap cap. By default 64 (RGS derives its own from `B`).
    pub heap_cap: usize,
    /// RGS's seed split: `n_seeds = round(B / seed_div)`. By default 2 (App. C.2).
    pub seed_div: f64,
    /// RGS's heap cap `L_s = max(n_seeds, round(frac B))`. By default 1 (App. C.2).
    pub frac: f64,
    /// Documents per oracle call for the GP methods, `q`. By default 1 (the paper).
    pub batch: usize,
    /// A token capacity `T`: the selected set holds at most `T` tokens (and at most
    /// `capacity` documents); needs per-document token counts.
    pub token_capacity: Option<u64>,
    /// With the adaptive prior: documents scored first, in one call, spread evenly over
    /// the MIPS ranks below the top ([`probe_ranks`]), so the prior's fit sees its shape and
    /// not only its top. By default 0.
    pub prior_probes: usize,
    /// The GP's kernel (and RGS's neighbourhoods). By default vMF with the median
    /// heuristic's `kappa`.
    pub kernel: KernelChoice,
    /// The precision of the pool copy kernel rows are read from (every method that reads
    /// them: boundary-morph, bagel, rgs, rgs-simple). By default f32, the pool itself and
    /// the paper's computation; bf16 and f16 read a half-precision copy made once per run
    /// (half the bytes per row; the GP's arithmetic stays f64; on a GPU engine the GP then
    /// runs on the CPU, beside the copy).
    pub row_precision: RowPrecision,
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
            graph_degree: if method == Method::Rgs { 10 } else { 16 },
            heap_cap: 64,
            seed_div: 2.0,
            frac: 1.0,
            batch: 1,
            token_capacity: None,
            prior_probes: 0,
            kernel: KernelChoice::Median(KernelKind::Vmf),
            row_precision: RowPrecision::F32,
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
    /// Oracle calls made (batches; `scored.len()` documents in all).
    pub rounds: usize,
    /// The adaptive prior's final scale `alpha` (`None` for the other priors).
    pub alpha: Option<f64>,
    /// Tokens of the selected set (with a token capacity).
    pub tokens: Option<u64>,
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
    /// `method`, `selected`, `scored`, `oracle_calls` (documents), `oracle_rounds` (calls),
    /// `scores`, `prior_alpha` (adaptive prior), `tokens` (token capacity), `notes`, `kappa` (vMF's,
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
            "oracle_rounds": self.rounds,
            "scores": self.scores,
            "prior_alpha": self.alpha,
            "tokens": self.tokens,
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
            return Err(Error::invalid("graph_degree", "must be at least 1"));
        }
        if cfg.heap_cap == 0 {
            return Err(Error::invalid("heap_cap", "must be at least 1"));
        }
        if !(cfg.seed_div.is_finite() && cfg.seed_div >= 1.0) {
            return Err(Error::invalid(
                "seed_div",
                format!("must be finite and >= 1, got {}", cfg.seed_div),
            ));
        }
        if !(cfg.frac.is_finite() && cfg.frac > 0.0 && cfg.frac <= 1.0) {
            return Err(Error::invalid(
                "frac",
                format!("must be in (0, 1], got {}", cfg.frac),
            ));
        }
        if cfg.batch == 0 {
            return Err(Error::invalid("batch", "must be at least 1"));
        }
        if cfg.batch > 1 && !cfg.method.has_gp() {
            return Err(Error::invalid(
                "batch",
                format!(
                    "applies to boundary-morph and bagel ({} batches its own calls)",
                    cfg.method.name()
                ),
            ));
        }
        if cfg.prior_probes > 0 && !(cfg.method == Method::BoundaryMorph && cfg.prior == Prior::Adaptive) {
            return Err(Error::invalid(
                "prior_probes",
                "applies to boundary-morph with the adaptive prior",
            ));
        }
        // Probes are oracle calls: more than the budget cannot all be made, and cutting
        // them down to it would change what was asked without a word.
        if cfg.prior_probes > cfg.budget {
            return Err(Error::invalid(
                "prior_probes",
                format!(
                    "{} probe documents exceed the budget of {} oracle calls (prior-probes <= budget)",
                    cfg.prior_probes, cfg.budget
                ),
            ));
        }
        if cfg.token_capacity == Some(0) {
            return Err(Error::invalid("token_capacity", "must be at least 1"));
        }
        if let KernelChoice::Fixed(k) = cfg.kernel {
            k.validate()?;
        }
        if cfg.row_precision != RowPrecision::F32 && cfg.method == Method::SingleStage {
            return Err(Error::invalid(
                "row_precision",
                "does not apply to single-stage (it reads no kernel rows)",
            ));
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
    /// `query`, calling `oracle` for at most `budget` documents. A configuration with a
    /// token capacity needs [`Reranker::rerank_tokens`].
    pub fn rerank(&self, pool: &Pool, query: &[f32], oracle: &mut dyn Oracle) -> Result<Reranked> {
        self.rerank_tokens(pool, query, None, oracle)
    }

    /// [`Reranker::rerank`] with per-document token counts (`tokens[i]` for pool row `i`),
    /// which a token capacity needs; without one they are an error, never ignored.
    pub fn rerank_tokens(
        &self,
        pool: &Pool,
        query: &[f32],
        tokens: Option<&[u64]>,
        oracle: &mut dyn Oracle,
    ) -> Result<Reranked> {
        let cfg = &self.cfg;
        pool.check_engine(&self.engine, "reranker")?;
        let n = pool.len();
        if cfg.capacity > n {
            return Err(Error::invalid(
                "capacity",
                format!("must be in 1..={n} (the pool), got {}", cfg.capacity),
            ));
        }
        let fill = match (cfg.token_capacity, tokens) {
            (Some(cap), Some(t)) => {
                if t.len() != n {
                    return Err(Error::invalid(
                        "tokens",
                        format!("{} token counts for a pool of {n}", t.len()),
                    ));
                }
                if let Some(i) = t.iter().position(|&x| x == 0) {
                    return Err(Error::invalid(
                        format!("tokens[{i}]"),
                        "is 0 (every document costs at least one token)",
                    ));
                }
                Some(Fill {
                    tokens: t,
                    cap,
                    k: cfg.capacity,
                })
            }
            (Some(_), None) => {
                return Err(Error::invalid(
                    "token_capacity",
                    "needs the documents' token counts",
                ))
            }
            (None, Some(_)) => {
                return Err(Error::invalid(
                    "tokens",
                    "token counts without a token capacity are not used",
                ))
            }
            (None, None) => None,
        };
        let kernel = match cfg.kernel {
            KernelChoice::Fixed(k) => k,
            KernelChoice::Median(kind) => Kernel::from_median(kind, pool.median_one_minus_cos()?),
        };
        let half = cfg.row_precision != RowPrecision::F32;
        let src = if half {
            kernel_rows_in(pool, query, kernel, cfg.row_precision)?
        } else {
            kernel_rows(pool, query, kernel)?
        };
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
            rounds: 0,
            oracle,
        };
        let mut backend = BackendKind::Cpu;
        let mut alpha = None;
        // The final order: by value (ties by MIPS position); with a token capacity, the
        // greedy fill by value per token.
        let (values, by_density) = match cfg.method {
            Method::SingleStage => {
                let top: Vec<usize> = (0..budget).collect();
                run.call(&top)?;
                (run.scored_above_tail(), false)
            }
            Method::Rgs => {
                let seeds = ((budget as f64 / cfg.seed_div).round() as usize).min(budget);
                let cap = seeds.max((cfg.frac * budget as f64).round() as usize).max(1);
                rgs(&mut run, &src, budget, seeds.max(1), cfg.graph_degree, cap)?;
                (run.scored_above_tail(), false)
            }
            Method::RgsSimple => {
                rgs(&mut run, &src, budget, 1, cfg.graph_degree, cfg.heap_cap)?;
                (run.scored_above_tail(), false)
            }
            Method::BoundaryMorph | Method::Bagel => {
                let (prior, acq) = if cfg.method == Method::Bagel {
                    (Prior::Zero, Acquisition::Ucb)
                } else {
                    (cfg.prior, cfg.acquisition)
                };
                let mips = prior != Prior::Zero;
                let mu0: Vec<f64> = match (mips, n > 1) {
                    (true, true) => (0..n).map(|p| (n - 1 - p) as f64 / (n - 1) as f64).collect(),
                    (true, false) => vec![1.0],
                    (false, _) => vec![0.0; n],
                };
                let mu0_q = if mips { 1.0 } else { 0.0 };
                let store = self.engine.gp_store(&src, mu0.clone())?;
                if !half {
                    backend = self.engine.kind();
                }
                let mut gp = Gp::with_store(&src, store, mu0, mu0_q)?;
                if prior == Prior::Adaptive {
                    gp.set_adaptive(ADAPTIVE_RIDGE)?;
                    // Options refuse more probes than the budget; a budget above the pool
                    // was capped at the pool above (with its note), and the probes with it.
                    if cfg.prior_probes > budget {
                        notes.push(format!(
                            "prior probes {} are more than the pool; capped at {budget}",
                            cfg.prior_probes
                        ));
                    }
                    let probes = probe_ranks(cfg.prior_probes.min(budget), n);
                    let ys = run.call(&probes)?;
                    let obs: Vec<(usize, f64)> = probes.iter().copied().zip(ys).collect();
                    gp.observe_batch(&obs)?;
                }
                if cfg.method == Method::Bagel {
                    let warm: Vec<usize> = (0..budget / 2).collect();
                    let ys = run.call(&warm)?;
                    let obs: Vec<(usize, f64)> = warm.iter().copied().zip(ys).collect();
                    gp.observe_batch(&obs)?;
                }
                let mut search = Search {
                    gp,
                    acq,
                    beta0: cfg.beta0,
                    k: cfg.capacity,
                    fill: fill.as_ref(),
                    mean: vec![0.0; n],
                    var: vec![0.0; n],
                };
                while run.scored.len() < budget {
                    let q = cfg.batch.min(budget - run.scored.len());
                    if !search.round(&mut run, q)? {
                        notes.push(format!(
                            "stopped after {} calls: no boundary pair left",
                            run.scored.len()
                        ));
                        break;
                    }
                }
                search.refresh(&run, &[])?;
                if prior == Prior::Adaptive {
                    alpha = Some(search.gp.alpha());
                }
                (search.mean, true)
            }
        };
        if half && self.engine.kind() != BackendKind::Cpu {
            notes.push(format!(
                "{} runs on the CPU (row-precision {}: the {} path reads f32 rows)",
                cfg.method.name(),
                cfg.row_precision.name(),
                self.engine.name()
            ));
        } else if backend == BackendKind::Cpu && self.engine.kind() != BackendKind::Cpu {
            notes.push(format!(
                "{} runs on the CPU (no {} path for it)",
                cfg.method.name(),
                self.engine.name()
            ));
        }
        let (selected, used) = match &fill {
            None => (rank(&values)[..cfg.capacity].to_vec(), None),
            Some(f) => {
                let order = if by_density {
                    f.density_order(&values)
                } else {
                    // Scored documents by score per token above the tail in MIPS order.
                    let dens: Vec<f64> = (0..n)
                        .map(|i| match run.y[i] {
                            Some(y) => 1.0 + y / f.tokens[i] as f64,
                            None => values[i],
                        })
                        .collect();
                    rank(&dens)
                };
                let set = f.take(&order);
                let used = set.iter().map(|&i| f.tokens[i]).sum();
                let mut set = set;
                set.sort_by(|&a, &b| values[b].total_cmp(&values[a]).then(a.cmp(&b)));
                (set, Some(used))
            }
        };
        Ok(Reranked {
            selected,
            scored: run.scored,
            rounds: run.rounds,
            alpha,
            tokens: used,
            scores: run.scores,
            kernel,
            notes,
            backend,
        })
    }
}

/// `p` MIPS ranks spread evenly below the top of a pool of `n`: `round(i (n - 1) / p)` for
/// `i = 1..=p` (the last is the bottom), without repeats.
#[must_use]
pub fn probe_ranks(p: usize, n: usize) -> Vec<usize> {
    let mut out: Vec<usize> = (1..=p)
        .map(|i| ((i as f64) * (n.saturating_sub(1)) as f64 / p as f64).round() as usize)
        .collect();
    out.dedup();
    out
}

/// A token capacity with the documents' counts: the greedy fill.
struct Fill<'t> {
    tokens: &'t [u64],
    cap: u64,
    k: usize,
}

impl Fill<'_> {
    /// Value per token, descending (ties by MIPS position).
    fn density_order(&self, values: &[f64]) -> Vec<usize> {
        let d: Vec<f64> = values
            .iter()
            .zip(self.tokens)
            .map(|(&v, &t)| v / t as f64)
            .collect();
        rank(&d)
    }

    /// The boundary rule on value per token ([`boundary_pick_tokens`]).
    fn boundary(&self, mean: &[f64], var: &[f64], y: &[Option<f64>]) -> Option<usize> {
        let n = mean.len();
        let order = self.density_order(mean);
        let inc = self.take(&order);
        let mut is_inc = vec![false; n];
        inc.iter().for_each(|&i| is_inc[i] = true);
        // Challengers: what is out of the set and could enter it alone.
        let ch: Vec<usize> = order
            .iter()
            .copied()
            .filter(|&j| !is_inc[j] && self.tokens[j] <= self.cap)
            .collect();
        let t = |i: usize| self.tokens[i] as f64;
        let dm: Vec<f64> = (0..n).map(|i| mean[i] / t(i)).collect();
        let dv: Vec<f64> = (0..n).map(|i| var[i] / (t(i) * t(i))).collect();
        boundary_over(&dm, &dv, y, &inc, &ch)
    }

    /// The documents taken, in `order`, while they fit: at most `k` of them and `cap` tokens
    /// (one that does not fit is passed over and the fill goes on).
    fn take(&self, order: &[usize]) -> Vec<usize> {
        let (mut used, mut set) = (0u64, Vec::new());
        for &i in order {
            if set.len() == self.k {
                break;
            }
            if let Some(u) = used.checked_add(self.tokens[i]).filter(|&u| u <= self.cap) {
                used = u;
                set.push(i);
            }
        }
        set
    }
}

/// The GP methods' search state: the posterior, the acquisition, and one round's picks.
struct Search<'g, 'f> {
    gp: Gp<'g>,
    acq: Acquisition,
    beta0: f64,
    k: usize,
    fill: Option<&'f Fill<'f>>,
    mean: Vec<f64>,
    var: Vec<f64>,
}

impl Search<'_, '_> {
    /// The posterior with the scored documents and this round's fantasies overlaid.
    fn refresh(&mut self, run: &Run<'_>, pending: &[(usize, f64)]) -> Result<()> {
        self.gp.posterior(&mut self.mean, &mut self.var)?;
        run.overlay(&mut self.mean, &mut self.var);
        for &(j, f) in pending {
            self.mean[j] = f;
            self.var[j] = 0.0;
        }
        Ok(())
    }

    /// The next document to score, given this round's fantasised picks (`None`: no
    /// boundary pair, or nothing unscored, is left).
    fn pick(&mut self, run: &Run<'_>, pending: &[(usize, f64)]) -> Result<Option<usize>> {
        match self.acq {
            Acquisition::Boundary => {
                self.refresh(run, pending)?;
                // The scores with this round's fantasies; no copy when there are none (q = 1).
                let y: std::borrow::Cow<'_, [Option<f64>]> = if pending.is_empty() {
                    std::borrow::Cow::Borrowed(&run.y)
                } else {
                    let mut y = run.y.clone();
                    for &(j, f) in pending {
                        y[j] = Some(f);
                    }
                    std::borrow::Cow::Owned(y)
                };
                Ok(match self.fill {
                    None => boundary_scan(&self.mean, &self.var, &y, self.k),
                    Some(f) => f.boundary(&self.mean, &self.var, &y),
                })
            }
            Acquisition::Ucb => {
                let beta = self.beta0 / ((run.scored.len() + pending.len() + 1) as f64).sqrt();
                let mut scored: Vec<bool> = run.y.iter().map(Option::is_some).collect();
                pending.iter().for_each(|&(j, _)| scored[j] = true);
                self.gp.ucb(&scored, beta)
            }
        }
    }

    /// One round of up to `q` picks and one oracle call; false when nothing was picked.
    /// Each pick but the last is observed at its posterior mean before the next (kriging
    /// believer); the oracle's scores then revise those and the last is observed.
    fn round(&mut self, run: &mut Run<'_>, q: usize) -> Result<bool> {
        let mut picks: Vec<usize> = Vec::with_capacity(q);
        let mut pending: Vec<(usize, f64)> = Vec::new();
        while picks.len() < q {
            let Some(j) = self.pick(run, &pending)? else {
                break;
            };
            picks.push(j);
            if picks.len() < q {
                let f = self.gp_mean(j)?;
                self.gp.observe(j, f)?;
                pending.push((j, f));
            }
        }
        if picks.is_empty() {
            return Ok(false);
        }
        let ys = run.call(&picks)?;
        let revised: Vec<(usize, f64)> = pending.iter().zip(&ys).map(|(&(j, _), &y)| (j, y)).collect();
        self.gp.revise(&revised)?;
        if pending.len() < picks.len() {
            let last = picks.len() - 1;
            self.gp.observe(picks[last], ys[last])?;
        }
        Ok(true)
    }

    /// The GP's posterior mean at `j` (the UCB path does not keep the means).
    fn gp_mean(&mut self, j: usize) -> Result<f64> {
        if self.acq == Acquisition::Ucb {
            self.gp.posterior(&mut self.mean, &mut self.var)?;
        }
        Ok(self.mean[j])
    }
}

/// Runs `cfg` over `pool` (on the pool's engine) for `query` with `oracle`: a thin
/// wrapper over [`Reranker`].
pub fn rerank(cfg: &RerankConfig, pool: &Pool, query: &[f32], oracle: &mut dyn Oracle) -> Result<Reranked> {
    Reranker::new(pool.engine(), cfg.clone())?.rerank(pool, query, oracle)
}

/// [`rerank`] with per-document token counts ([`Reranker::rerank_tokens`]).
pub fn rerank_tokens(
    cfg: &RerankConfig,
    pool: &Pool,
    query: &[f32],
    tokens: Option<&[u64]>,
    oracle: &mut dyn Oracle,
) -> Result<Reranked> {
    Reranker::new(pool.engine(), cfg.clone())?.rerank_tokens(pool, query, tokens, oracle)
}

struct Run<'o> {
    n: usize,
    scored: Vec<usize>,
    scores: Vec<f64>,
    y: Vec<Option<f64>>,
    rounds: usize,
    oracle: &'o mut dyn Oracle,
}

impl Run<'_> {
    fn call(&mut self, items: &[usize]) -> Result<Vec<f64>> {
        if items.is_empty() {
            return Ok(Vec::new());
        }
        let ys = self.oracle.score(items)?;
        self.rounds += 1;
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

/// The boundary rule under a token capacity (as a run with `token_capacity = cap` and
/// capacity `k` applies it): incumbents are the greedy fill of `cap` tokens (and at most `k`
/// documents) by `mean / tokens` (ties by position), challengers the others that fit alone;
/// the pairs compare value per token, `z = (mu_i/t_i - mu_j/t_j) / sqrt(s_i²/t_i² +
/// s_j²/t_j² + 1e-12)`, with the ties and the choice of member as [`boundary_pick`].
pub fn boundary_pick_tokens(
    mean: &[f64],
    var: &[f64],
    y: &[Option<f64>],
    tokens: &[u64],
    cap: u64,
    k: usize,
) -> Result<Option<usize>> {
    check_lengths(mean.len(), var.len(), y.len())?;
    check_lengths(mean.len(), tokens.len(), mean.len())?;
    if let Some(i) = tokens.iter().position(|&t| t == 0) {
        return Err(Error::invalid(format!("tokens[{i}]"), "is 0"));
    }
    let fill = Fill { tokens, cap, k };
    Ok(fill.boundary(mean, var, y))
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
    let inc: &[usize] = inc;
    // Challengers come off a heap in rank order, only as far as the scan needs them.
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
    scan_pairs(mean, var, y, inc, smax2, || heap.pop().map(|c| c.0))
}

/// The boundary rule over given incumbents and challengers, each in rank order (a token
/// capacity's greedy set and the documents that could enter it).
fn boundary_over(mean: &[f64], var: &[f64], y: &[Option<f64>], inc: &[usize], ch: &[usize]) -> Option<usize> {
    let smax2 = ch.iter().map(|&j| var[j]).fold(0.0f64, f64::max);
    let mut it = ch.iter().copied();
    scan_pairs(mean, var, y, inc, smax2, || it.next())
}

/// The pair scan of the boundary rule: challengers come from `next` in rank order, only as
/// far as the scan needs them: the gap to an incumbent only grows along the ranking, so
/// once `gap / sqrt(s_i² + smax2 + 1e-12)` reaches the best z (`smax2` bounds the
/// challengers' variances), no later challenger can beat it.
fn scan_pairs(
    mean: &[f64],
    var: &[f64],
    y: &[Option<f64>],
    inc: &[usize],
    smax2: f64,
    mut next: impl FnMut() -> Option<usize>,
) -> Option<usize> {
    let mut ranked: Vec<usize> = Vec::new();
    let mut best: Option<(f64, usize, usize)> = None;
    for &i in inc {
        let si2 = var[i];
        let mut p = 0;
        loop {
            if p == ranked.len() {
                match next() {
                    Some(c) => ranked.push(c),
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

/// RGS (App. C.2): score the MIPS top-`seeds` in one call and push them on a max-heap by
/// oracle score (capped at `heap_cap`); repeatedly pop the best-scored document not yet
/// expanded and score, in one call, its unscored neighbours in the `degree`-NN graph (by
/// kernel value, ties to the lower index), push them and truncate the heap, until the
/// budget is spent. When the heap empties, the next unscored document in MIPS order seeds
/// (App. C.2 does not say; this keeps the budget working). With `seeds = budget` it is
/// single-stage rerank. The graph is never built whole: an expanded document's neighbours
/// come from its kernel row, read when it is expanded (at most `budget` rows, `O(N d)`
/// each); the paper's DiskANN graph is approximate, this one is exact.
fn rgs(
    run: &mut Run<'_>,
    kernel: &dyn KernelRows,
    budget: usize,
    seeds: usize,
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
    // Kept sorted: best score first, ties to the lower index.
    let mut heap: Vec<(f64, usize)> = Vec::new();
    let order = |heap: &mut Vec<(f64, usize)>| {
        heap.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        heap.truncate(heap_cap);
    };
    let first: Vec<usize> = (0..seeds.min(budget).min(n)).collect();
    let ys = run.call(&first)?;
    heap.extend(ys.into_iter().zip(first));
    order(&mut heap);
    let mut next_seed = 0;
    while run.scored.len() < budget {
        if heap.is_empty() {
            while next_seed < n && run.y[next_seed].is_some() {
                next_seed += 1;
            }
            if next_seed >= n {
                break;
            }
            let y = run.call(&[next_seed])?[0];
            heap.push((y, next_seed));
            continue;
        }
        let (_, top) = heap.remove(0);
        let left = budget - run.scored.len();
        let fresh: Vec<usize> = neighbours(top)
            .into_iter()
            .filter(|&i| run.y[i].is_none())
            .take(left)
            .collect();
        let ys = run.call(&fresh)?;
        heap.extend(ys.into_iter().zip(fresh));
        order(&mut heap);
    }
    Ok(())
}
