//! The probe's fits (observation-masking.txt App. D.4, D.5), each a pure function on
//! row-major data (`&[Vec<f64>]`, one row per prefix): standardisation, the degree-2
//! polynomial expansion, ridge regression with a grouped-CV `alpha` and its refit on every
//! row ([`ridge_cv`], scikit-learn's `GridSearchCV` rule), the first principal component,
//! min–max scaling; and, written in classify.rs and re-exported here, the balanced
//! logistic probe and the fold-wise Mann–Whitney AUC.
//!
//! Linear algebra is [faer](https://docs.rs/faer)'s: the ridge system is solved by its
//! Cholesky (`Mat::llt`), PCA1 is the top eigenvector of its self-adjoint
//! eigendecomposition (`Mat::self_adjoint_eigen`).

use crate::error::{Error, Result};
use faer::linalg::solvers::Solve;
use faer::{Mat, Side};

/// Column means and scales of a standardisation (`(x - mean) / scale`).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Standardizer {
    /// Column means.
    pub mean: Vec<f64>,
    /// Population standard deviations; 1 for a constant column (as scikit-learn's
    /// `StandardScaler` does), so a constant column becomes all zeros after centring.
    pub scale: Vec<f64>,
    /// Indices of the constant columns.
    pub constant: Vec<usize>,
}

/// Fits a standardisation to `x` (`n >= 1` rows of equal length): the mean and the
/// population standard deviation (divided by `n`) of every column. A column whose values
/// are all equal is constant: its mean is that value and its scale 1.
pub fn standardize_fit(x: &[Vec<f64>]) -> Result<Standardizer> {
    let n = x.len();
    let Some(d) = x.first().map(Vec::len) else {
        return Err(Error::Empty("rows to standardise".into()));
    };
    if let Some(i) = x.iter().position(|r| r.len() != d) {
        return Err(Error::DimensionMismatch {
            what: format!("row {i} vs row 0"),
            expected: d,
            got: x[i].len(),
        });
    }
    let mut mean = vec![0.0; d];
    let mut scale = vec![1.0; d];
    let mut constant = Vec::new();
    for j in 0..d {
        let first = x[0][j];
        if x.iter().all(|r| r[j] == first) {
            mean[j] = first;
            constant.push(j);
            continue;
        }
        let m = x.iter().map(|r| r[j]).sum::<f64>() / n as f64;
        let var = x.iter().map(|r| (r[j] - m).powi(2)).sum::<f64>() / n as f64;
        mean[j] = m;
        scale[j] = if var > 0.0 { var.sqrt() } else { 1.0 };
    }
    Ok(Standardizer {
        mean,
        scale,
        constant,
    })
}

impl Standardizer {
    /// `(x - mean) / scale`, row by row.
    #[must_use]
    pub fn apply(&self, x: &[Vec<f64>]) -> Vec<Vec<f64>> {
        x.iter()
            .map(|r| {
                r.iter()
                    .zip(self.mean.iter().zip(&self.scale))
                    .map(|(v, (m, s))| (v - m) / s)
                    .collect()
            })
            .collect()
    }
}

/// Standardises `x` with its own statistics ([`standardize_fit`] then apply).
pub fn standardize(x: &[Vec<f64>]) -> Result<(Vec<Vec<f64>>, Standardizer)> {
    let s = standardize_fit(x)?;
    Ok((s.apply(x), s))
}

/// Degree-2 polynomial expansion without the bias column, in scikit-learn's
/// `PolynomialFeatures(degree=2, include_bias=False)` order: `x_0 … x_{d-1}`, then
/// `x_i x_j` for `i <= j` in lexicographic order of `(i, j)`
/// (`x_0², x_0 x_1, …, x_0 x_{d-1}, x_1², …, x_{d-1}²`): `d + d(d+1)/2` values.
#[must_use]
pub fn poly2(row: &[f64]) -> Vec<f64> {
    let d = row.len();
    let mut out = Vec::with_capacity(d + d * (d + 1) / 2);
    out.extend_from_slice(row);
    for i in 0..d {
        for j in i..d {
            out.push(row[i] * row[j]);
        }
    }
    out
}

