//! The probe's fits (observation-masking.txt App. D.4, D.5), each a pure function on
//! row-major data (`&[Vec<f64>]`, one row per prefix): standardisation, the degree-2
//! polynomial expansion, ridge regression with a grouped-CV `alpha` and its refit on every
//! row ([`ridge_cv`], scikit-learn's `GridSearchCV` rule), the first principal component,
//! min–max scaling, the balanced logistic probe and the fold-wise Mann–Whitney AUC.
//!
//! Linear algebra is [faer](https://docs.rs/faer)'s: the ridge system is solved by its
//! Cholesky (`Mat::llt`), PCA1 is the top eigenvector of its self-adjoint
//! eigendecomposition (`Mat::self_adjoint_eigen`). The logistic probe has three
//! parameters; its Newton step is an explicit 3×3 solve.

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
fn check_folds(what: &str, folds: &[usize], n: usize, k: usize) -> Result<()> {
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

/// A fitted two-feature logistic probe: `P(positive) = σ(intercept + w · [x, z])`.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Logistic {
    /// The unpenalised intercept.
    pub intercept: f64,
    /// The weights on the two features.
    pub w: [f64; 2],
    /// The class weights used (negative, positive): `n / (2 n_c)`.
    pub class_weight: [f64; 2],
    /// Newton iterations taken.
    pub iterations: usize,
}

impl Logistic {
    /// The linear score `intercept + w · p`.
    #[must_use]
    pub fn decision(&self, p: [f64; 2]) -> f64 {
        self.intercept + self.w[0] * p[0] + self.w[1] * p[1]
    }

    /// The positive-class probability.
    #[must_use]
    pub fn probability(&self, p: [f64; 2]) -> f64 {
        sigmoid(self.decision(p))
    }
}

fn sigmoid(t: f64) -> f64 {
    if t >= 0.0 {
        1.0 / (1.0 + (-t).exp())
    } else {
        let e = t.exp();
        e / (1.0 + e)
    }
}

/// `ln(1 + e^t)` without overflow.
fn softplus(t: f64) -> f64 {
    if t > 0.0 {
        t + (-t).exp().ln_1p()
    } else {
        t.exp().ln_1p()
    }
}

/// Solves the 3×3 system `h s = g` by Gaussian elimination with partial pivoting.
fn solve3(mut h: [[f64; 3]; 3], mut g: [f64; 3]) -> Option<[f64; 3]> {
    for c in 0..3 {
        let p = (c..3).max_by(|&a, &b| h[a][c].abs().total_cmp(&h[b][c].abs()))?;
        if h[p][c].abs() < 1e-300 {
            return None;
        }
        h.swap(c, p);
        g.swap(c, p);
        let pivot = h[c];
        for r in c + 1..3 {
            let f = h[r][c] / pivot[c];
            for (v, pv) in h[r][c..].iter_mut().zip(&pivot[c..]) {
                *v -= f * pv;
            }
            g[r] -= f * g[c];
        }
    }
    let mut s = [0.0; 3];
    for c in (0..3).rev() {
        let acc: f64 = (c + 1..3).map(|k| h[c][k] * s[k]).sum();
        s[c] = (g[c] - acc) / h[c][c];
    }
    Some(s)
}

/// The penalised weighted negative log-likelihood the probe minimises.
fn logistic_loss(th: [f64; 3], x: &[[f64; 2]], y: &[bool], sw: &[f64], c: f64) -> f64 {
    let data: f64 = x
        .iter()
        .zip(y)
        .zip(sw)
        .map(|((p, &yi), s)| {
            let t = th[0] + th[1] * p[0] + th[2] * p[1];
            s * (softplus(t) - if yi { t } else { 0.0 })
        })
        .sum();
    c * data + 0.5 * (th[1] * th[1] + th[2] * th[2])
}

