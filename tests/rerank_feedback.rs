//! The feedback prior (`Prior::Feedback`, issue 30): Rocchio's moved query against a
//! direct f64 evaluation of its definition, `Gp::set_prior` against a GP built on the new
//! prior and a dense refit, and BoundaryMORPH with it against a dense replay, call for call
//! and in its final order, on every thread count.

use crate::rerank::{bp, full_refit, overlay, pool, rerank, P};
use crate::rerank_beyond::fresh;
use ctxprune::rerank::gp::Gp;
use ctxprune::rerank::{
    feedback_mean, feedback_mean_with, kernel_rows, prior_mean, Hyperparameters, Method, Precomputed, Prior,
    RerankConfig, RerankOptions, Reranker, FEEDBACK_BETA, FEEDBACK_EVERY, FEEDBACK_GAMMA, FEEDBACK_RELEVANT,
};
use ctxprune::rng::Rng;
use ctxprune::{Embeddings, Engine, Pool};

/// The feedback prior from its definition, in f64 from the raw rows: the unit query plus
/// beta times the centroid of the unit rows scored at least `FEEDBACK_RELEVANT`, weighted
/// by their scores, minus gamma times the centroid of the others, weighted by one minus
/// their scores (an empty centroid left out); every row's cosine with it, min-max scaled
/// over the pool, square root.
fn slow_feedback(raw: &Embeddings, q: &[f32], scored: &[(usize, f64)]) -> (Vec<f64>, f64) {
    let unit = |v: &[f32]| {
        let norm = v.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>().sqrt();
        v.iter().map(|&x| f64::from(x) / norm).collect::<Vec<f64>>()
    };
    let mut m = unit(q);
    // Each set's rows with their weights, then its coefficient.
    for relevant in [true, false] {
        let set: Vec<(usize, f64)> = scored
            .iter()
            .filter(|s| (s.1 >= FEEDBACK_RELEVANT) == relevant)
            .map(|&(j, y)| (j, if relevant { y } else { 1.0 - y }))
            .collect();
        let coef = if relevant { FEEDBACK_BETA } else { -FEEDBACK_GAMMA };
        let total: f64 = set.iter().map(|s| s.1).sum();
        for (j, w) in set {
            let x = unit(raw.row(j));
            m.iter_mut().zip(&x).for_each(|(a, b)| *a += coef * w / total * b);
        }
    }
    let mnorm = m.iter().map(|v| v * v).sum::<f64>().sqrt();
    let cos: Vec<f64> = (0..raw.rows())
        .map(|i| unit(raw.row(i)).iter().zip(&m).map(|(a, b)| a * b).sum::<f64>() / mnorm)
        .collect();
    let lo = cos.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = cos.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (
        cos.iter().map(|c| ((c - lo) / (hi - lo)).sqrt()).collect(),
        hi - lo,
    )
}

/// `count` distinct rows of a pool of `n` and each with a uniform score, seeded.
fn graded_rows(n: usize, count: usize, seed: u64) -> (Vec<usize>, Vec<(usize, f64)>) {
    let mut rng = Rng::new(seed);
    let mut picked: Vec<usize> = Vec::new();
    while picked.len() < count {
        let j = rng.below(n);
        if !picked.contains(&j) {
            picked.push(j);
        }
    }
    let graded = picked.iter().map(|&j| (j, rng.uniform())).collect();
    (picked, graded)
}

