//! The probe's classifier and its score (observation-masking.txt App. D.5): the
//! class-balanced two-feature logistic probe ([`balanced_logistic`], scikit-learn's
//! `LogisticRegression(class_weight="balanced")` by Newton's method on three parameters,
//! an explicit 3×3 solve), the Mann–Whitney AUC, and the grouped-fold AUC the report
//! gives. Re-exported from [`fit`](super::fit), whose data layout it shares.

use super::fit::check_folds;
use crate::error::{Error, Result};

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
