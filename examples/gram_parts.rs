//! Gram overhead breakdown (dev aid): `cargo run --release --example gram_parts`.
use ctxprune::demo::synthetic_pool;
use ctxprune::similarity::{gram_into, Kernel};
use std::time::Instant;

fn main() {
    let n = 10_000;
    let p = synthetic_pool(n, 1024, 50, 1);
    let mut u = p.embeddings.clone();
    u.normalize().unwrap();
    let mut buf = vec![0.0f32; n * n];
    let x = p.embeddings.as_slice();
    for (name, e, k) in [
        ("cos unit", &u, Kernel::Cosine),
        ("cos raw", &p.embeddings, Kernel::Cosine),
        ("vmf raw", &p.embeddings, Kernel::Vmf { kappa: 10.0 }),
    ] {
        let mut ts = vec![];
        for _ in 0..3 {
            let t = Instant::now();
            gram_into(e, k, &mut buf).unwrap();
            ts.push(t.elapsed().as_secs_f64());
        }
        ts.sort_by(f64::total_cmp);
        println!("{name}: {:.3} s", ts[1]);
    }
    let mut ts = vec![];
    for _ in 0..3 {
        let t = Instant::now();
        ctxprune::backend::cpu::gemm_abt(x, x, 1024, &mut buf, n, true);
        ts.push(t.elapsed().as_secs_f64());
    }
    ts.sort_by(f64::total_cmp);
    println!("full sgemm: {:.3} s (half {:.3})", ts[1], ts[1] / 2.0);
    let h = 5000;
    let mut ts = vec![];
    for _ in 0..3 {
        let t = Instant::now();
        ctxprune::backend::cpu::gemm_abt(&x[..h * 1024], &x[h * 1024..], 1024, &mut buf[h..], n, true);
        ts.push(t.elapsed().as_secs_f64());
    }
    ts.sort_by(f64::total_cmp);
    println!(
        "one 5000x5000 strided block: {:.3} s  ({:.0} GFLOP/s)",
        ts[1],
        2.0 * 5000.0 * 5000.0 * 1024.0 / ts[1] / 1e9
    );
}
