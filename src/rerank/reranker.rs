//! [`Reranker`]: a [`RerankConfig`] checked once and bound to an engine, and one run:
//! single-stage, RGS, or the GP methods' search (BoundaryMORPH, BAGEL and the ablations),
//! in rounds of `batch` oracle calls.

use super::acquire::{boundary_scan, rank, verify_scan, Fill};
use super::auto::{AUTO_CONFIRM, AUTO_CONFIRM_FIRST, AUTO_RESERVE};
use super::config::ADAPTIVE_RIDGE;
use super::evidence::{self, FitOptions, Hyper, Observed};
use super::gp::Gp;
use super::gp::{PoolKernel, JITTERS};
use super::rgs::rgs;
use super::run::Run;
use super::{
    kernel_rows, kernel_rows_in, Acquisition, Hyperparameters, KernelChoice, Method, Oracle, Prior,
    RerankConfig, RowPrecision, EVIDENCE_FIRST, EVIDENCE_MAX_OBSERVATIONS, FEEDBACK_EVERY,
};
use crate::backend::{BackendKind, Engine, Storage};
use crate::error::{Error, Result};
use crate::pool::Pool;
use crate::similarity::{Kernel, KernelKind};

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
    /// The kernel the GP used (at the end of the run, with hyperparameters by the
    /// evidence).
    pub kernel: Kernel,
    /// The hyperparameters the evidence fitted last (`None` with the paper's, or when the
    /// budget ended before the first fit).
    pub hyperparameters: Option<Hyper>,
    /// `method = "auto"`: whether the run went over to the zero prior and hyperparameters
    /// by the evidence ([`super::auto`]; a note says so too).
    pub switched: bool,
    /// Notes for the caller (a budget capped at the pool size, an early stop, a step that
    /// ran on the CPU).
    pub notes: Vec<String>,
    /// Where the pool-sized work ran: the GP's (boundary-morph, bagel) or the kernel rows
    /// of RGS's neighbours.
    pub backend: BackendKind,
}

