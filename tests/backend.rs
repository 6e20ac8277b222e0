//! The backend harness: every backend test body runs on each available backend; a
//! missing GPU is a printed skip, or a failure when CTXPRUNE_REQUIRE_GPU=1.

use ctxprune::{Backend, BackendChoice};

/// The backends this machine can run. Prints why CUDA is skipped; panics instead when
/// `CTXPRUNE_REQUIRE_GPU=1`.
pub fn available() -> Vec<Backend> {
    let mut v = vec![Backend::Cpu];
    match Backend::cuda(0) {
        Ok(b) => v.push(b),
        Err(e) => {
            if std::env::var("CTXPRUNE_REQUIRE_GPU").as_deref() == Ok("1") {
                panic!("CTXPRUNE_REQUIRE_GPU=1 but CUDA is unavailable: {e}");
            }
            // Written to the stderr handle, not eprintln!, so the test harness does not
            // capture it: the skip shows in every `cargo test` run.
            use std::io::Write as _;
            let _ = writeln!(std::io::stderr(), "skipped on cuda: {e}");
        }
    }
    v
}

/// Gains against the f64 definitions, on either backend (both accumulate products of the
/// f32 rows in f64): 1e-8 leaves room for the determinant ratios' conditioning, as in
/// the scorer tests; coverage stores its similarity in f32, so 1e-5.
fn gain_tol(m: ctxprune::select::Method) -> f64 {
    if m == ctxprune::select::Method::Coverage {
        1e-5
    } else {
        1e-8
    }
}

/// One test body, run on every available backend: greedy MMR and DPP agree with the slow
/// definition, and the selection reports the backend it ran on.
#[test]
fn selection_body_runs_on_every_available_backend() {
    use ctxprune::select::{select, Inputs, Method, SelectConfig};
    let (e, q, _) = crate::problem(41, 17, 5);
    let p = crate::slow::Problem {
        e: &e,
        q: Some(&q),
        costs: None,
    };
    for b in available() {
        for (m, value) in [
            (
                Method::Mmr,
                Box::new(|x: usize, c: &[usize]| p.mmr(0.35, x, c)) as Box<dyn Fn(usize, &[usize]) -> f64>,
            ),
            (Method::Dpp, Box::new(|x: usize, c: &[usize]| p.dpp(x, c))),
        ] {
            let cfg = SelectConfig::new(m).k(7).backend(b.clone());
            let got = select(
                &cfg,
                &Inputs {
                    embeddings: Some(&e),
                    query: Some(&q),
                    ..Inputs::default()
                },
            )
            .unwrap();
            let rule = if m == Method::Dpp {
                crate::slow::StopRule::Floor(ctxprune::select::presets::RESIDUAL_EPS)
            } else {
                crate::slow::StopRule::Positive
            };
            let (want, gains) = crate::slow::greedy(41, &*value, &[], Some(7), None, None, None, rule);
            assert_eq!(got.selected, want, "{} on {}", m.name(), b.name());
            crate::assert_close(
                &format!("{} on {}", m.name(), b.name()),
                &got.gains,
                &gains,
                gain_tol(m),
            );
            assert_eq!(got.backend, b);
        }
    }
}

#[test]
fn auto_never_panics_and_explicit_cuda_errors_without_a_device() {
    let s = Backend::auto();
    if s.backend == Backend::Cpu {
        assert!(s.reason.is_some(), "auto fell back to the CPU without saying why");
        let e = Backend::choose(BackendChoice::Cuda).unwrap_err().to_string();
        assert!(e.contains("cuda"), "{e}");
    }
    assert_eq!(Backend::choose(BackendChoice::Cpu).unwrap().backend, Backend::Cpu);
    assert!("gpu".parse::<BackendChoice>().is_err());
    // A CUDA backend named directly is refused by select, never silently run on the CPU.
    let (e, q, _) = crate::problem(5, 3, 1);
    let cfg = ctxprune::select::SelectConfig::new(ctxprune::select::Method::Mmr).backend(Backend::Cuda(0));
    let inp = ctxprune::select::Inputs {
        embeddings: Some(&e),
        query: Some(&q),
        ..Default::default()
    };
    assert!(ctxprune::select::select(&cfg, &inp).is_err());
}

