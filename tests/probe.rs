//! The SNR regression probe (observation-masking.txt §5.2, App. D): every fit against
//! closed forms or scikit-learn's numbers, the trace features and targets of a hand-made
//! trajectory, the labels file's errors, and the `ctxprune probe` CLI.
//!
//! The scikit-learn references were computed with scikit-learn 1.9.1 / numpy 2.4.6 in a
//! venv (`python3 -m venv /tmp/skvenv && /tmp/skvenv/bin/pip install scikit-learn numpy`);
//! each literal says which call produced it. The CLI fixture (tests/data/probe/queries,
//! written by make_queries.py) was checked end to end by check_sklearn.py in the same
//! directory, on the folds the report gives: GridSearchCV's CV MSE per alpha and per fold
//! (to 5e-12), its chosen alpha, the refit's clipped predictions and `z`, the out-of-fold
//! predictions, both R², PCA1 and the AUC agree with scikit-learn's pipeline.

use ctxprune::probe::features::{
    all_prefix_features, citation_target, query_seed, sample_prefixes, scan_urls, snr_target, trace_text,
    ToolKinds,
};
use ctxprune::probe::fit::{
    alpha_grid, balanced_logistic, grouped_auc, macro_average, mann_whitney_auc, min_max, pca1,
    pipeline_predict, poly2, poly2_names, r_squared, ridge, ridge_cv, ridge_path, standardize,
    standardize_fit,
};
use ctxprune::probe::folds::group_k_fold;
use ctxprune::probe::{build, fit, parse_labels, Label, Options, TargetKind, FEATURES};
use ctxprune::rng::Rng;
use ctxprune::tokens::Approx;
use std::path::{Path, PathBuf};

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/probe")
        .join(name)
}

fn close(what: &str, got: f64, want: f64, tol: f64) {
    assert!((got - want).abs() <= tol, "{what}: got {got}, want {want}");
}

// ---------------------------------------------------------------- ridge, poly, scaling

#[test]
fn ridge_matches_the_closed_form() {
    // One feature, by hand: x̄ = 1.5, ȳ = 2.75, Sxx = 5, Sxy = 5.5, so at alpha = 1
    // w = 5.5 / (5 + 1) = 11/12 and b = 2.75 - 1.5 w = 1.375 (sklearn Ridge(alpha=1)
    // gives 0.9166666666666666 and 1.375).
    let x: Vec<Vec<f64>> = [0.0, 1.0, 2.0, 3.0].iter().map(|&v| vec![v]).collect();
    let m = ridge(&x, &[1.0, 3.0, 2.0, 5.0], 1.0).unwrap();
    close("w", m.coef[0], 11.0 / 12.0, 1e-12);
    close("b", m.intercept, 1.375, 1e-12);
    // Two features: numpy.linalg.solve(Xcᵀ Xc + I, Xcᵀ yc) on the centred data, equal to
    // sklearn Ridge(alpha=1.0).fit(X, y): coef [0.7133620689655176, 0.23922413793103417]
    // = [331/464, 111/464], intercept 0.13362068965517215 = 31/232.
    let x = vec![
        vec![1.0, 2.0],
        vec![2.0, 0.0],
        vec![3.0, 1.0],
        vec![4.0, 3.0],
        vec![5.0, 5.0],
    ];
    let y = [1.0, 2.0, 2.0, 4.0, 5.0];
    let m = ridge(&x, &y, 1.0).unwrap();
    close("w0", m.coef[0], 331.0 / 464.0, 1e-12);
    close("w1", m.coef[1], 111.0 / 464.0, 1e-12);
    close("b", m.intercept, 31.0 / 232.0, 1e-12);
    close(
        "predict",
        m.predict(&[1.0, 2.0]),
        31.0 / 232.0 + 331.0 / 464.0 + 222.0 / 464.0,
        1e-12,
    );
    // The path shares one Gram matrix and gives the same fits; larger alpha shrinks.
    let path = ridge_path(&x, &y, &[1.0, 1e4]).unwrap();
    assert_eq!(path[0], m);
    assert!(path[1].coef.iter().all(|w| w.abs() < 1e-2), "{:?}", path[1].coef);
    assert!(ridge(&x, &y, 0.0).is_err(), "alpha 0 is refused");
    assert!(ridge(&x, &y[..4], 1.0).is_err(), "length mismatch is refused");
}

#[test]
fn poly2_follows_sklearn_order() {
    // sklearn PolynomialFeatures(2, include_bias=False).fit_transform([[2, 3, 5]]) and
    // get_feature_names_out(["a", "b", "c"]).
    assert_eq!(
        poly2(&[2.0, 3.0, 5.0]),
        vec![2.0, 3.0, 5.0, 4.0, 6.0, 10.0, 9.0, 15.0, 25.0]
    );
    assert_eq!(
        poly2_names(&["a", "b", "c"]),
        vec!["a", "b", "c", "a^2", "a b", "a c", "b^2", "b c", "c^2"]
    );
    assert_eq!(poly2(&[0.0; 10]).len(), 65);
}

#[test]
fn standardize_uses_the_population_std_and_zeroes_constant_columns() {
    let x = vec![
        vec![1.0, 7.0, 0.0],
        vec![3.0, 7.0, 1.0],
        vec![5.0, 7.0, 2.0],
        vec![7.0, 7.0, 5.0],
    ];
    let (z, s) = standardize(&x).unwrap();
    // Column 0: mean 4, population variance (9 + 1 + 1 + 9) / 4 = 5.
    close("mean", s.mean[0], 4.0, 1e-15);
    close("scale", s.scale[0], 5f64.sqrt(), 1e-15);
    close("z[0][0]", z[0][0], -3.0 / 5f64.sqrt(), 1e-15);
    assert_eq!(s.constant, vec![1]);
    assert!(z.iter().all(|r| r[1] == 0.0), "constant column is all zeros");
    for j in [0, 2] {
        let m: f64 = z.iter().map(|r| r[j]).sum::<f64>() / 4.0;
        let v: f64 = z.iter().map(|r| r[j] * r[j]).sum::<f64>() / 4.0;
        close("mean 0", m, 0.0, 1e-15);
        close("variance 1", v, 1.0, 1e-12);
    }
    assert!(standardize(&[]).is_err());
}

