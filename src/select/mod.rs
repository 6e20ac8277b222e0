//! Marginal-value scoring and selection (marginal-value-pruning.txt §3, §5, App. B;
//! SPEC §1).
//!
//! Seven scorers answer `V(x | C, Q)` for a candidate `x`, a retained set `C` and a query:
//! MMR, geometric residual novelty (GRN), centroid drift, DPP determinant ratios,
//! submodular coverage per token, the hybrid, and lexical MMR. Each is used two ways:
//!
//! - [`Mode::Gate`]: score every candidate against a fixed retained set and keep those
//!   with `V >= tau` (Post-Retrieval pruning, Algorithm 1 line 11);
//! - [`Mode::Greedy`]: add the best candidate, update incrementally, repeat until an item
//!   budget `k`, a token budget, the threshold, or the scorer's own "no gain left" stops
//!   it (Pre-Retrieval and Pre-Synthesis).
//!
//! Ties always go to the lower index. Stopping rules (each method's facts are written once,
//! in `Selector::facts`, and hold on every backend): DPP and GRN stop when the best squared
//! residual is below [`presets::RESIDUAL_EPS`]; centroid drift stops when no candidate
//! drifts by more than [`presets::CENTROID_NOISE_FLOOR`]; MMR, lexical MMR and the hybrid
//! rank candidates rather than gain (their scores go negative in ordinary use), so they
//! run to `k` or the token budget unless a threshold is given, as LangChain's
//! `maximal_marginal_relevance`, Pyversity and Haystack do (SPEC §1, revised); coverage
//! keeps adding zero-gain items while they fit unless an item cap stops it. Every method also stops on the item budget `k` and the token budget;
//! under a token budget it takes the best candidate that still fits.
//!
//! A service builds a [`Selector`] once (the config is checked there) and calls
//! [`Selector::select`] on a resident [`Pool`] from any thread; the free
//! [`select`] is a thin wrapper that does both per call on the CPU.
//!
//! ```
//! use ctxprune::{Embeddings, select::{select, Inputs, Method, SelectConfig}};
//! let e = Embeddings::new(3, 2, vec![1.0, 0.0, 0.99, 0.1, 0.0, 1.0], "docs")?;
//! let q = [1.0f32, 0.5];
//! let cfg = SelectConfig::new(Method::Mmr).k(2);
//! let sel = select(&cfg, &Inputs { embeddings: Some(&e), query: Some(&q), ..Inputs::default() })?;
//! assert_eq!(sel.selected, vec![1, 2]); // 0, a near-duplicate of 1, loses to the new direction
//! # Ok::<(), ctxprune::Error>(())
//! ```

mod coverage;
mod dense;
mod driver;
mod estimate;
pub mod judge;
pub mod lexical;
pub mod options;
pub mod presets;
mod hybrid;
mod scorers;

pub use driver::Stop;
pub use options::{check_reads, SelectOptions};

use crate::backend::picker::{PickerInputs, PickerKind, Rows};
use crate::backend::{BackendKind, Engine};
use crate::embeddings::Embeddings;
use crate::error::{Error, Result};
use crate::pool::Pool;
use driver::{Facts, LazyPicker, Limits, Scorer};
use dense::Dense;
use hybrid::Hybrid;
use scorers::{Centroid, Dpp, Grn, Mmr};

/// The scorers of SPEC §1.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// Maximal marginal relevance.
    Mmr,
    /// Geometric residual novelty.
    Grn,
    /// Centroid drift.
    Centroid,
    /// DPP determinant ratio.
    Dpp,
    /// Submodular (facility-location) coverage per token.
    Coverage,
    /// Combined / hybrid: relevance + GRN + coverage.
    Hybrid,
    /// MMR over lexical similarity (TF-IDF cosine + bigram Jaccard).
    Lexical,
}

impl Method {
    /// Every method, in the order the demo shows them.
    pub const ALL: [Method; 7] = [
        Method::Mmr,
        Method::Grn,
        Method::Centroid,
        Method::Dpp,
        Method::Coverage,
        Method::Hybrid,
        Method::Lexical,
    ];