#[test]
fn feedback_prior_is_the_score_shape_of_rocchios_moved_query() {
    for &(n, d, seed) in &[(37usize, 9usize, 61u64), (64, 5, 62), (203, 17, 63)] {
        let (raw, q, _) = crate::raw_problem(n, d, seed);
        let pool = Pool::new(&Engine::cpu(), raw.clone()).unwrap();
        let rows = kernel_rows(&pool, &q, ctxprune::similarity::Kernel::Cosine).unwrap();
        let (picked, graded) = graded_rows(n, 11, seed);
        let cases: Vec<(&str, Vec<(usize, f64)>)> = vec![
            ("graded", graded.clone()),
            // No relevant centroid (every score 0) and no non-relevant one (every score 1).
            ("all zero", picked.iter().map(|&j| (j, 0.0)).collect()),
            ("all one", picked.iter().map(|&j| (j, 1.0)).collect()),
            ("one row", vec![(picked[3], 0.7)]),
            // Every score low but not zero: no relevant set (before the two sets, these
            // formed a relevant centroid of their own).
            (
                "all low",
                graded
                    .iter()
                    .map(|&(j, y)| (j, (FEEDBACK_RELEVANT - 1e-3) * y))
                    .collect(),
            ),
            // The line itself is relevant; just under it, not.
            (
                "at the line",
                vec![
                    (picked[0], FEEDBACK_RELEVANT),
                    (picked[1], FEEDBACK_RELEVANT - 1e-9),
                    (picked[2], 0.9),
                ],
            ),
        ];
        let score = prior_mean(Prior::Score, &rows);
        for (what, scored) in cases {
            let got = feedback_mean(&rows, &scored).unwrap();
            let (want, span) = slow_feedback(&raw, &q, &scored);
            assert!(span > 0.1, "n={n} {what}: a spread-out pool");
            // The pool reads unit f32 copies of the rows: the squares agree to f32's
            // precision over the cosines' span (as the score prior's do).
            let sq = |v: &[f64]| v.iter().map(|m| m * m).collect::<Vec<f64>>();
            crate::assert_close(&format!("n={n} {what}"), &sq(&got), &sq(&want), 1e-6 / span);
            assert_ne!(got, score, "n={n} {what}: the scores move the prior");
        }
        // No score yet: the score prior, bit for bit.
        assert_eq!(feedback_mean(&rows, &[]).unwrap(), score, "n={n}");
        assert_eq!(prior_mean(Prior::Feedback, &rows), score, "n={n}");
        // Bad input names the row.
        for (bad, want) in [
            (vec![(n, 0.5)], format!("index {n} outside the pool of {n}")),
            (
                vec![(2, 1.5)],
                "score of row 2: 1.5 is outside [0, 1]".to_string(),
            ),
            (vec![(1, 0.5), (4, f64::NAN)], "score of row 4: NaN".to_string()),
        ] {
            let e = feedback_mean(&rows, &bad).unwrap_err().to_string();
            assert!(e.contains(&want), "{e}");
        }
    }
}

/// The neighbour share's term from its definition, in f64 from the raw rows: every row's
/// largest cosine with a unit row scored at least `FEEDBACK_RELEVANT`, min-max scaled over
/// the pool, square root (with the span); `None` when no row is relevant.
fn slow_neighbours(raw: &Embeddings, scored: &[(usize, f64)]) -> Option<(Vec<f64>, f64)> {
    let unit = |v: &[f32]| {
        let norm = v.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>().sqrt();
        v.iter().map(|&x| f64::from(x) / norm).collect::<Vec<f64>>()
    };
    let relevant: Vec<Vec<f64>> = scored
        .iter()
        .filter(|s| s.1 >= FEEDBACK_RELEVANT)
        .map(|&(j, _)| unit(raw.row(j)))
        .collect();
    if relevant.is_empty() {
        return None;
    }
    let near: Vec<f64> = (0..raw.rows())
        .map(|i| {
            let x = unit(raw.row(i));
            relevant
                .iter()
                .map(|r| r.iter().zip(&x).map(|(a, b)| a * b).sum::<f64>())
                .fold(f64::NEG_INFINITY, f64::max)
        })
        .collect();
    let lo = near.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = near.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    Some((
        near.iter().map(|c| ((c - lo) / (hi - lo)).sqrt()).collect(),
        hi - lo,
    ))
}

