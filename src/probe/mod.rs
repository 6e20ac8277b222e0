//! The SNR regression probe (observation-masking.txt §5.2, App. D): can the No-CM
//! trajectory alone tell which queries context management (CM) will rescue?
//!
//! For every query (a No-CM trajectory and a label saying whether CM rescued it, No-CM
//! wrong → CM correct), [`build`] parses the trajectory into tool-observation turns
//! (tool-call turns with at least one answered call; a turn whose calls all went
//! unanswered, such as a last call the run never got back, is not counted and is reported
//! in [`Report::unanswered`]), samples at most `K` prefixes (D.2: all when `T <= K`, else `K - 1` drawn from
//! `1..T-1` plus `T`), and computes per prefix the ten trace-shape features of D.3
//! ([`FEATURES`]) and a target:
//!
//! - with gold URLs, the evidence SNR `y = |U ∩ G| / (|U \ G| + 1)` of the unique pages
//!   `U` observed so far (SPEC §2);
//! - without, the citation proxy of D.6, `p = |L ∩ C| / max(|L|, 1)`, with `L` the unique
//!   URLs observed so far and `C` the URLs the final answer cites (the label's `cited`
//!   list, else the URLs in the text of the last assistant message). **Decision:** the
//!   paper counts browser line ids; trajectories here are plain OpenAI / Anthropic
//!   messages with no line-id protocol, so the proxy is computed at the granularity the
//!   gold SNR uses, normalised page URLs ([`crate::mask::pages::normalize_url`]).
//!
//! [`fit`](fn@fit) then follows D.4–D.5: features are standardised and expanded to degree 2, and
//! a ridge regression is fitted with `alpha ∈ {10^-4 … 10^4}` chosen by query-grouped
//! K-fold CV ([`folds::group_k_fold`]; each row's fold is in the report) as scikit-learn's
//! `GridSearchCV(..., scoring="neg_mean_squared_error")` chooses it: the least mean over
//! folds of each fold's MSE on unclipped held-out predictions, ties to the smallest
//! alpha ([`fit::ridge_cv`]). The pipeline is then refitted on every prefix at that alpha
//! and every prefix predicted; these fitted values, clipped to `[0, 1]`, are `ŷ`, and the
//! vertical coordinate `z` is their min–max scaling ("the full min–max normalized fitted
//! SNR", D.4). The out-of-fold predictions at the chosen alpha (clipped) are kept for the
//! report (`y_oof` per prefix, the out-of-fold R² beside the in-sample one), not for `z`.
//! The horizontal `x` is PCA1 of the standardised features, signed to correlate
//! positively with `log_cum_obs_tokens`; a balanced logistic probe on `(x, z)` is trained
//! under the same grouped folds and scored by the macro-averaged held-out Mann–Whitney
//! AUC. As in the paper, `z` comes from a fit that saw every query, so the AUC measures
//! the separability of the plotted coordinates (D.5), not an out-of-sample prediction.
//!
//! Why faer and not linfa: faer is already the crate's linear-algebra dependency (the GP,
//! the CPU GEMM) and gives the Cholesky solve and the symmetric eigendecomposition the
//! probe needs directly; linfa would bring ndarray and a second linear-algebra stack for
//! a ridge solve, a 10×10 eigenproblem and a three-parameter logistic regression. Nor
//! would its cross-validation help: `Dataset::fold(k)` (as of the linfa sources read for
//! this decision) cuts the rows into `k` contiguous chunks and takes no groups, so the
//! query-grouped folds would be written here anyway. The three-parameter Newton solve is
//! simpler written out than configured.
//!
//! ```
//! use ctxprune::probe::fit::{mann_whitney_auc, poly2};
//! assert_eq!(poly2(&[2.0, 3.0]), vec![2.0, 3.0, 4.0, 6.0, 9.0]);
//! // One positive above both negatives, one tied with one: (2 + 1.5) / 4.
//! let auc = mann_whitney_auc(&[0.9, 0.5, 0.5, 0.1], &[true, true, false, false]);
//! assert_eq!(auc, Some(0.875));
//! ```

mod classify;
pub mod dataset;
pub mod features;
pub mod fit;
pub mod folds;
pub mod labels;