impl Reranked {
    /// The JSON object `ctxprune rerank` prints (and `ctxprune serve` answers):
    /// `method`, `selected`, `scored`, `oracle_calls` (documents), `oracle_rounds` (calls),
    /// `scores`, `prior_alpha` (adaptive prior), `tokens` (token capacity), `notes`, `kappa` (vMF's,
    /// else null), `hyperparameters` (the evidence's last fit: `log_bandwidth`, `signal`,
    /// `noise`, `scale`, `offset`; else null), `backend`, `elapsed_ms` (without the oracle's time) and `oracle_ms`.
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
            "hyperparameters": self.hyperparameters.map(|h| serde_json::json!({
                "log_bandwidth": h.log_bandwidth,
                "signal": h.log_signal.exp(),
                "noise": h.log_noise.exp(),
                "scale": h.scale,
                "offset": h.offset,
            })),
            "backend": self.backend.name(),
            "elapsed_ms": elapsed_ms,
            "oracle_ms": oracle_ms,
        })
    }
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
        if !(cfg.concentration.is_finite() && cfg.concentration > 0.0) {
            return Err(Error::invalid(
                "concentration",
                format!("must be finite and > 0, got {}", cfg.concentration),
            ));
        }
        if cfg.concentration != 1.0 && !cfg.method.has_gp() {
            return Err(Error::invalid(
                "concentration",
                format!(
                    "applies to boundary-morph and bagel ({} reads no kernel values, or only their order, which the factor does not change)",
                    cfg.method.name()
                ),
            ));
        }
        let cosine = matches!(
            cfg.kernel,
            KernelChoice::Median(KernelKind::Cosine) | KernelChoice::Fixed(Kernel::Cosine)
        );
        if cfg.concentration != 1.0 && cosine {
            return Err(Error::invalid(
                "concentration",
                "the cosine kernel has no concentration (vmf, rbf and matern52 have)",
            ));
        }
        if cfg.hyperparameters == Hyperparameters::Evidence {
            if cfg.method != Method::BoundaryMorph {
                return Err(Error::invalid(
                    "hyperparameters",
                    format!("evidence applies to boundary-morph, not {}", cfg.method.name()),
                ));
            }
            cfg.prior.check_evidence()?;
        }
        if let Some(t) = cfg.switch_below {
            if !(cfg.method == Method::BoundaryMorph
                && matches!(cfg.prior, Prior::Mips | Prior::Score | Prior::Feedback)
                && cfg.hyperparameters == Hyperparameters::Paper)
            {
                return Err(Error::invalid(
                    "switch_below",
                    "applies to boundary-morph with the mips, score or feedback prior and the paper's hyperparameters",
                ));
            }
            if !(t > 0.0 && t <= 1.0) {
                return Err(Error::invalid("switch_below", format!("{t} is outside (0, 1]")));
            }
        }
        if cfg.verify != 0.0 {
            if cfg.method != Method::BoundaryMorph || cfg.acquisition != Acquisition::Boundary {
                return Err(Error::invalid(
                    "verify",
                    format!(
                        "applies to boundary-morph with the boundary acquisition, not {}{}",
                        cfg.method.name(),
                        if cfg.method == Method::BoundaryMorph {
                            " with ucb"
                        } else {
                            ""
                        }
                    ),
                ));
            }
            if !(0.0..=1.0).contains(&cfg.verify) {
                return Err(Error::invalid(
                    "verify",
                    format!("{} is outside [0, 1]", cfg.verify),
                ));
            }
        }
        if cfg.feedback_neighbours != 0.0 {
            if !(cfg.method == Method::BoundaryMorph && cfg.prior == Prior::Feedback) {
                return Err(Error::invalid(
                    "feedback_neighbours",
                    "applies to boundary-morph with the feedback prior",
                ));
            }
            super::prior::check_share(cfg.feedback_neighbours)?;
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
        let kernel = if cfg.concentration == 1.0 {
            kernel
        } else {
            let k = kernel.concentrated(cfg.concentration);
            k.validate().map_err(|e| {
                Error::invalid(
                    "concentration",
                    format!(
                        "{} times the kernel {kernel:?} is not a kernel ({e})",
                        cfg.concentration
                    ),
                )
            })?;
            k
        };
        let half = cfg.row_precision != RowPrecision::F32;
        let src = if half {
            kernel_rows_in(pool, query, kernel, cfg.row_precision)?
        } else {
            kernel_rows(pool, query, kernel)?
        };
        let mut notes: Vec<String> = cfg.chosen.iter().cloned().collect();
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
        // What the GP ended with: its kernel, and the hyperparameters the evidence fitted.
        let mut final_kernel = kernel;
        let mut hyper = None;
        let mut switched = false;
        // The final order: by value (ties by MIPS position); with a token capacity, the
        // greedy fill by value per token.
        let (values, by_density) = match cfg.method {
            Method::SingleStage => {
                let top: Vec<usize> = (0..budget).collect();
                run.call(&top)?;
                (run.scored_above_tail(), false)
            }
            Method::Rgs | Method::RgsSimple => {
                let (seeds, cap) = if cfg.method == Method::Rgs {
                    let seeds = ((budget as f64 / cfg.seed_div).round() as usize).min(budget);
                    (
                        seeds.max(1),
                        seeds.max((cfg.frac * budget as f64).round() as usize).max(1),
                    )
                } else {
                    (1, cfg.heap_cap)
                };
                let mut rows = self.engine.kernel_row_reader(&src)?;
                backend = rows.backend();
                rgs(&mut run, rows.as_mut(), budget, seeds, cfg.graph_degree, cap)?;
                (run.scored_above_tail(), false)
            }
            Method::BoundaryMorph | Method::Bagel => {
                let (prior, acq) = if cfg.method == Method::Bagel {
                    (Prior::Zero, Acquisition::Ucb)
                } else {
                    (cfg.prior, cfg.acquisition)
                };
                let mut mu0 = super::prior_mean(prior, &src);
                let mut mu0_q = if prior == Prior::Zero { 0.0 } else { 1.0 };
                let mut by_evidence = cfg.hyperparameters == Hyperparameters::Evidence;
                // Checked once, after EVIDENCE_FIRST calls (`switch_below`).
                let mut switch = cfg.switch_below;
                // The feedback prior's next re-shaping (off once a switch drops the prior).
                let mut feedback = (prior == Prior::Feedback).then_some(FEEDBACK_EVERY);
                let mut near: Near = (cfg.feedback_neighbours > 0.0)
                    .then(|| (super::prior::Neighbours::new(n), cfg.feedback_neighbours));
                // The last calls verify the set the run would return (`verify`).
                let verify = (cfg.verify * budget as f64).floor() as usize;
                // One epoch per set of hyperparameters: the GP is rebuilt when a fit
                // changes them, with every call so far replayed as one block.
                let mut epoch = Epoch {
                    kernel,
                    jitter: JITTERS[0],
                    fitted: None,
                    next_fit: EVIDENCE_FIRST,
                };
                loop {
                    let refitted;
                    let rows: &PoolKernel<'_> = if epoch.kernel == kernel {
                        &src
                    } else {
                        refitted = if half {
                            kernel_rows_in(pool, query, epoch.kernel, cfg.row_precision)?
                        } else {
                            kernel_rows(pool, query, epoch.kernel)?
                        };
                        &refitted
                    };
                    let store = self.engine.gp_store(rows, mu0.clone())?;
                    if !half {
                        backend = self.engine.kind();
                    }
                    let mut gp = Gp::with_jitter(rows, store, mu0.clone(), mu0_q, epoch.jitter)?;
                    gp.set_fitted(epoch.fitted.map(|h| h.fitted()))?;
                    if !run.scored.is_empty() {
                        gp.observe_batch(&run.observed())?;
                    } else if prior == Prior::Adaptive {
                        gp.set_adaptive(ADAPTIVE_RIDGE)?;
                        // Options refuse more probes than the budget; a budget above the
                        // pool was capped at the pool above (with its note), and the probes
                        // with it.
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
                    } else if cfg.method == Method::Bagel {
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
                        verify_from: budget - verify,
                    };
                    let mut refitted_epoch = None;
                    while run.scored.len() < budget {
                        let q = cfg.batch.min(budget - run.scored.len());
                        if !search.round(&mut run, q)? {
                            notes.push(format!(
                                "stopped after {} calls: no boundary pair left",
                                run.scored.len()
                            ));
                            break;
                        }
                        let calls = run.scored.len();
                        if let Some(t) = switch.filter(|_| calls >= EVIDENCE_FIRST) {
                            switch = None;
                            let low =
                                |run: &Run<'_>| run.scored.iter().all(|&j| run.y[j].is_some_and(|y| y < t));
                            if low(&run) && calls < budget && calls >= EVIDENCE_MAX_OBSERVATIONS {
                                // A first round of that many calls (a batch that large):
                                // beyond what the evidence fits.
                                notes.push(format!(
                                    "the first {calls} scores are all below {t}, but the switch to the evidence fits at most {EVIDENCE_MAX_OBSERVATIONS} calls: the run goes on with its prior"
                                ));
                            } else if low(&run) && calls < budget {
                                // The first calls sit at the top-k's boundary, which can hold
                                // nothing relevant where fewer than k documents are: the
                                // MIPS top confirms before the prior is dropped. One at a
                                // time, stopping at the first that is not low (on real text
                                // mostly the first). The GP does not observe them unless the
                                // prior is dropped (the new epoch replays every call): a
                                // run that keeps the prior keeps its search, with the
                                // top's scores in its final order. The confirmation stops
                                // short of the evidence's limit, so a switch it confirms
                                // can still be made.
                                let mut confirmed = 0;
                                for j in 0..n.min(AUTO_CONFIRM) {
                                    if run.y[j].is_some() {
                                        continue;
                                    }
                                    let keep = if confirmed < AUTO_CONFIRM_FIRST {
                                        0
                                    } else {
                                        AUTO_RESERVE
                                    };
                                    if run.scored.len() + keep >= budget
                                        || run.scored.len() + 1 >= EVIDENCE_MAX_OBSERVATIONS
                                        || !low(&run)
                                    {
                                        break;
                                    }
                                    run.call(&[j])?;
                                    confirmed += 1;
                                }
                            }
                            let calls = run.scored.len();
                            if low(&run) && calls < budget && calls < EVIDENCE_MAX_OBSERVATIONS {
                                // The MIPS top scored low: the prior is contradicted. The
                                // zero prior from here on, with the evidence's fits.
                                switched = true;
                                feedback = None;
                                let top = (0..n.min(AUTO_CONFIRM)).filter(|&j| run.y[j].is_some()).count();
                                mu0 = vec![0.0; n];
                                mu0_q = 0.0;
                                by_evidence = true;
                                notes.push(format!(
                                    "the first {calls} scores, {top} of the MIPS top {AUTO_CONFIRM} among them, are all below {t}: the prior is contradicted; the zero prior and hyperparameters by the evidence from here on"
                                ));
                                refitted_epoch = Some(match epoch.refit(rows, &run, &mu0, mu0_q) {
                                    Ok(next) => next,
                                    Err(e) => {
                                        notes.push(format!(
                                            "the evidence's fit at {calls} calls failed ({e}); the hyperparameters in force were kept"
                                        ));
                                        Epoch {
                                            next_fit: 2 * calls,
                                            ..epoch
                                        }
                                    }
                                });
                                break;
                            }
                        }
                        let calls = run.scored.len();
                        if feedback.is_some_and(|due| calls >= due && calls < budget) {
                            feedback = Some(calls + FEEDBACK_EVERY);
                            mu0 = reshape(&mut search.gp, rows, &run, &mut near)?;
                        }
                        if by_evidence
                            && calls >= epoch.next_fit
                            && calls < budget
                            && calls < EVIDENCE_MAX_OBSERVATIONS
                        {
                            match epoch.refit(rows, &run, &mu0, mu0_q) {
                                Ok(next) => {
                                    refitted_epoch = Some(next);
                                    break;
                                }
                                // Not seen (the covariance factors at every start a run
                                // makes); the run goes on in this GP rather than fail
                                // after its calls are spent.
                                Err(e) => {
                                    notes.push(format!(
                                        "the evidence's fit at {calls} calls failed ({e}); the hyperparameters in force were kept"
                                    ));
                                    epoch.next_fit = 2 * calls;
                                }
                            }
                        }
                    }
                    if let Some(next) = refitted_epoch {
                        epoch = next;
                        continue;
                    }
                    search.refresh(&run, &[])?;
                    if prior == Prior::Adaptive {
                        alpha = Some(search.gp.alpha());
                    }
                    final_kernel = epoch.kernel;
                    hyper = epoch.fitted;
                    break (search.mean, true);
                }
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
            let why = if pool.storage() == Storage::F32 || cfg.method == Method::SingleStage {
                format!("no {} path for it", self.engine.name())
            } else {
                format!(
                    "the pool is stored as {} on {}, and its kernel rows read f32 rows",
                    pool.storage().name(),
                    self.engine.name()
                )
            };
            notes.push(format!("{} runs on the CPU ({why})", cfg.method.name()));
        }
        if half && hyper.is_some() {
            notes.push(format!(
                "the evidence's kernels read {} rows: its fitted kernels are sharper than the copy's rounding resolves (CE-nCG to 0.14 below f32 rows on `ctxprune eval`'s trap; docs/rerank.md); read f32 rows with hyperparameters by the evidence",
                cfg.row_precision.name()
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
            kernel: final_kernel,
            hyperparameters: hyper,
            switched,
            notes,
            backend,
        })
    }
}

