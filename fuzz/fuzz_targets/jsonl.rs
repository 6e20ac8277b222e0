//! JSON-lines and JSON bytes from an untrusted source: embeddings rows, pool texts and
//! arrays of numbers (costs, queries). `Err` on anything malformed, never a panic; what is
//! accepted is consistent (no ragged rows, no non-finite or zero-norm rows, optional
//! columns present for every row or none).
#![no_main]

use ctxprune::io::{parse_embeddings, parse_numbers, parse_texts, EmbeddingsFormat};
use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let path = Path::new("f.jsonl");
    if let Ok(loaded) = parse_embeddings(path, EmbeddingsFormat::JsonLines, data, None) {
        let e = &loaded.embeddings;
        assert!(e.rows() > 0 && e.dim() > 0, "empty matrix accepted");
        assert_eq!(e.rows() * e.dim(), e.as_slice().len());
        for r in 0..e.rows() {
            let row = e.row(r);
            assert!(row.iter().all(|v| v.is_finite()), "row {r}: non-finite value");
            assert!(row.iter().any(|&v| v != 0.0), "row {r}: zero norm accepted");
        }
        if let Some(t) = &loaded.tokens {
            assert_eq!(t.len(), e.rows());
            assert!(
                t.iter().all(|&x| x.is_finite() && x > 0.0),
                "bad token count accepted"
            );
        }
        if let Some(t) = &loaded.texts {
            assert_eq!(t.len(), e.rows());
        }
    }
    if let Ok((texts, tokens)) = parse_texts(path, data) {
        assert!(!texts.is_empty());
        if let Some(t) = tokens {
            assert_eq!(t.len(), texts.len());
            assert!(
                t.iter().all(|&x| x.is_finite() && x > 0.0),
                "bad token count accepted"
            );
        }
    }
    if let Ok(v) = parse_numbers(Path::new("f.json"), data) {
        assert!(v.iter().all(|x| x.is_finite()), "non-finite number accepted");
    }
});
