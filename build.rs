//! Embeds the CUDA C sources of kernels/ into the crate (a manifest of names, sources
//! and one content hash), so a release binary carries its kernels and NVRTC compiles
//! them at run time. Needs no CUDA toolkit.

use std::fmt::Write as _;
use std::path::Path;

fn main() {
    println!("cargo:rerun-if-changed=kernels");
    let dir = Path::new("kernels");
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| matches!(p.extension().and_then(|e| e.to_str()), Some("cu" | "cuh")))
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    // FNV-1a over names and contents: a cache key for compiled modules.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut out = String::from("/// Kernel sources embedded at build time: (file name, CUDA C source).\n");
    out.push_str("pub const SOURCES: &[(&str, &str)] = &[\n");
    for f in &files {
        println!("cargo:rerun-if-changed={}", f.display());
        let name = f
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_string();
        let text = std::fs::read_to_string(f).unwrap_or_default();
        for b in name.bytes().chain(text.bytes()) {
            hash ^= u64::from(b);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
        let abs = std::fs::canonicalize(f).unwrap_or_else(|_| f.clone());
        let _ = writeln!(
            out,
            "    ({name:?}, include_str!({:?})),",
            abs.display().to_string()
        );
    }
    out.push_str("];\n");
    let _ = writeln!(
        out,
        "/// FNV-1a hash of every kernel file's name and contents.\npub const SOURCES_HASH: u64 = {hash:#x};"
    );
    let dst = Path::new(&std::env::var("OUT_DIR").unwrap_or_else(|_| ".".into())).join("kernels.rs");
    if let Err(e) = std::fs::write(&dst, out) {
        println!("cargo:warning=cannot write {}: {e}", dst.display());
    }
}
