//! `method = "auto"` (src/rerank/auto.rs): BoundaryMORPH with the feedback prior and the
//! kernel's concentration doubled, with the switch to the
//! zero prior and the evidence when the first scores are all low, against a dense replay;
//! every option it sets refused by name.

use crate::rerank::{pool, rerank, P};
use crate::rerank_evidence::{evidence_replay, Replay};
use crate::slow;
use ctxprune::rerank::auto::{
    AUTO_CONCENTRATION, AUTO_CONFIRM, AUTO_CONFIRM_FIRST, AUTO_LOW_SCORE, AUTO_NEIGHBOURS, AUTO_RESERVE,
};
use ctxprune::rerank::{
    Hyperparameters, Method, Precomputed, Prior, RerankConfig, RerankOptions, Reranker, RowPrecision,
};

#[test]
fn auto_is_boundary_morph_with_the_switch() {
    for b in [0, 1, 10, 11, 25, 5000] {
        let c = RerankOptions::new("auto", b, 3).config().unwrap();
        let want = RerankOptions::new("boundary-morph", b, 3).config().unwrap();
        assert_eq!(
            (
                c.method,
                c.prior,
                c.hyperparameters,
                c.batch,
                c.kernel,
                c.concentration
            ),
            (
                want.method,
                Prior::Feedback,
                want.hyperparameters,
                want.batch,
                want.kernel,
                2.0
            ),
            "B = {b}"
        );
        assert_eq!(
            (c.switch_below, c.verify, c.feedback_neighbours),
            (Some(AUTO_LOW_SCORE), 0.0, AUTO_NEIGHBOURS)
        );
        assert!(c.chosen.unwrap().starts_with(
            "auto: boundary-morph with the feedback prior (0.3 of it from the relevant documents' neighbourhoods) and the kernel's concentration times 2;"
        ));
    }
    // What does not change the choice is the caller's.
    let c = RerankOptions {
        batch: Some(4),
        row_precision: Some("bf16"),
        token_capacity: Some(900),
        kernel: Some("rbf"),
        ..RerankOptions::new("auto", 40, 3)
    }
    .config()
    .unwrap();
    assert_eq!(c.batch, 4);
    assert_eq!(c.row_precision, ctxprune::rerank::RowPrecision::Bf16);
    assert_eq!(c.token_capacity, Some(900));
    assert_eq!(c.concentration, AUTO_CONCENTRATION);
    // The cosine kernel has no concentration to sharpen: auto leaves it, and says so.
    let c = RerankOptions {
        kernel: Some("cosine"),
        ..RerankOptions::new("auto", 40, 3)
    }
    .config()
    .unwrap();
    assert_eq!((c.prior, c.concentration), (Prior::Feedback, 1.0));
    assert!(c
        .chosen
        .unwrap()
        .starts_with("auto: boundary-morph with the feedback prior (0.3 of it from the relevant documents' neighbourhoods);"));
    // A named method carries neither the switch nor a note.
    let c = RerankOptions::new("boundary-morph", 40, 3).config().unwrap();
    assert_eq!(
        (c.switch_below, c.verify, c.feedback_neighbours, c.chosen),
        (None, 0.0, 0.0, None)
    );
    // The switch, set by hand, is checked by the reranker.
    let engine = ctxprune::Engine::cpu();
    for (cfg, want) in [
        (
            RerankConfig {
                switch_below: Some(0.5),
                prior: Prior::Zero,
                ..RerankConfig::new(Method::BoundaryMorph, 20, 3)
            },
            "mips, score or feedback prior",
        ),
        (
            RerankConfig {
                switch_below: Some(0.5),
                hyperparameters: Hyperparameters::Evidence,
                ..RerankConfig::new(Method::BoundaryMorph, 20, 3)
            },
            "paper's hyperparameters",
        ),
        (
            RerankConfig {
                switch_below: Some(0.5),
                ..RerankConfig::new(Method::Bagel, 20, 3)
            },
            "applies to boundary-morph",
        ),
        (
            RerankConfig {
                switch_below: Some(1.5),
                ..RerankConfig::new(Method::BoundaryMorph, 20, 3)
            },
            "1.5 is outside (0, 1]",
        ),
        (
            RerankConfig {
                switch_below: Some(f64::NAN),
                ..RerankConfig::new(Method::BoundaryMorph, 20, 3)
            },
            "outside (0, 1]",
        ),
    ] {
        let e = Reranker::new(&engine, cfg).unwrap_err().to_string();
        assert!(e.starts_with("invalid switch_below: ") && e.contains(want), "{e}");
    }
}

