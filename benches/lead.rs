//! Issue 24's goals on the CPU, so a regression shows (the Python side, against the peers,
//! is benches/python_peers.py):
//! - `array_in/*`: a selection over a borrowed matrix of unit rows, as embedding models
//!   return them (`Selector::select_rows`: one pass checks the rows and takes their norms,
//!   then the selection reads them where they are) beside the same selection over a
//!   resident `Pool`; for rows that are not unit (`borrowed_raw`, MMR k = 10), the
//!   selection over the unit copy it makes, and that copy's fused pass alone
//!   (`unit_rows`); and one read of the matrix with the crate's arithmetic (`read`: every
//!   row's f64-accumulated dot with one vector), at N = 1,000, d = 384 (a framework
//!   component's call over the retriever's top 1,000; read on the calling thread),
//!   N = 5,000, d = 384 (the real-text pools' shape) and N = 10,000, d = 1,024;
//! - `select_many/*`: Q = 32 MMR k = 100 requests over one pool of N = 10,000, d = 1,024,
//!   as one `select_many` and as 32 `select` calls.
//!
//! Run: `cargo bench --bench lead && python3 benches/medians.py`.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use ctxprune::demo::synthetic_pool;
use ctxprune::select::{Method, Request, SelectConfig, Selector};
use ctxprune::{Embeddings, Engine, Pool};
use std::hint::black_box;
use std::time::Duration;

fn array_in(c: &mut Criterion) {
    let engine = Engine::cpu();
    let mut g = c.benchmark_group("array_in");
    g.sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    for (n, d) in [(1_000usize, 384usize), (5_000, 384), (10_000, 1_024)] {
        let p = synthetic_pool(n, d, 50, 7);
        let (x, q) = (p.embeddings.as_slice(), &p.query[..]);
        // The rows as an embedding model returns them: each divided by its norm in f32.
        let units: Vec<f32> = x
            .chunks_exact(d)
            .flat_map(|r| {
                let norm = r.iter().map(|&v| f64::from(v) * f64::from(v)).sum::<f64>().sqrt() as f32;
                r.iter().map(move |&v| v / norm)
            })
            .collect();
        let unit = Embeddings::new(n, d, units, "unit").unwrap();
        let shape = format!("n{n}_d{d}");
        g.bench_function(BenchmarkId::new("read", &shape), |b| {
            let mut out = vec![0.0; n];
            b.iter(|| ctxprune::backend::cpu::matvec(black_box(x), d, q, &mut out))
        });
        g.bench_function(BenchmarkId::new("unit_rows", &shape), |b| {
            b.iter(|| black_box(Embeddings::unit_rows(x, n, d, "x", Some(q)).unwrap()))
        });
        let pool = Pool::from_embeddings(&engine, &unit).unwrap();
        let xu = unit.as_slice();
        let req = Request {
            query: Some(q),
            ..Request::default()
        };
        for (m, k) in [
            (Method::Mmr, 10),
            (Method::Mmr, 100),
            (Method::Dpp, 10),
            (Method::Dpp, 100),
        ] {
            let s = Selector::new(&engine, SelectConfig::new(m).k(k).threshold(-1.0)).unwrap();
            let case = format!("{}_k{k}_{shape}", m.name());
            g.bench_function(BenchmarkId::new("borrowed", &case), |b| {
                b.iter(|| black_box(s.select_rows(xu, n, d, "x", &req).unwrap()))
            });
            if (m, k) == (Method::Mmr, 10) {
                g.bench_function(BenchmarkId::new("borrowed_raw", &case), |b| {
                    b.iter(|| black_box(s.select_rows(x, n, d, "x", &req).unwrap()))
                });
            }
            g.bench_function(BenchmarkId::new("pool", &case), |b| {
                b.iter(|| black_box(s.select(&pool, &req).unwrap()))
            });
        }
    }
    g.finish();
}

fn many(c: &mut Criterion) {
    let engine = Engine::cpu();
    let (n, d, q) = (10_000, 1_024, 32);
    let p = synthetic_pool(n, d, 50, 8);
    let queries: Vec<Vec<f32>> = (0..q)
        .map(|i| {
            let r = p.embeddings.row(i * 97 % n);
            r.iter().zip(&p.query).map(|(a, b)| a + 0.5 * b).collect()
        })
        .collect();
    let reqs: Vec<Request<'_>> = queries
        .iter()
        .map(|q| Request {
            query: Some(q),
            ..Request::default()
        })
        .collect();
    let pool = Pool::from_embeddings(&engine, &p.embeddings).unwrap();
    let s = Selector::new(&engine, SelectConfig::new(Method::Mmr).k(100).threshold(-1.0)).unwrap();
    let mut g = c.benchmark_group("select_many");
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(10));
    g.bench_function("mmr_k100_q32_n10000_d1024/select_many", |b| {
        b.iter(|| black_box(s.select_many(&pool, &reqs)))
    });
    g.bench_function("mmr_k100_q32_n10000_d1024/sequential", |b| {
        b.iter(|| {
            black_box(
                reqs.iter()
                    .map(|r| s.select(&pool, r).unwrap())
                    .collect::<Vec<_>>(),
            )
        })
    });
    g.finish();
}

criterion_group!(lead, array_in, many);
criterion_main!(lead);
