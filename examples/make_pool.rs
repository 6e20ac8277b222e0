//! Writes a seeded synthetic pool as .npy files (embeddings, query, costs, oracle scores)
//! for CLI measurements: `cargo run --release --example make_pool -- N D OUTDIR`
//! (the same as `ctxprune make-pool --n N --d D --out OUTDIR`).
use std::path::Path;

fn main() -> ctxprune::Result<()> {
    let a: Vec<String> = std::env::args().collect();
    let n: usize = a.get(1).and_then(|s| s.parse().ok()).unwrap_or(10_000);
    let d: usize = a.get(2).and_then(|s| s.parse().ok()).unwrap_or(1024);
    let dir = Path::new(a.get(3).map_or("out", String::as_str)).to_path_buf();
    ctxprune::demo::data::write_pool(&dir, n, d, 7)?;
    println!("wrote {n} x {d} to {}", dir.display());
    Ok(())
}