#[test]
fn the_neighbour_share_mixes_in_the_nearest_relevant_rows_shape() {
    for &(n, d, seed) in &[(37usize, 9usize, 64u64), (71, 5, 65), (203, 17, 66)] {
        let (raw, q, _) = crate::raw_problem(n, d, seed);
        let pool = Pool::new(&Engine::cpu(), raw.clone()).unwrap();
        let rows = kernel_rows(&pool, &q, ctxprune::similarity::Kernel::Cosine).unwrap();
        let (picked, graded) = graded_rows(n, 13, seed);
        let cases: Vec<(&str, Vec<(usize, f64)>)> = vec![
            ("graded", graded.clone()),
            ("all one", picked.iter().map(|&j| (j, 1.0)).collect()),
            ("one relevant", vec![(picked[3], 0.7), (picked[4], 0.2)]),
            // The line itself is relevant; just under it, not.
            (
                "at the line",
                vec![
                    (picked[0], FEEDBACK_RELEVANT),
                    (picked[1], FEEDBACK_RELEVANT - 1e-9),
                ],
            ),
            // The same relevant row twice counts once (the largest is the same).
            (
                "twice",
                vec![(picked[5], 0.9), (picked[6], 0.1), (picked[5], 0.8)],
            ),
            ("all zero", picked.iter().map(|&j| (j, 0.0)).collect()),
            (
                "all low",
                graded
                    .iter()
                    .map(|&(j, y)| (j, (FEEDBACK_RELEVANT - 1e-3) * y))
                    .collect(),
            ),
        ];
        for (what, scored) in cases {
            let at = format!("n={n} {what}");
            let rocchio = feedback_mean(&rows, &scored).unwrap();
            assert_eq!(feedback_mean_with(&rows, &scored, 0.0).unwrap(), rocchio, "{at}");
            let alone = feedback_mean_with(&rows, &scored, 1.0).unwrap();
            match slow_neighbours(&raw, &scored) {
                None => {
                    // No relevant row: Rocchio's prior at every share.
                    assert_eq!(alone, rocchio, "{at}");
                    assert_eq!(feedback_mean_with(&rows, &scored, 0.3).unwrap(), rocchio, "{at}");
                }
                Some((want, span)) => {
                    assert!(span > 0.1, "{at}: a spread-out pool");
                    // The squares agree to f32's precision over the span, as Rocchio's do.
                    let sq = |v: &[f64]| v.iter().map(|m| m * m).collect::<Vec<f64>>();
                    crate::assert_close(&at, &sq(&alone), &sq(&want), 1e-6 / span);
                    assert_ne!(alone, rocchio, "{at}");
                    for share in [0.3, 0.75] {
                        let got = feedback_mean_with(&rows, &scored, share).unwrap();
                        let mixed: Vec<f64> = rocchio
                            .iter()
                            .zip(&alone)
                            .map(|(&r, &a)| (1.0 - share) * r + share * a)
                            .collect();
                        assert_eq!(got, mixed, "{at} share {share}");
                    }
                }
            }
        }
        // Bad input names the share, the row or the score.
        for share in [-0.1, 1.5, f64::NAN, f64::INFINITY] {
            let e = feedback_mean_with(&rows, &graded, share).unwrap_err().to_string();
            assert!(
                e.starts_with("invalid feedback_neighbours: ") && e.ends_with("is outside [0, 1]"),
                "{e}"
            );
        }
        let e = feedback_mean_with(&rows, &[(n, 0.9)], 0.3)
            .unwrap_err()
            .to_string();
        assert!(e.contains(&format!("index {n} outside the pool of {n}")), "{e}");
        let e = feedback_mean_with(&rows, &[(2, 1.5)], 0.3)
            .unwrap_err()
            .to_string();
        assert!(e.contains("score of row 2: 1.5 is outside [0, 1]"), "{e}");
    }
}