/// Balanced L2 logistic regression on two features, as scikit-learn's
/// `LogisticRegression(C=c, class_weight="balanced")` defines it: minimises
/// `C Σ s_i [ln(1 + e^{t_i}) - y_i t_i] + ½|w|²` with `t_i = b + w·x_i`, the intercept `b`
/// unpenalised and `s_i = n / (2 n_{y_i})`. Newton's method with a backtracking line search,
/// until the Newton decrement `gᵀH⁻¹g` is below `1e-18` of the loss (or the step below
/// `1e-13` of the parameters; at most 100 steps). Errors: a class is empty, the
/// inputs differ in length, a value is not finite, or no convergence.
pub fn balanced_logistic(x: &[[f64; 2]], y: &[bool], c: f64) -> Result<Logistic> {
    let n = x.len();
    if y.len() != n {
        return Err(Error::DimensionMismatch {
            what: "logistic labels vs rows".into(),
            expected: n,
            got: y.len(),
        });
    }
    if !(c.is_finite() && c > 0.0) {
        return Err(Error::invalid("C", format!("{c} is not positive and finite")));
    }
    if x.iter().flatten().any(|v| !v.is_finite()) {
        return Err(Error::invalid("logistic", "a feature value is not finite"));
    }
    let pos = y.iter().filter(|&&b| b).count();
    let neg = n - pos;
    if pos == 0 || neg == 0 {
        return Err(Error::invalid(
            "logistic",
            format!("both classes are needed ({pos} positive, {neg} negative)"),
        ));
    }
    let cw = [n as f64 / (2.0 * neg as f64), n as f64 / (2.0 * pos as f64)];
    let sw: Vec<f64> = y.iter().map(|&b| cw[usize::from(b)]).collect();
    let mut th = [0.0f64; 3];
    let mut f = logistic_loss(th, x, y, &sw, c);
    for it in 1..=100 {
        let mut g = [0.0, th[1], th[2]];
        let mut h = [[0.0; 3], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]];
        for ((p, &yi), s) in x.iter().zip(y).zip(&sw) {
            let row = [1.0, p[0], p[1]];
            let pr = sigmoid(th[0] + th[1] * p[0] + th[2] * p[1]);
            let r = c * s * (pr - f64::from(u8::from(yi)));
            let q = c * s * pr * (1.0 - pr);
            for a in 0..3 {
                g[a] += r * row[a];
                for b in 0..3 {
                    h[a][b] += q * row[a] * row[b];
                }
            }
        }
        let step = solve3(h, g).ok_or_else(|| Error::invalid("logistic", "the Hessian is singular"))?;
        let dec: f64 = g.iter().zip(&step).map(|(a, b)| a * b).sum();
        let size = th.iter().fold(1.0f64, |m, v| m.max(v.abs()));
        let small = step.iter().all(|v| v.abs() <= 1e-13 * size);
        if dec <= 1e-18 * f.abs().max(1.0) || small {
            return Ok(Logistic {
                intercept: th[0],
                w: [th[1], th[2]],
                class_weight: cw,
                iterations: it - 1,
            });
        }
        let mut t = 1.0;
        loop {
            let cand = [th[0] - t * step[0], th[1] - t * step[1], th[2] - t * step[2]];
            let fc = logistic_loss(cand, x, y, &sw, c);
            if fc <= f - 1e-4 * t * dec || t < 1e-10 {
                th = cand;
                f = fc;
                break;
            }
            t *= 0.5;
        }
    }
    Err(Error::invalid(
        "logistic",
        "Newton's method did not converge in 100 steps",
    ))
}

/// The Mann–Whitney AUC of `scores` for `labels`: the share of (positive, negative)
/// pairs with the positive scored higher, ties counting ½. `None` when a class is empty.
/// Sorted once (`O(n log n)`): each positive counts the negatives below it and half of
/// those tied with it.
#[must_use]
pub fn mann_whitney_auc(scores: &[f64], labels: &[bool]) -> Option<f64> {
    if scores.len() != labels.len() {
        return None;
    }
    let pos = labels.iter().filter(|&&b| b).count();
    let neg = labels.len() - pos;
    if pos == 0 || neg == 0 {
        return None;
    }
    let mut idx: Vec<usize> = (0..scores.len()).collect();
    idx.sort_by(|&a, &b| scores[a].total_cmp(&scores[b]));
    let mut below = 0usize; // negatives strictly below the current tie group
    let mut wins = 0.0;
    let mut i = 0;
    while i < idx.len() {
        let mut j = i;
        while j < idx.len() && scores[idx[j]] == scores[idx[i]] {
            j += 1;
        }
        let (p, q) = idx[i..j].iter().fold(
            (0usize, 0usize),
            |(p, q), &k| {
                if labels[k] {
                    (p + 1, q)
                } else {
                    (p, q + 1)
                }
            },
        );
        wins += p as f64 * (below as f64 + 0.5 * q as f64);
        below += q;
        i = j;
    }
    Some(wins / (pos as f64 * neg as f64))
}

/// The macro average of the available values, and how many there were (`None` when none).
#[must_use]
pub fn macro_average(values: &[Option<f64>]) -> (Option<f64>, usize) {
    let v: Vec<f64> = values.iter().flatten().copied().collect();
    if v.is_empty() {
        (None, 0)
    } else {
        (Some(v.iter().sum::<f64>() / v.len() as f64), v.len())
    }
}