/// Re-shapes the feedback prior ([`Prior::Feedback`]) from Rocchio's moved query over
/// every score so far (the MIPS top's confirming calls included) and puts it under `gp`,
/// which keeps its kernel rows and observations; returns the new prior.
fn reshape(gp: &mut Gp<'_>, rows: &PoolKernel<'_>, run: &Run<'_>, near: &mut Near) -> Result<Vec<f64>> {
    let scored = run.observed();
    let mut mu0 = super::feedback_mean(rows, &scored)?;
    if let Some((neighbours, share)) = near {
        neighbours.add(rows, &scored)?;
        mu0 = neighbours.mix(mu0, *share);
    }
    gp.set_prior(mu0.clone())?;
    Ok(mu0)
}

/// The feedback prior's neighbour share ([`RerankConfig::feedback_neighbours`]) with the
/// relevant rows counted so far; `None` at a share of 0.
type Near = Option<(super::prior::Neighbours, f64)>;

/// The GP's hyperparameters between two fits of the evidence.
#[derive(Clone, Copy)]
struct Epoch {
    kernel: Kernel,
    /// The noise variance over the signal's: the jitter ladder's first rung.
    jitter: f64,
    /// The last fit (`None`: the paper's, until the first).
    fitted: Option<Hyper>,
    /// The call count at which the next fit is due.
    next_fit: usize,
}