#[test]
fn a_new_prior_under_a_gp_is_the_gp_built_on_it() {
    for &(n, d, seed, adaptive) in &[
        (41usize, 7usize, 71u64, false),
        (29, 13, 72, true),
        (57, 5, 73, false),
        (45, 9, 74, true),
    ] {
        let (p, scores) = pool(n, d, seed);
        let k = p.rows();
        let mu0 = prior_mean(Prior::Score, &k);
        let mut rng = Rng::new(seed);
        let mu1: Vec<f64> = (0..n).map(|_| rng.uniform()).collect();
        let new = |mu: &[f64]| {
            let mut gp = Gp::new(&k, mu.to_vec(), 1.0).unwrap();
            if adaptive {
                gp.set_adaptive(1.0).unwrap();
            }
            gp
        };
        let (mut moved, mut built) = (new(&mu0), new(&mu1));
        let mut seen = Vec::new();
        let one = fresh(&mut rng, n, 6, &mut seen, &scores);
        let block = fresh(&mut rng, n, 4, &mut seen, &scores);
        for gp in [&mut moved, &mut built] {
            for &(j, y) in &one {
                gp.observe(j, y).unwrap();
            }
            gp.observe_batch(&block).unwrap();
        }
        moved.set_prior(mu1.clone()).unwrap();
        let later = fresh(&mut rng, n, 3, &mut seen, &scores);
        for stage in ["after the new prior", "after three more calls"] {
            let (mut m1, mut v1, mut m2, mut v2) = (vec![0.0; n], vec![0.0; n], vec![0.0; n], vec![0.0; n]);
            moved.posterior(&mut m1, &mut v1).unwrap();
            built.posterior(&mut m2, &mut v2).unwrap();
            let at = format!("n={n} adaptive={adaptive} {stage}");
            // The same L and V; the new prior's corrections are read back from V's f32
            // storage where the built GP summed each row before rounding (as revisions).
            crate::assert_close(&format!("mean {at}"), &m1, &m2, 1e-6);
            crate::assert_close(&format!("var {at}"), &v1, &v2, 1e-9);
            assert!((moved.alpha() - built.alpha()).abs() <= 1e-9, "alpha {at}");
            if !adaptive {
                let obs: Vec<(Option<usize>, f64)> = std::iter::once((None, 0.0))
                    .chain(
                        seen.iter()
                            .take(moved.observations() - 1)
                            .map(|&j| (Some(j), scores[j] - mu1[j])),
                    )
                    .collect();
                let (m3, v3) = full_refit(&k, &mu1, &obs, 1e-4);
                crate::assert_close(&format!("mean vs a dense refit {at}"), &m1, &m3, 1e-5);
                crate::assert_close(&format!("var vs a dense refit {at}"), &v1, &v3, 1e-5);
            }
            if stage.starts_with("after the new") {
                for gp in [&mut moved, &mut built] {
                    for &(j, y) in &later {
                        gp.observe(j, y).unwrap();
                    }
                }
            }
        }
        let e = moved.set_prior(vec![0.5; n - 1]).unwrap_err().to_string();
        assert!(e.contains("prior"), "{e}");
        let mut bad = mu1.clone();
        bad[3] = f64::NAN;
        let e = moved.set_prior(bad).unwrap_err().to_string();
        assert!(e.contains("prior[3]"), "{e}");
    }
}

