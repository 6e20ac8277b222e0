//! What a selection does: the [`Method`], the [`Mode`], the paper's per-method [`Preset`]
//! and the [`SelectConfig`] builder ([`super::Selector::new`] checks it once).

use super::presets;
use crate::error::{Error, Result};

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

    /// The crate's defaults where an option is not given (measured on real text,
    /// [`presets`]): MMR's lambda and every gate threshold; no item cap. The hybrid has
    /// no default threshold (its scale is the caller's weights').
    #[must_use]
    pub fn defaults(self) -> Preset {
        use presets::*;
        let base = Preset {
            lambda: None,
            tau: None,
            max_items: None,
            weights: None,
        };
        match self {
            Method::Mmr => Preset {
                lambda: Some(DEFAULT_MMR_LAMBDA),
                tau: Some(DEFAULT_MMR_TAU),
                ..base
            },
            Method::Grn => Preset {
                tau: Some(DEFAULT_GRN_TAU),
                ..base
            },
            Method::Centroid => Preset {
                tau: Some(DEFAULT_CENTROID_DELTA),
                ..base
            },
            Method::Dpp => Preset {
                tau: Some(DEFAULT_DPP_TAU),
                ..base
            },
            Method::Coverage => Preset {
                tau: Some(DEFAULT_COVERAGE_TAU),
                ..base
            },
            Method::Hybrid => Preset {
                weights: Some(HYBRID_WEIGHTS),
                ..base
            },
            Method::Lexical => Preset {
                lambda: Some(LEXICAL_LAMBDA),
                tau: Some(DEFAULT_LEXICAL_TAU),
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
    pub(super) method: Method,
    pub(super) mode: Mode,
    pub(super) lambda: Option<f64>,
    pub(super) weights: Option<[f64; 3]>,
    pub(super) lexical_weights: Option<[f64; 2]>,
    pub(super) threshold: Option<f64>,
    pub(super) k: Option<usize>,
    pub(super) token_budget: Option<f64>,
    pub(super) paper_preset: bool,
    pub(super) residual_eps: f64,
    pub(super) coverage_dense_max: usize,
    pub(super) coverage_knn: usize,
    pub(super) eager_only: bool,
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
