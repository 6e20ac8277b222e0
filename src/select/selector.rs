//! [`Selector`]: a [`SelectConfig`] checked once and bound to an engine, and the run of
//! one selection over a resident pool or borrowed rows (facts per method, the scorer's
//! picker on the engine or the lazy CPU driver, gate or greedy).

use super::dense::{first_pick_guess, Dense, RelPass};
use super::driver::{self, Facts, LazyPicker, Limits, Scorer};
use super::hybrid::Hybrid;
use super::scorers::{Centroid, Dpp, Grn, Mmr};
use super::{coverage, lexical, presets, Inputs, Method, Mode, Request, SelectConfig, Selection, Stop};
use crate::backend::picker::{PickerInputs, PickerKind, Rows};
use crate::backend::{BackendKind, Engine};
use crate::embeddings::{Matrix, Norms};
use crate::error::{Error, Result};
use crate::pool::Pool;

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
/// let mmr = Selector::new(&engine, SelectConfig::new(Method::Mmr).k(2).lambda(0.5))?;
/// let q = [1.0f32, 0.5];
/// let sel = mmr.select(&pool, &Request { query: Some(&q), ..Request::default() })?;
/// assert_eq!(sel.selected, vec![1, 2]);
/// # Ok::<(), ctxprune::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Selector {
    pub(super) engine: Engine,
    pub(super) cfg: SelectConfig,
    pub(super) lambda: f64,
    pub(super) weights: [f64; 3],
    pub(super) lex_w: [f64; 2],
    pub(super) threshold: Option<f64>,
    pub(super) k: Option<usize>,
}

