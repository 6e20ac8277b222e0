//! The CUDA path on the emulated device (feature `cuda-emu`): `ctxprune gpu-check`'s
//! every comparison, every kernel launched, and sizes that take the multi-block paths
//! (grids of thousands of blocks; the grid reductions above 65,536 elements).

use ctxprune::backend::cuda::emulated_launches;
use ctxprune::{BackendKind, Engine, EngineOptions};

/// The emulated device opens as CUDA device 0.
fn emulated() -> Engine {
    let e = Engine::cuda(0).expect("the emulated CUDA device opens");
    assert_eq!(e.kind(), BackendKind::Cuda);
    e
}

#[test]
fn gpu_check_passes_on_the_emulator_and_every_kernel_runs() {
    let _ = emulated();
    let t = std::time::Instant::now();
    let rep = ctxprune::gpu_check::run(0, Some(20_261_201), false, &EngineOptions::default()).unwrap();
    let fails: Vec<String> = rep
        .failures()
        .iter()
        .map(|c| format!("{}: {}", c.what, c.detail))
        .collect();
    assert!(fails.is_empty(), "gpu-check on the emulator:\n{rep}");
    let launches = emulated_launches();
    let never: Vec<&str> = launches.iter().filter(|l| l.1 == 0).map(|l| l.0).collect();
    assert!(never.is_empty(), "kernels never launched: {never:?}");
    use std::io::Write as _;
    let _ = writeln!(
        std::io::stderr(),
        "emulator: gpu-check's {} comparisons passed in {:.1} s; {} kernels launched ({} launches)",
        rep.comparisons.len(),
        t.elapsed().as_secs_f64(),
        launches.len(),
        launches.iter().map(|l| l.1).sum::<u64>()
    );
}