#[test]
fn min_max_scales_and_flags_constant_input() {
    assert_eq!(min_max(&[2.0, 4.0, 3.0]), (vec![0.0, 1.0, 0.5], false));
    assert_eq!(min_max(&[0.3, 0.3]), (vec![0.0, 0.0], true));
}

// ---------------------------------------------------------------- the ridge CV

/// Twelve rows of two features, three folds of unequal size (6, 3, 3), targets partly
/// outside `[0, 1]` so that clipping would change the scores.
fn ridge_cv_data() -> (Vec<Vec<f64>>, Vec<f64>, Vec<usize>) {
    let x = [
        [0.13, -0.13],
        [0.64, 0.1],
        [-0.54, 0.36],
        [1.3, 0.95],
        [-0.7, -1.27],
        [-0.62, 0.04],
        [-2.33, -0.22],
        [-1.25, -0.73],
        [-0.54, -0.32],
        [0.41, 1.04],
        [-0.13, 1.37],
        [-0.67, 0.35],
    ];
    let y = vec![
        0.73, 0.77, 0.1, 0.56, -0.2, 0.3, -0.2, -0.2, 0.22, 0.45, -0.07, 0.27,
    ];
    let folds = vec![0, 0, 0, 0, 0, 0, 1, 1, 1, 2, 2, 2];
    (x.iter().map(|r| r.to_vec()).collect(), y, folds)
}

#[test]
fn ridge_cv_chooses_alpha_as_grid_search_cv_and_refits_on_every_row() {
    let (x, y, folds) = ridge_cv_data();
    let r = ridge_cv(&x, &y, &folds, 3, &alpha_grid()).unwrap();
    // sklearn GridSearchCV(Pipeline(StandardScaler, PolynomialFeatures(2,
    // include_bias=False), Ridge), {"ridge__alpha": logspace(-4, 4, 9)}, cv=the three
    // folds, scoring="neg_mean_squared_error").fit(x, y): -mean_test_score.
    let want = [
        0.33663708329715475,
        0.3360086748800741,
        0.32985100097646775,
        0.27765648575813445,
        0.07853341021957198,
        0.07471736830428984,
        0.13639003319679108,
        0.14644578441460704,
        0.14760256933796564,
    ];
    for (a, (g, w)) in r.cv_mse.iter().zip(want).enumerate() {
        close(&format!("cv_mse[{a}]"), *g, w, 1e-10);
    }
    // -split{0,1,2}_test_score at alpha 1 and 10: each fold's own MSE, unweighted in the
    // mean although the folds hold 6, 3 and 3 rows.
    for (a, w) in [
        (4, [0.03695368128608887, 0.1617016232640636, 0.03694492610856348]),
        (5, [0.13411054691675933, 0.0671143333952117, 0.022927224600898497]),
    ] {
        assert_eq!(r.fold_mse[a].len(), 3);
        for (f, (g, want)) in r.fold_mse[a].iter().zip(w).enumerate() {
            close(&format!("fold_mse[{a}][{f}]"), g.unwrap(), want, 1e-10);
        }
        close("mean of folds", r.cv_mse[a], w.iter().sum::<f64>() / 3.0, 1e-15);
    }
    // A fold with no rows is not scored (GroupKFold never makes one).
    let r4 = ridge_cv(&x, &y, &folds, 4, &alpha_grid()).unwrap();
    assert!(r4.fold_mse.iter().all(|per| per.len() == 4 && per[3].is_none()));
    assert_eq!((&r4.cv_mse, r4.alpha), (&r.cv_mse, r.alpha));
    // best_params_: alpha 10. (The MSE of the pooled, clipped out-of-fold predictions
    // would pick alpha 1: 0.03233 against 0.09166 at alpha 10.)
    assert_eq!(r.alpha, 10.0);
    // best_estimator_.predict(x), the refit on all twelve rows, clipped to [0, 1].
    let fitted = [
        0.3903860982381096,
        0.48287939043342654,
        0.3020129239999465,
        0.4446085704928123,
        0.0, // -0.11740745475796488 before clipping
        0.28399047519532594,
        0.0, // -0.047508931051272796
        0.0074810381562805395,
        0.24981700872816043,
        0.3134348023817396,
        0.1373954948266018,
        0.2829105833568352,
    ];
    for (i, (g, w)) in r.fitted.iter().zip(fitted).enumerate() {
        close(&format!("fitted[{i}]"), *g, w, 1e-10);
    }
    // The refit is the pipeline at the chosen alpha on every row.
    let s = standardize_fit(&x).unwrap();
    assert_eq!(r.scaler, s);
    let raw = pipeline_predict(&r.scaler, &r.model, &x);
    close("raw[4]", raw[4], -0.11740745475796488, 1e-10);
    // Out-of-fold predictions at alpha 10 (each fold's pipeline on the other two),
    // clipped.
    let oof = [
        0.1736681863807627,
        0.2089389944419906,
        0.1561340299072962,
        0.19122173017240293,
        0.0,
        0.13759720609200848,
        0.1434350102802347,
        0.0814169563413783,
        0.2848065628081364,
        0.33955742642133263,
        0.16782671303668423,
        0.2747504010549412,
    ];
    for (i, (g, w)) in r.oof.iter().zip(oof).enumerate() {
        close(&format!("oof[{i}]"), *g, w, 1e-10);
    }
    // sklearn r2_score of the clipped fitted and out-of-fold predictions.
    close("in-sample R²", r.in_sample_r2.unwrap(), 0.6796520781255573, 1e-10);
    close("out-of-fold R²", r.oof_r2.unwrap(), 0.19537512344634833, 1e-10);
    assert_eq!(r.in_sample_r2, r_squared(&y, &r.fitted));
}