pub use dataset::{build, build_from, BadUrl, Dataset, Query, Skipped, TargetKind, UnansweredTurn};
pub use features::{ToolKinds, Trace, FEATURES};
pub use labels::{load_labels, parse_inline, parse_labels, Label};

use crate::error::{Error, Result};
use crate::tokens::TokenCounter;
use serde::Serialize;
use std::path::Path;

/// The probe's settings.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Options {
    /// `K`: prefixes sampled per trajectory (D.2), at least 1.
    pub prefixes: usize,
    /// Query-grouped folds of the ridge CV and of the AUC, at least 2.
    pub folds: usize,
    /// Seed of the prefix sample (mixed with each query id).
    pub seed: u64,
    /// Search tool names.
    pub search_tools: Vec<String>,
    /// Open tool names.
    pub open_tools: Vec<String>,
}

impl Default for Options {
    fn default() -> Self {
        let t = ToolKinds::default();
        Options {
            prefixes: 8,
            folds: 5,
            seed: 0,
            search_tools: t.search,
            open_tools: t.open,
        }
    }
}

impl Options {
    fn check(&self) -> Result<()> {
        if self.prefixes == 0 {
            return Err(Error::invalid("prefixes", "must be at least 1"));
        }
        if self.folds < 2 {
            return Err(Error::invalid(
                "folds",
                format!("{}: at least 2 are needed", self.folds),
            ));
        }
        Ok(())
    }

    fn tools(&self) -> ToolKinds {
        ToolKinds {
            search: self.search_tools.clone(),
            open: self.open_tools.clone(),
        }
    }
}

/// One sampled prefix in the report.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Row {
    /// Query id.
    pub id: String,
    /// Prefix `t` (1-based).
    pub prefix: usize,
    /// The trajectory's `T`.
    pub turns: usize,
    /// Features, in the order of [`FEATURES`].
    pub features: Vec<f64>,
    /// Target.
    pub y: f64,
    /// Fitted target: the refit on every prefix at the chosen alpha, clipped to `[0, 1]`.
    pub y_hat: f64,
    /// Out-of-fold prediction at the chosen alpha (its fold held out), clipped to `[0, 1]`.
    pub y_oof: f64,
    /// PCA1 coordinate.
    pub x: f64,
    /// Min–max scaled `y_hat` (D.4).
    pub z: f64,
    /// Rescue label.
    pub rescued: bool,
    /// Its query's fold (of the ridge CV and the AUC), `0..folds`.
    pub fold: usize,
}

/// How many queries have each target kind.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct TargetCounts {
    /// Gold SNR.
    pub gold_snr: usize,
    /// Citation proxy from `cited` lists.
    pub cited_list: usize,
    /// Citation proxy from final answers.
    pub final_answer: usize,
    /// Proxy queries whose `C` is empty (their target is 0 at every prefix).
    pub empty_citations: usize,
}

/// PCA1 in the report.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PcaReport {
    /// `(feature, loading)`, in the order of [`FEATURES`].
    pub loadings: Vec<(String, f64)>,
    /// Share of the total variance.
    pub explained_variance_ratio: Option<f64>,
    /// The feature the sign is aligned with (positive correlation).
    pub aligned_with: String,
}

/// Everything the probe found.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Report {
    /// The settings.
    pub options: Options,
    /// Feature names.
    pub features: Vec<String>,
    /// Queries fitted.
    pub queries: usize,
    /// Rescued queries.
    pub rescued_queries: usize,
    /// Prefixes fitted.
    pub prefixes: usize,
    /// Rescued prefixes.
    pub rescued_prefixes: usize,
    /// Target kinds.
    pub targets: TargetCounts,
    /// Queries left out.
    pub skipped: Vec<Skipped>,
    /// Tool-call turns with no answered call (not counted as turns).
    pub unanswered: Vec<UnansweredTurn>,
    /// Unlabelled trajectory files.
    pub unlabelled: Vec<String>,
    /// Unparsable URL-like strings (skipped).
    pub bad_urls: Vec<BadUrl>,
    /// Features constant over all prefixes (all zero after standardisation).
    pub constant_features: Vec<String>,
    /// Terms of the degree-2 expansion.
    pub poly_terms: usize,
    /// The ridge CV and refit: alphas, CV MSE per alpha (and per fold), the chosen alpha,
    /// out-of-fold and in-sample R², the refit's weights and standardisation.
    pub ridge: fit::RidgeCv,
    /// PCA1.
    pub pca: PcaReport,
    /// True when every fitted value was equal, so `z` is 0 everywhere.
    pub z_constant: bool,
    /// The AUC.
    pub auc: fit::GroupedAuc,
    /// Every prefix.
    pub rows: Vec<Row>,
}