/// The names of [`poly2`]'s outputs, as scikit-learn's `get_feature_names_out` writes
/// them (`a`, `a^2`, `a b`).
#[must_use]
pub fn poly2_names(names: &[&str]) -> Vec<String> {
    let d = names.len();
    let mut out: Vec<String> = names.iter().map(|s| (*s).to_string()).collect();
    for i in 0..d {
        for j in i..d {
            out.push(if i == j {
                format!("{}^2", names[i])
            } else {
                format!("{} {}", names[i], names[j])
            });
        }
    }
    out
}

/// A fitted ridge regression: `y ≈ intercept + coef · x`.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Ridge {
    /// The unpenalised intercept.
    pub intercept: f64,
    /// The weights.
    pub coef: Vec<f64>,
}

impl Ridge {
    /// The prediction for one row.
    #[must_use]
    pub fn predict(&self, row: &[f64]) -> f64 {
        self.intercept + self.coef.iter().zip(row).map(|(w, v)| w * v).sum::<f64>()
    }
}

/// Ridge fits at every `alpha` sharing one Gram matrix: with `X` and `y` centred
/// (so the intercept is not penalised), `w = (XᵀX + αI)⁻¹ Xᵀy` by Cholesky, and
/// `intercept = ȳ - x̄·w` (scikit-learn's `Ridge(alpha, fit_intercept=True)`).
/// Every `alpha` must be positive and finite.
pub fn ridge_path(x: &[Vec<f64>], y: &[f64], alphas: &[f64]) -> Result<Vec<Ridge>> {
    let n = x.len();
    if n == 0 {
        return Err(Error::Empty("ridge training rows".into()));
    }
    if y.len() != n {
        return Err(Error::DimensionMismatch {
            what: "ridge targets vs rows".into(),
            expected: n,
            got: y.len(),
        });
    }
    if let Some(a) = alphas.iter().find(|a| !(a.is_finite() && **a > 0.0)) {
        return Err(Error::invalid("alpha", format!("{a} is not positive and finite")));
    }
    let p = x[0].len();
    if let Some(i) = x.iter().position(|r| r.len() != p) {
        return Err(Error::DimensionMismatch {
            what: format!("ridge row {i} vs row 0"),
            expected: p,
            got: x[i].len(),
        });
    }
    let xm: Vec<f64> = (0..p)
        .map(|j| x.iter().map(|r| r[j]).sum::<f64>() / n as f64)
        .collect();
    let ym = y.iter().sum::<f64>() / n as f64;
    let mut gram = Mat::<f64>::zeros(p, p);
    let mut xty = Mat::<f64>::zeros(p, 1);
    let mut c = vec![0.0; p];
    for (r, &yi) in x.iter().zip(y) {
        for j in 0..p {
            c[j] = r[j] - xm[j];
        }
        let yc = yi - ym;
        for a in 0..p {
            xty[(a, 0)] += c[a] * yc;
            for b in 0..=a {
                gram[(a, b)] += c[a] * c[b];
            }
        }
    }
    alphas
        .iter()
        .map(|&alpha| {
            let mut m = gram.clone();
            for a in 0..p {
                m[(a, a)] += alpha;
                for b in 0..a {
                    m[(b, a)] = m[(a, b)];
                }
            }
            let llt = m.llt(Side::Lower).map_err(|e| {
                Error::invalid(
                    "ridge",
                    format!("XᵀX + {alpha}·I is not positive definite: {e:?}"),
                )
            })?;
            let w = llt.solve(&xty);
            let coef: Vec<f64> = (0..p).map(|a| w[(a, 0)]).collect();
            if coef.iter().any(|v| !v.is_finite()) {
                return Err(Error::invalid(
                    "ridge",
                    format!("the solve at alpha {alpha} is not finite"),
                ));
            }
            let intercept = ym - coef.iter().zip(&xm).map(|(w, m)| w * m).sum::<f64>();
            Ok(Ridge { intercept, coef })
        })
        .collect()
}

/// One ridge fit ([`ridge_path`] at one `alpha`).
pub fn ridge(x: &[Vec<f64>], y: &[f64], alpha: f64) -> Result<Ridge> {
    ridge_path(x, y, &[alpha]).map(|mut v| v.remove(0))
}

/// The `alpha` grid of App. D.4: `10^-4, 10^-3, …, 10^4`.
#[must_use]
pub fn alpha_grid() -> Vec<f64> {
    (-4..=4).map(|e| 10f64.powi(e)).collect()
}