#[test]
fn ridge_cv_ties_go_to_the_first_alpha_of_the_grid() {
    // A constant target (0.5, exact in binary): every fit predicts 0.5 exactly, every
    // MSE is 0. GridSearchCV takes the first alpha of the grid as given (best_params_
    // {"alpha": 10.0} for the grid [10, 1, 0.1]); for alpha_grid() that is the smallest.
    let (x, _, folds) = ridge_cv_data();
    let y = vec![0.5; x.len()];
    let r = ridge_cv(&x, &y, &folds, 3, &alpha_grid()).unwrap();
    assert!(r.cv_mse.iter().all(|&m| m == 0.0), "{:?}", r.cv_mse);
    assert_eq!(r.alpha, 1e-4);
    let r = ridge_cv(&x, &y, &folds, 3, &[10.0, 1.0, 0.1]).unwrap();
    assert_eq!(r.alpha, 10.0);
    assert_eq!(r.oof_r2, None, "constant target");
    assert_eq!(r.fitted, vec![0.5; x.len()]);
}

#[test]
fn a_row_outside_the_folds_is_an_error_naming_it() {
    let (x, y, mut folds) = ridge_cv_data();
    folds[7] = 3;
    let e = ridge_cv(&x, &y, &folds, 3, &alpha_grid())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("row 7") && e.contains("fold 3") && e.contains("3 folds"),
        "{e}"
    );
    let pts: Vec<[f64; 2]> = x.iter().map(|r| [r[0], r[1]]).collect();
    let lab: Vec<bool> = y.iter().map(|&v| v > 0.25).collect();
    let e = grouped_auc(&pts, &lab, &folds, 3).unwrap_err().to_string();
    assert!(
        e.contains("grouped_auc") && e.contains("row 7") && e.contains("fold 3"),
        "{e}"
    );
    // Fewer fold entries than rows is a mismatch, not a silent zero.
    assert!(ridge_cv(&x, &y, &folds[..11], 3, &alpha_grid()).is_err());
    assert!(grouped_auc(&pts, &lab, &folds[..11], 3).is_err());
}

#[test]
fn pca1_is_the_top_eigenvector_signed_by_the_alignment_column() {
    // Points along (1, -1) with a little spread across: PCA1 ∝ (1, -1)/√2.
    let z = vec![
        vec![-2.0, 2.1],
        vec![-1.0, 0.9],
        vec![0.0, 0.1],
        vec![1.0, -1.1],
        vec![2.0, -2.0],
    ];
    for align in [0, 1] {
        let p = pca1(&z, align).unwrap();
        let norm: f64 = p.loadings.iter().map(|v| v * v).sum();
        close("unit", norm, 1.0, 1e-12);
        // Cv = λv for the population covariance.
        let n = z.len() as f64;
        let mean: Vec<f64> = (0..2).map(|j| z.iter().map(|r| r[j]).sum::<f64>() / n).collect();
        for a in 0..2 {
            let cv: f64 = (0..2)
                .map(|b| {
                    z.iter().map(|r| (r[a] - mean[a]) * (r[b] - mean[b])).sum::<f64>() / n * p.loadings[b]
                })
                .sum();
            close("eigen", cv, p.variance * p.loadings[a], 1e-10);
        }
        assert!(
            p.loadings[align] > 0.0,
            "aligned with column {align}: {:?}",
            p.loadings
        );
        assert!(p.explained_variance_ratio.unwrap() > 0.99);
        // Scores are the centred projections, correlating positively with the column.
        let c: f64 = p
            .scores
            .iter()
            .zip(&z)
            .map(|(s, r)| s * (r[align] - mean[align]))
            .sum();
        assert!(c > 0.0);
    }
}

// ---------------------------------------------------------------- logistic and AUC

/// The logistic fixture: 9 points, 4 positive.
fn logistic_data() -> (Vec<[f64; 2]>, Vec<bool>) {
    let x = vec![
        [0.5, 0.1],
        [1.2, 0.4],
        [-0.3, 0.9],
        [2.0, 0.2],
        [1.5, 0.8],
        [-1.0, 0.3],
        [0.0, 0.0],
        [0.7, 1.0],
        [2.2, 0.6],
    ];
    let y = [0, 1, 0, 1, 1, 0, 0, 0, 1].iter().map(|&v| v == 1).collect();
    (x, y)
}

#[test]
fn balanced_logistic_matches_sklearn_and_is_stationary() {
    let (x, y) = logistic_data();
    let m = balanced_logistic(&x, &y, 1.0).unwrap();
    // sklearn LogisticRegression(C=1.0, class_weight="balanced", solver="newton-cholesky",
    // tol=1e-12).fit(x, y): intercept -1.2569735471565828, coef [1.413243887776484,
    // 0.003878060697606715] (lbfgs agrees to 1e-10).
    close("b", m.intercept, -1.2569735471565828, 1e-8);
    close("w0", m.w[0], 1.413243887776484, 1e-8);
    close("w1", m.w[1], 0.003878060697606715, 1e-8);
    // Class weights n / (2 n_c): 9 / 10 for the 5 negatives, 9 / 8 for the 4 positives,
    // so each class carries total weight n / 2.
    close("neg weight", m.class_weight[0], 0.9, 1e-15);
    close("pos weight", m.class_weight[1], 1.125, 1e-15);
    // Independent check: the gradient of C Σ s_i ℓ_i + ½|w|² vanishes at the answer.
    let mut g = [0.0, m.w[0], m.w[1]];
    for (p, &yi) in x.iter().zip(&y) {
        let s = m.class_weight[usize::from(yi)];
        let r = s * (m.probability(*p) - f64::from(u8::from(yi)));
        g[0] += r;
        g[1] += r * p[0];
        g[2] += r * p[1];
    }
    assert!(g.iter().all(|v| v.abs() < 1e-9), "gradient {g:?}");
    assert!(
        balanced_logistic(&x, &[true; 9], 1.0).is_err(),
        "one class is refused"
    );
}

#[test]
fn mann_whitney_auc_counts_ties_as_half() {
    // Positives 0.8, 0.5, 0.3 against negatives 0.5, 0.3, 0.1, 0.9 (12 pairs), by hand:
    // 0.8 beats 0.5, 0.3, 0.1 (3); 0.5 ties 0.5 and beats 0.3, 0.1 (2.5); 0.3 ties 0.3 and
    // beats 0.1 (1.5): 7 / 12.
    let s = [0.8, 0.5, 0.3, 0.5, 0.3, 0.1, 0.9];
    let l = [true, true, true, false, false, false, false];
    close("auc", mann_whitney_auc(&s, &l).unwrap(), 7.0 / 12.0, 1e-15);
    assert_eq!(mann_whitney_auc(&[0.1, 0.2], &[true, true]), None);
    assert_eq!(mann_whitney_auc(&[0.4, 0.4], &[true, false]), Some(0.5));
    assert_eq!(macro_average(&[Some(0.5), None, Some(1.0)]), (Some(0.75), 2));
    assert_eq!(macro_average(&[None, None]), (None, 0));
}