/// Fits the probe to a dataset (App. D.4, D.5); see the module docs. Errors: fewer
/// queries than folds (naming `folds`), or a failed solve.
pub fn fit(ds: &Dataset, opts: &Options) -> Result<Report> {
    opts.check()?;
    if ds.queries.is_empty() {
        return Err(Error::Empty("queries with tool-observation turns".into()));
    }
    let mut ids = Vec::new();
    let mut x = Vec::new();
    let mut y = Vec::new();
    let mut labels = Vec::new();
    for q in &ds.queries {
        for (f, &v) in q.features.iter().zip(&q.y) {
            ids.push(q.id.as_str());
            x.push(f.to_vec());
            y.push(v);
            labels.push(q.rescued);
        }
    }
    if ds.queries.len() < opts.folds {
        return Err(Error::invalid(
            "folds",
            format!(
                "{} folds need at least {} queries with tool-observation turns, got {}",
                opts.folds,
                opts.folds,
                ds.queries.len()
            ),
        ));
    }
    let folds = folds::group_k_fold(&ids, opts.folds)?;
    let ridge = fit::ridge_cv(&x, &y, &folds, opts.folds, &fit::alpha_grid())?;
    let (zstd, scaler) = fit::standardize(&x)?;
    let pca = fit::pca1(&zstd, features::CUM_TOKENS)?;
    let (z, z_constant) = fit::min_max(&ridge.fitted);
    let points: Vec<[f64; 2]> = pca.scores.iter().zip(&z).map(|(a, b)| [*a, *b]).collect();
    let auc = fit::grouped_auc(&points, &labels, &folds, opts.folds)?;
    let mut targets = TargetCounts::default();
    for q in &ds.queries {
        match q.target {
            TargetKind::GoldSnr => targets.gold_snr += 1,
            TargetKind::CitedList => targets.cited_list += 1,
            TargetKind::FinalAnswer => targets.final_answer += 1,
        }
        if q.target != TargetKind::GoldSnr && q.cited == 0 {
            targets.empty_citations += 1;
        }
    }
    let mut rows = Vec::with_capacity(x.len());
    let mut i = 0;
    for q in &ds.queries {
        for &t in &q.prefixes {
            rows.push(Row {
                id: q.id.clone(),
                prefix: t,
                turns: q.trace.len(),
                features: x[i].clone(),
                y: y[i],
                y_hat: ridge.fitted[i],
                y_oof: ridge.oof[i],
                x: pca.scores[i],
                z: z[i],
                rescued: labels[i],
                fold: folds[i],
            });
            i += 1;
        }
    }
    Ok(Report {
        options: opts.clone(),
        features: FEATURES.iter().map(|s| (*s).to_string()).collect(),
        queries: ds.queries.len(),
        rescued_queries: ds.queries.iter().filter(|q| q.rescued).count(),
        prefixes: rows.len(),
        rescued_prefixes: labels.iter().filter(|&&b| b).count(),
        targets,
        skipped: ds.skipped.clone(),
        unanswered: ds.unanswered.clone(),
        unlabelled: ds.unlabelled.clone(),
        bad_urls: ds.bad_urls.clone(),
        constant_features: scaler.constant.iter().map(|&j| FEATURES[j].to_string()).collect(),
        poly_terms: fit::poly2(&[0.0; 10]).len(),
        ridge,
        pca: PcaReport {
            loadings: FEATURES
                .iter()
                .zip(&pca.loadings)
                .map(|(n, v)| ((*n).to_string(), *v))
                .collect(),
            explained_variance_ratio: pca.explained_variance_ratio,
            aligned_with: FEATURES[features::CUM_TOKENS].to_string(),
        },
        z_constant,
        auc,
        rows,
    })
}