/// The outcome of [`ridge_cv`]: the grid search and the refit on every row, as
/// scikit-learn's `GridSearchCV(Pipeline(StandardScaler, PolynomialFeatures(2), Ridge),
/// {"alpha": alphas}, cv=folds, scoring="neg_mean_squared_error")` (refit on) reports them.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct RidgeCv {
    /// The grid.
    pub alphas: Vec<f64>,
    /// Per `alpha`, the mean over the scored folds of each fold's MSE on its held-out
    /// rows, from **unclipped** predictions (`-mean_test_score`).
    pub cv_mse: Vec<f64>,
    /// Per `alpha`, each fold's MSE (`-split{f}_test_score`); `None` for a fold with no
    /// rows (not scored).
    pub fold_mse: Vec<Vec<Option<f64>>>,
    /// The chosen `alpha`: the least `cv_mse`, ties to the first in grid order (for
    /// [`alpha_grid`], the smallest), as `GridSearchCV`'s `best_params_`.
    pub alpha: f64,
    /// Every row's out-of-fold prediction at the chosen `alpha`, clipped to `[0, 1]`
    /// (in the report, each row's `y_oof`).
    #[serde(skip)]
    pub oof: Vec<f64>,
    /// `R²` of the clipped out-of-fold predictions ([`r_squared`]); `None` when `y` is
    /// constant.
    pub oof_r2: Option<f64>,
    /// The refit at the chosen `alpha` on every row (standardisation, expansion and
    /// ridge): every row's fitted value, clipped to `[0, 1]` (in the report, each row's
    /// `y_hat`).
    #[serde(skip)]
    pub fitted: Vec<f64>,
    /// `R²` of the clipped fitted values (in sample); `None` when `y` is constant.
    pub in_sample_r2: Option<f64>,
    /// The refit's ridge weights on the degree-2 terms of the standardised features.
    pub model: Ridge,
    /// The refit's standardisation.
    pub scaler: Standardizer,
}

/// An error unless `folds` has `n` entries, each below `k`; it names the first bad row.
pub(super) fn check_folds(what: &str, folds: &[usize], n: usize, k: usize) -> Result<()> {
    if folds.len() != n {
        return Err(Error::DimensionMismatch {
            what: format!("{what}: folds vs rows"),
            expected: n,
            got: folds.len(),
        });
    }
    match folds.iter().position(|&f| f >= k) {
        Some(i) => Err(Error::invalid(
            "folds",
            format!(
                "{what}: row {i} is in fold {}, but there are only {k} folds (0..{})",
                folds[i],
                k.saturating_sub(1)
            ),
        )),
        None => Ok(()),
    }
}

/// The pipeline fitted on `x`, `y`: [`standardize_fit`] on `x`, [`poly2`] of the
/// standardised rows, [`ridge_path`] over `alphas`.
fn pipeline_path(x: &[Vec<f64>], y: &[f64], alphas: &[f64]) -> Result<(Standardizer, Vec<Ridge>)> {
    let s = standardize_fit(x)?;
    let p: Vec<Vec<f64>> = s.apply(x).iter().map(|r| poly2(r)).collect();
    let models = ridge_path(&p, y, alphas)?;
    Ok((s, models))
}

/// The unclipped predictions of a fitted pipeline for the rows `x`.
#[must_use]
pub fn pipeline_predict(scaler: &Standardizer, model: &Ridge, x: &[Vec<f64>]) -> Vec<f64> {
    scaler.apply(x).iter().map(|r| model.predict(&poly2(r))).collect()
}

