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
            crate::assert_close(&format!("{} on {}", m.name(), b.name()), &got.gains, &gains, 1e-9);
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