/// BoundaryMORPH as auto runs it while its prior stands: the feedback prior with its
/// neighbour share, the kernel's concentration doubled.
fn kept(budget: usize, cap: usize) -> RerankConfig {
    RerankConfig {
        prior: Prior::Feedback,
        concentration: AUTO_CONCENTRATION,
        feedback_neighbours: AUTO_NEIGHBOURS,
        ..RerankConfig::new(Method::BoundaryMorph, budget, cap)
    }
}

/// Calls the confirmation must leave after `made` confirming calls.
fn keep(made: usize) -> usize {
    if made < AUTO_CONFIRM_FIRST {
        0
    } else {
        AUTO_RESERVE
    }
}

/// Scores with a bump of relevance around row `centre`, plus `top` times the MIPS rank
/// (1 at the top), from `floor`.
fn bump_scores(p: &P, noise: &[f64], centre: usize, floor: f64, top: f64) -> Vec<f64> {
    let e = p.pool.embeddings();
    let n = noise.len();
    let c = e.row(centre).to_vec();
    (0..n)
        .map(|j| {
            let bump = (4.0 * (slow::cos(e.row(j), &c) - 1.0)).exp();
            let rank = (n - 1 - j) as f64 / (n - 1) as f64;
            (floor + 0.6 * bump + top * rank + 0.05 * noise[j]).clamp(0.0, 1.0)
        })
        .collect()
}

/// What the scores hold where auto's first calls land.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Shape {
    /// Nothing relevant at the MIPS top: the relevance sits near the bottom.
    Low,
    /// The top scores at least 0.5.
    High,
    /// Only the MIPS top scores high; everything else, the top-k's boundary included,
    /// is low (fewer relevant documents than the capacity).
    TopOnly,
}

/// Scores of `shape` over `p`.
fn shaped_scores(p: &P, noise: &[f64], shape: Shape) -> Vec<f64> {
    let n = noise.len();
    match shape {
        Shape::Low => bump_scores(p, noise, n - 4, 0.05, 0.0),
        Shape::High => bump_scores(p, noise, n / 2, 0.5, 0.2),
        Shape::TopOnly => {
            let mut s = bump_scores(p, noise, n - 4, 0.05, 0.0);
            s[..3].iter_mut().for_each(|v| *v = 0.9);
            s
        }
    }
}

