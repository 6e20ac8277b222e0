//! BoundaryMORPH step breakdown (dev aid): `cargo run --release --example rerank_parts`.
use ctxprune::demo::synthetic_pool;
use ctxprune::rerank::gp::Gp;
use ctxprune::rerank::{boundary_pick, kernel_rows};
use ctxprune::rng::Rng;
use ctxprune::similarity::{Kernel, KernelKind};
use std::time::Instant;

fn main() {
    let n = 10_000;
    let p = synthetic_pool(n, 1024, 50, 5);
    let k = Kernel::with_median_heuristic(KernelKind::Vmf, &p.embeddings).unwrap();
    let pool = ctxprune::Pool::from_embeddings(&ctxprune::Engine::cpu(), &p.embeddings).unwrap();
    let dk = kernel_rows(&pool, &p.query, k).unwrap();
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
    println!(
        "posterior {:.1} ms, pick {:.1} ms, observe {:.1} ms",
        t_post * 1e3,
        t_pick * 1e3,
        t_obs * 1e3
    );
}