/// What BoundaryMORPH with the feedback prior must do, from scratch: the dense posterior
/// over the score prior; after every `FEEDBACK_EVERY` calls while the budget lasts, the
/// prior re-shaped from every score so far (with the neighbour share `share`, from scratch) and the dense posterior over it (the residuals
/// of every call against the new prior); the final order by value, ties to the lower
/// index.
fn feedback_replay(p: &P, scores: &[f64], budget: usize, cap: usize, share: f64) -> (Vec<usize>, Vec<usize>) {
    let k = p.rows();
    let n = scores.len();
    let mut mu0 = prior_mean(Prior::Score, &k);
    let mut y = vec![None; n];
    let mut calls: Vec<usize> = vec![];
    let posterior = |mu0: &[f64], calls: &[usize], y: &[Option<f64>]| {
        let obs: Vec<(Option<usize>, f64)> = std::iter::once((None, 0.0))
            .chain(calls.iter().map(|&j| (Some(j), scores[j] - mu0[j])))
            .collect();
        let (mut m, mut v) = full_refit(&k, mu0, &obs, 1e-4);
        overlay(&mut m, &mut v, y);
        (m, v)
    };
    let observed = |calls: &[usize]| calls.iter().map(|&j| (j, scores[j])).collect::<Vec<_>>();
    while calls.len() < budget {
        let (m, v) = posterior(&mu0, &calls, &y);
        let Some(j) = bp(&m, &v, &y, cap) else {
            break;
        };
        calls.push(j);
        y[j] = Some(scores[j]);
        if calls.len() % FEEDBACK_EVERY == 0 && calls.len() < budget {
            mu0 = feedback_mean_with(&k, &observed(&calls), share).unwrap();
        }
    }
    let (m, _) = posterior(&mu0, &calls, &y);
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| m[b].total_cmp(&m[a]).then(a.cmp(&b)));
    order.truncate(cap);
    (calls, order)
}

#[test]
fn boundary_morph_with_the_feedback_prior_follows_a_dense_replay() {
    assert_eq!(FEEDBACK_EVERY, 10);
    for &(n, d, seed, budget, cap) in &[
        (61usize, 9usize, 81u64, 27usize, 7usize),
        (47, 13, 82, 21, 5),
        (53, 6, 83, 33, 9),
        // A budget that ends at the first re-shaping's count: none is made.
        (40, 7, 84, 10, 4),
    ] {
        let (p, scores) = pool(n, d, seed);
        let mut cfg = RerankConfig::new(Method::BoundaryMorph, budget, cap);
        cfg.prior = Prior::Feedback;
        let run = |cfg: &RerankConfig| {
            rerank(cfg, &p, &mut Precomputed::new(scores.clone(), budget).unwrap()).unwrap()
        };
        let got = run(&cfg);
        let (calls, top) = feedback_replay(&p, &scores, budget, cap, 0.0);
        let at = format!("n={n} B={budget} k={cap}");
        assert_eq!(got.scored, calls, "{at}");
        assert_eq!(got.selected, top, "{at}");
        // With a neighbour share: the run keeps the largest cosines as relevant rows
        // arrive; the replay computes them from scratch at every re-shaping.
        for share in [0.3, 1.0] {
            let mut with = cfg.clone();
            with.feedback_neighbours = share;
            let got_with = run(&with);
            let (calls, top) = feedback_replay(&p, &scores, budget, cap, share);
            assert_eq!(got_with.scored, calls, "{at} share {share}");
            assert_eq!(got_with.selected, top, "{at} share {share}");
            if budget > 20 {
                // Relevant rows before the first re-shaping and between the first and the
                // second: the running maximum adds to what it has counted.
                for (from, to) in [(0, 10), (10, 20)] {
                    assert!(
                        calls[from..to].iter().any(|&j| scores[j] >= FEEDBACK_RELEVANT),
                        "{at}: relevant rows in calls {from}..{to}"
                    );
                }
                assert_ne!(
                    got_with.scored, got.scored,
                    "{at} share {share}: the share changes the calls"
                );
            }
        }
        // The score prior's run: the same first ten calls, then the feedback's own.
        cfg.prior = Prior::Score;
        let score = run(&cfg);
        let first = budget.min(FEEDBACK_EVERY);
        assert_eq!(score.scored[..first], got.scored[..first], "{at}");
        if budget > 20 {
            assert_ne!(score.scored, got.scored, "{at}: the feedback changes the calls");
        }
        // Same input, same output on one thread and on three, in batches too.
        for batch in [1, 4] {
            let mut cfg = RerankConfig::new(Method::BoundaryMorph, budget, cap);
            cfg.prior = Prior::Feedback;
            cfg.batch = batch;
            cfg.feedback_neighbours = 0.3;
            let on = |threads: usize| {
                let tp = rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .build()
                    .unwrap();
                tp.install(|| run(&cfg))
            };
            let (a, b) = (on(1), on(3));
            assert_eq!(
                (&a.scored, &a.selected),
                (&b.scored, &b.selected),
                "{at} q={batch}"
            );
            assert_eq!(a.scored.len(), budget, "{at} q={batch}");
        }
    }
}