/// Every selector with a CUDA path, with an item budget, a token budget and a retained
/// set, against the slow definitions on every available backend (odd sizes, duplicates).
#[test]
fn greedy_selectors_agree_with_their_definitions_on_every_backend() {
    use crate::slow::StopRule;
    use ctxprune::select::{presets, select, Inputs, Method, SelectConfig};
    let (e0, q, costs) = crate::problem(57, 11, 23);
    // Two exact duplicates: ties go to the lower index on every backend.
    let mut data = e0.as_slice().to_vec();
    let row3 = data[3 * 11..4 * 11].to_vec();
    data[50 * 11..51 * 11].copy_from_slice(&row3);
    let e = ctxprune::Embeddings::new(57, 11, data, "dups").unwrap();
    let p = crate::slow::Problem {
        e: &e,
        q: Some(&q),
        costs: None,
    };
    let pc = crate::slow::Problem {
        e: &e,
        q: Some(&q),
        costs: Some(&costs),
    };
    // Retained: three relevant items (DPP weights are max(cos, 0); a weightless retained
    // item would leave det(L_C) = 0, which the scorer skips and the slow ratio cannot).
    let mut by_rel: Vec<usize> = (0..57).filter(|&i| i != 50).collect();
    by_rel.sort_by(|&a, &b| crate::slow::cos(e.row(b), &q).total_cmp(&crate::slow::cos(e.row(a), &q)));
    let kept = [by_rel[0], by_rel[4], by_rel[9]];
    type Value<'a> = Box<dyn Fn(usize, &[usize]) -> f64 + 'a>;
    let eps = presets::RESIDUAL_EPS;
    for b in available() {
        for m in [
            Method::Mmr,
            Method::Grn,
            Method::Dpp,
            Method::Centroid,
            Method::Coverage,
        ] {
            let (value, rule): (Value<'_>, StopRule) = match m {
                Method::Mmr => (Box::new(|x, c| p.mmr(0.5, x, c)), StopRule::Positive),
                Method::Grn => (Box::new(|x, c| p.grn(x, c)), StopRule::Floor(eps)),
                Method::Dpp => (Box::new(|x, c| p.dpp(x, c)), StopRule::Floor(eps)),
                Method::Centroid => (
                    Box::new(|x, c| p.centroid(x, c)),
                    StopRule::Floor(presets::CENTROID_NOISE_FLOOR),
                ),
                _ => (Box::new(|x, c| pc.coverage(x, c)), StopRule::None),
            };
            for (label, k, budget, retained) in [
                ("k=9", Some(9), None, &[][..]),
                ("token budget 120", None, Some(120.0), &[][..]),
                ("retained, k=6", Some(6), None, &kept[..]),
            ] {
                let mut cfg = SelectConfig::new(m).backend(b.clone());
                if m == Method::Mmr {
                    cfg = cfg.lambda(0.5);
                }
                if let Some(k) = k {
                    cfg = cfg.k(k);
                }
                if let Some(t) = budget {
                    cfg = cfg.token_budget(t);
                }
                let got = select(
                    &cfg,
                    &Inputs {
                        embeddings: Some(&e),
                        query: Some(&q),
                        costs: Some(&costs),
                        retained,
                        ..Inputs::default()
                    },
                )
                .unwrap();
                let (want, gains) =
                    crate::slow::greedy(57, &*value, retained, k, budget, Some(&costs), None, rule);
                let what = format!("{} {label} on {}", m.name(), b.name());
                assert_eq!(got.selected, want, "{what}");
                crate::assert_close(&what, &got.gains, &gains, gain_tol(m));
                assert_eq!(got.backend, b, "{what}");
            }
        }
    }
}

/// The Gram of every kernel, single and batched, equals the slow kernel of the cosine on
/// every available backend.
#[test]
fn gram_blocks_agree_with_the_kernel_definitions_on_every_backend() {
    use ctxprune::similarity::{gram_batched_on, gram_on, Kernel};
    let (e, _, _) = crate::raw_problem(67, 13, 5);
    let (f, _, _) = crate::raw_problem(9, 13, 6);
    for b in available() {
        for k in [
            Kernel::Cosine,
            Kernel::Vmf { kappa: 3.0 },
            Kernel::Rbf { l2: 0.7 },
            Kernel::Matern52 { l2: 0.9 },
        ] {
            let g = gram_on(&e, k, &b).unwrap();
            let gb = gram_batched_on(&[&f, &e], k, &b).unwrap();
            for (pool, got) in [(&e, &g), (&e, &gb[1]), (&f, &gb[0])] {
                let n = pool.rows();
                let want: Vec<f64> = (0..n * n)
                    .map(|t| {
                        let c = crate::slow::cos(pool.row(t / n), pool.row(t % n)).clamp(-1.0, 1.0);
                        match k {
                            Kernel::Cosine => c,
                            Kernel::Vmf { kappa } => (f64::from(kappa) * (c - 1.0)).exp(),
                            Kernel::Rbf { l2 } => (-(1.0 - c) / f64::from(l2)).exp(),
                            Kernel::Matern52 { l2 } => {
                                let t = (5.0 * 2.0 * (1.0 - c) / f64::from(l2)).sqrt();
                                (1.0 + t + t * t / 3.0) * (-t).exp()
                            }
                        }
                    })
                    .collect();
                let got: Vec<f64> = got.iter().map(|&v| f64::from(v)).collect();
                crate::assert_close(&format!("{k:?} Gram on {}", b.name()), &got, &want, 2e-5);
            }
        }
    }
}

/// BoundaryMORPH and BAGEL make the same calls and return the same top-k on every
/// available backend (the GP's pool-sized updates move to the device).
#[test]
fn rerank_gp_runs_the_same_on_every_backend() {
    use ctxprune::rerank::{rerank, DenseKernel, Method, Precomputed, RerankConfig};
    use ctxprune::similarity::Kernel;
    let (e, q, _) = crate::problem(131, 9, 77);
    let mut rng = ctxprune::rng::Rng::new(8);
    let scores: Vec<f64> = (0..131).map(|_| rng.uniform()).collect();
    let k = Kernel::Vmf { kappa: 4.0 };
    let mut first: Option<Vec<(Vec<usize>, Vec<usize>)>> = None;
    for b in available() {
        let dk = DenseKernel::build_on(&e, &q, k, &b).unwrap();
        let runs: Vec<(Vec<usize>, Vec<usize>)> = [Method::BoundaryMorph, Method::Bagel]
            .into_iter()
            .map(|m| {
                let mut cfg = RerankConfig::new(m, 25, 10);
                cfg.backend = b.clone();
                let r = rerank(&cfg, &dk, &mut Precomputed::new(scores.clone(), 25).unwrap()).unwrap();
                (r.scored, r.selected)
            })
            .collect();
        match &first {
            None => first = Some(runs),
            Some(f) => assert_eq!(&runs, f, "{} differs from the CPU", b.name()),
        }
    }
}