#[test]
fn an_auto_run_follows_a_dense_replay_with_and_without_the_switch() {
    for (n, d, seed, budget, cap, shape) in [
        (48usize, 7usize, 31u64, 23usize, 5usize, Shape::Low),
        (53, 6, 32, 30, 5, Shape::Low),
        (45, 9, 33, 22, 5, Shape::High),
        (40, 5, 34, 9, 5, Shape::Low),
        (61, 7, 38, 27, 21, Shape::TopOnly),
        (57, 5, 36, 12, 25, Shape::TopOnly),
        (47, 8, 37, 11, 17, Shape::Low),
    ] {
        let (p, noise) = pool(n, d, seed);
        let scores = shaped_scores(&p, &noise, shape);
        let cfg = RerankOptions::new("auto", budget, cap).config().unwrap();
        let got = rerank(&cfg, &p, &mut Precomputed::new(scores.clone(), budget).unwrap()).unwrap();
        let (calls, fitted) = evidence_replay(&p, &scores, budget, cap, RowPrecision::F32, Replay::Auto);
        let at = format!("n = {n}, {shape:?}");
        assert_eq!(got.scored, calls, "{at}");
        assert_eq!(got.hyperparameters, fitted, "{at}");
        let switched = got.notes.iter().any(|m| m.contains("the prior is contradicted"));
        let first: Vec<usize> = got.scored.iter().copied().take(10).collect();
        let low_start = budget > 10 && first.iter().all(|&j| scores[j] < AUTO_LOW_SCORE);
        // The MIPS top the first calls left unscored, scored next when they were all low,
        // up to the first that is not low, while the budget lasts (AUTO_RESERVE calls
        // left after the first AUTO_CONFIRM_FIRST).
        let mut confirm: Vec<usize> = Vec::new();
        for j in (0..AUTO_CONFIRM).filter(|j| !first.contains(j)) {
            if 10 + confirm.len() + keep(confirm.len()) < budget
                && confirm.iter().all(|&c| scores[c] < AUTO_LOW_SCORE)
            {
                confirm.push(j);
            }
        }
        if low_start {
            assert_eq!(&got.scored[10..10 + confirm.len()], &confirm[..], "{at}");
        }
        // The switch is checked once, at 10 calls, and made only when the MIPS top is low
        // too and calls are left.
        let want = shape == Shape::Low && low_start && budget > 10 + confirm.len();
        assert_eq!(switched, want, "{at}: {:?}", got.notes);
        assert_eq!(fitted.is_some(), switched, "{at}");
        assert_eq!(got.notes[0], cfg.chosen.clone().unwrap());
        // Each shape is what it is meant to be: a low start where the top is unscored.
        match shape {
            Shape::Low => assert_eq!(low_start, budget > 10, "{at}"),
            Shape::High => assert!(!low_start, "{at}"),
            // One call of the top ends the confirmation.
            Shape::TopOnly => assert!(low_start && confirm.len() == 1, "{at}"),
        }
        if !switched {
            let paper = kept(budget, cap);
            let want = rerank(&paper, &p, &mut Precomputed::new(scores.clone(), budget).unwrap()).unwrap();
            // A confirmed run is held by the replay above: its confirming calls feed the
            // feedback prior's re-shapings, so its search is not the kept run's.
            if !low_start {
                // Untriggered, the run is the kept run call for call.
                assert_eq!((&got.scored, &got.selected), (&want.scored, &want.selected));
                assert_eq!(&got.notes[1..], &want.notes[..]);
            }
        }
    }
}

/// With batches and a token capacity (beyond the replay, which calls one at a time): the
/// check comes after the round that reaches 10 calls, the confirmation follows it, the
/// budget holds, nothing is scored twice, and without a low start the run is the kept run.
#[test]
fn auto_with_batches_and_a_token_capacity() {
    use ctxprune::rerank::KernelChoice;
    for (n, d, seed, budget, cap, batch, tokens, shape) in [
        (53usize, 6usize, 41u64, 30usize, 5usize, 4usize, false, Shape::Low),
        (61, 7, 45, 27, 21, 3, false, Shape::TopOnly),
        (45, 9, 43, 22, 5, 4, false, Shape::High),
        (53, 6, 46, 31, 5, 1, true, Shape::Low),
        (61, 7, 52, 26, 21, 2, true, Shape::TopOnly),
    ] {
        let (p, noise) = pool(n, d, seed);
        let scores = shaped_scores(&p, &noise, shape);
        let costs: Vec<u64> = (0..n as u64).map(|i| 20 + (i * 37) % 90).collect();
        let capacity = tokens.then_some(400);
        let run = |cfg: RerankConfig| {
            let mut cfg = cfg;
            cfg.batch = batch;
            cfg.token_capacity = capacity;
            cfg.kernel = KernelChoice::Fixed(p.kernel);
            ctxprune::rerank::rerank_tokens(
                &cfg,
                &p.pool,
                &p.q,
                tokens.then_some(&costs[..]),
                &mut Precomputed::new(scores.clone(), budget).unwrap(),
            )
            .unwrap()
        };
        let got = run(RerankOptions::new("auto", budget, cap).config().unwrap());
        let paper = run(kept(budget, cap));
        let at = format!("n = {n}, batch {batch}, tokens {tokens}, {shape:?}");
        assert_eq!(got.scored.len(), budget, "{at}");
        let mut seen = got.scored.clone();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), budget, "{at}: an item scored twice");
        if let Some(t) = capacity {
            assert!(got.tokens.unwrap() <= t, "{at}");
        }
        // The check: after the first round that reaches 10 calls.
        let first = 10usize.div_ceil(batch) * batch;
        let low_start = got.scored[..first].iter().all(|&j| scores[j] < AUTO_LOW_SCORE);
        let confirm: Vec<usize> = if low_start {
            let mut c = Vec::new();
            for j in (0..AUTO_CONFIRM).filter(|j| !got.scored[..first].contains(j)) {
                if first + c.len() + keep(c.len()) < budget
                    && c.iter().all(|&x: &usize| scores[x] < AUTO_LOW_SCORE)
                {
                    c.push(j);
                }
            }
            c
        } else {
            Vec::new()
        };
        assert_eq!(&got.scored[first..first + confirm.len()], &confirm[..], "{at}");
        let want = shape == Shape::Low && low_start;
        assert_eq!(got.switched, want, "{at}: {:?}", got.notes);
        match shape {
            Shape::Low => assert!(low_start, "{at}"),
            Shape::High => assert!(!low_start, "{at}"),
            Shape::TopOnly => assert!(low_start && confirm.len() == 1, "{at}"),
        }
        if !low_start {
            assert_eq!(
                (&got.scored, &got.selected),
                (&paper.scored, &paper.selected),
                "{at}"
            );
        }
        if !got.switched {
            assert!(got.hyperparameters.is_none(), "{at}");
        }
    }
}