#[test]
fn the_feedback_prior_is_named_and_refused_where_it_does_not_apply() {
    let c = RerankOptions {
        prior: Some("feedback"),
        ..RerankOptions::new("boundary-morph", 30, 5)
    }
    .config()
    .unwrap();
    assert_eq!(c.prior, Prior::Feedback);
    let e = RerankOptions {
        prior: Some("rocchio"),
        ..RerankOptions::new("boundary-morph", 30, 5)
    }
    .config()
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("unknown prior 'rocchio' (mips, zero, adaptive, score, feedback)"),
        "{e}"
    );
    // Refused by the options, with the flag named, and by the reranker.
    let e = RerankOptions {
        prior: Some("feedback"),
        hyperparameters: Some("evidence"),
        ..RerankOptions::new("boundary-morph", 30, 5)
    }
    .config()
    .unwrap_err()
    .to_string();
    assert!(
        e.starts_with("invalid hyperparameters: ") && e.contains("feedback prior changes during the run"),
        "{e}"
    );
    let cfg = RerankConfig {
        prior: Prior::Feedback,
        hyperparameters: Hyperparameters::Evidence,
        ..RerankConfig::new(Method::BoundaryMorph, 30, 5)
    };
    let e = Reranker::new(&Engine::cpu(), cfg).unwrap_err().to_string();
    assert!(
        e.starts_with("invalid hyperparameters: ") && e.contains("feedback prior changes during the run"),
        "{e}"
    );
    // The neighbour share: with the feedback prior, in [0, 1], by the options and by the
    // reranker.
    let share = |prior: Option<&'static str>, method: &'static str, s: f64| {
        RerankOptions {
            prior,
            feedback_neighbours: Some(s),
            ..RerankOptions::new(method, 30, 5)
        }
        .config()
    };
    assert_eq!(
        share(Some("feedback"), "boundary-morph", 0.3)
            .unwrap()
            .feedback_neighbours,
        0.3
    );
    for (prior, method, s, want) in [
        (
            Some("score"),
            "boundary-morph",
            0.3,
            "invalid feedback_neighbours: applies to the feedback prior",
        ),
        (
            None,
            "boundary-morph",
            0.3,
            "invalid feedback_neighbours: applies to the feedback prior",
        ),
        (
            None,
            "bagel",
            0.3,
            "invalid feedback_neighbours: does not apply to bagel",
        ),
        (
            Some("feedback"),
            "boundary-morph",
            1.5,
            "invalid feedback_neighbours: 1.5 is outside [0, 1]",
        ),
        (
            Some("feedback"),
            "boundary-morph",
            -0.2,
            "invalid feedback_neighbours: -0.2 is outside [0, 1]",
        ),
        (
            Some("feedback"),
            "boundary-morph",
            f64::NAN,
            "invalid feedback_neighbours: NaN is outside [0, 1]",
        ),
    ] {
        assert_eq!(share(prior, method, s).unwrap_err().to_string(), want);
    }
    for (prior, method, s, want) in [
        (
            Prior::Score,
            Method::BoundaryMorph,
            0.3,
            "applies to boundary-morph with the feedback prior",
        ),
        (
            Prior::Zero,
            Method::Bagel,
            0.3,
            "applies to boundary-morph with the feedback prior",
        ),
        (
            Prior::Feedback,
            Method::BoundaryMorph,
            1.01,
            "1.01 is outside [0, 1]",
        ),
    ] {
        let cfg = RerankConfig {
            prior,
            feedback_neighbours: s,
            ..RerankConfig::new(method, 30, 5)
        };
        let e = Reranker::new(&Engine::cpu(), cfg).unwrap_err().to_string();
        assert_eq!(e, format!("invalid feedback_neighbours: {want}"));
    }
}