    /// The CLI name.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Method::Mmr => "mmr",
            Method::Grn => "grn",
            Method::Centroid => "centroid",
            Method::Dpp => "dpp",
            Method::Coverage => "coverage",
            Method::Hybrid => "hybrid",
            Method::Lexical => "lexical",
        }
    }

    /// The published operating point (App. B Table 5; SPEC §1).
    #[must_use]
    pub fn preset(self) -> Preset {
        use presets::*;
        let base = Preset {
            lambda: None,
            tau: None,
            max_items: None,
            weights: None,
        };
        match self {
            Method::Mmr => Preset {
                lambda: Some(MMR_LAMBDA),
                tau: Some(MMR_TAU),
                max_items: Some(MMR_MAX_ITEMS),
                ..base
            },
            Method::Grn => Preset {
                tau: Some(GRN_TAU),
                ..base
            },
            Method::Centroid => Preset {
                tau: Some(CENTROID_DELTA),
                ..base
            },
            Method::Dpp => Preset {
                tau: Some(DPP_TAU),
                max_items: Some(DPP_MAX_ITEMS),
                ..base
            },
            Method::Coverage => Preset {
                tau: Some(COVERAGE_TAU),
                ..base
            },
            Method::Hybrid => Preset {
                weights: Some(HYBRID_WEIGHTS),
                ..base
            },
            Method::Lexical => Preset {
                lambda: Some(LEXICAL_LAMBDA),
                tau: Some(LEXICAL_TAU),
                ..base
            },
        }
    }

    /// True for the scorers that cannot run without the query embedding (MMR, hybrid).
    #[must_use]
    pub fn needs_query(self) -> bool {
        matches!(self, Method::Mmr | Method::Hybrid)
    }

    /// True for the scorers that read the query embedding when one is given: MMR and the
    /// hybrid (relevance), DPP and coverage (the quality weight `w(x) = max(cos(x, q), 0)`;
    /// without a query `w = 1`). GRN, centroid drift and lexical MMR never read it.
    #[must_use]
    pub fn reads_query(self) -> bool {
        matches!(
            self,
            Method::Mmr | Method::Hybrid | Method::Dpp | Method::Coverage
        )
    }
}

impl std::str::FromStr for Method {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Ok(match s {
            "mmr" => Method::Mmr,
            "grn" => Method::Grn,
            "centroid" | "cd" => Method::Centroid,
            "dpp" => Method::Dpp,
            "coverage" | "sc" | "submodular" => Method::Coverage,
            "hybrid" | "combined" => Method::Hybrid,
            "lexical" => Method::Lexical,
            _ => {
                return Err(Error::invalid(
                    "method",
                    format!("unknown method '{s}' (mmr, grn, centroid, dpp, coverage, hybrid, lexical)"),
                ))
            }
        })
    }
}

/// A published operating point; `None` where the paper gives none.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Preset {
    /// MMR / lexical trade-off.
    pub lambda: Option<f64>,
    /// Keep threshold.
    pub tau: Option<f64>,
    /// Item cap.
    pub max_items: Option<usize>,
    /// Hybrid weights.
    pub weights: Option<[f64; 3]>,
}

/// Gating or greedy selection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Incremental greedy selection under budgets.
    Greedy,
    /// Score against the retained set; keep if `V >= tau`.
    Gate,
}

impl Mode {
    /// The CLI name.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Mode::Greedy => "greedy",
            Mode::Gate => "gate",
        }
    }
}

impl std::str::FromStr for Mode {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "greedy" => Ok(Mode::Greedy),
            "gate" => Ok(Mode::Gate),
            _ => Err(Error::invalid(
                "mode",
                format!("unknown mode '{s}' (greedy, gate)"),
            )),
        }
    }
}

/// How to select. Built with [`SelectConfig::new`] and the setters; every unset option
/// takes the default its setter names.
#[derive(Clone, Debug, PartialEq)]
pub struct SelectConfig {
    method: Method,
    mode: Mode,
    lambda: Option<f64>,
    weights: Option<[f64; 3]>,
    lexical_weights: Option<[f64; 2]>,
    threshold: Option<f64>,
    k: Option<usize>,
    token_budget: Option<f64>,
    paper_preset: bool,
    residual_eps: f64,
    coverage_dense_max: usize,
    coverage_knn: usize,
    eager_only: bool,
}

