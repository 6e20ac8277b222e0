//! BoundaryMORPH at the size: N = 10,000, d = 1,024, k = 100, B = 100 and 500,
//! through a `Reranker` over a resident pool (made once, outside the clock; kernel rows
//! are read on demand inside it); the oracle is precomputed scores. A `cuda` group runs
//! the same on the GPU when `Engine::auto` finds one.
//! Run: `cargo bench --bench rerank && python3 benches/medians.py`.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use ctxprune::demo::synthetic_pool;
use ctxprune::rerank::{KernelChoice, Method, Precomputed, RerankConfig, Reranker};
use ctxprune::rng::Rng;
use ctxprune::similarity::{Kernel, KernelKind};
use ctxprune::{Engine, Pool};
use std::hint::black_box;
use std::time::Duration;

fn benches(c: &mut Criterion) {
    let p = synthetic_pool(10_000, 1024, 50, 5);
    let k = Kernel::with_median_heuristic(KernelKind::Vmf, &p.embeddings).unwrap();
    let cpu = Engine::cpu();
    let pool = Pool::from_embeddings(&cpu, &p.embeddings).unwrap();
    let cfg = |budget: usize| {
        let mut c = RerankConfig::new(Method::BoundaryMorph, budget, 100);
        c.kernel = KernelChoice::Fixed(k);
        c
    };
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
                let r = Reranker::new(&cpu, cfg(budget)).unwrap();
                b.iter(|| {
                    let mut o = Precomputed::new(scores.clone(), budget).unwrap();
                    black_box(r.rerank(&pool, &p.query, &mut o).unwrap())
                })
            },
        );
    }
    g.finish();
    let gpu = Engine::auto();
    if let Some(why) = gpu.fallback_reason() {
        eprintln!("cuda benches skipped: {why}");
        return;
    }
    let gpool = Pool::from_embeddings(&gpu, &p.embeddings).unwrap();
    let r = Reranker::new(&gpu, cfg(500)).unwrap();
    let mut g = c.benchmark_group("cuda");
    g.sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));
    g.bench_function("boundary_morph_n10000_k100/500", |b| {
        b.iter(|| {
            let mut o = Precomputed::new(scores.clone(), 500).unwrap();
            black_box(r.rerank(&gpool, &p.query, &mut o).unwrap())
        })
    });
    g.finish();
}

criterion_group!(rerank_benches, benches);
criterion_main!(rerank_benches);