/// Grouped cross-validated ridge on the degree-2 expansion of standardised features,
/// then the refit. For each fold `f` (rows with `folds[i] == f` held out; every
/// `folds[i]` must be below `k`, or the error names the row), the pipeline is fitted on
/// the other rows only, as a scikit-learn `Pipeline(StandardScaler,
/// PolynomialFeatures(2), Ridge)` under `GridSearchCV(cv=GroupKFold)` would be:
/// [`standardize_fit`] on the training rows, [`poly2`], [`ridge_path`] over `alphas`. The
/// held-out rows are predicted **unclipped** and the fold's MSE taken; `cv_mse` is the
/// mean of the fold MSEs over the folds that hold rows (every fold, for
/// [`crate::probe::folds::group_k_fold`]'s), and `alpha` the least, ties to the first in
/// grid order (`scoring="neg_mean_squared_error"`). Then the pipeline is refitted on
/// every row at that `alpha` and every row predicted; clipping to `[0, 1]` (D.4) applies
/// only to these final predictions and to the reported out-of-fold ones, never to the
/// CV score.
pub fn ridge_cv(x: &[Vec<f64>], y: &[f64], folds: &[usize], k: usize, alphas: &[f64]) -> Result<RidgeCv> {
    let n = x.len();
    if y.len() != n {
        return Err(Error::DimensionMismatch {
            what: "ridge_cv: targets vs rows".into(),
            expected: n,
            got: y.len(),
        });
    }
    check_folds("ridge_cv", folds, n, k)?;
    if alphas.is_empty() {
        return Err(Error::Empty("alpha grid".into()));
    }
    let mut pred = vec![vec![0.0; n]; alphas.len()];
    // fold_mse[a][f], filled fold by fold (`None` for a fold with no rows).
    let mut fold_mse: Vec<Vec<Option<f64>>> = vec![Vec::with_capacity(k); alphas.len()];
    for f in 0..k {
        let (train, test): (Vec<usize>, Vec<usize>) = (0..n).partition(|&i| folds[i] != f);
        if test.is_empty() {
            fold_mse.iter_mut().for_each(|per| per.push(None));
            continue;
        }
        if train.is_empty() {
            return Err(Error::invalid(
                "folds",
                format!("fold {f} holds every row: nothing to train on"),
            ));
        }
        let xtr: Vec<Vec<f64>> = train.iter().map(|&i| x[i].clone()).collect();
        let ytr: Vec<f64> = train.iter().map(|&i| y[i]).collect();
        let (s, models) = pipeline_path(&xtr, &ytr, alphas)?;
        let xte: Vec<Vec<f64>> = test.iter().map(|&i| x[i].clone()).collect();
        for (a, m) in models.iter().enumerate() {
            let p = pipeline_predict(&s, m, &xte);
            let sse: f64 = test.iter().zip(&p).map(|(&i, v)| (v - y[i]).powi(2)).sum();
            fold_mse[a].push(Some(sse / test.len() as f64));
            for (&i, v) in test.iter().zip(p) {
                pred[a][i] = v;
            }
        }
    }
    let cv_mse: Vec<f64> = fold_mse
        .iter()
        .map(|per| {
            let scored: Vec<f64> = per.iter().flatten().copied().collect();
            scored.iter().sum::<f64>() / scored.len().max(1) as f64
        })
        .collect();
    // The least mean MSE; a strict `<` keeps the first of equal ones (grid order).
    let mut best = 0;
    for a in 1..alphas.len() {
        if cv_mse[a] < cv_mse[best] {
            best = a;
        }
    }
    let alpha = alphas[best];
    let oof: Vec<f64> = pred.swap_remove(best).iter().map(|v| v.clamp(0.0, 1.0)).collect();
    let (scaler, mut models) = pipeline_path(x, y, &[alpha])?;
    let model = models.remove(0);
    let fitted: Vec<f64> = pipeline_predict(&scaler, &model, x)
        .iter()
        .map(|v| v.clamp(0.0, 1.0))
        .collect();
    Ok(RidgeCv {
        alphas: alphas.to_vec(),
        cv_mse,
        fold_mse,
        alpha,
        oof_r2: r_squared(y, &oof),
        oof,
        in_sample_r2: r_squared(y, &fitted),
        fitted,
        model,
        scaler,
    })
}

/// `R² = 1 - Σ(y - ŷ)² / Σ(y - ȳ)²`; `None` when `y` is empty or constant.
#[must_use]
pub fn r_squared(y: &[f64], pred: &[f64]) -> Option<f64> {
    if y.is_empty() {
        return None;
    }
    let m = y.iter().sum::<f64>() / y.len() as f64;
    let tot: f64 = y.iter().map(|v| (v - m).powi(2)).sum();
    let res: f64 = y.iter().zip(pred).map(|(a, b)| (a - b).powi(2)).sum();
    (tot > 0.0).then(|| 1.0 - res / tot)
}

