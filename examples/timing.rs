//! Quick breakdown of the Gram's parts (dev aid): `cargo run --release --example timing`.
use ctxprune::backend::cpu;
use ctxprune::demo::synthetic_pool;
use std::time::Instant;

fn main() {
    let n: usize = std::env::args().nth(1).map_or(10_000, |s| s.parse().unwrap());
    let d = 1024;
    let p = synthetic_pool(n, d, 50, 1);
    let data = p.embeddings.as_slice();
    let mut out = vec![0.0f32; n * n];
    for _ in 0..3 {
        let t = Instant::now();
        cpu::gemm_abt(data, data, d, &mut out, n, true);
        println!(
            "full gemm par: {:.3} s  ({:.1} GFLOP/s)",
            t.elapsed().as_secs_f64(),
            2.0 * (n * n * d) as f64 / t.elapsed().as_secs_f64() / 1e9
        );
    }
    let t = Instant::now();
    let g = ctxprune::similarity::gram(&p.embeddings, ctxprune::similarity::Kernel::Cosine).unwrap();
    println!("gram cosine: {:.3} s", t.elapsed().as_secs_f64());
    let t = Instant::now();
    let g2 =
        ctxprune::similarity::gram(&p.embeddings, ctxprune::similarity::Kernel::Vmf { kappa: 10.0 }).unwrap();
    println!("gram vmf: {:.3} s", t.elapsed().as_secs_f64());
    let mut u = p.embeddings.clone();
    u.normalize().unwrap();
    let t = Instant::now();
    let _g3 = ctxprune::similarity::gram(&u, ctxprune::similarity::Kernel::Cosine).unwrap();
    println!("gram cosine unit: {:.3} s", t.elapsed().as_secs_f64());
    let mut v = g.clone();
    let t = Instant::now();
    ctxprune::similarity::Kernel::Vmf { kappa: 10.0 }.apply_slice(&mut v);
    println!(
        "vmf apply_slice 1 thread all n^2: {:.3} s",
        t.elapsed().as_secs_f64()
    );
    let h = n / 2;
    let mut blk = vec![0.0f32; h * h];
    let t = Instant::now();
    cpu::gemm_abt(&data[..h * d], &data[h * d..], d, &mut blk, h, true);
    println!(
        "one off-diagonal gemm {h}x{h}: {:.3} s",
        t.elapsed().as_secs_f64()
    );
    let t = Instant::now();
    let s: f32 = g.iter().map(|&c| (10.0 * (c - 1.0)).exp()).sum();
    println!(
        "exp alone (1 thread): {:.3} s {s} {}",
        t.elapsed().as_secs_f64(),
        g2[1]
    );
}

#[allow(dead_code)]
fn parts() {}