/// `eval`'s count of switched runs is the problems whose own auto run says it switched.
#[test]
fn eval_counts_the_problems_auto_switched_on() {
    use ctxprune::rerank::eval::{self, Mode, Spec};
    use ctxprune::rerank::KernelChoice;
    let spec = Spec {
        problems: 3,
        seed: 5,
        n: 301,
        budgets: vec![17],
        capacities: vec![7],
        modes: vec![Mode::Trap, Mode::Diffuse],
        token_capacity: None,
    };
    let out = eval::run_spec(&spec, false, &mut |_| {}).unwrap();
    for (mode, name) in [(Mode::Trap, "trap"), (Mode::Diffuse, "diffuse")] {
        let mut want = 0;
        for i in 0..spec.problems {
            let prob = eval::generate_mode(spec.n, 64, spec.seed + i as u64, mode).unwrap();
            let mut cfg = RerankConfig::new(Method::BoundaryMorph, 17, 7);
            cfg.switch_below = Some(AUTO_LOW_SCORE);
            cfg.kernel = KernelChoice::Fixed(prob.kernel);
            let r = Reranker::new(prob.pool.engine(), cfg)
                .unwrap()
                .rerank(
                    &prob.pool,
                    &prob.query,
                    &mut Precomputed::new(prob.oracle.clone(), 17).unwrap(),
                )
                .unwrap();
            want += usize::from(r.notes.iter().any(|m| m.contains("the prior is contradicted")));
        }
        let cell = out
            .cells
            .iter()
            .find(|c| c.set == name && c.method == "auto")
            .unwrap();
        assert_eq!(cell.switched, Some(want), "{name}");
        // The generated problems' MIPS top scores low: the switch is made on them.
        assert!(want > 0, "{name}");
        assert!(out
            .cells
            .iter()
            .filter(|c| c.method != "auto")
            .all(|c| c.switched.is_none()));
    }
}

#[test]
fn auto_refuses_every_option_it_sets() {
    let base = RerankOptions::new("auto", 40, 3);
    let cases: Vec<(&str, RerankOptions)> = vec![
        (
            "prior",
            RerankOptions {
                prior: Some("zero"),
                ..base
            },
        ),
        (
            "acquisition",
            RerankOptions {
                acquisition: Some("ucb"),
                ..base
            },
        ),
        (
            "beta0",
            RerankOptions {
                beta0: Some(1.0),
                ..base
            },
        ),
        (
            "hyperparameters",
            RerankOptions {
                hyperparameters: Some("paper"),
                ..base
            },
        ),
        (
            "kappa",
            RerankOptions {
                kappa: Some(5.0),
                ..base
            },
        ),
        (
            "prior_probes",
            RerankOptions {
                prior_probes: Some(2),
                ..base
            },
        ),
        (
            "graph_degree",
            RerankOptions {
                graph_degree: Some(4),
                ..base
            },
        ),
        (
            "seed_div",
            RerankOptions {
                seed_div: Some(2.0),
                ..base
            },
        ),
        (
            "frac",
            RerankOptions {
                frac: Some(0.5),
                ..base
            },
        ),
    ];
    for (name, o) in cases {
        let e = o.config().unwrap_err().to_string();
        assert!(e.starts_with(&format!("invalid {name}: ")), "{e}");
        assert!(e.contains("does not apply to auto"), "{e}");
    }
    let e = RerankOptions::new("automatic", 40, 3)
        .config()
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("unknown method 'automatic'") && e.contains("auto)"),
        "{e}"
    );
}