/// Loads the labels, builds the dataset and fits it: the whole probe.
pub fn probe(dir: &Path, labels_path: &Path, opts: &Options, counter: &dyn TokenCounter) -> Result<Report> {
    let labels = load_labels(labels_path)?;
    let ds = build(dir, labels_path, &labels, opts, counter)?;
    fit(&ds, opts)
}

/// The whole probe over labelled trajectories given in memory ([`parse_inline`],
/// [`build_from`]): the request form of `POST /v1/probe`.
pub fn probe_inline(
    items: &[(Label, crate::mask::Trajectory)],
    opts: &Options,
    counter: &dyn TokenCounter,
) -> Result<Report> {
    let ds = build_from(items, opts, counter)?;
    fit(&ds, opts)
}

/// A number for the summary: 4 significant decimals.
fn num(v: f64) -> String {
    format!("{v:.4}")
}

impl Report {
    /// The AUC line: `AUC: 0.7321 (macro average over 4 of 5 folds)`, or
    /// `AUC: not available (why)`.
    #[must_use]
    pub fn auc_line(&self) -> String {
        match self.auc.auc {
            Some(a) => format!(
                "AUC: {} (macro average over {} of {} folds)",
                num(a),
                self.auc.valid_folds,
                self.options.folds
            ),
            None => format!(
                "AUC: not available ({})",
                self.auc.reason.as_deref().unwrap_or("no valid fold")
            ),
        }
    }

    /// The printed summary (several lines, each ending in a newline).
    #[must_use]
    pub fn summary(&self) -> String {
        use std::fmt::Write as _;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "queries: {} ({} rescued); prefixes: {} ({} rescued)",
            self.queries, self.rescued_queries, self.prefixes, self.rescued_prefixes
        );
        if !self.skipped.is_empty() {
            let list: Vec<String> = self
                .skipped
                .iter()
                .map(|k| format!("{} ({})", k.id, k.reason))
                .collect();
            let _ = writeln!(s, "skipped: {}", list.join(", "));
        }
        if !self.unanswered.is_empty() {
            let shown: Vec<String> = self
                .unanswered
                .iter()
                .take(5)
                .map(|u| {
                    format!(
                        "{} messages[{}] ({}{})",
                        u.id,
                        u.message,
                        u.tools.join(", "),
                        if u.last { ", last" } else { "" }
                    )
                })
                .collect();
            let more = self.unanswered.len().saturating_sub(5);
            let _ = writeln!(
                s,
                "tool-call turns never answered (not counted as turns): {} ({}{})",
                self.unanswered.len(),
                shown.join("; "),
                if more > 0 {
                    format!("; and {more} more")
                } else {
                    String::new()
                }
            );
        }
        if !self.unlabelled.is_empty() {
            let _ = writeln!(
                s,
                "unlabelled trajectory files (not used): {}",
                self.unlabelled.join(", ")
            );
        }
        if !self.bad_urls.is_empty() {
            let shown: Vec<String> = self
                .bad_urls
                .iter()
                .take(5)
                .map(|b| format!("{} turn {}: '{}'", b.id, b.turn, b.url))
                .collect();
            let more = self.bad_urls.len().saturating_sub(5);
            let _ = writeln!(
                s,
                "unparsable URLs skipped: {} ({}{})",
                self.bad_urls.len(),
                shown.join(", "),
                if more > 0 {
                    format!(", and {more} more")
                } else {
                    String::new()
                }
            );
        }
        let t = &self.targets;
        let mut kinds = Vec::new();
        if t.gold_snr > 0 {
            kinds.push(format!("gold SNR for {} queries", t.gold_snr));
        }
        if t.cited_list > 0 {
            kinds.push(format!(
                "citation proxy (cited lists) for {} queries",
                t.cited_list
            ));
        }
        if t.final_answer > 0 {
            kinds.push(format!(
                "citation proxy (final-answer URLs) for {} queries",
                t.final_answer
            ));
        }
        let _ = writeln!(s, "target: {}", kinds.join(", "));
        if t.empty_citations > 0 {
            let _ = writeln!(
                s,
                "note: {} proxy queries cite no URL (target 0 at every prefix)",
                t.empty_citations
            );
        }
        if t.gold_snr > 0 && t.gold_snr < self.queries {
            let _ = writeln!(
                s,
                "note: gold SNR and citation-proxy targets are mixed in one fit"
            );
        }
        if !self.constant_features.is_empty() {
            let _ = writeln!(
                s,
                "constant features (zero after standardisation): {}",
                self.constant_features.join(", ")
            );
        }
        let _ = writeln!(
            s,
            "ridge on {} degree-2 terms, alpha by {}-fold query-grouped CV (mean over folds of the MSE of unclipped held-out predictions):",
            self.poly_terms, self.options.folds
        );
        for (a, m) in self.ridge.alphas.iter().zip(&self.ridge.cv_mse) {
            let mark = if *a == self.ridge.alpha { "  <- chosen" } else { "" };
            let _ = writeln!(s, "  alpha {a:e}: MSE {m:.6}{mark}");
        }
        let _ = writeln!(s, "chosen alpha: {:e}", self.ridge.alpha);
        let r2 = |v: Option<f64>| v.map_or("not available (constant target)".into(), num);
        let _ = writeln!(
            s,
            "R² of the refit on all prefixes (clipped, in sample): {}",
            r2(self.ridge.in_sample_r2)
        );
        let _ = writeln!(s, "out-of-fold R² (clipped): {}", r2(self.ridge.oof_r2));
        let _ = writeln!(
            s,
            "PCA1 of standardised features (explained variance {}), sign: positive correlation with {}:",
            self.pca.explained_variance_ratio.map_or("n/a".into(), num),
            self.pca.aligned_with
        );
        for (n, v) in &self.pca.loadings {
            let _ = writeln!(s, "  {n:<22} {v:+.4}");
        }
        if self.z_constant {
            let _ = writeln!(s, "note: every fitted SNR is equal, so z = 0 for every prefix");
        }
        let _ = writeln!(s, "{}", self.auc_line());
        s
    }
}

