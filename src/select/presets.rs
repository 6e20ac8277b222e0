//! The published operating points (marginal-value-pruning.txt, App. B, Table 5; SPEC §1:
//! `preset = "paper"`), the crate's own defaults chosen on real text, and its numeric
//! constants for the selectors, in one place.
//!
//! The defaults were measured by `benches/defaults.py` (docs/selection.md, "The
//! defaults"): 6,187 passages of the READMEs and doc comments of 342 crates embedded by
//! all-MiniLM-L6-v2, 24 hand-written queries with graded relevance by crate. MMR's lambda
//! is the most diverse one within one standard error of the best alpha-nDCG@10 by crate
//! (the paper's 0.35 scored 0.51 there against 0.70 at 0.75: its picks left the query's
//! subject); each gate threshold is the one with the best Youden's J at keeping passages
//! from a source file the context does not hold. Lexical MMR's lambda and the hybrid's
//! weights are the paper's (not re-measured).

/// MMR trade-off `lambda` (App. B Table 5).
pub const MMR_LAMBDA: f64 = 0.35;
/// MMR keep threshold `tau`.
pub const MMR_TAU: f64 = 0.35;
/// MMR item cap ("max 10 contexts").
pub const MMR_MAX_ITEMS: usize = 10;
/// GRN keep threshold on the squared residual.
pub const GRN_TAU: f64 = 0.85;
/// Centroid-drift keep threshold `delta`.
pub const CENTROID_DELTA: f64 = 0.03;
/// DPP keep threshold on the determinant ratio.
pub const DPP_TAU: f64 = 0.30;
/// DPP item cap.
pub const DPP_MAX_ITEMS: usize = 10;
/// Submodular coverage: prune when gain per token falls below this.
pub const COVERAGE_TAU: f64 = 0.05;
/// Hybrid weights `(alpha, beta, gamma)` on `(cos(x,q), V_GRN, V_SC)`. The paper prints
/// `- beta V_GRN` in App. B but its text says the term "rewards orthogonal novelty"; SPEC
/// §1 decides for `+0.30` (reward novelty). Pass a negative beta for the printed sign.
pub const HYBRID_WEIGHTS: [f64; 3] = [0.40, 0.30, 0.30];
/// Lexical MMR `lambda` (the paper's, and the default).
pub const LEXICAL_LAMBDA: f64 = 0.6;
/// Lexical keep threshold.
pub const LEXICAL_TAU: f64 = 0.2;
/// Lexical similarity weights `(w_tfidf, w_jaccard)`.
pub const LEXICAL_WEIGHTS: [f64; 2] = [0.5, 0.5];

/// The default MMR trade-off (measured; the paper's is [`MMR_LAMBDA`]).
pub const DEFAULT_MMR_LAMBDA: f64 = 0.75;
/// The default MMR gate threshold, at [`DEFAULT_MMR_LAMBDA`] (measured; J = 0.05: MMR's
/// value is mostly relevance, a weak novelty gate).
pub const DEFAULT_MMR_TAU: f64 = 0.185;
/// The default GRN gate threshold on the squared residual (measured; J = 0.45).
pub const DEFAULT_GRN_TAU: f64 = 0.679;
/// The default centroid-drift gate threshold (measured; J = 0.37).
pub const DEFAULT_CENTROID_DELTA: f64 = 0.0332;
/// The default DPP gate threshold on the determinant ratio (measured; J = 0.16).
pub const DEFAULT_DPP_TAU: f64 = 0.138;
/// The default coverage gate threshold on gain per token (measured, unit costs; J = 0.24).
pub const DEFAULT_COVERAGE_TAU: f64 = 0.0902;
/// The default lexical MMR gate threshold (measured; J = 0.35).
pub const DEFAULT_LEXICAL_TAU: f64 = -0.0178;

/// DPP and GRN stop when the best squared residual falls below this (SPEC §1); residuals
/// are computed from `f64`-accumulated inner products, so 1e-10 is resolvable.
pub const RESIDUAL_EPS: f64 = 1e-10;

/// Centroid drift stops when no candidate's drift exceeds this: `1 - cos` of unit vectors
/// computed in `f64` carries ~1e-16 of rounding, so smaller values are no evidence of drift.
pub const CENTROID_NOISE_FLOOR: f64 = 1e-12;

/// Facility location keeps the dense `N × N` similarity up to this pool size
/// (256 MiB of `f32`); above it, a sparse k-nearest-neighbour similarity.
pub const COVERAGE_DENSE_MAX: usize = 8192;
/// Neighbours kept per item by the sparse facility location (the item itself included).
pub const COVERAGE_KNN: usize = 64;