impl Epoch {
    /// Fits the evidence of the calls so far (the query first, then the calls in order),
    /// warm-started from the last fit, and the epoch that runs with it.
    fn refit(&self, rows: &PoolKernel<'_>, run: &Run<'_>, mu0: &[f64], mu0_q: f64) -> Result<Epoch> {
        let idx: Vec<Option<usize>> = std::iter::once(None)
            .chain(run.scored.iter().map(|&j| Some(j)))
            .collect();
        let t = idx.len();
        let mut cos = vec![0.0; t * t];
        for a in 0..t {
            for b in 0..=a {
                let c = rows.cosine(idx[a], idx[b])?;
                cos[a * t + b] = c;
                cos[b * t + a] = c;
            }
        }
        // The query is an observation y = 1 at its prior mean (SPEC §3).
        let value = |i: Option<usize>, of: &dyn Fn(usize) -> f64, query: f64| i.map_or(query, of);
        let y: Vec<f64> = idx
            .iter()
            .map(|&i| value(i, &|j| run.y[j].unwrap_or(f64::NAN), 1.0))
            .collect();
        let p: Vec<f64> = idx.iter().map(|&i| value(i, &|j| mu0[j], mu0_q)).collect();
        let obs = Observed {
            cos: &cos,
            y: &y,
            mu0: &p,
        };
        let (family, _) = evidence::log_bandwidth_of(self.kernel);
        let start = match self.fitted {
            Some(h) => h,
            None => Hyper::paper(self.kernel, &obs, JITTERS[0])?,
        };
        let fit = evidence::fit(family, &obs, &start, &FitOptions::default())?;
        let h = fit.hyper;
        Ok(Epoch {
            kernel: evidence::kernel_of(family, h.log_bandwidth),
            jitter: (h.log_noise - h.log_signal).exp(),
            fitted: Some(h),
            next_fit: 2 * run.scored.len(),
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

/// The GP methods' search state: the posterior, the acquisition, and one round's picks.
struct Search<'g, 'f> {
    gp: Gp<'g>,
    acq: Acquisition,
    beta0: f64,
    k: usize,
    fill: Option<&'f Fill<'f>>,
    mean: Vec<f64>,
    var: Vec<f64>,
    /// The call from which on each pick verifies the set the run would return
    /// ([`super::verify_pick`]): the budget less the verifying calls.
    verify_from: usize,
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
    /// boundary pair, or nothing unscored, is left). From call `verify_from` on, the set's
    /// most uncertain unscored member comes first, the boundary rule when it has none.
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
                if run.scored.len() + pending.len() >= self.verify_from {
                    let j = match self.fill {
                        None => verify_scan(&self.mean, &self.var, &y, self.k),
                        Some(f) => f.verify(&self.mean, &self.var, &y),
                    };
                    if j.is_some() {
                        return Ok(j);
                    }
                }
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
