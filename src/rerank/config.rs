//! What a budgeted top-k run does: the [`Method`], the GP's [`Prior`], the
//! [`Acquisition`] rule, the [`KernelChoice`] and the [`RerankConfig`] builder
//! ([`super::Reranker::new`] checks it once).

use super::RowPrecision;
use crate::error::{Error, Result};
use crate::similarity::{Kernel, KernelKind};

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
                    format!(
                        "unknown method '{s}' (boundary-morph, bagel, single-stage, rgs, rgs-simple, auto)"
                    ),
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
    /// generalised least squares with a ridge toward 1 ([`super::gp::Gp::set_adaptive`]): the paper's
    /// prior while the scores agree with it, fading to zero as they contradict it.
    Adaptive,
    /// The MIPS score's shape: `sqrt((c_i - c_min) / (c_max - c_min))`, where `c_i` is row
    /// `i`'s cosine with the query and the minimum and maximum are over the pool (1 for
    /// every row when they are equal); the query has `mu0 = 1`. Unlike the percentile it
    /// keeps the gaps between the scores: a top that stands out is high and the long flat
    /// tail low, where the percentile spreads both evenly over `[0, 1]`. The square root
    /// was chosen by measurement on the real-text set (docs/rerank.md).
    Score,
    /// The score prior from a query moved by the scores (Rocchio's relevance feedback,
    /// [`super::prior::feedback_mean`]): the score prior until [`FEEDBACK_EVERY`] calls,
    /// then (after the round that reaches them, and again once [`FEEDBACK_EVERY`] more
    /// calls have been made, while the budget lasts) the score prior's shape
    /// of the rows' cosines with `q + beta c_rel - gamma c_non` (the unit query, the
    /// centroid of the scored rows at or above [`FEEDBACK_RELEVANT`] weighted by their
    /// scores, and that of the rows below it weighted by one minus them;
    /// [`FEEDBACK_BETA`], [`FEEDBACK_GAMMA`]). The GP keeps its observations and kernel
    /// rows; only the prior means change ([`super::gp::Gp::set_prior`]).
    Feedback,
}

impl Prior {
    /// Refuses hyperparameters by the evidence with a prior they cannot fit (an error on
    /// `hyperparameters` naming why): the adaptive prior fits its scale itself, and the
    /// feedback prior changes during the run where the evidence fits one prior's scale and
    /// offset. Checked by the options and by the reranker.
    pub(crate) fn check_evidence(self) -> crate::error::Result<()> {
        let why = match self {
            Prior::Adaptive => "evidence fits the prior's scale itself",
            Prior::Feedback => {
                "evidence fits the prior's scale and offset to one prior, and the feedback prior changes during the run"
            }
            Prior::Mips | Prior::Zero | Prior::Score => return Ok(()),
        };
        Err(crate::error::Error::invalid(
            "hyperparameters",
            format!("{why}; use it with the mips, zero or score prior"),
        ))
    }
}

/// Calls before the feedback prior's first re-shaping ([`Prior::Feedback`]), and from each
/// re-shaping to the next (counted from the calls made when it happened: with batches, or
/// auto's confirming calls, it is not a multiple of this).
pub const FEEDBACK_EVERY: usize = 10;

/// Rocchio's weight on the relevant rows' centroid, weighted by their scores (SMART's
/// customary 0.75; [`Prior::Feedback`]).
pub const FEEDBACK_BETA: f64 = 0.75;

/// Rocchio's weight on the non-relevant rows' centroid, weighted by one minus their
/// scores (SMART's customary 0.15; [`Prior::Feedback`]).
pub const FEEDBACK_GAMMA: f64 = 0.15;

/// The score (in `[0, 1]`) from which a scored row counts as relevant in the feedback
/// prior's Rocchio sets ([`Prior::Feedback`]); below it, as non-relevant. The same line as
/// auto's low start ([`super::auto::AUTO_LOW_SCORE`]). With every score in both centroids
/// (weighted by the score and by one minus it), the many low scores of a noisy
/// cross-encoder, each small, together pulled the relevant centroid toward the pool:
/// measured over five draws of the noise on the three real-text sets, the two sets are
/// ahead by 0.0003 to 0.0027 on average (docs/rerank.md).
pub const FEEDBACK_RELEVANT: f64 = 0.5;

/// The adaptive prior's ridge toward `alpha = 1` ([`super::gp::Gp::set_adaptive`]).
pub const ADAPTIVE_RIDGE: f64 = 1.0;

/// How the GP's hyperparameters (kernel bandwidth, signal and noise variances, the prior's
/// scale and offset) are set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hyperparameters {
    /// The paper's heuristics (SPEC §3): the kernel as chosen, the residuals standardised
    /// after every call, jitter 1e-4, the prior at full scale.
    Paper,
    /// By the evidence ([`super::evidence`]): type-II maximum likelihood over the scores
    /// seen, warm-started, refitted after [`EVIDENCE_FIRST`] calls and then each time the
    /// calls have doubled, while there are at most [`EVIDENCE_MAX_OBSERVATIONS`]
    /// observations; the GP is rebuilt with the fitted kernel and noise (the paper's until
    /// the first fit).
    Evidence,
}

impl Hyperparameters {
    /// The name options use.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Hyperparameters::Paper => "paper",
            Hyperparameters::Evidence => "evidence",
        }
    }
}