#[test]
fn grouped_auc_skips_single_class_folds_and_macro_averages() {
    // Three folds of 6 points; fold 2 holds only negatives and is skipped.
    let mut pts = Vec::new();
    let mut lab = Vec::new();
    let mut folds = Vec::new();
    let mut rng = Rng::new(3);
    for f in 0..3 {
        for i in 0..6 {
            let pos = f != 2 && i % 2 == 0;
            let shift = if pos { 1.0 } else { 0.0 };
            pts.push([shift + rng.normal(), 0.5 * shift + 0.3 * rng.uniform()]);
            lab.push(pos);
            folds.push(f);
        }
    }
    let g = grouped_auc(&pts, &lab, &folds, 3).unwrap();
    assert_eq!(g.valid_folds, 2);
    assert!(g.folds[2].auc.is_none() && g.folds[2].skipped.is_some());
    assert_eq!((g.folds[2].positives, g.folds[2].negatives), (0, 6));
    // Each valid fold's AUC is the Mann–Whitney AUC of the probe trained on the others.
    let mut per = Vec::new();
    for f in 0..2 {
        let tr: Vec<usize> = (0..18).filter(|&i| folds[i] != f).collect();
        let te: Vec<usize> = (0..18).filter(|&i| folds[i] == f).collect();
        let m = balanced_logistic(
            &tr.iter().map(|&i| pts[i]).collect::<Vec<_>>(),
            &tr.iter().map(|&i| lab[i]).collect::<Vec<_>>(),
            1.0,
        )
        .unwrap();
        let s: Vec<f64> = te.iter().map(|&i| m.probability(pts[i])).collect();
        let l: Vec<bool> = te.iter().map(|&i| lab[i]).collect();
        per.push(mann_whitney_auc(&s, &l).unwrap());
        assert_eq!(g.folds[f].auc, Some(per[f]));
    }
    close("macro", g.auc.unwrap(), (per[0] + per[1]) / 2.0, 1e-15);
    // No valid fold: not available, with the reason.
    let none = grouped_auc(&pts, &[false; 18], &folds, 3).unwrap();
    assert!(none.auc.is_none() && none.reason.is_some() && none.valid_folds == 0);
}

// ---------------------------------------------------------------- folds and sampling

#[test]
fn group_k_fold_matches_sklearn() {
    // Sizes q0 4, q3 3, q1 and q5 2, q2, q4 and q6 1: ties, ordered by descending id.
    let groups = [
        "q3", "q1", "q1", "q2", "q3", "q3", "q4", "q5", "q5", "q6", "q0", "q0", "q0", "q0",
    ];
    // sklearn 1.9.1 GroupKFold(n_splits=k).split(X, groups=groups) (it sorts the sizes
    // with kind="stable"), fold of each sample.
    let want: [(usize, [usize; 14]); 3] = [
        (2, [1, 0, 0, 1, 1, 1, 0, 1, 1, 1, 0, 0, 0, 0]),
        (3, [1, 2, 2, 1, 1, 1, 0, 2, 2, 1, 0, 0, 0, 0]),
        (4, [1, 3, 3, 1, 1, 1, 3, 2, 2, 2, 0, 0, 0, 0]),
    ];
    for (k, w) in want {
        assert_eq!(group_k_fold(&groups, k).unwrap(), w.to_vec(), "k = {k}");
    }
    assert!(group_k_fold(&groups, 1).is_err());
    assert!(group_k_fold(&groups, 8).is_err(), "more folds than groups");
}

#[test]
fn group_k_fold_breaks_ties_in_size_by_descending_id() {
    // Twenty groups of three samples, five folds: every size ties, so the groups go in
    // descending id order, each to the emptiest fold (lowest index on ties): g19 → 0,
    // g18 → 1, …, g15 → 4, g14 → 0, … The same as sklearn 1.9.1's GroupKFold(5) (stable
    // sort); numpy's default argsort may order the ties otherwise.
    let groups: Vec<String> = (0..20)
        .flat_map(|g| std::iter::repeat_n(format!("g{g:02}"), 3))
        .collect();
    let got = group_k_fold(&groups, 5).unwrap();
    let per_group: Vec<usize> = (0..20).map(|g| got[3 * g]).collect();
    assert_eq!(
        per_group,
        vec![4, 3, 2, 1, 0, 4, 3, 2, 1, 0, 4, 3, 2, 1, 0, 4, 3, 2, 1, 0]
    );
    // Sizes 2 (g00, g03, …, g18) and 1 (the rest), four folds: sklearn 1.9.1 GroupKFold(4).
    let sizes: Vec<usize> = (0..20).map(|g| 1 + usize::from(g % 3 == 0)).collect();
    let groups: Vec<String> = (0..20)
        .flat_map(|g| std::iter::repeat_n(format!("g{g:02}"), sizes[g]))
        .collect();
    let got = group_k_fold(&groups, 4).unwrap();
    let mut first = 0;
    let per_group: Vec<usize> = sizes
        .iter()
        .map(|&s| {
            first += s;
            got[first - s]
        })
        .collect();
    assert_eq!(
        per_group,
        vec![2, 2, 1, 1, 0, 3, 0, 2, 1, 3, 0, 3, 2, 2, 1, 1, 0, 3, 0, 3]
    );
}

