//! BoundaryMORPH at the size: N = 10,000, d = 1,024, k = 100, B = 100 and 500,
//! through a `Reranker` over a resident pool (made once, outside the clock; kernel rows
//! are read on demand inside it); the oracle is precomputed scores. Each run is timed with
//! kernel rows read from the f32 pool (the default, the paper's computation) and from a
//! bf16 and an f16 copy (`row_precision`).
//!
//! Beside them, in GB/s (criterion's throughput, decimal): a plain streaming read of the
//! f32 pool (a parallel sum of every value, 1,024-row blocks, the dot kernels' lane layout)
//! and the kernel-row passes alone (`KernelRows::row` for the rows a B = 500 run reads, in
//! its order; bytes = rows × N × d × bytes per element of the row precision). Their ratio
//! is how close the passes come to a streaming read on this machine.
//!
//! `boundary_morph_n10000_k100_evidence/100` is B = 100 with hyperparameters by the evidence
//! (its fits and rebuilds inside the clock), beside the paper's; `auto_n10000_k100_switched/100`
//! is `method = "auto"` on scores that are all low (the same scores times 0.4), so it
//! confirms at the MIPS top, switches, and fits from there; `auto_n10000_k100_kept/100` on
//! the uniform scores, where it keeps its prior (the feedback prior with its neighbour
//! share, the doubled kappa);
//! `boundary_morph_n10000_k100_score/100`, `_feedback/100` and `_feedback_neighbours/100`
//! are B = 100 with the score and the feedback prior (its re-shapings inside the clock), the
//! last with auto's neighbour share.
//!
//! A `cuda` group runs the same on the GPU when `Engine::auto` finds one.
//! Run: `cargo bench --bench rerank && python3 benches/medians.py`.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use ctxprune::demo::synthetic_pool;
use ctxprune::rerank::gp::KernelRows;
use ctxprune::rerank::{
    kernel_rows_in, Hyperparameters, KernelChoice, Method, Precomputed, Prior, RerankConfig, RerankOptions,
    Reranker, RowPrecision,
};
use ctxprune::rng::Rng;
use ctxprune::similarity::{Kernel, KernelKind};
use ctxprune::{Engine, Pool};
use rayon::prelude::*;
use std::hint::black_box;
use std::time::Duration;