/// The first principal component.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Pca1 {
    /// The unit loading vector (one value per column).
    pub loadings: Vec<f64>,
    /// Its eigenvalue: the variance along it (population covariance).
    pub variance: f64,
    /// Its share of the total variance (`None` when every column is constant).
    pub explained_variance_ratio: Option<f64>,
    /// The projection of every row.
    pub scores: Vec<f64>,
}

/// PCA1 of already-standardised rows `z`: the eigenvector of the largest eigenvalue of
/// the covariance `ZᵀZ / n` (faer's self-adjoint eigendecomposition; the columns are
/// centred first, a no-op for standardised data), with its sign chosen so that the
/// projection correlates positively with column `align` (for the probe,
/// `log_cum_obs_tokens`, so larger values mean a larger trace: "input complexity"). When
/// that correlation is zero the largest-magnitude loading is made positive. With every
/// column constant the loadings and scores are all zero.
pub fn pca1(z: &[Vec<f64>], align: usize) -> Result<Pca1> {
    let n = z.len();
    let Some(d) = z.first().map(Vec::len) else {
        return Err(Error::Empty("rows for PCA".into()));
    };
    if align >= d {
        return Err(Error::invalid("pca align", format!("column {align} of {d}")));
    }
    let mean: Vec<f64> = (0..d)
        .map(|j| z.iter().map(|r| r[j]).sum::<f64>() / n as f64)
        .collect();
    let mut cov = Mat::<f64>::zeros(d, d);
    for r in z {
        for a in 0..d {
            for b in 0..=a {
                cov[(a, b)] += (r[a] - mean[a]) * (r[b] - mean[b]) / n as f64;
            }
        }
    }
    for a in 0..d {
        for b in 0..a {
            cov[(b, a)] = cov[(a, b)];
        }
    }
    let trace: f64 = (0..d).map(|a| cov[(a, a)]).sum();
    if trace <= 0.0 {
        return Ok(Pca1 {
            loadings: vec![0.0; d],
            variance: 0.0,
            explained_variance_ratio: None,
            scores: vec![0.0; n],
        });
    }
    let evd = cov
        .self_adjoint_eigen(Side::Lower)
        .map_err(|e| Error::invalid("pca", format!("the eigendecomposition failed: {e:?}")))?;
    let s = evd.S().column_vector();
    let u = evd.U();
    // Eigenvalues come in nondecreasing order: the last is the largest.
    let top = (0..d).max_by(|&a, &b| s[a].total_cmp(&s[b])).unwrap_or(d - 1);
    let mut v: Vec<f64> = (0..d).map(|i| u[(i, top)]).collect();
    let project = |v: &[f64]| -> Vec<f64> {
        z.iter()
            .map(|r| r.iter().zip(&mean).zip(v).map(|((x, m), w)| (x - m) * w).sum())
            .collect()
    };
    let mut scores = project(&v);
    let corr: f64 = scores
        .iter()
        .zip(z)
        .map(|(p, r)| p * (r[align] - mean[align]))
        .sum();
    let flip = if corr.abs() > 1e-12 * n as f64 {
        corr < 0.0
    } else {
        let big = (0..d)
            .max_by(|&a, &b| v[a].abs().total_cmp(&v[b].abs()))
            .unwrap_or(0);
        v[big] < 0.0
    };
    if flip {
        v.iter_mut().for_each(|w| *w = -*w);
        scores.iter_mut().for_each(|p| *p = -*p);
    }
    Ok(Pca1 {
        loadings: v,
        variance: s[top],
        explained_variance_ratio: Some(s[top] / trace),
        scores,
    })
}

/// Min–max scaling `(v - min) / (max - min)`; when every value is equal (or there are
/// none) all scale to 0 and the flag is `true`.
#[must_use]
pub fn min_max(v: &[f64]) -> (Vec<f64>, bool) {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if v.is_empty() || hi <= lo {
        return (vec![0.0; v.len()], true);
    }
    (v.iter().map(|x| (x - lo) / (hi - lo)).collect(), false)
}

// The classifier half of the probe's fits lives in classify.rs; its items are part of this
// module's API.
pub use super::classify::{
    balanced_logistic, grouped_auc, macro_average, mann_whitney_auc, FoldAuc, GroupedAuc, Logistic,
};