#[test]
fn group_k_fold_never_splits_a_group_and_balances_greedily() {
    let mut rng = Rng::new(11);
    for case in 0..20 {
        let n_groups = 5 + rng.below(20);
        let sizes: Vec<usize> = (0..n_groups).map(|_| 1 + rng.below(9)).collect();
        let mut groups: Vec<String> = Vec::new();
        for (g, &s) in sizes.iter().enumerate() {
            groups.extend(std::iter::repeat_n(format!("g{g:02}"), s));
        }
        // Shuffle the samples: the assignment must not depend on their order.
        for i in (1..groups.len()).rev() {
            let j = rng.below(i + 1);
            groups.swap(i, j);
        }
        for k in 2..=n_groups.min(6) {
            let f = group_k_fold(&groups, k).unwrap();
            let mut fold_of = std::collections::HashMap::new();
            for (g, &fi) in groups.iter().zip(&f) {
                assert_eq!(
                    *fold_of.entry(g.clone()).or_insert(fi),
                    fi,
                    "case {case}: {g} split"
                );
            }
            // The rule, simulated independently: largest first (ties: larger id first),
            // each to the lightest fold (ties: lower index).
            let mut order: Vec<usize> = (0..n_groups).collect();
            order.sort_by(|&a, &b| sizes[b].cmp(&sizes[a]).then(b.cmp(&a)));
            let mut load = vec![0usize; k];
            for g in order {
                let min = *load.iter().min().unwrap();
                let light = load.iter().position(|&l| l == min).unwrap();
                assert_eq!(
                    fold_of[&format!("g{g:02}")],
                    light,
                    "case {case}, k {k}, group {g}"
                );
                load[light] += sizes[g];
            }
            let max_size = *sizes.iter().max().unwrap();
            assert!(load.iter().max().unwrap() - load.iter().min().unwrap() <= max_size);
        }
    }
}

#[test]
fn prefix_sampling_keeps_short_trajectories_and_the_final_turn() {
    let mut rng = Rng::new(query_seed(0, "q1"));
    assert_eq!(sample_prefixes(5, 8, &mut rng), vec![1, 2, 3, 4, 5]);
    assert_eq!(sample_prefixes(8, 8, &mut rng), (1..=8).collect::<Vec<_>>());
    let mut seen = [false; 30];
    for seed in 0..200u64 {
        let s = sample_prefixes(30, 8, &mut Rng::new(query_seed(seed, "q1")));
        assert_eq!(s.len(), 8);
        assert_eq!(*s.last().unwrap(), 30);
        assert!(s.windows(2).all(|w| w[0] < w[1]), "sorted and distinct: {s:?}");
        assert!(s[..7].iter().all(|&t| (1..30).contains(&t)));
        s.iter().for_each(|&t| seen[t - 1] = true);
        // Deterministic for a seed.
        assert_eq!(s, sample_prefixes(30, 8, &mut Rng::new(query_seed(seed, "q1"))));
    }
    assert!(seen.iter().all(|&b| b), "every prefix is drawn sometimes");
    assert_ne!(query_seed(0, "q1"), query_seed(0, "q2"));
    assert_ne!(query_seed(0, "q1"), query_seed(1, "q1"));
    assert_eq!(sample_prefixes(30, 1, &mut rng), vec![30]);
}

// ---------------------------------------------------------------- features and targets

#[test]
fn scan_urls_stops_at_delimiters_and_strips_trailing_punctuation() {
    let t = "see https://a.com/x, (http://b.org/y) \"https://c.net/z?q=1\" HTTPS://D.com/w. \
             [https://e.io/]{x} https://f.com/p;: <http://g.com/>";
    assert_eq!(
        scan_urls(t),
        vec![
            "https://a.com/x",
            "http://b.org/y",
            "https://c.net/z?q=1",
            "HTTPS://D.com/w",
            "https://e.io/",
            "https://f.com/p",
            "http://g.com/"
        ]
    );
    assert_eq!(scan_urls("no links here, http:/ either"), Vec::<&str>::new());
}

/// The expected features of tests/data/probe/openai_small.json with the `approx` counter
/// (ceil(bytes / 4)). Turn 1 (search) observes a.com/1 and b.com/2 (67-byte text: 17
/// tokens; the URL in the search arguments does not count, "http://" is unparsable);
/// turn 2 (two opens) adds a.com/1 (from the arguments, fragment dropped), d.com/4 and
/// c.com/3 (29 + 12 bytes: 8 + 3 tokens); turn 3 (web_search) adds e.com/5 (33 bytes: 9).
fn expected_features() -> [[f64; 10]; 3] {
    let l = |v: f64| v.ln_1p();
    [
        [
            1.0 / 3.0,
            l(2.0),
            l(2.0),
            l(17.0),
            l(17.0),
            1.0,
            1.0,
            0.0,
            l(5.0),
            l(3.0),
        ],
        [
            2.0 / 3.0,
            l(4.0),
            l(2.0),
            l(28.0),
            l(11.0),
            0.5,
            0.0,
            1.0,
            l(5.0),
            l(3.0),
        ],
        [
            1.0,
            l(5.0),
            l(1.0),
            l(37.0),
            l(9.0),
            0.2,
            1.0,
            0.0,
            l(5.0),
            l(3.0),
        ],
    ]
}

#[test]
fn features_and_targets_of_a_small_openai_trajectory() {
    let text = std::fs::read_to_string(data("openai_small.json")).unwrap();
    let tr = trace_text(&text, &ToolKinds::default(), &Approx).unwrap();
    assert_eq!(tr.len(), 3);
    assert_eq!(tr.turns[0].urls, vec!["https://a.com/1", "https://b.com/2"]);
    assert_eq!(
        tr.turns[1].urls,
        vec!["https://a.com/1", "https://d.com/4", "https://c.com/3"]
    );
    assert_eq!(tr.turns[2].urls, vec!["https://b.com/2", "https://e.com/5"]);
    assert_eq!(
        tr.turns.iter().map(|t| t.tokens).collect::<Vec<_>>(),
        vec![17, 11, 9]
    );
    assert_eq!(tr.bad_urls.len(), 1);
    assert_eq!((tr.bad_urls[0].turn, tr.bad_urls[0].url.as_str()), (1, "http://"));
    assert_eq!(tr.answer_urls, vec!["https://c.com/3", "https://a.com/1"]);
    let got = all_prefix_features(&tr);
    for (t, (g, w)) in got.iter().zip(expected_features()).enumerate() {
        for (j, (a, b)) in g.iter().zip(w).enumerate() {
            close(&format!("prefix {} {}", t + 1, FEATURES[j]), *a, b, 1e-12);
        }
    }
    // Gold SNR: U = {a, b}, {a, b, c, d}, {a, b, c, d, e} against G = {c, x}:
    // 0/(2+1), 1/(3+1), 1/(4+1).
    let gold = vec!["https://c.com/3".to_string(), "https://x.com/9".to_string()];
    let snr: Vec<f64> = (1..=3).map(|t| snr_target(&tr, t, &gold).unwrap()).collect();
    assert_eq!(snr, vec![0.0, 0.25, 0.2]);
    // Citation proxy against the final answer's URLs C = {c, a}: 1/2, 2/4, 2/5.
    let p: Vec<f64> = (1..=3)
        .map(|t| citation_target(&tr, t, &tr.answer_urls))
        .collect();
    assert_eq!(p, vec![0.5, 0.5, 0.4]);
    // Against an explicit cited list {b}: 1/2, 1/4, 1/5.
    let p: Vec<f64> = (1..=3)
        .map(|t| citation_target(&tr, t, &["https://b.com/2".to_string()]))
        .collect();
    assert_eq!(p, vec![0.5, 0.25, 0.2]);
    // Other tool names: nothing is an open call, so the argument URLs do not count.
    let kinds = ToolKinds {
        search: vec!["search".into()],
        open: vec!["nothing".into()],
    };
    let tr2 = trace_text(&text, &kinds, &Approx).unwrap();
    assert_eq!(tr2.turns[1].urls, vec!["https://d.com/4"]);
    assert!(
        !tr2.turns[1].open && !tr2.turns[2].search,
        "web_search is not in the list"
    );
}