#[cfg(feature = "cli")]
#[test]
fn the_cli_runs_auto_and_names_a_refused_flag() {
    use crate::cli::run;
    use ctxprune::io::write_npy_f32;
    let d = tempfile::tempdir().unwrap();
    let (e, q, _) = crate::problem(80, 6, 4);
    let (pe, pq, ps) = (
        d.path().join("e.npy"),
        d.path().join("q.npy"),
        d.path().join("s.npy"),
    );
    write_npy_f32(&pe, 80, 6, e.as_slice()).unwrap();
    write_npy_f32(&pq, 1, 6, &q).unwrap();
    let scores: Vec<u8> = (0..80u32)
        // At least 0.5 everywhere: the switch stays off and auto is its kept run.
        .flat_map(|i| (0.5 + f64::from(i * 37 % 80) / 160.0).to_le_bytes())
        .collect();
    std::fs::write(&ps, crate::io::npy_bytes("<f8", false, &[80], &scores)).unwrap();
    let args = |m: &str, extra: &[&str]| {
        let mut v: Vec<String> = [
            "rerank",
            "--method",
            m,
            "--budget",
            "24",
            "--capacity",
            "4",
            "--embeddings",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        v.push(pe.display().to_string());
        v.push("--query".into());
        v.push(pq.display().to_string());
        v.push("--oracle-scores".into());
        v.push(ps.display().to_string());
        v.extend(extra.iter().map(|s| s.to_string()));
        v
    };
    let go = |v: Vec<String>| {
        let refs: Vec<&str> = v.iter().map(String::as_str).collect();
        run(&refs)
    };
    let (code, out, err) = go(args("auto", &[]));
    assert_eq!(code, 0, "{err}");
    let a: serde_json::Value = serde_json::from_str(&out).unwrap();
    // The kept run is boundary-morph with the feedback prior (auto's neighbour share) and
    // twice the median heuristic's kappa, which the CLI can name.
    let pool = ctxprune::Pool::new(&ctxprune::Engine::cpu(), e.clone()).unwrap();
    let kernel = ctxprune::similarity::Kernel::from_median(
        ctxprune::similarity::KernelKind::Vmf,
        pool.median_one_minus_cos().unwrap(),
    )
    .concentrated(AUTO_CONCENTRATION);
    let ctxprune::similarity::Kernel::Vmf { kappa } = kernel else {
        unreachable!()
    };
    let kappa = kappa.to_string();
    let (code, out, err) = go(args(
        "boundary-morph",
        &[
            "--prior",
            "feedback",
            "--kappa",
            &kappa,
            "--feedback-neighbours",
            &AUTO_NEIGHBOURS.to_string(),
        ],
    ));
    assert_eq!(code, 0, "{err}");
    let b: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(a["method"], "boundary-morph");
    assert_eq!((&a["scored"], &a["selected"]), (&b["scored"], &b["selected"]));
    let notes = a["notes"].as_array().unwrap();
    assert!(
        notes.iter().any(|n| n
            .as_str()
            .unwrap()
            .starts_with("auto: boundary-morph with the feedback prior")),
        "{notes:?}"
    );
    let (code, out, err) = go(args("auto", &["--prior", "mips"]));
    assert_ne!(code, 0);
    assert!(out.is_empty() && err.lines().count() == 1, "{err}");
    assert!(
        err.contains("--prior") && err.contains("does not apply to auto"),
        "{err}"
    );
    // The neighbour share's flag, named in its errors.
    let (code, out, err) = go(args("auto", &["--feedback-neighbours", "0.3"]));
    assert_ne!(code, 0);
    assert!(out.is_empty() && err.lines().count() == 1, "{err}");
    assert!(
        err.contains("invalid --feedback-neighbours: does not apply to auto"),
        "{err}"
    );
    let (code, out, err) = go(args(
        "boundary-morph",
        &["--prior", "feedback", "--feedback-neighbours", "1.5"],
    ));
    assert_ne!(code, 0);
    assert!(out.is_empty() && err.lines().count() == 1, "{err}");
    assert!(
        err.contains("invalid --feedback-neighbours: 1.5 is outside [0, 1]"),
        "{err}"
    );
}