/// The diagnostic scatter (Figure 5): `x` (PCA1) against `z` (min–max fitted SNR), rescued
/// and non-rescued prefixes in two colours, with a legend and the AUC in the title.
pub fn scatter(path: &Path, r: &Report) -> Result<()> {
    use plotters::prelude::*;
    let (mut lo, mut hi) = r
        .rows
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), row| {
            (a.min(row.x), b.max(row.x))
        });
    if !(lo.is_finite() && hi.is_finite()) || hi - lo < 1e-9 {
        lo = if lo.is_finite() { lo - 1.0 } else { -1.0 };
        hi = lo + 2.0;
    }
    let pad = 0.05 * (hi - lo);
    let title = match r.auc.auc {
        Some(a) => format!("CM-rescue probe: AUC {a:.3} ({} valid folds)", r.auc.valid_folds),
        None => "CM-rescue probe: AUC not available".to_string(),
    };
    let pos: Vec<(f64, f64)> = r.rows.iter().filter(|w| w.rescued).map(|w| (w.x, w.z)).collect();
    let neg: Vec<(f64, f64)> = r.rows.iter().filter(|w| !w.rescued).map(|w| (w.x, w.z)).collect();
    let blue = RGBColor(70, 110, 200);
    let red = RGBColor(215, 60, 40);
    crate::plot::png(path, 900, 700, |root| {
        let mut chart = ChartBuilder::on(root)
            .caption(title, ("sans-serif", 24))
            .margin(16)
            .x_label_area_size(56)
            .y_label_area_size(70)
            .build_cartesian_2d((lo - pad)..(hi + pad), -0.05f64..1.05f64)?;
        chart
            .configure_mesh()
            .x_desc("PCA1 of standardised features (input complexity)")
            .y_desc("fitted SNR (min–max)")
            .label_style(("sans-serif", 15))
            .axis_desc_style(("sans-serif", 17))
            .draw()?;
        chart
            .draw_series(neg.iter().map(|&p| Circle::new(p, 4, blue.mix(0.45).filled())))?
            .label(format!("not rescued ({} prefixes)", neg.len()))
            .legend(move |(x, y)| Circle::new((x + 8, y), 5, blue.filled()));
        chart
            .draw_series(pos.iter().map(|&p| Circle::new(p, 4, red.mix(0.7).filled())))?
            .label(format!("CM-rescued ({} prefixes)", pos.len()))
            .legend(move |(x, y)| Circle::new((x + 8, y), 5, red.filled()));
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .label_font(("sans-serif", 15))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()?;
        Ok(())
    })
}