/// An OpenAI trajectory from `(tool, answered)` turns: each turn is one assistant message
/// with its calls, then a tool message per answered call (observing one URL per call).
fn openai_turns(turns: &[&[(&str, bool)]], final_answer: bool) -> String {
    let mut msgs = vec![serde_json::json!({"role": "user", "content": "Q?"})];
    for (t, calls) in turns.iter().enumerate() {
        let tc: Vec<serde_json::Value> = calls
            .iter()
            .enumerate()
            .map(|(c, (tool, _))| {
                serde_json::json!({"id": format!("c{t}-{c}"), "type": "function",
                    "function": {"name": tool, "arguments": "{}"}})
            })
            .collect();
        msgs.push(serde_json::json!({"role": "assistant", "content": null, "tool_calls": tc}));
        for (c, (_, answered)) in calls.iter().enumerate() {
            if *answered {
                msgs.push(
                    serde_json::json!({"role": "tool", "tool_call_id": format!("c{t}-{c}"),
                    "content": format!("result https://r.com/{t}/{c}")}),
                );
            }
        }
    }
    if final_answer {
        msgs.push(serde_json::json!({"role": "assistant", "content": "Done."}));
    }
    serde_json::to_string(&msgs).unwrap()
}

#[test]
fn turns_with_no_answered_call_are_not_counted_but_reported() {
    // Turn 1 answered; turn 2 (messages[3]) never answered; turn 3 (messages[4]) has one
    // answered call of two; turn 4 (messages[6]) never answered, the last: the run was cut
    // off waiting for it.
    let text = openai_turns(
        &[
            &[("search", true)],
            &[("open", false)],
            &[("search", true), ("open", false)],
            &[("search", false), ("open", false)],
        ],
        false,
    );
    let tr = trace_text(&text, &ToolKinds::default(), &Approx).unwrap();
    assert_eq!(tr.len(), 2, "only turns with an answered call count");
    assert_eq!(tr.turns[1].urls, vec!["https://r.com/2/0"]);
    assert!(tr.turns[1].search);
    // The last prefix T = 2 ends on an observation.
    assert!(tr.turns.last().unwrap().tokens > 0);
    let u: Vec<(usize, Vec<String>, bool)> = tr
        .unanswered
        .iter()
        .map(|u| (u.message, u.tools.clone(), u.last))
        .collect();
    assert_eq!(
        u,
        vec![
            (3, vec!["open".to_string()], false),
            (6, vec!["search".to_string(), "open".to_string()], true)
        ]
    );
    // A trajectory whose only tool call was never answered is skipped, with the reason;
    // its turn is reported with the others.
    let t = tempfile::tempdir().unwrap();
    std::fs::write(t.path().join("a.json"), &text).unwrap();
    std::fs::write(
        t.path().join("b.json"),
        openai_turns(&[&[("search", false)]], false),
    )
    .unwrap();
    let lp = t.path().join("labels.jsonl");
    let labels = parse_labels(
        &lp,
        "{\"id\": \"a\", \"trajectory\": \"a.json\", \"rescued\": true}\n\
         {\"id\": \"b\", \"trajectory\": \"b.json\", \"rescued\": false}\n",
    )
    .unwrap();
    let ds = build(t.path(), &lp, &labels, &Options::default(), &Approx).unwrap();
    assert_eq!(ds.queries.len(), 1);
    assert_eq!(ds.queries[0].prefixes, vec![1, 2]);
    assert_eq!(ds.skipped.len(), 1);
    assert_eq!(ds.skipped[0].id, "b");
    assert_eq!(
        ds.skipped[0].reason,
        "no tool-observation turns (its one tool-call turn was never answered)"
    );
    let u: Vec<(&str, usize, bool)> = ds
        .unanswered
        .iter()
        .map(|u| (u.id.as_str(), u.message, u.last))
        .collect();
    assert_eq!(u, vec![("a", 3, false), ("a", 6, true), ("b", 1, true)]);
}

#[test]
fn anthropic_trajectory_traces_like_the_openai_one() {
    let a = std::fs::read_to_string(data("anthropic_small.json")).unwrap();
    let o = std::fs::read_to_string(data("openai_small.json")).unwrap();
    let ta = trace_text(&a, &ToolKinds::default(), &Approx).unwrap();
    let to = trace_text(&o, &ToolKinds::default(), &Approx).unwrap();
    assert_eq!(ta, to);
}

// ---------------------------------------------------------------- labels and the dataset

fn label_err(text: &str) -> String {
    parse_labels(Path::new("labels.jsonl"), text)
        .unwrap_err()
        .to_string()
}

