//! A rerank configuration by name, as a command line, a Python caller or an HTTP request
//! gives it: every option checked here once, and an option the method does not read is an
//! error naming it, never ignored.

use super::{Acquisition, Hyperparameters, KernelChoice, Method, Prior, RerankConfig};
use crate::error::{Error, Result};
use crate::similarity::{Kernel, KernelKind};

/// Options by name; `None` takes the default. Errors name the option as written here
/// (`prior`, `graph-degree`); a front end renames them to its flags or arguments.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RerankOptions<'a> {
    /// `boundary-morph`, `bagel`, `single-stage`, `rgs`, `rgs-simple`, or `auto`
    /// (BoundaryMORPH with a switch when its first scores say its prior is wrong:
    /// [`super::auto`]).
    pub method: &'a str,
    /// Oracle calls allowed, `B`.
    pub budget: usize,
    /// Documents returned, `k`.
    pub capacity: usize,
    /// The GP's kernel family: `vmf` (default), `cosine`, `rbf`, `matern52`; its bandwidth
    /// from the median heuristic unless `kappa` fixes vMF's.
    pub kernel: Option<&'a str>,
    /// vMF's concentration, fixed (vmf only).
    pub kappa: Option<f32>,
    /// `mips` (default), `zero`, `adaptive`, `score` or `feedback` (boundary-morph only).
    pub prior: Option<&'a str>,
    /// `boundary` (default) or `ucb` (boundary-morph only).
    pub acquisition: Option<&'a str>,
    /// UCB's `beta0`, by default 1 (bagel, and boundary-morph with `ucb`).
    pub beta0: Option<f64>,
    /// RGS's graph degree, by default 10 for rgs and 16 for rgs-simple.
    pub graph_degree: Option<usize>,
    /// RGS's seed split `n_seeds = round(B / seed_div)`, by default 2 (rgs only).
    pub seed_div: Option<f64>,
    /// RGS's heap cap fraction, `L_s = max(n_seeds, round(frac B))`, by default 1 (rgs only).
    pub frac: Option<f64>,
    /// Documents per oracle call, by default 1 (boundary-morph and bagel).
    pub batch: Option<usize>,
    /// A token capacity (needs the documents' token counts).
    pub token_capacity: Option<u64>,
    /// Probe documents for the adaptive prior, by default 0 (boundary-morph, prior adaptive).
    pub prior_probes: Option<usize>,
    /// The precision of the pool copy kernel rows are read from: `f32` (default), `bf16`
    /// or `f16` (boundary-morph, bagel, rgs, rgs-simple).
    pub row_precision: Option<&'a str>,
    /// How the GP's hyperparameters are set: `paper` (default) or `evidence`
    /// (boundary-morph, with the mips, zero or score prior).
    pub hyperparameters: Option<&'a str>,
    /// The share of the feedback prior from the relevant documents' neighbourhoods, in
    /// `[0, 1]`, by default 0 (boundary-morph, prior feedback;
    /// [`RerankConfig::feedback_neighbours`]).
    pub feedback_neighbours: Option<f64>,
}

impl<'a> RerankOptions<'a> {
    /// `method` with budget `B`, capacity `k` and every other option at its default.
    #[must_use]
    pub fn new(method: &'a str, budget: usize, capacity: usize) -> Self {
        RerankOptions {
            method,
            budget,
            capacity,
            kernel: None,
            kappa: None,
            prior: None,
            acquisition: None,
            beta0: None,
            graph_degree: None,
            seed_div: None,
            frac: None,
            batch: None,
            token_capacity: None,
            prior_probes: None,
            row_precision: None,
            hyperparameters: None,
            feedback_neighbours: None,
        }
    }