impl Selector {
    /// Checks `cfg` (ranges, options that do not apply to the method or mode) and binds it
    /// to `engine`.
    pub fn new(engine: &Engine, cfg: SelectConfig) -> Result<Selector> {
        let m = cfg.method;
        let preset = m.preset();
        // The paper's operating point with `paper_preset`, else the crate's defaults.
        let preset = if cfg.paper_preset { preset } else { m.defaults() };
        let lambda = cfg
            .lambda
            .or(preset.lambda)
            .unwrap_or(presets::DEFAULT_MMR_LAMBDA);
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
                    format!(
                        "{} has no default threshold (its scale is the weights'); gating needs one",
                        m.name()
                    ),
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
        let rows = self.pool_rows(pool);
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
        let ours = pool.check_engine(&self.engine, "selector").is_ok();
        // A copy is made only for a pool this selector can read.
        let rows = if ours { self.pool_rows(pool) } else { pool.rows() };
        let m = self.cfg.method;
        // The queries the selection would read and accept, relevance for all in one pass.
        let valid = |q: &[f32]| q.len() == pool.dim() && crate::embeddings::unit_vector(q, "query").is_ok();
        let shared: Vec<usize> = (0..reqs.len())
            .filter(|&i| m != Method::Lexical && m.reads_query() && reqs[i].query.is_some_and(valid))
            .collect();
        let qs: Vec<&[f32]> = shared.iter().filter_map(|&i| reqs[i].query).collect();
        let mut rels: Vec<Option<Vec<f64>>> = vec![None; reqs.len()];
        if ours && !qs.is_empty() {
            let dots = crate::backend::cpu::matvec_many(rows.e.as_slice(), rows.e.dim(), &qs);
            for ((&i, q), mut r) in shared.iter().zip(&qs).zip(dots) {
                let inv_q = 1.0 / crate::backend::cpu::sum_sq(q).sqrt();
                r.iter_mut().zip(rows.inv).for_each(|(v, &iv)| *v *= iv * inv_q);
                rels[i] = Some(r);
            }
        }
        rels.into_par_iter()
            .zip(reqs.par_iter())
            .map(|(rel, req)| {
                pool.check_engine(&self.engine, "selector")?;
                self.run(
                    Some(&rows),
                    rel.map(|rel| Dense::with_rel(&rows, rel)),
                    pool.len(),
                    req,
                )
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

    /// Selects from borrowed inputs (the rows read where they are when unit, or within 2^-8
    /// of it, else normalised into a copy, as [`Selector::select_rows`]; uploaded per call
    /// on a device engine): what [`select`](super::select()) runs.
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
                let resident = self.engine.resident(e.view(), &inv)?;
                let rows = Rows {
                    e: e.view(),
                    inv: &inv,
                    resident: &resident,
                    screen: None,
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
    /// errors), such as a caller's array, without copying it: one parallel pass checks it
    /// and takes each row's exact inverse norm ([`Pool::from_slice`]'s pass), then the
    /// selection runs over the borrowed rows as over a [`Pool`] of them, with the same
    /// result bit for bit. Rows that are not unit already (a norm further than 2^-8 from
    /// one) are unit-normalised into a scratch copy instead, as the pool normalises them
    /// (the copy is kept for the next call on the same thread when it is at most 64 MiB).
    /// On a device engine the rows are uploaded per call. Lexical reads no rows: use
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
        // Relevance from the read that takes the norms: the bits, or the bounds, a pool's
        // selection takes in its own pass. A lazy pass guesses row 0 as the first pick, as
        // over a pool ([`Dense::lazy`]). A query of another length gets none here; the
        // selection names it.
        let query = query.filter(|q| q.len() == dim);
        let lazy = self.lazy_rel();
        let guess = query.filter(|_| lazy).and_then(|q| {
            first_pick_guess(rows, q, |i| {
                // Before the shape is checked: a short array gives no guess.
                let r = data.get(i.checked_mul(dim)?..(i + 1).checked_mul(dim)?)?;
                crate::embeddings::kept_inv_norm(r).map(|inv| (r, inv))
            })
        });
        let pass = query.and_then(|q| RelPass::new(q, lazy, guess).ok());
        let per_row = pass
            .as_ref()
            .map(|p| move |row: &[f32], inv: f64| p.row(row, inv));
        let f = per_row.as_ref().map(|f| f as crate::embeddings::PerRow<'_>);
        if let Norms::Kept { inv, per_row } = crate::Embeddings::kept_inv_norms(data, rows, dim, source, f)? {
            let e = Matrix::borrowed(data, rows, dim);
            let resident = self.engine.resident(e, &inv)?;
            let r = Rows {
                e,
                inv: &inv,
                resident: &resident,
                screen: None,
            };
            let dense = pass.zip(per_row).map(|(p, v)| p.into_dense(&r, v));
            return self.run(Some(&r), dense, rows, req);
        }
        let buf = SCRATCH.with(std::cell::Cell::take);
        let u = crate::Embeddings::unit_rows_in(buf, data, rows, dim, source, query)?;
        let resident = self.engine.resident(u.e.view(), &u.inv)?;
        let r = Rows {
            e: u.e.view(),
            inv: &u.inv,
            resident: &resident,
            screen: None,
        };
        let out = self.run(Some(&r), u.rel.map(|rel| Dense::with_rel(&r, rel)), rows, req);
        let buf = u.e.into_vec();
        if buf.capacity() * 4 <= SCRATCH_MAX_BYTES {
            SCRATCH.with(|s| s.set(buf));
        }
        out
    }

    /// The rows of `pool` a selection reads: with its 16-bit copy (made on first use)
    /// where MMR's lazy heap screens a pool past [`SCREEN16_FROM_BYTES`].
    fn pool_rows<'p>(&self, pool: &'p Pool) -> Rows<'p> {
        if self.lazy_rel() && screen16(pool) {
            pool.rows_screened()
        } else {
            pool.rows()
        }
    }

    /// Whether this selection reads relevance through bounds: MMR's lazy heap on the CPU
    /// computes it exactly only for the rows that reach its top (the eager reference, and
    /// the devices, compute it all).
    fn lazy_rel(&self) -> bool {
        self.cfg.method == Method::Mmr
            && self.cfg.mode == Mode::Greedy
            && !self.cfg.eager_only
            && self.engine.kind() == BackendKind::Cpu
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

    /// `dense`: the rows with their relevance to `req.query`, when the caller took it
    /// already (in the read that took the rows' norms, or for many queries at once).
    fn run<'r>(
        &self,
        rows: Option<&Rows<'r>>,
        dense: Option<Dense<'r>>,
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
        let dense = match (dense, rows) {
            (Some(d), _) => Some(d),
            (None, Some(r)) if m != Method::Lexical => Some(match query {
                Some(q) if self.lazy_rel() => Dense::lazy(r, q)?,
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
                best: None,
            },
            None => self.on_cpu(dense.as_ref(), n, req, &lim, &facts, &mut notes)?,
        };
        // A threshold that keeps nothing says so: an empty answer is not left to look like
        // a bug (or like an empty pool).
        if out.selected.is_empty() && candidates > 0 {
            if let Some(t) = self.threshold {
                let preset = if self.cfg.paper_preset {
                    " (the paper's preset)"
                } else {
                    ""
                };
                notes.push(match (mode, out.best) {
                    (Mode::Gate, Some(b)) => format!(
                        "nothing kept: the threshold {t}{preset} is above every candidate's value (the best is {b:.6}); a lower threshold keeps some"
                    ),
                    _ => format!(
                        "nothing selected: the first pick's value is below the threshold {t}{preset}; a lower threshold, or none, selects by the item or token budget"
                    ),
                });
            }
        }
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
    /// Gate mode: the best value of any candidate (kept or not).
    best: Option<f64>,
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
                best: None,
            })
        }
        Mode::Gate => {
            let tau = lim.threshold.unwrap_or(f64::NEG_INFINITY);
            let all = driver::gate(s, n, retained, lim.cancel)?;
            let best = all
                .iter()
                .map(|&(_, v)| v)
                .fold(None, |b: Option<f64>, v| Some(b.map_or(v, |b| b.max(v))));
            let (selected, gains) = all.into_iter().filter(|&(_, v)| v >= tau).unzip();
            Ok(Outcome {
                selected,
                gains,
                stop: None,
                best,
            })
        }
    }
}