#[test]
fn labels_errors_name_the_file_line_and_field() {
    let ok = r#"{"id": "a", "trajectory": "a.json", "rescued": true, "gold": ["https://X.com/1#f"]}"#;
    let l = parse_labels(Path::new("labels.jsonl"), &format!("{ok}\n\n")).unwrap();
    assert_eq!(
        l,
        vec![Label {
            id: "a".into(),
            trajectory: "a.json".into(),
            gold: Some(vec!["https://x.com/1".into()]),
            cited: None,
            rescued: true,
            line: 1,
        }]
    );
    let cases = [
        (
            format!("{ok}\n{{\"id\": \"b\", \"trajectory\": \"b.json\"}}"),
            "line 2: field \"rescued\": missing",
        ),
        (format!("{ok}\n\n{{\"id\": \"b\","), "line 3: not valid JSON"),
        (
            format!("{ok}\n{ok}"),
            "line 2: field \"id\": 'a' is also the id on line 1",
        ),
        ("[1]".to_string(), "line 1: expected a JSON object"),
        (
            r#"{"id": "a", "trajectory": "a.json", "rescued": 1}"#.to_string(),
            "field \"rescued\": expected true or false",
        ),
        (
            r#"{"id": "a", "trajectory": "a.json", "rescued": true, "glod": []}"#.to_string(),
            "line 1: unknown field \"glod\"",
        ),
        (
            r#"{"id": "a", "trajectory": "a.json", "rescued": true, "gold": ["x", 3]}"#.to_string(),
            "line 1: field \"gold\"[0]",
        ),
        (
            r#"{"id": "a", "trajectory": "a.json", "rescued": true, "cited": "x"}"#.to_string(),
            "line 1: field \"cited\": expected an array",
        ),
        (
            r#"{"id": "", "trajectory": "a.json", "rescued": true}"#.to_string(),
            "line 1: field \"id\": is empty",
        ),
        ("\n\n".to_string(), "no labels"),
    ];
    for (text, want) in cases {
        let e = label_err(&text);
        assert!(
            e.starts_with("labels.jsonl: ") && e.contains(want),
            "{e} (want {want})"
        );
        assert_eq!(e.lines().count(), 1);
    }
}

#[test]
fn build_and_fit_the_fixture_directory() {
    let dir = data("queries");
    let lp = dir.join("labels.jsonl");
    let labels = ctxprune::probe::load_labels(&lp).unwrap();
    let opts = Options::default();
    let ds = build(&dir, &lp, &labels, &opts, &Approx).unwrap();
    assert_eq!(ds.queries.len(), 11);
    assert_eq!(ds.skipped.len(), 1);
    assert_eq!(ds.skipped[0].id, "q12");
    assert_eq!(ds.unlabelled, vec!["extra.json"]);
    assert_eq!(ds.bad_urls.len(), 1);
    assert_eq!(ds.bad_urls[0].id, "q03");
    assert!(ds.queries.iter().all(|q| q.target == TargetKind::GoldSnr));
    // q07's last tool call was never answered: T = 7, not 8, and the turn is reported.
    let q07 = ds.queries.iter().find(|q| q.id == "q07").unwrap();
    assert_eq!(q07.trace.len(), 7);
    assert_eq!(q07.prefixes, (1..=7).collect::<Vec<_>>());
    assert_eq!(ds.unanswered.len(), 1);
    let u = &ds.unanswered[0];
    assert_eq!((u.id.as_str(), u.message, u.last), ("q07", 15, true));
    assert_eq!(u.tools, vec!["search"]);
    // min(T, 8) prefixes each: 2+3+3+4+5+6+7 + 4 × 8.
    assert_eq!(ds.queries.iter().map(|q| q.prefixes.len()).sum::<usize>(), 62);
    let r = fit(&ds, &opts).unwrap();
    assert_eq!(r.rows.len(), 62);
    assert_eq!(r.unanswered, ds.unanswered);
    // PCA1 is signed to correlate positively with log_cum_obs_tokens.
    assert!(r.pca.loadings[3].1 > 0.0, "{:?}", r.pca.loadings);
    assert!(r
        .rows
        .iter()
        .all(|w| [w.z, w.y_hat, w.y_oof].iter().all(|v| (0.0..=1.0).contains(v))));
    assert!(r.ridge.alphas.contains(&r.ridge.alpha));
    // y_hat is the refit on every prefix at the chosen alpha (clipped), z its min–max
    // scaling; y_oof the out-of-fold prediction. The folds keep each query together.
    let x: Vec<Vec<f64>> = r.rows.iter().map(|w| w.features.clone()).collect();
    let y: Vec<f64> = r.rows.iter().map(|w| w.y).collect();
    let folds: Vec<usize> = r.rows.iter().map(|w| w.fold).collect();
    let cv = ridge_cv(&x, &y, &folds, opts.folds, &alpha_grid()).unwrap();
    assert_eq!(cv, r.ridge);
    let refit = ridge(
        &standardize(&x)
            .unwrap()
            .0
            .iter()
            .map(|v| poly2(v))
            .collect::<Vec<_>>(),
        &y,
        r.ridge.alpha,
    )
    .unwrap();
    let (z, constant) = min_max(&r.rows.iter().map(|w| w.y_hat).collect::<Vec<_>>());
    assert!(!constant);
    for (i, w) in r.rows.iter().enumerate() {
        let p = poly2(&r.ridge.scaler.apply(&x[i..=i])[0]);
        close("y_hat", w.y_hat, refit.predict(&p).clamp(0.0, 1.0), 1e-9);
        close("z", w.z, z[i], 0.0);
        assert_eq!(w.y_oof, r.ridge.oof[i]);
        let same = r.rows.iter().filter(|v| v.id == w.id).all(|v| v.fold == w.fold);
        assert!(same && w.fold < opts.folds, "{} fold {}", w.id, w.fold);
    }
    assert!(
        r.rows.iter().any(|w| (w.y_hat - w.y_oof).abs() > 1e-3),
        "z is not from the out-of-fold predictions"
    );
    // A label naming a missing file is an error naming the labels file, line and field.
    let mut bad = labels.clone();
    bad[1].trajectory = "nope.json".into();
    let e = build(&dir, &lp, &bad, &opts, &Approx).unwrap_err().to_string();
    assert!(
        e.contains("labels.jsonl: line 2: field \"trajectory\"") && e.contains("nope.json"),
        "{e}"
    );
    // Fewer queries than folds names the folds.
    let few = Options {
        folds: 12,
        ..Options::default()
    };
    let e = fit(&ds, &few).unwrap_err().to_string();
    assert!(e.contains("folds") && e.contains("11"), "{e}");
}

