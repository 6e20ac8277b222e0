//! `.npy` bytes from an untrusted source: the embeddings parser and the f32 array parser
//! return `Err` on anything malformed, never panic, never allocate past the input's size.
#![no_main]

use ctxprune::io::{parse_embeddings, parse_npy_f32, EmbeddingsFormat};
use libfuzzer_sys::fuzz_target;
use std::path::Path;

/// KNOWN BUG, skipped here so the campaign explores the rest (remove the skip once it is
/// fixed; tests/fuzz_regressions.rs holds the reproducer): npyz parses the header with
/// py_literal, a pest grammar that backtracks exponentially in the nesting of brackets
/// (about 3x per level: a header of 10 '{' takes a second, 20 take hours), and ctxprune
/// hands it any header under 1 MiB. Headers nesting deeper than this are skipped.
const MAX_HEADER_NESTING: usize = 6;

/// The deepest bracket nesting in the `.npy` header of `data` (0 when there is none).
fn header_nesting(data: &[u8]) -> usize {
    let header = match data.get(6) {
        Some(1) if data.len() >= 10 => {
            let n = usize::from(u16::from_le_bytes([data[8], data[9]]));
            &data[10..data.len().min(10 + n)]
        }
        Some(2 | 3) if data.len() >= 12 => {
            let n = u32::from_le_bytes([data[8], data[9], data[10], data[11]]) as usize;
            &data[12..data.len().min(12usize.saturating_add(n))]
        }
        _ => return 0,
    };
    let (mut depth, mut max) = (0usize, 0usize);
    for &b in header {
        match b {
            b'{' | b'[' | b'(' => {
                depth += 1;
                max = max.max(depth);
            }
            b'}' | b']' | b')' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    max
}

fuzz_target!(|data: &[u8]| {
    if header_nesting(data) > MAX_HEADER_NESTING {
        return;
    }
    let path = Path::new("f.npy");
    if let Ok(loaded) = parse_embeddings(path, EmbeddingsFormat::Npy, data, None) {
        let e = &loaded.embeddings;
        assert!(e.rows() > 0 && e.dim() > 0, "empty matrix accepted");
        assert_eq!(e.rows() * e.dim(), e.as_slice().len());
        assert!(
            e.as_slice().iter().all(|v| v.is_finite()),
            "non-finite value accepted"
        );
        // Each value is at least one byte of the file: a header cannot conjure data.
        assert!(e.as_slice().len() <= data.len());
        assert!(loaded.tokens.is_none() && loaded.texts.is_none());
    }
    // A tensor name applies to safetensors only.
    assert!(parse_embeddings(path, EmbeddingsFormat::Npy, data, Some("x")).is_err());
    if let Ok((shape, values)) = parse_npy_f32(path, data) {
        let count = shape.iter().try_fold(1usize, |a, &s| a.checked_mul(s));
        assert_eq!(
            count,
            Some(values.len()),
            "shape {shape:?} vs {} values",
            values.len()
        );
        assert!(values.len() <= data.len());
    }
});
