//! Finding the NVRTC and cuBLAS libraries where CUDA installs put them: the loader path
//! first, then each root of [`EngineOptions::cuda_roots`], then `/usr/local/cuda`. A
//! library found by full path is loaded and kept, so cudarc's later open by file name
//! finds the loaded copy. A success is remembered for the process; a failure is not (a
//! later open with other roots may succeed).

use super::{raw, unavailable};
use crate::backend::EngineOptions;
use crate::error::Result;
use std::sync::OnceLock;

fn ensure(
    found: &'static OnceLock<String>,
    names: &[&str],
    present: fn() -> bool,
    what: &str,
    opts: &EngineOptions,
) -> Result<String> {
    if let Some(p) = found.get() {
        return Ok(p.clone());
    }
    let dirs = raw::search_dirs(&opts.cuda_roots);
    match raw::preload(names, &dirs) {
        Some(p) if present() => Ok(found.get_or_init(|| p).clone()),
        _ => Err(unavailable(
            None,
            format!(
                "{what} ({}) not found on the loader path or in {dirs:?}; add its CUDA root to the engine options (the CLI reads CUDA_HOME) or LD_LIBRARY_PATH",
                names[0]
            ),
        )),
    }
}

/// Makes NVRTC loadable; the path it was loaded from, or where it was looked for.
pub fn ensure_nvrtc(opts: &EngineOptions) -> Result<String> {
    static FOUND: OnceLock<String> = OnceLock::new();
    ensure(
        &FOUND,
        &["libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"],
        raw::nvrtc_present,
        "NVRTC",
        opts,
    )
}

/// Makes cuBLAS (and cuBLASLt, which it needs) loadable.
pub fn ensure_cublas(opts: &EngineOptions) -> Result<String> {
    static FOUND: OnceLock<String> = OnceLock::new();
    let dirs = raw::search_dirs(&opts.cuda_roots);
    // cuBLAS needs cuBLASLt: load it first so cuBLAS's own dependency resolves.
    let _ = raw::preload(
        &["libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"],
        &dirs,
    );
    ensure(
        &FOUND,
        &["libcublas.so.13", "libcublas.so.12", "libcublas.so"],
        raw::cublas_present,
        "cuBLAS",
        opts,
    )
}
