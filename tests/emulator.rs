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

/// Greedy selections on the device compute the CPU's gains bit for bit (the dot products
/// follow the CPU's 16 lanes and reduction order; every sum is f64 in the same order), at
/// odd sizes and at N = 70,001, where the step kernels' grids have thousands of blocks
/// and the grid argmax reduces more than 65,536 candidates.
#[test]
fn greedy_gains_on_the_device_are_the_cpus_bit_for_bit() {
    use ctxprune::select::{Method, Request, SelectConfig, Selector};
    use ctxprune::Pool;
    let gpu = emulated();
    let cpu = Engine::cpu();
    for (n, d, k) in [(513usize, 67usize, 12usize), (70_001, 37, 3)] {
        let (e, q, costs) = crate::raw_problem(n, d, n as u64);
        let (pc, pg) = (
            Pool::from_embeddings(&cpu, &e).unwrap(),
            Pool::from_embeddings(&gpu, &e).unwrap(),
        );
        let req = Request {
            query: Some(&q),
            costs: Some(&costs),
            retained: &[5, 17],
            ..Request::default()
        };
        let methods: &[Method] = if n > 10_000 {
            &[Method::Mmr, Method::Dpp]
        } else {
            &[Method::Mmr, Method::Grn, Method::Dpp, Method::Centroid]
        };
        for &m in methods {
            let cfg = SelectConfig::new(m).k(k).token_budget(40.0 * k as f64);
            let a = Selector::new(&cpu, cfg.clone())
                .unwrap()
                .select(&pc, &req)
                .unwrap();
            let b = Selector::new(&gpu, cfg).unwrap().select(&pg, &req).unwrap();
            assert_eq!(b.backend, BackendKind::Cuda, "{} n={n}: {:?}", m.name(), b.notes);
            assert_eq!(a.selected, b.selected, "{} n={n}", m.name());
            assert_eq!(a.stop, b.stop, "{} n={n}", m.name());
            let bits = |g: &[f64]| g.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(
                bits(&a.gains),
                bits(&b.gains),
                "{} n={n}: {:?} vs {:?}",
                m.name(),
                a.gains,
                b.gains
            );
        }
    }
}
