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
            eprintln!("skipped on cuda: {e}");
        }
    }
    v
}

#[test]
fn auto_never_panics_and_explicit_cuda_errors_without_a_device() {
    let s = Backend::auto();
    for b in available() {
        assert!(matches!(b, Backend::Cpu | Backend::Cuda(_)));
    }
    if s.backend == Backend::Cpu {
        assert!(s.reason.is_some(), "auto fell back to the CPU without saying why");
        let e = Backend::choose(BackendChoice::Cuda).unwrap_err().to_string();
        assert!(e.contains("cuda"), "{e}");
    }
    assert_eq!(Backend::choose(BackendChoice::Cpu).unwrap().backend, Backend::Cpu);
    assert!("gpu".parse::<BackendChoice>().is_err());
}
