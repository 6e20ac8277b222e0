//! The backend harness: every backend test body runs on each available engine; a missing
//! GPU is a printed skip, or a failure when CTXPRUNE_REQUIRE_GPU=1. Also the service
//! shape: one engine and one resident pool shared by many threads.

use ctxprune::select::{Request, SelectConfig, Selector};
use ctxprune::{BackendChoice, BackendKind, Engine, EngineOptions, Pool};

/// The engines this machine can run. Prints why CUDA is skipped; panics instead when
/// `CTXPRUNE_REQUIRE_GPU=1`.
pub fn available() -> Vec<Engine> {
    let mut v = vec![Engine::cpu()];
    match Engine::cuda(0) {
        Ok(e) => v.push(e),
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
    use ctxprune::select::Method;
    let (e, q, _) = crate::problem(41, 17, 5);
    let p = crate::slow::Problem {
        e: &e,
        q: Some(&q),
        costs: None,
    };
    for engine in available() {
        let pool = Pool::from_embeddings(&engine, &e).unwrap();
        for (m, value) in [
            (
                Method::Mmr,
                Box::new(|x: usize, c: &[usize]| p.mmr(ctxprune::select::presets::DEFAULT_MMR_LAMBDA, x, c))
                    as Box<dyn Fn(usize, &[usize]) -> f64>,
            ),
            (Method::Dpp, Box::new(|x: usize, c: &[usize]| p.dpp(x, c))),
        ] {
            let s = Selector::new(&engine, SelectConfig::new(m).k(7)).unwrap();
            let got = s
                .select(
                    &pool,
                    &Request {
                        query: Some(&q),
                        ..Request::default()
                    },
                )
                .unwrap();
            let rule = if m == Method::Dpp {
                crate::slow::StopRule::Floor(ctxprune::select::presets::RESIDUAL_EPS)
            } else {
                crate::slow::StopRule::None
            };
            let (want, gains) = crate::slow::greedy(41, &*value, &[], Some(7), None, None, None, rule);
            assert_eq!(got.selected, want, "{} on {}", m.name(), engine.name());
            crate::assert_close(
                &format!("{} on {}", m.name(), engine.name()),
                &got.gains,
                &gains,
                gain_tol(m),
            );
            assert_eq!(got.backend, engine.kind());
        }
    }
}

#[test]
fn auto_never_panics_and_explicit_cuda_errors_without_a_device() {
    let s = Engine::auto();
    if s.kind() == BackendKind::Cpu {
        assert!(
            s.fallback_reason().is_some(),
            "auto fell back to the CPU without saying why"
        );
        let e = Engine::open(BackendChoice::Cuda, &EngineOptions::default()).unwrap_err();
        assert_eq!(e.kind(), ctxprune::ErrorKind::DeviceUnavailable);
        assert!(e.to_string().contains("cuda"), "{e}");
        // Nothing is remembered: opening again asks again, with the same answer here.
        assert!(s.reopen().unwrap().fallback_reason().is_some());
    }
    assert_eq!(
        Engine::open(BackendChoice::Cpu, &EngineOptions::default())
            .unwrap()
            .kind(),
        BackendKind::Cpu
    );
    assert!("gpu".parse::<BackendChoice>().is_err());
    // A pool resident on one engine is refused by a selector on another, never silently
    // run elsewhere.
    let (e, q, _) = crate::problem(5, 3, 1);
    if let Ok(gpu) = Engine::cuda(0) {
        let pool = Pool::from_embeddings(&Engine::cpu(), &e).unwrap();
        let s = Selector::new(&gpu, SelectConfig::new(ctxprune::select::Method::Mmr)).unwrap();
        let req = Request {
            query: Some(&q),
            ..Request::default()
        };
        assert!(s.select(&pool, &req).is_err());
    }
}

/// Every selector with a CUDA path, with an item budget, a token budget and a retained
/// set, against the slow definitions on every available backend (odd sizes, duplicates).
#[test]
fn greedy_selectors_agree_with_their_definitions_on_every_backend() {
    let (e0, q, costs) = crate::problem(57, 11, 23);
    // Two exact duplicates: ties go to the lower index on every backend.
    let mut data = e0.as_slice().to_vec();
    let row3 = data[3 * 11..4 * 11].to_vec();
    data[50 * 11..51 * 11].copy_from_slice(&row3);
    // The rows as drawn (a pool unit-normalises a copy) and unit already, as a model
    // returns them (a pool keeps them as given; coverage builds a unit copy, on the device
    // too).
    let unit: Vec<f32> = data
        .chunks_exact(11)
        .flat_map(|r| {
            let n = r.iter().map(|&v| f64::from(v) * f64::from(v)).sum::<f64>().sqrt() as f32;
            r.iter().map(move |&v| v / n)
        })
        .collect();
    for data in [data, unit] {
        greedy_selectors_agree_on(
            ctxprune::Embeddings::new(57, 11, data, "dups").unwrap(),
            &q,
            &costs,
        );
    }
}

fn greedy_selectors_agree_on(e: ctxprune::Embeddings, q: &[f32], costs: &[f64]) {
    use crate::slow::StopRule;
    use ctxprune::select::{presets, Method};
    let p = crate::slow::Problem {
        e: &e,
        q: Some(q),
        costs: None,
    };
    let pc = crate::slow::Problem {
        e: &e,
        q: Some(q),
        costs: Some(costs),
    };
    // Retained: three relevant items (DPP weights are max(cos, 0); a weightless retained
    // item would leave det(L_C) = 0, which the scorer skips and the slow ratio cannot).
    let mut by_rel: Vec<usize> = (0..57).filter(|&i| i != 50).collect();
    by_rel.sort_by(|&a, &b| crate::slow::cos(e.row(b), q).total_cmp(&crate::slow::cos(e.row(a), q)));
    let kept = [by_rel[0], by_rel[4], by_rel[9]];
    type Value<'a> = Box<dyn Fn(usize, &[usize]) -> f64 + 'a>;
    let eps = presets::RESIDUAL_EPS;
    for engine in available() {
        let pool = Pool::from_embeddings(&engine, &e).unwrap();
        for m in [
            Method::Mmr,
            Method::Grn,
            Method::Dpp,
            Method::Centroid,
            Method::Coverage,
        ] {
            let (value, rule): (Value<'_>, StopRule) = match m {
                Method::Mmr => (Box::new(|x, c| p.mmr(0.5, x, c)), StopRule::None),
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
                let mut cfg = SelectConfig::new(m);
                if m == Method::Mmr {
                    cfg = cfg.lambda(0.5);
                }
                if let Some(k) = k {
                    cfg = cfg.k(k);
                }
                if let Some(t) = budget {
                    cfg = cfg.token_budget(t);
                }
                let got = Selector::new(&engine, cfg)
                    .unwrap()
                    .select(
                        &pool,
                        &Request {
                            query: Some(q),
                            costs: Some(costs),
                            retained,
                            ..Request::default()
                        },
                    )
                    .unwrap();
                let (want, gains) =
                    crate::slow::greedy(57, &*value, retained, k, budget, Some(costs), None, rule);
                let what = format!("{} {label} on {}", m.name(), engine.name());
                assert_eq!(got.selected, want, "{what}");
                crate::assert_close(&what, &got.gains, &gains, gain_tol(m));
                assert_eq!(got.backend, engine.kind(), "{what}");
            }
        }
    }
}

/// DPP and coverage without a query weigh every item 1 (SPEC §1: diversity alone): picks
/// and gains equal the explicit determinants and F(C) on every available backend.
#[test]
fn dpp_and_coverage_without_a_query_are_diversity_alone_on_every_backend() {
    use crate::slow::StopRule;
    use ctxprune::select::{presets, Method, Stop};
    let (e, _, _) = crate::problem(41, 9, 77);
    let p = crate::slow::Problem {
        e: &e,
        q: None,
        costs: None,
    };
    for engine in available() {
        let pool = Pool::from_embeddings(&engine, &e).unwrap();
        for (m, k) in [
            (Method::Dpp, Some(7)),
            (Method::Dpp, None),
            (Method::Coverage, Some(5)),
        ] {
            let mut cfg = SelectConfig::new(m);
            if let Some(k) = k {
                cfg = cfg.k(k);
            }
            let got = Selector::new(&engine, cfg)
                .unwrap()
                .select(&pool, &Request::default())
                .unwrap();
            let (want, gains) = if m == Method::Dpp {
                let rule = StopRule::Floor(presets::RESIDUAL_EPS);
                crate::slow::greedy(41, &|x, c| p.dpp(x, c), &[], k, None, None, None, rule)
            } else {
                crate::slow::greedy(
                    41,
                    &|x, c| p.coverage(x, c),
                    &[],
                    k,
                    None,
                    None,
                    None,
                    StopRule::None,
                )
            };
            let what = format!("{} k={k:?} without a query on {}", m.name(), engine.name());
            assert_eq!(got.selected, want, "{what}");
            crate::assert_close(&what, &got.gains, &gains, gain_tol(m));
            if k.is_none() {
                // Nine directions span R^9: DPP stops when nothing new is left.
                assert_eq!((got.selected.len(), got.stop), (9, Some(Stop::NoGain)), "{what}");
            }
        }
    }
}

/// The Gram of every kernel, single and batched, equals the slow kernel of the cosine on
/// every available backend; a resident pool's Gram too.
#[test]
fn gram_blocks_agree_with_the_kernel_definitions_on_every_backend() {
    use ctxprune::similarity::Kernel;
    let (e, _, _) = crate::raw_problem(67, 13, 5);
    let (f, _, _) = crate::raw_problem(9, 13, 6);
    for engine in available() {
        let pool = Pool::from_embeddings(&engine, &e).unwrap();
        for k in [
            Kernel::Cosine,
            Kernel::Vmf { kappa: 3.0 },
            Kernel::Rbf { l2: 0.7 },
            Kernel::Matern52 { l2: 0.9 },
        ] {
            let g = engine.gram(&e, k).unwrap();
            let gb = engine.gram_batched(&[&f, &e], k).unwrap();
            let gp = pool.gram(k).unwrap();
            for (pool, got) in [(&e, &g), (&e, &gb[1]), (&f, &gb[0]), (&e, &gp)] {
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
                crate::assert_close(&format!("{k:?} Gram on {}", engine.name()), &got, &want, 2e-5);
            }
        }
    }
}

/// BoundaryMORPH, BAGEL, the UCB ablation and RGS make the same calls and return the same
/// top-k on every available backend (the GP's pool-sized state and kernel rows, and RGS's
/// neighbours' kernel rows, move to the device).
#[test]
fn rerank_gp_runs_the_same_on_every_backend() {
    use ctxprune::rerank::{
        Acquisition, Hyperparameters, KernelChoice, Method, Precomputed, RerankConfig, Reranker,
    };
    use ctxprune::similarity::Kernel;
    let (e, q, _) = crate::problem(131, 9, 77);
    let mut rng = ctxprune::rng::Rng::new(8);
    let scores: Vec<f64> = (0..131).map(|_| rng.uniform()).collect();
    let mut first: Option<Vec<(Vec<usize>, Vec<usize>)>> = None;
    for engine in available() {
        let pool = Pool::from_embeddings(&engine, &e).unwrap();
        let runs: Vec<(Vec<usize>, Vec<usize>)> = [
            (
                Method::BoundaryMorph,
                Acquisition::Boundary,
                Hyperparameters::Paper,
            ),
            (Method::Bagel, Acquisition::Ucb, Hyperparameters::Paper),
            (Method::BoundaryMorph, Acquisition::Ucb, Hyperparameters::Paper),
            (Method::Rgs, Acquisition::Boundary, Hyperparameters::Paper),
            (Method::RgsSimple, Acquisition::Boundary, Hyperparameters::Paper),
            // Rebuilt on the fitted kernel at 10 and 20 calls.
            (
                Method::BoundaryMorph,
                Acquisition::Boundary,
                Hyperparameters::Evidence,
            ),
        ]
        .into_iter()
        .map(|(m, acq, h)| {
            let mut cfg = RerankConfig::new(m, 25, 10);
            cfg.acquisition = acq;
            cfg.hyperparameters = h;
            cfg.kernel = KernelChoice::Fixed(Kernel::Vmf { kappa: 4.0 });
            let r = Reranker::new(&engine, cfg)
                .unwrap()
                .rerank(&pool, &q, &mut Precomputed::new(scores.clone(), 25).unwrap())
                .unwrap();
            assert_eq!(r.backend, engine.kind());
            (r.scored, r.selected)
        })
        .collect();
        match &first {
            None => first = Some(runs),
            Some(f) => assert_eq!(&runs, f, "{} differs from the CPU", engine.name()),
        }
    }
}

/// The service shape: 8 threads share one engine and one resident pool and run 200 mixed
/// selections and reranks; every result equals the one computed sequentially.
#[test]
fn one_engine_and_pool_shared_by_8_threads_give_the_sequential_results() {
    use ctxprune::rerank::{Method as R, Precomputed, RerankConfig, Reranker};
    use ctxprune::select::Method;
    use std::sync::Arc;
    let (e, _, costs) = crate::problem(301, 23, 91);
    let mut rng = ctxprune::rng::Rng::new(17);
    let queries: Vec<Vec<f32>> = (0..10)
        .map(|_| (0..23).map(|_| rng.normal() as f32).collect())
        .collect();
    let scores: Vec<f64> = (0..301).map(|_| rng.uniform()).collect();
    for engine in available() {
        let pool = Pool::from_embeddings(&engine, &e).unwrap();
        let methods = [
            Method::Mmr,
            Method::Dpp,
            Method::Grn,
            Method::Centroid,
            Method::Coverage,
            Method::Hybrid,
        ];
        let selectors: Vec<Selector> = methods
            .iter()
            .map(|&m| Selector::new(&engine, SelectConfig::new(m).k(12).token_budget(400.0)).unwrap())
            .collect();
        let rerankers: Vec<Reranker> = [R::BoundaryMorph, R::Bagel, R::Rgs]
            .iter()
            .map(|&m| Reranker::new(&engine, RerankConfig::new(m, 15, 8)).unwrap())
            .collect();
        // Job j: a selection or a rerank, by a fixed rule; its output as comparable data.
        let job = |j: usize| -> (Vec<usize>, Vec<u64>) {
            let q = &queries[j % queries.len()];
            if j % 3 == 2 {
                let r = rerankers[j % rerankers.len()]
                    .rerank(&pool, q, &mut Precomputed::new(scores.clone(), 15).unwrap())
                    .unwrap();
                (r.selected, r.scored.iter().map(|&x| x as u64).collect())
            } else {
                let s = selectors[j % selectors.len()]
                    .select(
                        &pool,
                        &Request {
                            query: Some(q),
                            costs: Some(&costs),
                            ..Request::default()
                        },
                    )
                    .unwrap();
                (s.selected, s.gains.iter().map(|g| g.to_bits()).collect())
            }
        };
        let sequential: Vec<_> = (0..200).map(job).collect();
        let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let results = std::sync::Mutex::new(vec![None; 200]);
        std::thread::scope(|s| {
            for _ in 0..8 {
                let next = next.clone();
                let (job, results) = (&job, &results);
                s.spawn(move || loop {
                    let j = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if j >= 200 {
                        break;
                    }
                    let r = job(j);
                    results.lock().unwrap()[j] = Some(r);
                });
            }
        });
        let parallel: Vec<_> = results
            .into_inner()
            .unwrap()
            .into_iter()
            .map(Option::unwrap)
            .collect();
        for (j, (a, b)) in sequential.iter().zip(&parallel).enumerate() {
            assert_eq!(
                a,
                b,
                "job {j} on {} differs between sequential and 8 threads",
                engine.name()
            );
        }
    }
}

/// What a server shares across threads is `Send + Sync`; what a request hands to a worker
/// thread is `Send`.
#[test]
fn service_types_cross_threads() {
    fn shared<T: Send + Sync>() {}
    fn sent<T: Send + ?Sized>() {}
    shared::<Engine>();
    shared::<Pool>();
    shared::<Selector>();
    shared::<ctxprune::rerank::Reranker>();
    shared::<ctxprune::mask::masker::Masker>();
    shared::<std::sync::Arc<dyn ctxprune::tokens::TokenCounter>>();
    sent::<dyn ctxprune::rerank::Oracle>();
    sent::<dyn ctxprune::select::judge::Judge>();
    sent::<ctxprune::Error>();
}

/// Pools refuse what they cannot hold, naming it; selectors check their config once, at
/// construction; errors carry the kind a service branches on.
#[test]
fn pools_and_selectors_refuse_bad_input_with_the_right_kind() {
    use ctxprune::select::{Method, Mode};
    use ctxprune::{Embeddings, ErrorKind};
    let engine = Engine::cpu();
    let empty = Embeddings::new(0, 3, vec![], "empty.npy").unwrap();
    let e = Pool::new(&engine, empty).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert!(e.to_string().contains("empty.npy"), "{e}");
    let zero = Embeddings::new(2, 2, vec![1.0, 0.0, 0.0, 0.0], "z.npy").unwrap();
    let e = Pool::new(&engine, zero).unwrap_err();
    assert!(e.to_string().contains("row 1 has zero norm"), "{e}");
    for (cfg, flag) in [
        (SelectConfig::new(Method::Mmr).lambda(1.5), "lambda"),
        (SelectConfig::new(Method::Grn).lambda(0.5), "lambda"),
        (SelectConfig::new(Method::Hybrid).mode(Mode::Gate), "threshold"),
        (SelectConfig::new(Method::Dpp).mode(Mode::Gate).k(3), "k"),
        (SelectConfig::new(Method::Dpp).residual_eps(0.0), "residual_eps"),
    ] {
        let e = Selector::new(&engine, cfg).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
        assert!(e.to_string().contains(flag), "{flag}: {e}");
    }
    // Request errors name the field.
    let (x, q, _) = crate::problem(9, 4, 2);
    let pool = Pool::new(&engine, x).unwrap();
    let s = Selector::new(&engine, SelectConfig::new(Method::Mmr).k(3)).unwrap();
    for (req, want) in [
        (Request::default(), "query"),
        (
            Request {
                query: Some(&q[..3]),
                ..Request::default()
            },
            "dimension mismatch",
        ),
        (
            Request {
                query: Some(&q),
                retained: &[9],
                ..Request::default()
            },
            "retained[0]",
        ),
        (
            Request {
                query: Some(&q),
                costs: Some(&[1.0; 8]),
                ..Request::default()
            },
            "costs",
        ),
    ] {
        let e = s.select(&pool, &req).unwrap_err();
        assert!(e.to_string().contains(want), "{want}: {e}");
    }
    let e = ctxprune::rerank::Reranker::new(
        &engine,
        ctxprune::rerank::RerankConfig::new(ctxprune::rerank::Method::BoundaryMorph, 5, 0),
    )
    .unwrap_err();
    assert!(e.to_string().contains("capacity"), "{e}");
    if Engine::cuda(0).is_err() {
        let e = Engine::cuda(0).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::DeviceUnavailable, "{e}");
    }
}