// ---------------------------------------------------------------- the CLI

#[cfg(feature = "cli")]
mod cli {
    use super::data;
    use crate::cli::run;

    fn dir() -> String {
        data("queries").display().to_string()
    }

    #[test]
    fn probe_cli_prints_the_auc_and_writes_the_plot_and_json() {
        let t = tempfile::tempdir().unwrap();
        let png = t.path().join("scatter.png");
        let js = t.path().join("out.json");
        let labels = data("queries").join("labels.jsonl");
        let (code, out, err) = run(&[
            "probe",
            "--trajectories",
            &dir(),
            "--labels",
            labels.to_str().unwrap(),
            "--plot",
            png.to_str().unwrap(),
            "--json",
            js.to_str().unwrap(),
        ]);
        assert_eq!(code, 0, "{err}");
        // The numbers check_sklearn.py reproduces with scikit-learn (o200k_base tokens).
        for want in [
            "queries: 11 (4 rescued); prefixes: 62 (32 rescued)",
            "skipped: q12 (no tool-observation turns)",
            "unlabelled trajectory files (not used): extra.json",
            "unparsable URLs skipped: 1 (q03 turn 1: 'http://')",
            "tool-call turns never answered (not counted as turns): 1 (q07 messages[15] (search, last))",
            "target: gold SNR for 11 queries",
            "chosen alpha: 1e-1",
            "R² of the refit on all prefixes (clipped, in sample): 0.9564",
            "out-of-fold R² (clipped): 0.7974",
            "AUC: 1.0000 (macro average over 4 of 5 folds)",
        ] {
            assert!(out.lines().any(|l| l == want), "missing line {want:?} in\n{out}");
        }
        let bytes = std::fs::read(&png).unwrap();
        assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n") && bytes.len() > 5000);
        let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&js).unwrap()).unwrap();
        let rows = v["rows"].as_array().unwrap();
        assert_eq!(rows.len(), 62);
        for k in [
            "id", "prefix", "features", "y", "y_hat", "y_oof", "x", "z", "rescued", "fold",
        ] {
            assert!(!rows[0][k].is_null(), "row field {k}");
        }
        assert_eq!(rows[0]["features"].as_array().unwrap().len(), 10);
        assert_eq!(v["auc"]["valid_folds"], 4);
        assert_eq!(v["ridge"]["cv_mse"].as_array().unwrap().len(), 9);
        assert_eq!(v["ridge"]["fold_mse"][0].as_array().unwrap().len(), 5);
        assert!(v["ridge"]["in_sample_r2"].is_f64() && v["ridge"]["oof_r2"].is_f64());
        assert_eq!(v["unanswered"][0]["id"], "q07");
    }

    /// Writes `text` as a labels file and asserts the CLI refuses it with one line holding
    /// every `want`.
    fn refused(labels: &str, extra: &[&str], want: &[&str]) {
        let t = tempfile::tempdir().unwrap();
        let lp = t.path().join("labels.jsonl");
        std::fs::write(&lp, labels).unwrap();
        let d = dir();
        let lps = lp.display().to_string();
        let mut args = vec![
            "probe",
            "--tokenizer",
            "approx",
            "--trajectories",
            &d,
            "--labels",
            &lps,
        ];
        args.extend_from_slice(extra);
        let (code, out, err) = run(&args);
        assert!(code != 0, "{labels}: exit 0");
        assert!(out.is_empty(), "stdout: {out}");
        assert_eq!(err.lines().count(), 1, "stderr: {err}");
        for w in want {
            let w = w.replace("{labels}", &lps);
            assert!(err.contains(&w), "{err} (want {w})");
        }
    }

    #[test]
    fn probe_cli_refuses_bad_labels_in_one_line() {
        let ok = std::fs::read_to_string(data("queries").join("labels.jsonl")).unwrap();
        let first: Vec<&str> = ok.lines().collect();
        // A missing field on line 2.
        refused(
            &format!("{}\n{{\"id\": \"x\", \"trajectory\": \"q02.json\"}}\n", first[0]),
            &[],
            &["{labels}: line 2: field \"rescued\": missing"],
        );
        // A bad JSON line 3.
        refused(
            &format!("{}\n{}\n{{\"id\": \n", first[0], first[1]),
            &[],
            &["{labels}: line 3: not valid JSON"],
        );
        // A missing trajectory file on line 1.
        refused(
            "{\"id\": \"x\", \"trajectory\": \"missing.json\", \"rescued\": true}\n",
            &[],
            &["{labels}: line 1: field \"trajectory\"", "missing.json"],
        );
        // A duplicate id on line 2.
        refused(
            &format!("{}\n{}\n", first[0], first[0].replace("q01.json", "q02.json")),
            &[],
            &["{labels}: line 2: field \"id\": 'q01' is also the id on line 1"],
        );
    }

    #[test]
    fn probe_cli_names_bad_flags() {
        let labels = data("queries").join("labels.jsonl").display().to_string();
        let d = dir();
        for (extra, want) in [
            (["--folds", "1"], "--folds"),
            (["--folds", "40"], "--folds"),
            (["--prefixes", "0"], "--prefixes"),
            (["--prefixes", "-2"], "--prefixes"),
            (["--search-tools", ","], "--search-tools"),
        ] {
            let mut args = vec![
                "probe",
                "--tokenizer",
                "approx",
                "--trajectories",
                &d,
                "--labels",
                &labels,
            ];
            args.extend(extra);
            let (code, out, err) = run(&args);
            assert!(code != 0 && out.is_empty(), "{extra:?}: exit {code}");
            assert!(err.lines().count() == 1 && err.contains(want), "{extra:?}: {err}");
        }
        let (code, _, err) = run(&[
            "probe",
            "--tokenizer",
            "nope",
            "--trajectories",
            &d,
            "--labels",
            &labels,
        ]);
        assert!(
            code != 0 && err.lines().count() == 1 && err.contains("--tokenizer"),
            "{err}"
        );
    }
}
