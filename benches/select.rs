//! Criterion benchmarks of the Gram and every scorer on the CPU backend, and the same
//! workloads on CUDA when `Engine::auto` finds a GPU (group `cuda`; every CUDA call ends
//! with its results on the host, so the device is synchronised inside the timing). Sizes
//! are the issue's: N = 10,000, d = 1,024 (facility location: N = 2,000). Run:
//! `cargo bench --bench select && python3 benches/medians.py`. The device-resident
//! timings (no copies back) are `ctxprune gpu-check`'s table.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use ctxprune::demo::synthetic_pool;
use ctxprune::select::{select, Inputs, Method, SelectConfig};
use ctxprune::similarity::{gram, gram_into, Kernel};
use std::hint::black_box;
use std::time::Duration;

fn benches(c: &mut Criterion) {
    let big = synthetic_pool(10_000, 1024, 50, 1);
    let mut g = c.benchmark_group("cpu");
    g.sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(8));

    let vmf = Kernel::Vmf { kappa: 10.0 };
    g.bench_function("gram_cos_vmf_n10000_d1024", |b| {
        b.iter(|| black_box(gram(&big.embeddings, vmf).unwrap()))
    });
    let (rows, d) = (big.embeddings.rows(), big.embeddings.dim());
    let mut buf = vec![0.0f32; rows * rows];
    g.bench_function("gram_into_reused_buffer_cos_vmf_n10000_d1024", |b| {
        b.iter(|| gram_into(&big.embeddings, vmf, black_box(&mut buf)).unwrap())
    });
    g.bench_function("reference_full_sgemm_n10000_d1024", |b| {
        let x = big.embeddings.as_slice();
        b.iter(|| ctxprune::backend::cpu::gemm_abt(x, x, d, black_box(&mut buf), rows, true))
    });
    drop(buf);

    // Rows unit-normalised once, as `ctxprune select` does on load (and as most encoders
    // emit them); the raw-rows run includes the unit copy a library caller then pays.
    // threshold(-1): MMR scores can go negative; the benchmark wants all k picks.
    let mut unit = big.embeddings.clone();
    unit.normalize().unwrap();
    let inp = Inputs {
        embeddings: Some(&unit),
        query: Some(&big.query),
        costs: Some(&big.costs),
        ..Inputs::default()
    };
    for m in [Method::Mmr, Method::Dpp, Method::Grn, Method::Centroid] {
        g.bench_with_input(
            BenchmarkId::new("greedy_k100_n10000_d1024", m.name()),
            &m,
            |b, &m| b.iter(|| black_box(select(&SelectConfig::new(m).k(100).threshold(-1.0), &inp).unwrap())),
        );
    }
    let raw = Inputs {
        embeddings: Some(&big.embeddings),
        ..inp
    };
    g.bench_function("greedy_k100_n10000_d1024_raw_rows/mmr", |b| {
        b.iter(|| black_box(select(&SelectConfig::new(Method::Mmr).k(100).threshold(-1.0), &raw).unwrap()))
    });

    // Facility location and friends at N = 2,000 from raw rows (normalisation included).
    let small = synthetic_pool(2_000, 1024, 20, 2);
    let inp2 = Inputs {
        embeddings: Some(&small.embeddings),
        query: Some(&small.query),
        costs: Some(&small.costs),
        texts: Some(&small.texts),
        query_text: Some(&small.query_text),
        ..Inputs::default()
    };
    let budget: f64 = small.costs.iter().sum::<f64>() / 10.0;
    for m in [Method::Coverage, Method::Hybrid, Method::Lexical] {
        g.bench_with_input(
            BenchmarkId::new("greedy_k50_budget_n2000_d1024", m.name()),
            &m,
            |b, &m| {
                b.iter(|| {
                    let cfg = SelectConfig::new(m).k(50).token_budget(budget);
                    let cfg = if m == Method::Coverage {
                        cfg
                    } else {
                        cfg.threshold(-1.0)
                    };
                    black_box(select(&cfg, &inp2).unwrap())
                })
            },
        );
    }
    // The paper's encoder (bge-small-en-v1.5) has d = 384: facility location at that width.
    let small384 = synthetic_pool(2_000, 384, 20, 3);
    let inp3 = Inputs {
        embeddings: Some(&small384.embeddings),
        query: Some(&small384.query),
        costs: Some(&small384.costs),
        ..Inputs::default()
    };
    let budget3: f64 = small384.costs.iter().sum::<f64>() / 10.0;
    g.bench_function("greedy_k50_budget_n2000_d384/coverage", |b| {
        b.iter(|| {
            black_box(
                select(
                    &SelectConfig::new(Method::Coverage).k(50).token_budget(budget3),
                    &inp3,
                )
                .unwrap(),
            )
        })
    });
    g.finish();
    cuda(c, &big, &unit);
}

/// The CUDA rows: skipped, with the reason printed, when no GPU is usable. Selections run
/// through a `Selector` over a pool made resident once (outside the clock).
fn cuda(c: &mut Criterion, big: &ctxprune::demo::Synthetic, unit: &ctxprune::Embeddings) {
    use ctxprune::select::{Request, Selector};
    let engine = ctxprune::Engine::auto();
    if let Some(why) = engine.fallback_reason() {
        eprintln!("cuda benches skipped: {why}");
        return;
    }
    let mut g = c.benchmark_group("cuda");
    g.sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));
    let vmf = Kernel::Vmf { kappa: 10.0 };
    g.bench_function("gram_cos_vmf_n10000_d1024_to_host", |bch| {
        bch.iter(|| black_box(engine.gram(&big.embeddings, vmf).unwrap()))
    });
    let pool = ctxprune::Pool::from_embeddings(&engine, unit).unwrap();
    let req = Request {
        query: Some(&big.query),
        costs: Some(&big.costs),
        ..Request::default()
    };
    for m in [Method::Mmr, Method::Dpp, Method::Grn, Method::Centroid] {
        let s = Selector::new(&engine, SelectConfig::new(m).k(100).threshold(-1.0)).unwrap();
        g.bench_with_input(
            BenchmarkId::new("greedy_k100_n10000_d1024_resident", m.name()),
            &m,
            |bch, _| bch.iter(|| black_box(s.select(&pool, &req).unwrap())),
        );
    }
    g.finish();
}

criterion_group!(select_benches, benches);
criterion_main!(select_benches);