/// One held-out fold of [`grouped_auc`].
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct FoldAuc {
    /// The fold.
    pub fold: usize,
    /// Positive rows held out.
    pub positives: usize,
    /// Negative rows held out.
    pub negatives: usize,
    /// Its AUC, when the fold is valid.
    pub auc: Option<f64>,
    /// Why it was skipped, when it was.
    pub skipped: Option<String>,
}

/// The outcome of [`grouped_auc`].
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct GroupedAuc {
    /// The macro-averaged AUC over valid folds, `None` when no fold is valid.
    pub auc: Option<f64>,
    /// Valid folds.
    pub valid_folds: usize,
    /// Every fold.
    pub folds: Vec<FoldAuc>,
    /// Why the AUC is not available, when it is not.
    pub reason: Option<String>,
}

/// The probe's AUC (App. D.5): for each fold whose held-out rows hold both classes (and
/// whose other rows do too), the [`balanced_logistic`] probe (`C = 1`) is trained on the
/// other folds and the held-out rows are scored by its positive-class probability; the
/// fold's [`mann_whitney_auc`] is macro-averaged over valid folds. Every `folds[i]` must
/// be below `k` (a row in no fold would never be scored); the error names the row.
pub fn grouped_auc(points: &[[f64; 2]], labels: &[bool], folds: &[usize], k: usize) -> Result<GroupedAuc> {
    let n = points.len();
    if labels.len() != n {
        return Err(Error::DimensionMismatch {
            what: "grouped_auc: labels vs points".into(),
            expected: n,
            got: labels.len(),
        });
    }
    check_folds("grouped_auc", folds, n, k)?;
    let mut out = Vec::with_capacity(k);
    for f in 0..k {
        let (train, test): (Vec<usize>, Vec<usize>) = (0..n).partition(|&i| folds[i] != f);
        let positives = test.iter().filter(|&&i| labels[i]).count();
        let negatives = test.len() - positives;
        let train_pos = train.iter().filter(|&&i| labels[i]).count();
        let skipped = if positives == 0 || negatives == 0 {
            Some(format!(
                "held-out fold has {positives} positive and {negatives} negative prefixes"
            ))
        } else if train_pos == 0 || train_pos == train.len() {
            Some(format!(
                "training folds have one class ({train_pos} positive of {})",
                train.len()
            ))
        } else {
            None
        };
        let auc = if skipped.is_none() {
            let xs: Vec<[f64; 2]> = train.iter().map(|&i| points[i]).collect();
            let ys: Vec<bool> = train.iter().map(|&i| labels[i]).collect();
            let m = balanced_logistic(&xs, &ys, 1.0)?;
            let s: Vec<f64> = test.iter().map(|&i| m.probability(points[i])).collect();
            let l: Vec<bool> = test.iter().map(|&i| labels[i]).collect();
            mann_whitney_auc(&s, &l)
        } else {
            None
        };
        out.push(FoldAuc {
            fold: f,
            positives,
            negatives,
            auc,
            skipped,
        });
    }
    let (auc, valid_folds) = macro_average(&out.iter().map(|f| f.auc).collect::<Vec<_>>());
    let reason = auc.is_none().then(|| {
        format!("no valid fold: none of the {k} held-out folds has both rescued and non-rescued prefixes with both classes left to train on")
    });
    Ok(GroupedAuc {
        auc,
        valid_folds,
        folds: out,
        reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn solve3_solves_a_system_that_needs_pivoting() {
        // h has a zero first pivot; h · [1, -2, 3] = g.
        let h = [[0.0, 2.0, 1.0], [1.0, 1.0, 0.0], [3.0, 0.0, 2.0]];
        let s = solve3(h, [-1.0, -1.0, 9.0]).unwrap();
        for (a, b) in s.iter().zip([1.0, -2.0, 3.0]) {
            assert!((a - b).abs() < 1e-14, "{s:?}");
        }
        assert!(solve3([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [0.0, 0.0, 1.0]], [1.0; 3]).is_none());
    }

    #[test]
    fn sigmoid_and_softplus_do_not_overflow() {
        assert_eq!(sigmoid(800.0), 1.0);
        assert_eq!(sigmoid(-800.0), 0.0);
        assert!((sigmoid(0.3) + sigmoid(-0.3) - 1.0).abs() < 1e-15);
        assert_eq!(softplus(800.0), 800.0);
        assert!(softplus(-800.0) >= 0.0 && softplus(-800.0) < 1e-300);
        assert!((softplus(0.0) - std::f64::consts::LN_2).abs() < 1e-15);
    }
}