impl std::str::FromStr for Hyperparameters {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "paper" => Ok(Hyperparameters::Paper),
            "evidence" => Ok(Hyperparameters::Evidence),
            _ => Err(Error::invalid(
                "hyperparameters",
                format!("unknown hyperparameters '{s}' (paper, evidence)"),
            )),
        }
    }
}

/// Calls before the evidence's first fit ([`Hyperparameters::Evidence`]); later fits come
/// each time the calls have doubled since the last. Chosen by `ctxprune eval` (20 problems
/// a mode, B in {25, 50, 100}, k in {50, 100}): with the zero prior, 10 was ahead of 3, 5
/// and 20 in 11 of the 12 cells (a fit on fewer calls can settle on a bandwidth the later,
/// warm-started fits do not leave).
pub const EVIDENCE_FIRST: usize = 10;

/// The most observations (the query's included) a fit of the evidence is taken over: a
/// fit is dense, `O(t³)` per evaluation, so once the calls pass this the last fit's
/// hyperparameters stay for the rest of the run (fits at 10, 20, 40, 80 and 160 calls).
pub const EVIDENCE_MAX_OBSERVATIONS: usize = 256;

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
    /// the MIPS ranks below the top ([`super::probe_ranks`]), so the prior's fit sees its shape and
    /// not only its top. By default 0.
    pub prior_probes: usize,
    /// The GP's kernel (and RGS's neighbourhoods). By default vMF with the median
    /// heuristic's `kappa`.
    pub kernel: KernelChoice,
    /// A factor on the kernel's concentration once it is chosen (median heuristic or
    /// fixed): vMF's `kappa` times it, RBF's and Matérn-5/2's `l²` divided by it (the cosine
    /// kernel has none: a factor other than 1 with it is an error). By default 1, the kernel
    /// as chosen; `method = "auto"` sets 2 ([`super::auto::AUTO_CONCENTRATION`]).
    /// Boundary-morph and bagel only (RGS reads only the kernel's order, which it does not
    /// change). With hyperparameters by the evidence it sets the kernel until the first fit
    /// (the fit's starting point).
    pub concentration: f32,
    /// The precision of the pool copy kernel rows are read from (every method that reads
    /// them: boundary-morph, bagel, rgs, rgs-simple). By default f32, the pool itself and
    /// the paper's computation; bf16 and f16 read a half-precision copy made once per run
    /// (half the bytes per row; the GP's arithmetic stays f64; on a GPU engine the GP and
    /// RGS's kernel rows then run on the CPU, beside the copy).
    pub row_precision: RowPrecision,
    /// How the GP's hyperparameters are set (boundary-morph). By default the paper's.
    pub hyperparameters: Hyperparameters,
    /// BoundaryMORPH with the MIPS or score prior and the paper's hyperparameters only: after
    /// [`EVIDENCE_FIRST`] calls, when every score so far is below this, the MIPS top is
    /// scored (up to [`super::auto::AUTO_CONFIRM`] documents, one at a time, until one is
    /// not below it, while the budget lasts and, after the first
    /// [`super::auto::AUTO_CONFIRM_FIRST`], while [`super::auto::AUTO_RESERVE`] calls are
    /// left); if every score is still below it, the prior is taken as
    /// contradicted and the run goes on with the zero prior and hyperparameters by the
    /// evidence (a note says so). `method = "auto"` sets it
    /// ([`super::auto::AUTO_LOW_SCORE`]); `None` by default.
    pub switch_below: Option<f64>,
    /// The share of the budget spent last on the set the run would return: each of the
    /// last `floor(verify * B)` calls (counted call by call, batches included; none when
    /// that is 0) scores, of the top-k by posterior mean (with a token capacity, its greedy
    /// fill), the unscored member with the largest posterior variance
    /// ([`super::verify_pick`]; the boundary rule when every member is scored). In `[0, 1]`;
    /// boundary-morph with the boundary acquisition only; 0 by default. Measured and not
    /// taken by `method = "auto"`: a tenth gained on one real-text set and lost on two
    /// (docs/rerank.md, "Verifying the top-k").
    pub verify: f64,
    /// The share of the feedback prior ([`Prior::Feedback`]) taken from the relevant
    /// documents' neighbourhoods at each re-shaping: `(1 - share) r + share n`, `r`
    /// Rocchio's shape and `n` the score prior's shape of every row's largest cosine with
    /// a row scored at least [`FEEDBACK_RELEVANT`] ([`super::feedback_mean_with`]). In
    /// `[0, 1]`; boundary-morph with the feedback prior only; 0 by default (Rocchio's
    /// alone). `method = "auto"` sets [`super::auto::AUTO_NEIGHBOURS`]. Each relevant
    /// document costs one pass of the pool's cosines with it, once.
    pub feedback_neighbours: f64,
    /// What `method = "auto"` chose and why ([`super::auto`]); the run's notes carry it.
    /// `None` for a method named by the caller.
    pub chosen: Option<String>,
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
            concentration: 1.0,
            row_precision: RowPrecision::F32,
            hyperparameters: Hyperparameters::Paper,
            switch_below: None,
            verify: 0.0,
            feedback_neighbours: 0.0,
            chosen: None,
        }
    }
}
