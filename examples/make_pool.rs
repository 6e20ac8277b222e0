//! Writes a seeded synthetic pool as .npy files (embeddings, query, costs) for CLI
//! measurements: `cargo run --release --example make_pool -- N D OUTDIR`.
use ctxprune::demo::synthetic_pool;
use ctxprune::io::write_npy_f32;
use std::path::Path;

fn main() -> ctxprune::Result<()> {
    let a: Vec<String> = std::env::args().collect();
    let n: usize = a.get(1).and_then(|s| s.parse().ok()).unwrap_or(10_000);
    let d: usize = a.get(2).and_then(|s| s.parse().ok()).unwrap_or(1024);
    let dir = Path::new(a.get(3).map_or("out", String::as_str)).to_path_buf();
    std::fs::create_dir_all(&dir).map_err(|e| ctxprune::Error::io(&dir, e))?;
    let p = synthetic_pool(n, d, 50, 7);
    write_npy_f32(&dir.join("emb.npy"), n, d, p.embeddings.as_slice())?;
    write_npy_f32(&dir.join("query.npy"), 1, d, &p.query)?;
    let costs: Vec<f32> = p.costs.iter().map(|&c| c as f32).collect();
    write_npy_f32(&dir.join("costs.npy"), 1, n, &costs)?;
    println!("wrote {n} x {d} to {}", dir.display());
    Ok(())
}
