//! `.npy` bytes from an untrusted source: the embeddings parser and the f32 array parser
//! return `Err` on anything malformed, never panic, never allocate past the input's size.
#![no_main]

use ctxprune::io::{parse_embeddings, parse_npy_f32, EmbeddingsFormat};
use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
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