impl SelectConfig {
    /// Greedy selection with `method` and its default parameters.
    #[must_use]
    pub fn new(method: Method) -> Self {
        SelectConfig {
            method,
            mode: Mode::Greedy,
            lambda: None,
            weights: None,
            lexical_weights: None,
            threshold: None,
            k: None,
            token_budget: None,
            paper_preset: false,
            residual_eps: presets::RESIDUAL_EPS,
            coverage_dense_max: presets::COVERAGE_DENSE_MAX,
            coverage_knn: presets::COVERAGE_KNN,
            eager_only: false,
        }
    }
    /// Gate or greedy. By default, greedy.
    #[must_use]
    pub fn mode(mut self, m: Mode) -> Self {
        self.mode = m;
        self
    }
    /// MMR / lexical `lambda` in `[0, 1]`. By default, the paper's (0.35; lexical 0.6).
    #[must_use]
    pub fn lambda(mut self, l: f64) -> Self {
        self.lambda = Some(l);
        self
    }
    /// Hybrid `(alpha, beta, gamma)`, plain signed numbers. By default (0.40, 0.30, 0.30).
    #[must_use]
    pub fn weights(mut self, w: [f64; 3]) -> Self {
        self.weights = Some(w);
        self
    }
    /// Lexical `(w_tfidf, w_jaccard)`. By default (0.5, 0.5).
    #[must_use]
    pub fn lexical_weights(mut self, w: [f64; 2]) -> Self {
        self.lexical_weights = Some(w);
        self
    }
    /// Keep threshold `tau`. By default: gating uses the paper's tau (the hybrid has none
    /// and needs one); greedy has no threshold unless the paper preset is on.
    #[must_use]
    pub fn threshold(mut self, t: f64) -> Self {
        self.threshold = Some(t);
        self
    }
    /// Item budget. By default, none (the paper's cap with the paper preset).
    #[must_use]
    pub fn k(mut self, k: usize) -> Self {
        self.k = Some(k);
        self
    }
    /// Token budget over the selected items' costs. By default, none.
    #[must_use]
    pub fn token_budget(mut self, t: f64) -> Self {
        self.token_budget = Some(t);
        self
    }
    /// Use the paper's operating point (App. B Table 5) for every option not set
    /// explicitly: threshold and item cap in greedy mode too. By default, off.
    #[must_use]
    pub fn paper_preset(mut self, on: bool) -> Self {
        self.paper_preset = on;
        self
    }
    /// DPP / GRN stopping threshold on the squared residual. By default 1e-10.
    #[must_use]
    pub fn residual_eps(mut self, eps: f64) -> Self {
        self.residual_eps = eps;
        self
    }
    /// Largest pool for which coverage keeps a dense similarity; above it, a sparse
    /// k-NN one. By default 8192.
    #[must_use]
    pub fn coverage_dense_max(mut self, n: usize) -> Self {
        self.coverage_dense_max = n;
        self
    }
    /// Neighbours per item of the sparse coverage similarity. By default 64.
    #[must_use]
    pub fn coverage_knn(mut self, r: usize) -> Self {
        self.coverage_knn = r;
        self
    }
    /// Refresh every candidate at every step instead of lazily (same result, slower; the
    /// reference the lazy path is tested against). By default, off.
    #[must_use]
    pub fn eager_only(mut self, on: bool) -> Self {
        self.eager_only = on;
        self
    }
    /// The method.
    #[must_use]
    pub fn method_kind(&self) -> Method {
        self.method
    }
    /// The mode.
    #[must_use]
    pub fn mode_kind(&self) -> Mode {
        self.mode
    }
    /// The token budget, when one is set (then the request needs each item's cost).
    #[must_use]
    pub fn token_budget_value(&self) -> Option<f64> {
        self.token_budget
    }
}

/// What to select from, all borrowed: the free function [`select`]'s input. Rows of
/// `embeddings` (or entries of `texts`) are the pool; `retained` names rows already in
/// the context `C`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Inputs<'a> {
    /// The pool's embeddings (any norm; cosines divide by the norms). Not needed by lexical.
    pub embeddings: Option<&'a Embeddings>,
    /// The query embedding (MMR, DPP and hybrid need it; coverage weighs by it if given).
    pub query: Option<&'a [f32]>,
    /// The pool's texts (lexical).
    pub texts: Option<&'a [String]>,
    /// The query text (lexical).
    pub query_text: Option<&'a str>,
    /// Token cost of every pool item (> 0). By default every item costs 1.
    pub costs: Option<&'a [f64]>,
    /// Rows already retained, in the order they were added.
    pub retained: &'a [usize],
    /// Stops the selection between greedy steps (and between blocks of coverage's
    /// neighbour search) once cancelled or past its deadline, with
    /// [`Error::Cancelled`]. By default none: the selection runs to its end.
    pub cancel: Option<&'a crate::cancel::Cancel>,
}

/// One selection request against a resident [`Pool`]: everything but the pool.
#[derive(Clone, Copy, Debug, Default)]
pub struct Request<'a> {
    /// The query embedding (MMR, DPP and hybrid need it; coverage weighs by it if given).
    pub query: Option<&'a [f32]>,
    /// The pool's texts (lexical).
    pub texts: Option<&'a [String]>,
    /// The query text (lexical).
    pub query_text: Option<&'a str>,
    /// Token cost of every pool item (> 0). By default every item costs 1.
    pub costs: Option<&'a [f64]>,
    /// Rows already retained, in the order they were added.
    pub retained: &'a [usize],
    /// Stops the selection between greedy steps (and between blocks of coverage's
    /// neighbour search) once cancelled or past its deadline, with
    /// [`Error::Cancelled`]. By default none: the selection runs to its end.
    pub cancel: Option<&'a crate::cancel::Cancel>,
}

impl<'a> Inputs<'a> {
    fn request(&self) -> Request<'a> {
        Request {
            query: self.query,
            texts: self.texts,
            query_text: self.query_text,
            costs: self.costs,
            retained: self.retained,
            cancel: self.cancel,
        }
    }
}

/// The outcome of a selection.
#[derive(Clone, Debug, PartialEq)]
pub struct Selection {
    /// The method used.
    pub method: Method,
    /// The mode used.
    pub mode: Mode,
    /// Greedy: picks in order. Gate: kept candidates in index order.
    pub selected: Vec<usize>,
    /// `V(x | C)` of each selected item when it was selected.
    pub gains: Vec<f64>,
    /// Why greedy selection stopped (`None` for gating).
    pub stop: Option<Stop>,
    /// The threshold in force, if any.
    pub threshold: Option<f64>,
    /// Sum of the selected items' costs.
    pub tokens_selected: f64,
    /// Things the caller should know (a budget larger than the pool, a sparsified
    /// similarity, a step that ran on the CPU, ...), one sentence each.
    pub notes: Vec<String>,
    /// Where the selection ran.
    pub backend: BackendKind,
}