    /// The checked configuration. Ranges that need the pool (the budget against its size)
    /// are checked by [`super::Reranker`].
    pub fn config(&self) -> Result<RerankConfig> {
        if self.method == "auto" {
            return super::auto::config(self);
        }
        let method: Method = self.method.parse()?;
        let kind: KernelKind = self.kernel.unwrap_or("vmf").parse()?;
        let only = |given: bool, name: &str, ok: &[Method]| -> Result<()> {
            if given && !ok.contains(&method) {
                return Err(Error::invalid(
                    name,
                    format!("does not apply to {}", method.name()),
                ));
            }
            Ok(())
        };
        use Method as M;
        only(self.prior.is_some(), "prior", &[M::BoundaryMorph])?;
        only(self.acquisition.is_some(), "acquisition", &[M::BoundaryMorph])?;
        only(self.beta0.is_some(), "beta0", &[M::BoundaryMorph, M::Bagel])?;
        only(
            self.graph_degree.is_some(),
            "graph_degree",
            &[M::Rgs, M::RgsSimple],
        )?;
        only(self.seed_div.is_some(), "seed_div", &[M::Rgs])?;
        only(self.frac.is_some(), "frac", &[M::Rgs])?;
        only(self.batch.is_some(), "batch", &[M::BoundaryMorph, M::Bagel])?;
        only(self.prior_probes.is_some(), "prior_probes", &[M::BoundaryMorph])?;
        only(
            self.row_precision.is_some(),
            "row_precision",
            &[M::BoundaryMorph, M::Bagel, M::Rgs, M::RgsSimple],
        )?;
        only(
            self.hyperparameters.is_some(),
            "hyperparameters",
            &[M::BoundaryMorph],
        )?;
        only(
            self.feedback_neighbours.is_some(),
            "feedback_neighbours",
            &[M::BoundaryMorph],
        )?;
        let row_precision: super::RowPrecision = self.row_precision.unwrap_or("f32").parse()?;
        let hyperparameters: Hyperparameters = self.hyperparameters.unwrap_or("paper").parse()?;
        if self.graph_degree == Some(0) {
            return Err(Error::invalid("graph_degree", "must be at least 1"));
        }
        let prior = match self.prior.unwrap_or("mips") {
            "mips" => Prior::Mips,
            "zero" => Prior::Zero,
            "adaptive" => Prior::Adaptive,
            "score" => Prior::Score,
            "feedback" => Prior::Feedback,
            p => {
                return Err(Error::invalid(
                    "prior",
                    format!("unknown prior '{p}' (mips, zero, adaptive, score, feedback)"),
                ))
            }
        };
        let acquisition = match self.acquisition.unwrap_or("boundary") {
            "boundary" => Acquisition::Boundary,
            "ucb" => Acquisition::Ucb,
            p => {
                return Err(Error::invalid(
                    "acquisition",
                    format!("unknown acquisition '{p}' (boundary, ucb)"),
                ))
            }
        };
        if self.beta0.is_some() && method == M::BoundaryMorph && acquisition != Acquisition::Ucb {
            return Err(Error::invalid("beta0", "applies to the ucb acquisition"));
        }
        if hyperparameters == Hyperparameters::Evidence {
            prior.check_evidence()?;
        }
        if let Some(share) = self.feedback_neighbours {
            if prior != Prior::Feedback {
                return Err(Error::invalid(
                    "feedback_neighbours",
                    "applies to the feedback prior",
                ));
            }
            super::prior::check_share(share)?;
        }
        if self.kappa.is_some() && kind != KernelKind::Vmf {
            return Err(Error::invalid("kappa", "applies to the vmf kernel"));
        }
        let mut cfg = RerankConfig::new(method, self.budget, self.capacity);
        cfg.prior = prior;
        cfg.acquisition = acquisition;
        cfg.beta0 = self.beta0.unwrap_or(1.0);
        if let Some(r) = self.graph_degree {
            cfg.graph_degree = r;
        }
        if let Some(x) = self.seed_div {
            cfg.seed_div = x;
        }
        if let Some(x) = self.frac {
            cfg.frac = x;
        }
        cfg.batch = self.batch.unwrap_or(1);
        cfg.prior_probes = self.prior_probes.unwrap_or(0);
        cfg.token_capacity = self.token_capacity;
        cfg.row_precision = row_precision;
        cfg.hyperparameters = hyperparameters;
        cfg.feedback_neighbours = self.feedback_neighbours.unwrap_or(0.0);
        cfg.kernel = match (kind, self.kappa) {
            (KernelKind::Vmf, Some(k)) => KernelChoice::Fixed(Kernel::Vmf { kappa: k }),
            _ => KernelChoice::Median(kind),
        };
        Ok(cfg)
    }
}

/// Token counts given as numbers (a JSON array, an .npy, a texts file's "tokens"): each a
/// whole number in `1..=`[`crate::limits::MAX_TOKEN_COUNT`]; errors name `what`, the
/// position and the reason ("is 4.611686018427388e18, above the largest accepted token
/// count 9007199254740992", or "is 2.5, not a whole number >= 1").
pub fn token_counts(v: &[f64], what: &str) -> Result<Vec<u64>> {
    v.iter()
        .enumerate()
        .map(|(i, &x)| {
            crate::limits::token_count(x).map_err(|m| Error::invalid(what, format!("token count {i} {m}")))
        })
        .collect()
}
