//! A Q/K tensors file from an untrusted source (`ctxprune attention mass --tensors`):
//! opening and reading the first rows is `Err` on anything malformed, never a panic, a
//! hang or an allocation the file's size does not back.
#![no_main]

use ctxprune::attention::tensors::TensorFile;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let path = std::env::temp_dir().join(format!("ctxprune-fuzz-qk-{}.safetensors", std::process::id()));
    if std::fs::write(&path, data).is_err() {
        return;
    }
    if let Ok(mut f) = TensorFile::open(&path, None) {
        let n = f.layout().n;
        if n > 0 {
            if let Ok(qk) = f.read(&[0, n - 1][..if n > 1 { 2 } else { 1 }]) {
                assert!(qk.layers().iter().all(|l| l.q.iter().chain(&l.k).all(|v| v.is_finite())));
            }
        }
    }
});