/// Half-precision pools: on a device the Gram runs from f16/bf16 rows (within 1e-2 of the
/// definition on the f32 originals) and greedy selection, which needs f32 rows there, is
/// refused; RGS reads its kernel rows on the host; the CPU keeps f32 rows and refuses half
/// storage.
#[test]
fn half_storage_pools_serve_the_gram_where_the_device_has_it() {
    use ctxprune::rerank::{Method as RerankMethod, Precomputed, RerankConfig, Reranker};
    use ctxprune::similarity::Kernel;
    use ctxprune::{ErrorKind, Storage};
    let (e, q, _) = crate::raw_problem(53, 19, 12);
    for engine in available() {
        for storage in [Storage::F16, Storage::Bf16] {
            let made = Pool::with_storage(&engine, e.clone(), storage);
            if engine.kind() == BackendKind::Cpu {
                let err = made.unwrap_err();
                assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}");
                continue;
            }
            let pool = made.unwrap();
            assert_eq!(pool.storage(), storage);
            let k = Kernel::Vmf { kappa: 3.0 };
            let g = pool.gram(k).unwrap();
            let n = 53;
            let want: Vec<f64> = (0..n * n)
                .map(|t| {
                    let c = crate::slow::cos(e.row(t / n), e.row(t % n)).clamp(-1.0, 1.0);
                    (3.0 * (c - 1.0)).exp()
                })
                .collect();
            let got: Vec<f64> = g.iter().map(|&v| f64::from(v)).collect();
            crate::assert_close(
                &format!("{} Gram on {}", storage.name(), engine.name()),
                &got,
                &want,
                1e-2,
            );
            let s = Selector::new(&engine, SelectConfig::new(ctxprune::select::Method::Mmr).k(3)).unwrap();
            let req = Request {
                query: Some(&q),
                ..Request::default()
            };
            let err = s.select(&pool, &req).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}");
            // RGS reads its kernel rows from the host's f32 rows instead, and says so: the
            // same calls and top-k as on a CPU pool.
            let scores: Vec<f64> = (0..n).map(|i| ((i * 37) % 53) as f64 / 53.0).collect();
            let cfg = RerankConfig::new(RerankMethod::Rgs, 12, 5);
            let run = |engine: &Engine, pool: &Pool| {
                Reranker::new(engine, cfg.clone())
                    .unwrap()
                    .rerank(pool, &q, &mut Precomputed::new(scores.clone(), 12).unwrap())
                    .unwrap()
            };
            let got = run(&engine, &pool);
            let want = run(
                &Engine::cpu(),
                &Pool::from_embeddings(&Engine::cpu(), &e).unwrap(),
            );
            assert_eq!((&got.scored, &got.selected), (&want.scored, &want.selected));
            assert_eq!(got.backend, BackendKind::Cpu);
            let note = format!("rgs runs on the CPU (the pool is stored as {} on", storage.name());
            assert!(got.notes.iter().any(|n| n.starts_with(&note)), "{:?}", got.notes);
        }
    }
}

/// `ctxprune pipeline --backend`: the scorer policies select on the pipeline's engine,
/// and every backend keeps the same candidates (the report is the CPU's, field for field).
#[test]
fn replayed_stages_keep_the_same_candidates_on_every_backend() {
    use ctxprune::pipeline::{replay::RunLog, stages::Stages};
    use std::path::Path;
    let log = RunLog::parse(crate::pipeline_replay::RUN, Path::new("run.jsonl"), None).unwrap();
    let st = Stages::parse(
        "[post_retrieval]\npolicy = \"scorer\"\nmethod = \"grn\"\nmode = \"gate\"\nthreshold = 0.5\n\n\
         [pre_synthesis]\npolicy = \"scorer\"\nmethod = \"mmr\"\nk = 2\n",
        Path::new("stages.toml"),
    )
    .unwrap();
    let cpu = log.replay(st.pipeline()).unwrap().report.to_json();
    for engine in available() {
        let mut p = st.pipeline();
        p.engine = engine.clone();
        let got = log.replay(p).unwrap().report.to_json();
        assert_eq!(got, cpu, "{}", engine.describe());
    }
}