impl Selection {
    /// The JSON object `ctxprune select` prints (and `ctxprune serve` answers):
    /// `method`, `mode`, `selected`, `gains`, `backend`, `elapsed_ms`, and `stopped_by`,
    /// `threshold` and `tokens` (with `costs_given`) where they apply.
    #[must_use]
    pub fn to_json(&self, elapsed_ms: f64, costs_given: bool) -> serde_json::Value {
        let mut out = serde_json::json!({
            "method": self.method.name(),
            "mode": self.mode.name(),
            "selected": self.selected,
            "gains": self.gains,
            "backend": self.backend.name(),
            "elapsed_ms": elapsed_ms,
        });
        if let Some(s) = self.stop {
            out["stopped_by"] = s.as_str().into();
        }
        if let Some(t) = self.threshold {
            out["threshold"] = t.into();
        }
        if costs_given {
            out["tokens"] = self.tokens_selected.into();
        }
        out
    }
}

fn check_finite(name: &str, v: f64) -> Result<()> {
    if v.is_finite() {
        Ok(())
    } else {
        Err(Error::invalid(name, format!("must be finite, got {v}")))
    }
}

/// A [`SelectConfig`] checked once and bound to an engine: `select` from any thread, any
/// number of times, over resident pools.
///
/// ```
/// use ctxprune::{Embeddings, Engine, Pool};
/// use ctxprune::select::{Method, Request, SelectConfig, Selector};
/// let engine = Engine::cpu();
/// let pool = Pool::new(&engine, Embeddings::new(3, 2, vec![1.0, 0.0, 0.99, 0.1, 0.0, 1.0], "docs")?)?;
/// let mmr = Selector::new(&engine, SelectConfig::new(Method::Mmr).k(2))?;
/// let q = [1.0f32, 0.5];
/// let sel = mmr.select(&pool, &Request { query: Some(&q), ..Request::default() })?;
/// assert_eq!(sel.selected, vec![1, 2]);
/// # Ok::<(), ctxprune::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Selector {
    engine: Engine,
    cfg: SelectConfig,
    lambda: f64,
    weights: [f64; 3],
    lex_w: [f64; 2],
    threshold: Option<f64>,
    k: Option<usize>,
}

impl Selector {
    /// Checks `cfg` (ranges, options that do not apply to the method or mode) and binds it
    /// to `engine`.
    pub fn new(engine: &Engine, cfg: SelectConfig) -> Result<Selector> {
        let m = cfg.method;
        let preset = m.preset();
        let lambda = cfg.lambda.or(preset.lambda).unwrap_or(presets::MMR_LAMBDA);
        if !(0.0..=1.0).contains(&lambda) {
            return Err(Error::invalid(
                "lambda",
                format!("must be in [0, 1], got {lambda}"),
            ));
        }
        let weights = cfg.weights.unwrap_or(presets::HYBRID_WEIGHTS);
        weights.iter().try_for_each(|&w| check_finite("weights", w))?;
        let lex_w = cfg.lexical_weights.unwrap_or(presets::LEXICAL_WEIGHTS);
        lex_w.iter().try_for_each(|&w| check_finite("weights", w))?;
        if let Some(t) = cfg.threshold {
            check_finite("threshold", t)?;
        }
        if let Some(b) = cfg.token_budget {
            if !(b.is_finite() && b >= 0.0) {
                return Err(Error::invalid(
                    "token_budget",
                    format!("must be finite and >= 0, got {b}"),
                ));
            }
        }
        if !(cfg.residual_eps.is_finite() && cfg.residual_eps > 0.0) {
            return Err(Error::invalid(
                "residual_eps",
                format!("must be finite and > 0, got {}", cfg.residual_eps),
            ));
        }
        // Options that would be silently ignored are errors instead.
        if cfg.mode == Mode::Gate {
            if cfg.k.is_some() {
                return Err(Error::invalid(
                    "k",
                    "gate mode keeps every candidate with V >= tau; an item budget applies to greedy mode",
                ));
            }
            if cfg.token_budget.is_some() {
                return Err(Error::invalid(
                    "token_budget",
                    "gate mode keeps every candidate with V >= tau; a token budget applies to greedy mode",
                ));
            }
        }
        if cfg.lambda.is_some() && !matches!(m, Method::Mmr | Method::Lexical) {
            return Err(Error::invalid(
                "lambda",
                format!("applies to mmr and lexical, not {}", m.name()),
            ));
        }
        if cfg.weights.is_some() && m != Method::Hybrid {
            return Err(Error::invalid(
                "weights",
                format!("(alpha, beta, gamma) apply to hybrid, not {}", m.name()),
            ));
        }
        if cfg.lexical_weights.is_some() && m != Method::Lexical {
            return Err(Error::invalid(
                "weights",
                format!("(w_tfidf, w_jaccard) apply to lexical, not {}", m.name()),
            ));
        }
        let threshold = match cfg.mode {
            Mode::Gate => Some(cfg.threshold.or(preset.tau).ok_or_else(|| {
                Error::invalid(
                    "threshold",
                    format!("{} has no published threshold; gating needs one", m.name()),
                )
            })?),
            Mode::Greedy => cfg.threshold.or(if cfg.paper_preset { preset.tau } else { None }),
        };
        let k = cfg.k.or(if cfg.paper_preset { preset.max_items } else { None });
        Ok(Selector {
            engine: engine.clone(),
            cfg,
            lambda,
            weights,
            lex_w,
            threshold,
            k,
        })
    }