fn benches(c: &mut Criterion) {
    let p = synthetic_pool(10_000, 1024, 50, 5);
    let k = Kernel::with_median_heuristic(KernelKind::Vmf, &p.embeddings).unwrap();
    let cpu = Engine::cpu();
    let pool = Pool::from_embeddings(&cpu, &p.embeddings).unwrap();
    let cfg = |budget: usize, prec: RowPrecision| {
        let mut c = RerankConfig::new(Method::BoundaryMorph, budget, 100);
        c.kernel = KernelChoice::Fixed(k);
        c.row_precision = prec;
        c
    };
    let mut rng = Rng::new(3);
    let scores: Vec<f64> = (0..10_000).map(|_| rng.uniform()).collect();
    // The rows a B = 500 run reads, in its order.
    let calls = Reranker::new(&cpu, cfg(500, RowPrecision::F32))
        .unwrap()
        .rerank(
            &pool,
            &p.query,
            &mut Precomputed::new(scores.clone(), 500).unwrap(),
        )
        .unwrap()
        .scored;

    let mut g = c.benchmark_group("cpu_bandwidth");
    g.sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    let e = pool.embeddings().as_slice();
    let d = pool.dim();
    g.throughput(Throughput::BytesDecimal((e.len() * 4) as u64));
    g.bench_function("stream_read_f32_pool", |b| {
        b.iter(|| {
            let s: Vec<f64> = e.par_chunks(1024 * d).map(ctxprune::backend::cpu::sum).collect();
            black_box(s.iter().sum::<f64>())
        })
    });
    // 50 rows per sample: the first 50 of the run's calls.
    let rows = &calls[..50];
    for prec in RowPrecision::ALL {
        let src = kernel_rows_in(&pool, &p.query, k, prec).unwrap();
        g.throughput(Throughput::BytesDecimal(
            (rows.len() * src.row_pass_bytes()) as u64,
        ));
        let mut out = vec![0.0; 10_000];
        g.bench_function(BenchmarkId::new("kernel_row_passes_x50", prec.name()), |b| {
            b.iter(|| {
                for &j in rows {
                    src.row(j, &mut out);
                }
                black_box(out[0])
            })
        });
    }
    g.finish();

    let mut g = c.benchmark_group("cpu");
    g.sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(6));
    for budget in [100usize, 500] {
        for prec in RowPrecision::ALL {
            g.bench_with_input(
                // f32 keeps the name the README's earlier rows were measured under.
                BenchmarkId::new(
                    match prec {
                        RowPrecision::F32 => "boundary_morph_n10000_k100".to_string(),
                        p => format!("boundary_morph_n10000_k100_{}", p.name()),
                    },
                    budget,
                ),
                &budget,
                |b, &budget| {
                    let r = Reranker::new(&cpu, cfg(budget, prec)).unwrap();
                    b.iter(|| {
                        let mut o = Precomputed::new(scores.clone(), budget).unwrap();
                        black_box(r.rerank(&pool, &p.query, &mut o).unwrap())
                    })
                },
            );
        }
    }
    // The score prior and the feedback prior (its re-shapings at 10, 20, ..., 90 calls: a
    // pass of cosines over the pool and two passes over V each, no kernel row), and with
    // auto's neighbour share (a pass of cosines for each document scored at least 0.5,
    // once: about half of the uniform scores).
    for (name, prior, share) in [
        ("boundary_morph_n10000_k100_score", Prior::Score, 0.0),
        ("boundary_morph_n10000_k100_feedback", Prior::Feedback, 0.0),
        (
            "boundary_morph_n10000_k100_feedback_neighbours",
            Prior::Feedback,
            ctxprune::rerank::auto::AUTO_NEIGHBOURS,
        ),
    ] {
        let budget = 100usize;
        let mut fc = cfg(budget, RowPrecision::F32);
        fc.prior = prior;
        fc.feedback_neighbours = share;
        let r = Reranker::new(&cpu, fc).unwrap();
        g.bench_with_input(BenchmarkId::new(name, budget), &budget, |b, &budget| {
            b.iter(|| {
                let mut o = Precomputed::new(scores.clone(), budget).unwrap();
                black_box(r.rerank(&pool, &p.query, &mut o).unwrap())
            })
        });
    }
    // Hyperparameters by the evidence: fits at 10, 20, 40 and 80 calls (B = 100), each
    // followed by a rebuild of the GP that replays the calls so far.
    let budget = 100usize;
    let mut ec = cfg(budget, RowPrecision::F32);
    ec.hyperparameters = Hyperparameters::Evidence;
    let r = Reranker::new(&cpu, ec).unwrap();
    g.bench_with_input(
        BenchmarkId::new("boundary_morph_n10000_k100_evidence", budget),
        &budget,
        |b, &budget| {
            b.iter(|| {
                let mut o = Precomputed::new(scores.clone(), budget).unwrap();
                black_box(r.rerank(&pool, &p.query, &mut o).unwrap())
            })
        },
    );
    let low: Vec<f64> = scores.iter().map(|s| 0.4 * s).collect();
    let mut ac = RerankOptions::new("auto", budget, 100).config().unwrap();
    ac.kernel = KernelChoice::Fixed(k);
    let r = Reranker::new(&cpu, ac).unwrap();
    for (name, s, switched) in [
        ("auto_n10000_k100_switched", &low, true),
        ("auto_n10000_k100_kept", &scores, false),
    ] {
        let got = r
            .rerank(&pool, &p.query, &mut Precomputed::new(s.clone(), budget).unwrap())
            .unwrap();
        assert_eq!(got.switched, switched, "{name}");
        g.bench_with_input(BenchmarkId::new(name, budget), &budget, |b, &budget| {
            b.iter(|| {
                let mut o = Precomputed::new(s.clone(), budget).unwrap();
                black_box(r.rerank(&pool, &p.query, &mut o).unwrap())
            })
        });
    }
    g.finish();
    let gpu = Engine::auto();
    if let Some(why) = gpu.fallback_reason() {
        eprintln!("cuda benches skipped: {why}");
        return;
    }
    let gpool = Pool::from_embeddings(&gpu, &p.embeddings).unwrap();
    let r = Reranker::new(&gpu, cfg(500, RowPrecision::F32)).unwrap();
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
