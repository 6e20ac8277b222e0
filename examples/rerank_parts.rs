//! BoundaryMORPH step breakdown (dev aid): `cargo run --release --example rerank_parts
//! [f32|bf16|f16]`; the kernel-row passes are timed inside the observations, and a plain
//! streaming read of the pool (a parallel sum) is timed beside them.
use ctxprune::demo::synthetic_pool;
use ctxprune::rerank::gp::{Gp, KernelRows};
use ctxprune::rerank::{boundary_pick, kernel_rows_in, RowPrecision};
use ctxprune::rng::Rng;
use ctxprune::similarity::{Kernel, KernelKind};
use rayon::prelude::*;
use std::time::Instant;

/// The pool kernel with its row passes timed.
struct Timed<'a, K: KernelRows> {
    inner: &'a K,
    spent: std::sync::Mutex<(f64, usize)>,
}

impl<K: KernelRows> KernelRows for Timed<'_, K> {
    fn len(&self) -> usize {
        self.inner.len()
    }
    fn row(&self, j: usize, out: &mut [f64]) {
        let t = Instant::now();
        self.inner.row(j, out);
        let mut s = self.spent.lock().unwrap();
        s.0 += t.elapsed().as_secs_f64();
        s.1 += 1;
    }
    fn query_row(&self, out: &mut [f64]) {
        self.inner.query_row(out)
    }
    fn get(&self, i: usize, j: usize) -> f64 {
        self.inner.get(i, j)
    }
}

fn main() {
    let prec: RowPrecision = std::env::args()
        .nth(1)
        .as_deref()
        .unwrap_or("f32")
        .parse()
        .unwrap();
    let n = 10_000;
    let p = synthetic_pool(n, 1024, 50, 5);
    let k = Kernel::with_median_heuristic(KernelKind::Vmf, &p.embeddings).unwrap();
    let pool = ctxprune::Pool::from_embeddings(&ctxprune::Engine::cpu(), &p.embeddings).unwrap();
    let t = Instant::now();
    let pk = kernel_rows_in(&pool, &p.query, k, prec).unwrap();
    let t_copy = t.elapsed().as_secs_f64();
    let pass_bytes = pk.row_pass_bytes() as f64;
    let dk = Timed {
        inner: &pk,
        spent: Default::default(),
    };
    let e = pool.embeddings().as_slice();
    let d = pool.dim();
    let mut t_stream = f64::INFINITY;
    for _ in 0..20 {
        let t = Instant::now();
        let s: f64 = e
            .par_chunks(1024 * d)
            .map(ctxprune::backend::cpu::sum)
            .collect::<Vec<f64>>()
            .iter()
            .sum();
        std::hint::black_box(s);
        t_stream = t_stream.min(t.elapsed().as_secs_f64());
    }
    let mut rng = Rng::new(3);
    let scores: Vec<f64> = (0..n).map(|_| rng.uniform()).collect();
    let mu0: Vec<f64> = (0..n).map(|i| (n - 1 - i) as f64 / (n - 1) as f64).collect();
    let mut gp = Gp::new(&dk, mu0, 1.0).unwrap();
    let (mut mean, mut var) = (vec![0.0; n], vec![0.0; n]);
    let mut y = vec![None; n];
    let (mut t_post, mut t_pick, mut t_obs) = (0.0, 0.0, 0.0);
    for _ in 0..500 {
        let t = Instant::now();
        gp.posterior(&mut mean, &mut var).unwrap();
        for i in 0..n {
            if let Some(s) = y[i] {
                mean[i] = s;
                var[i] = 0.0;
            }
        }
        t_post += t.elapsed().as_secs_f64();
        let t = Instant::now();
        let j = boundary_pick(&mean, &var, &y, 100).unwrap().unwrap();
        t_pick += t.elapsed().as_secs_f64();
        let t = Instant::now();
        y[j] = Some(scores[j]);
        gp.observe(j, scores[j]).unwrap();
        t_obs += t.elapsed().as_secs_f64();
    }
    let (t_rows, rows) = *dk.spent.lock().unwrap();
    println!(
        "{}: copy {:.1} ms, posterior {:.1} ms, pick {:.1} ms, observe {:.1} ms, of which {rows} kernel-row passes {:.1} ms ({:.1} GB/s); stream read of the f32 pool (best of 20) {:.2} ms ({:.1} GB/s)",
        prec.name(),
        t_copy * 1e3,
        t_post * 1e3,
        t_pick * 1e3,
        t_obs * 1e3,
        t_rows * 1e3,
        rows as f64 * pass_bytes / t_rows / 1e9,
        t_stream * 1e3,
        (e.len() * 4) as f64 / t_stream / 1e9
    );
}
