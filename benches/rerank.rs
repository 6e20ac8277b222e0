//! BoundaryMORPH at the size: N = 10,000, d = 1,024, k = 100, B = 100 and 500;
//! the kernel build is excluded (built once), the oracle is precomputed scores. A `cuda`
//! group runs the same with the GP's pool-sized updates on the GPU when `Backend::auto`
//! finds one.
//! Run: `cargo bench --bench rerank && python3 benches/medians.py`.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use ctxprune::demo::synthetic_pool;
use ctxprune::rerank::{rerank, DenseKernel, Method, Precomputed, RerankConfig};
use ctxprune::rng::Rng;
use ctxprune::similarity::{Kernel, KernelKind};
use std::hint::black_box;
use std::time::Duration;

fn benches(c: &mut Criterion) {
    let p = synthetic_pool(10_000, 1024, 50, 5);
    let k = Kernel::with_median_heuristic(KernelKind::Vmf, &p.embeddings).unwrap();
    let dk = DenseKernel::build(&p.embeddings, &p.query, k).unwrap();
    let mut rng = Rng::new(3);
    let scores: Vec<f64> = (0..10_000).map(|_| rng.uniform()).collect();
    let mut g = c.benchmark_group("cpu");
    g.sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(6));
    for budget in [100usize, 500] {
        g.bench_with_input(
            BenchmarkId::new("boundary_morph_n10000_k100", budget),
            &budget,
            |b, &budget| {
                b.iter(|| {
                    let mut o = Precomputed::new(scores.clone(), budget).unwrap();
                    black_box(
                        rerank(
                            &RerankConfig::new(Method::BoundaryMorph, budget, 100),
                            &dk,
                            &mut o,
                        )
                        .unwrap(),
                    )
                })
            },
        );
    }
    g.finish();
    let sel = ctxprune::Backend::auto();
    if sel.backend == ctxprune::Backend::Cpu {
        eprintln!(
            "cuda benches skipped: {}",
            sel.reason.as_deref().unwrap_or("no GPU")
        );
        return;
    }
    let mut g = c.benchmark_group("cuda");
    g.sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));
    g.bench_function("boundary_morph_n10000_k100/500", |b| {
        b.iter(|| {
            let mut o = Precomputed::new(scores.clone(), 500).unwrap();
            let mut cfg = RerankConfig::new(Method::BoundaryMorph, 500, 100);
            cfg.backend = sel.backend.clone();
            black_box(rerank(&cfg, &dk, &mut o).unwrap())
        })
    });
    g.finish();
}

criterion_group!(rerank_benches, benches);
criterion_main!(rerank_benches);