    /// The configuration.
    #[must_use]
    pub fn config(&self) -> &SelectConfig {
        &self.cfg
    }

    /// The engine.
    #[must_use]
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Selects from `pool` (resident on this selector's engine's device).
    pub fn select(&self, pool: &Pool, req: &Request<'_>) -> Result<Selection> {
        pool.check_engine(&self.engine, "selector")?;
        let rows = pool.rows();
        self.run(Some(&rows), None, pool.len(), req)
    }

    /// Runs every request of `reqs` over `pool`, each answered as [`Selector::select`]
    /// answers it alone (the same result, bit for bit, errors included), with the work
    /// shared: the relevance of every row to every request's query is taken in one read
    /// of the pool, then the requests run side by side on the engine's cores.
    ///
    /// ```
    /// use ctxprune::select::{Method, Request, SelectConfig, Selector};
    /// use ctxprune::{Embeddings, Engine, Pool};
    /// let engine = Engine::cpu();
    /// let pool = Pool::new(&engine, Embeddings::new(3, 2, vec![1.0, 0.0, 0.99, 0.1, 0.0, 1.0], "docs")?)?;
    /// let s = Selector::new(&engine, SelectConfig::new(Method::Mmr).k(2))?;
    /// let (a, b) = ([1.0f32, 0.0], [0.0f32, 1.0]);
    /// let reqs = [Request { query: Some(&a), ..Default::default() }, Request { query: Some(&b), ..Default::default() }];
    /// let out = s.select_many(&pool, &reqs);
    /// assert_eq!(out[0].as_ref().unwrap().selected, s.select(&pool, &reqs[0])?.selected);
    /// assert_eq!(out[1].as_ref().unwrap().selected[0], 2);
    /// # Ok::<(), ctxprune::Error>(())
    /// ```
    #[must_use]
    pub fn select_many(&self, pool: &Pool, reqs: &[Request<'_>]) -> Vec<Result<Selection>> {
        use rayon::prelude::*;
        let rows = pool.rows();
        let m = self.cfg.method;
        // The queries the selection would read and accept, relevance for all in one pass.
        let valid = |q: &[f32]| q.len() == pool.dim() && crate::embeddings::unit_vector(q, "query").is_ok();
        let shared: Vec<usize> = (0..reqs.len())
            .filter(|&i| m != Method::Lexical && m.reads_query() && reqs[i].query.is_some_and(valid))
            .collect();
        let qs: Vec<&[f32]> = shared.iter().filter_map(|&i| reqs[i].query).collect();
        let mut rels: Vec<Option<Vec<f64>>> = vec![None; reqs.len()];
        if pool.check_engine(&self.engine, "selector").is_ok() && !qs.is_empty() {
            let dots = crate::backend::cpu::matvec_many(rows.e.as_slice(), rows.e.dim(), &qs);
            for ((&i, q), mut r) in shared.iter().zip(&qs).zip(dots) {
                let inv_q = 1.0 / crate::backend::cpu::dot(q, q).sqrt();
                r.iter_mut().zip(rows.inv).for_each(|(v, &iv)| *v *= iv * inv_q);
                rels[i] = Some(r);
            }
        }
        rels.into_par_iter()
            .zip(reqs.par_iter())
            .map(|(rel, req)| {
                pool.check_engine(&self.engine, "selector")?;
                self.run(Some(&rows), rel, pool.len(), req)
            })
            .collect()
    }

    /// Selects from `pool`, or, without one, from the request alone (lexical over texts):
    /// what a front end with an optional pool calls.
    pub fn select_maybe_pool(&self, pool: Option<&Pool>, req: &Request<'_>) -> Result<Selection> {
        match pool {
            Some(p) => self.select(p, req),
            None => self.select_inputs(&Inputs {
                embeddings: None,
                query: req.query,
                texts: req.texts,
                query_text: req.query_text,
                costs: req.costs,
                retained: req.retained,
                cancel: req.cancel,
            }),
        }
    }

    /// Selects from borrowed inputs (the rows are normalised into a copy unless already
    /// unit, and uploaded per call on a device engine): what [`select`] runs.
    pub fn select_inputs(&self, inp: &Inputs<'_>) -> Result<Selection> {
        let m = self.cfg.method;
        let n = match (m, inp.embeddings, inp.texts) {
            (Method::Lexical, _, Some(t)) => t.len(),
            (Method::Lexical, _, None) => {
                return Err(Error::invalid("texts", "lexical needs the pool's texts"))
            }
            (_, Some(e), _) => e.rows(),
            (_, None, _) => {
                return Err(Error::invalid(
                    "embeddings",
                    format!("{} needs embeddings", m.name()),
                ))
            }
        };
        if let (Some(e), Some(t)) = (inp.embeddings, inp.texts) {
            if e.rows() != t.len() {
                return Err(Error::invalid(
                    "texts",
                    format!("{} texts for {} embedding rows", t.len(), e.rows()),
                ));
            }
        }
        match inp.embeddings {
            Some(e) if m != Method::Lexical && n > 0 && e.is_unit() => {
                let inv = e.inv_norms()?;
                let resident = self.engine.resident(e, &inv)?;
                let rows = Rows {
                    e,
                    inv: &inv,
                    resident: &resident,
                };
                self.run(Some(&rows), None, n, &inp.request())
            }
            Some(e) if m != Method::Lexical && n > 0 => {
                self.select_rows(e.as_slice(), e.rows(), e.dim(), e.source_name(), &inp.request())
            }
            _ => self.run(None, None, n, &inp.request()),
        }
    }

    /// Selects from a borrowed row-major `f32` matrix (`rows × dim`, named `source` in
    /// errors), such as a caller's array: one parallel pass checks it, unit-normalises it
    /// into a scratch copy and takes each row's relevance to the query from the same read
    /// ([`crate::Embeddings::unit_rows`]); then the selection runs as over a [`Pool`] of the
    /// same rows, with the same result bit for bit. The scratch copy is kept for the next
    /// call on the same thread when it is at most 64 MiB. Lexical reads no rows: use
    /// [`Selector::select_inputs`].
    pub fn select_rows(
        &self,
        data: &[f32],
        rows: usize,
        dim: usize,
        source: &str,
        req: &Request<'_>,
    ) -> Result<Selection> {
        if rows == 0 {
            return Err(Error::Empty("candidate pool".into()));
        }
        let query = if self.cfg.method.reads_query() {
            req.query
        } else {
            None
        };
        let buf = SCRATCH.with(std::cell::Cell::take);
        let u = crate::Embeddings::unit_rows_in(buf, data, rows, dim, source, query)?;
        let resident = self.engine.resident(&u.e, &u.inv)?;
        let r = Rows {
            e: &u.e,
            inv: &u.inv,
            resident: &resident,
        };
        let out = self.run(Some(&r), u.rel, rows, req);
        let buf = u.e.into_vec();
        if buf.capacity() * 4 <= SCRATCH_MAX_BYTES {
            SCRATCH.with(|s| s.set(buf));
        }
        out
    }

    /// The method's facts (SPEC §1), written once for every backend: its stopping floor
    /// and the device kernel that runs its greedy steps (none for gating, hybrid, lexical and sparse coverage).
    fn facts(&self, n: usize) -> (Facts, Option<PickerKind>) {
        let eps = self.cfg.residual_eps;
        let (floor, kind) = match self.cfg.method {
            Method::Mmr => (None, Some(PickerKind::Mmr { lambda: self.lambda })),
            Method::Lexical | Method::Hybrid => (None, None),
            Method::Grn => (Some(eps), Some(PickerKind::Grn { eps })),
            Method::Dpp => (Some(eps), Some(PickerKind::Dpp { eps })),
            // "No positive gain" at f64 resolution: 1 - cos of two unit vectors carries
            // ~1e-16 of rounding, so smaller drifts are not evidence of any.
            Method::Centroid => (Some(presets::CENTROID_NOISE_FLOOR), Some(PickerKind::Centroid)),
            Method::Coverage => (
                None,
                (n <= self.cfg.coverage_dense_max).then_some(PickerKind::Coverage),
            ),
        };
        let kind = if self.cfg.mode == Mode::Greedy { kind } else { None };
        (Facts { floor }, kind)
    }

    /// `rel`: the rows' relevance to `req.query` when the caller computed it already.
    fn run(
        &self,
        rows: Option<&Rows<'_>>,
        rel: Option<Vec<f64>>,
        n: usize,
        req: &Request<'_>,
    ) -> Result<Selection> {
        let m = self.cfg.method;
        let mode = self.cfg.mode;
        // --- validate the request before any work ----------------------------------------
        if n == 0 {
            return Err(Error::Empty("candidate pool".into()));
        }
        if let Some(t) = req.texts {
            if t.len() != n {
                return Err(Error::invalid(
                    "texts",
                    format!("{} texts for a pool of {n}", t.len()),
                ));
            }
        }
        let query = if m.reads_query() { req.query } else { None };
        if m.needs_query() && query.is_none() {
            return Err(Error::invalid(
                "query",
                format!("{} needs a query embedding", m.name()),
            ));
        }
        if m == Method::Lexical {
            if req.texts.is_none() {
                return Err(Error::invalid("texts", "lexical needs the pool's texts"));
            }
            if req.query_text.is_none() {
                return Err(Error::invalid("query_text", "lexical needs the query text"));
            }
        }
        if let (Some(q), Some(r)) = (query, rows) {
            r.e.check_dim(q.len(), "query vs embeddings")?;
            crate::embeddings::unit_vector(q, "query")?; // finite and non-zero
        }
        let mut seen = vec![false; n];
        for (k, &r) in req.retained.iter().enumerate() {
            if r >= n {
                return Err(Error::invalid(
                    format!("retained[{k}]"),
                    format!("index {r} is outside the pool of {n}"),
                ));
            }
            if std::mem::replace(&mut seen[r], true) {
                return Err(Error::invalid(
                    format!("retained[{k}]"),
                    format!("index {r} is listed twice"),
                ));
            }
        }
        if let Some(c) = req.costs {
            if c.len() != n {
                return Err(Error::invalid(
                    "costs",
                    format!("{} costs for a pool of {n}", c.len()),
                ));
            }
            if let Some(i) = c.iter().position(|&v| !(v.is_finite() && v > 0.0)) {
                return Err(Error::invalid(
                    format!("costs[{i}]"),
                    format!("must be finite and > 0, got {}", c[i]),
                ));
            }
            // Each cost finite is not enough: the selected tokens are their sum.
            if !c.iter().sum::<f64>().is_finite() {
                return Err(Error::invalid(
                    "costs",
                    "their total overflows f64 (costs near 1.8e308); give token counts",
                ));
            }
        }
        if self.cfg.token_budget.is_some() && req.costs.is_none() {
            return Err(Error::invalid(
                "token_budget",
                "needs each item's token cost: `costs`, or the `texts` to count them with `tokenizer`",
            ));
        }
        let mut notes = Vec::new();
        // Inputs the method does not read are named, never dropped without a word (the
        // CLI refuses such flags outright).
        for (given, what, used) in [
            (req.query.is_some(), "query embedding", m.reads_query()),
            (req.texts.is_some(), "texts", m == Method::Lexical),
            (req.query_text.is_some(), "query text", m == Method::Lexical),
        ] {
            if given && !used {
                notes.push(format!("{} does not read the {what}; it was not used", m.name()));
            }
        }
        let candidates = n - req.retained.len();
        if let Some(k) = self.k {
            if mode == Mode::Greedy && k > candidates {
                notes.push(format!(
                    "k = {k} is larger than the {candidates} candidates; selecting at most {candidates}"
                ));
            }
        }

        // --- build the picker (device or CPU) and run --------------------------------------
        let lim = Limits {
            k: self.k,
            token_budget: self.cfg.token_budget,
            costs: req.costs,
            threshold: self.threshold,
            cancel: req.cancel,
        };
        let (facts, kind) = self.facts(n);
        let dense = match rows {
            Some(r) if m != Method::Lexical => Some(match (query, rel) {
                (Some(_), Some(rel)) => Dense::with_rel(r, rel),
                _ => Dense::new(r, query)?,
            }),
            _ => None,
        };
        let mut ran_on = BackendKind::Cpu;
        let mut device = None;
        if let (Some(kind), Some(d), Some(r)) = (kind, dense.as_ref(), rows) {
            let budget_costs: Option<Vec<f64>> = lim
                .token_budget
                .map(|_| req.costs.map_or_else(|| vec![1.0; n], <[f64]>::to_vec));
            let inputs = PickerInputs {
                rel: d.rel.as_deref(),
                budget_costs: budget_costs.as_deref(),
                gain_costs: if m == Method::Coverage { req.costs } else { None },
            };
            if let Some(mut p) = self.engine.greedy_picker(kind, r, &inputs)? {
                ran_on = self.engine.kind();
                device = Some(driver::greedy(&mut *p, n, req.retained, &lim, &facts)?);
            }
        }
        if self.engine.kind() != BackendKind::Cpu && ran_on == BackendKind::Cpu {
            notes.push(format!(
                "{} in {} mode runs on the CPU (no {} path for it)",
                m.name(),
                mode.name(),
                self.engine.name()
            ));
        }
        let out = match device {
            Some((selected, gains, stop)) => Outcome {
                selected,
                gains,
                stop: Some(stop),
            },
            None => self.on_cpu(dense.as_ref(), n, req, &lim, &facts, &mut notes)?,
        };
        // A gain that overflowed (a cost of 1e-320, weights of 1e308) is not a number a
        // caller can use: say which item instead of printing null.
        if let Some(k) = out.gains.iter().position(|g| !g.is_finite()) {
            return Err(Error::invalid(
                format!("item {}", out.selected[k]),
                format!(
                    "its score is {} (overflow from the costs or weights given)",
                    out.gains[k]
                ),
            ));
        }
        let tokens_selected = out
            .selected
            .iter()
            .map(|&x| req.costs.map_or(1.0, |c| c[x]))
            .sum::<f64>()
            + 0.0;
        Ok(Selection {
            method: m,
            mode,
            selected: out.selected,
            gains: out.gains,
            stop: out.stop,
            threshold: self.threshold,
            tokens_selected,
            notes,
            backend: ran_on,
        })
    }

    /// The CPU path: the method's scorer, gated or stepped by the lazy picker.
    fn on_cpu(
        &self,
        dense: Option<&Dense<'_>>,
        n: usize,
        req: &Request<'_>,
        lim: &Limits<'_>,
        facts: &Facts,
        notes: &mut Vec<String>,
    ) -> Result<Outcome> {
        let (m, mode, eager, eps) = (
            self.cfg.method,
            self.cfg.mode,
            self.cfg.eager_only,
            self.cfg.residual_eps,
        );
        if m == Method::Lexical {
            let texts = req.texts.unwrap_or(&[]);
            let lex = lexical::Lexical::new(texts, req.query_text.unwrap_or(""), self.lex_w);
            return run_scorer(
                &mut Mmr::new(lex, self.lambda),
                mode,
                n,
                req.retained,
                lim,
                facts,
                eager,
            );
        }
        let d = dense.ok_or_else(|| Error::invalid("embeddings", "missing"))?;
        match m {
            Method::Mmr => run_scorer(
                &mut Mmr::new(d, self.lambda),
                mode,
                n,
                req.retained,
                lim,
                facts,
                eager,
            ),
            Method::Grn => run_scorer(&mut Grn::new(d, eps), mode, n, req.retained, lim, facts, eager),
            Method::Centroid => run_scorer(&mut Centroid::new(d), mode, n, req.retained, lim, facts, eager),
            Method::Dpp => run_scorer(&mut Dpp::new(d, eps), mode, n, req.retained, lim, facts, eager),
            Method::Coverage | Method::Hybrid => {
                let cov = coverage::Coverage::build(
                    d,
                    req.costs,
                    self.cfg.coverage_dense_max,
                    self.cfg.coverage_knn,
                    req.cancel,
                )?;
                if cov.is_sparse() {
                    notes.push(format!(
                        "pool of {n} is above {} items: coverage uses a sparse {}-nearest-neighbour similarity",
                        self.cfg.coverage_dense_max, self.cfg.coverage_knn
                    ));
                }
                if m == Method::Coverage {
                    run_scorer(&mut { cov }, mode, n, req.retained, lim, facts, eager)
                } else {
                    let mut h = Hybrid {
                        grn: Grn::new(d, eps),
                        cov,
                        w: self.weights,
                    };
                    run_scorer(&mut h, mode, n, req.retained, lim, facts, eager)
                }
            }
            Method::Lexical => Err(Error::invalid("method", "lexical is handled above")),
        }
    }
}

/// Runs `cfg` on `inp` on the CPU: a thin wrapper over [`Selector`] (the config is checked
/// on every call and the rows normalised per call; a service keeps a [`Selector`] and a
/// [`Pool`] instead).
pub fn select(cfg: &SelectConfig, inp: &Inputs<'_>) -> Result<Selection> {
    Selector::new(&Engine::cpu(), cfg.clone())?.select_inputs(inp)
}

/// The largest scratch copy [`Selector::select_rows`] keeps between calls, per thread.
const SCRATCH_MAX_BYTES: usize = 64 << 20;

thread_local! {
    /// The unit copy of the last borrowed matrix selected on this thread (at most
    /// [`SCRATCH_MAX_BYTES`]): arrays above glibc's mmap threshold (32 MB) would otherwise
    /// fault in every page of a fresh copy on every call.
    static SCRATCH: std::cell::Cell<Vec<f32>> = const { std::cell::Cell::new(Vec::new()) };
}

struct Outcome {
    selected: Vec<usize>,
    gains: Vec<f64>,
    stop: Option<Stop>,
}

#[allow(clippy::too_many_arguments)]
fn run_scorer<S: Scorer>(
    s: &mut S,
    mode: Mode,
    n: usize,
    retained: &[usize],
    lim: &Limits<'_>,
    facts: &Facts,
    eager_only: bool,
) -> Result<Outcome> {
    match mode {
        Mode::Greedy => {
            let mut p = LazyPicker::new(s, n, lim.costs, eager_only);
            let (selected, gains, stop) = driver::greedy(&mut p, n, retained, lim, facts)?;
            Ok(Outcome {
                selected,
                gains,
                stop: Some(stop),
            })
        }
        Mode::Gate => {
            let tau = lim.threshold.unwrap_or(f64::NEG_INFINITY);
            let (selected, gains) = driver::gate(s, n, retained, lim.cancel)?
                .into_iter()
                .filter(|&(_, v)| v >= tau)
                .unzip();
            Ok(Outcome {
                selected,
                gains,
                stop: None,
            })
        }
    }
}