/// Pools whose `f32` rows take at least this many bytes are screened from their 16-bit
/// copy ([`Pool::rows_screened`]) by MMR's lazy heap. A fixed size, the L3 of the host it
/// was measured on: past the last-level cache a pass of bounds waits on memory, and the
/// copy halves what it reads (synthetic 10,000 x 1,024, 40 MB: MMR k = 10 twice as fast,
/// k = 100 about a quarter faster, docs/performance.md). A pool in the cache gained
/// nothing from it (the conversions cost about what the bytes saved: real text
/// 5,000 x 384, MMR k = 10, 16% slower), so it keeps its `f32` screens.
pub(crate) const SCREEN16_FROM_BYTES: usize = 32 << 20;

/// Whether MMR over `pool` screens from its 16-bit copy ([`SCREEN16_FROM_BYTES`]).
fn screen16(pool: &Pool) -> bool {
    pool.len().saturating_mul(pool.dim()).saturating_mul(4) >= SCREEN16_FROM_BYTES
}

#[cfg(test)]
mod tests {
    use super::*;

    /// MMR over a pool's 16-bit copy (what pools past [`SCREEN16_FROM_BYTES`] read)
    /// picks what it picks over the `f32` rows, with the same gains bit for bit: the
    /// copy only screens. Clustered rows (near-ties) of odd sizes in a retriever's order
    /// and shuffled, k from 1 to past the pool, λ from 0 to 1, retained rows, a token
    /// budget; alone and through `select_many`'s shared relevance.
    #[test]
    fn the_16_bit_copy_changes_no_pick() {
        let engine = Engine::cpu();
        for (seed, n, d) in [(3u64, 37usize, 9usize), (4, 997, 101), (5, 2113, 17)] {
            let mut rng = crate::rng::Rng::new(seed);
            let centres: Vec<Vec<f64>> = (0..5).map(|_| (0..d).map(|_| rng.normal()).collect()).collect();
            let q: Vec<f32> = centres[0]
                .iter()
                .map(|&v| (v + 0.5 * rng.normal()) as f32)
                .collect();
            let mut raw: Vec<Vec<f32>> = (0..n)
                .map(|i| {
                    centres[i % 5]
                        .iter()
                        .map(|&v| (v + 0.1 * rng.normal()) as f32)
                        .collect()
                })
                .collect();
            if seed == 4 {
                // A retriever's order (by cosine, as the pool's unit rows see it): the
                // first pick is guessed.
                let to: Vec<f64> = q.iter().map(|&v| f64::from(v)).collect();
                super::super::dense::in_retriever_order(&mut raw, &to);
            }
            let pool = Pool::new(&engine, crate::Embeddings::new(n, d, raw.concat(), "t").unwrap()).unwrap();
            let guessed = Dense::lazy(&pool.rows_screened(), &q).unwrap().guessed(0);
            assert_eq!(
                guessed,
                seed == 4,
                "seed {seed}: a first pick is guessed in a retriever's order only"
            );
            let costs: Vec<f64> = (0..n).map(|i| 1.0 + (i % 7) as f64).collect();
            for (k, lambda, retained, budget) in [
                (1usize, 0.5, vec![], None),
                (10, 0.5, vec![], None),
                (n + 3, 0.7, vec![], None),
                (25, 0.0, vec![], None),
                (25, 1.0, vec![], None),
                (12, 0.3, vec![2, n - 1], None),
                (40, 0.6, vec![], Some(60.0)),
            ] {
                let mut cfg = SelectConfig::new(Method::Mmr).k(k).lambda(lambda).threshold(-1.0);
                if let Some(b) = budget {
                    cfg = cfg.token_budget(b);
                }
                let s = Selector::new(&engine, cfg).unwrap();
                let req = Request {
                    query: Some(&q),
                    retained: &retained,
                    costs: budget.map(|_| costs.as_slice()),
                    ..Request::default()
                };
                let plain = s.run(Some(&pool.rows()), None, n, &req).unwrap();
                let screened = s.run(Some(&pool.rows_screened()), None, n, &req).unwrap();
                let what =
                    format!("seed {seed}, k {k}, lambda {lambda}, retained {retained:?}, budget {budget:?}");
                assert!(!plain.selected.is_empty(), "{what}");
                assert_eq!(plain.selected, screened.selected, "{what}");
                let bits = |g: &[f64]| g.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&plain.gains), bits(&screened.gains), "{what}");
                let rows = pool.rows_screened();
                let rel = Dense::new(&rows, Some(&q)).unwrap().rel.unwrap();
                let shared = s
                    .run(Some(&rows), Some(Dense::with_rel(&rows, rel)), n, &req)
                    .unwrap();
                assert_eq!(plain.selected, shared.selected, "{what}, shared relevance");
                assert_eq!(
                    bits(&plain.gains),
                    bits(&shared.gains),
                    "{what}, shared relevance"
                );
            }
        }
    }

    /// Over a pool of [`SCREEN16_FROM_BYTES`] (8,192 x 1,024 in `f32`), `select` and
    /// `select_many` screen from the pool's copy (made on the first call) and answer as
    /// array in does over the same rows without one, bit for bit; a pool one row smaller
    /// makes none.
    #[test]
    fn a_pool_past_the_size_reads_its_copy_and_picks_as_array_in() {
        let engine = Engine::cpu();
        let (n, d) = (8_192usize, 1_024usize);
        let mut rng = crate::rng::Rng::new(9);
        let centres: Vec<Vec<f64>> = (0..40).map(|_| (0..d).map(|_| rng.normal()).collect()).collect();
        let mut data = Vec::with_capacity(n * d);
        for i in 0..n {
            let c = &centres[(i * 7) % 40];
            let row: Vec<f64> = c.iter().map(|&v| v + 0.8 * rng.normal()).collect();
            let norm = row.iter().map(|v| v * v).sum::<f64>().sqrt();
            data.extend(row.iter().map(|&v| (v / norm) as f32));
        }
        let small = Pool::new(
            &engine,
            crate::Embeddings::new(n - 1, d, data[..(n - 1) * d].to_vec(), "t").unwrap(),
        )
        .unwrap();
        assert!(!screen16(&small), "{} bytes", (n - 1) * d * 4);
        let pool = Pool::new(&engine, crate::Embeddings::new(n, d, data.clone(), "t").unwrap()).unwrap();
        assert!(screen16(&pool));
        let qs: Vec<Vec<f32>> = (0..3)
            .map(|j| {
                centres[j]
                    .iter()
                    .map(|&v| (v + 0.5 * rng.normal()) as f32)
                    .collect()
            })
            .collect();
        let reqs: Vec<Request<'_>> = qs
            .iter()
            .map(|q| Request {
                query: Some(q),
                ..Request::default()
            })
            .collect();
        let s = Selector::new(&engine, SelectConfig::new(Method::Mmr).k(30).lambda(0.5)).unwrap();
        assert!(
            pool.inner_screen().is_none(),
            "made on the first selection, not before"
        );
        let bits = |g: &[f64]| g.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        let many = s.select_many(&pool, &reqs);
        for (req, m) in reqs.iter().zip(many) {
            let one = s.select(&pool, req).unwrap();
            let array = s.select_rows(&data, n, d, "t", req).unwrap();
            let m = m.unwrap();
            assert_eq!(one.selected.len(), 30);
            assert_eq!(one.selected, array.selected);
            assert_eq!(bits(&one.gains), bits(&array.gains));
            assert_eq!(m.selected, array.selected);
            assert_eq!(bits(&m.gains), bits(&array.gains));
        }
        assert!(pool.inner_screen().is_some());
        s.select(&small, &reqs[0]).unwrap();
        assert!(small.inner_screen().is_none());
    }
}
