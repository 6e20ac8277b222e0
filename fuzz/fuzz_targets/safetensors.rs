//! safetensors bytes from an untrusted source, with an optional tensor name (as in
//! `FILE.safetensors:NAME`): `Err` on anything malformed, never a panic.
//!
//! Input layout: byte 0 is the name's length `k`; `0xff` means no name. With a name, the
//! next `k` bytes are the name (UTF-8, lossily) and the rest is the file; without, the
//! file starts at byte 1.
#![no_main]

use ctxprune::io::{parse_embeddings, EmbeddingsFormat};
use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let Some((&k, rest)) = data.split_first() else {
        return;
    };
    let (name, file) = if k == 0xff || usize::from(k) > rest.len() {
        (None, rest)
    } else {
        let (n, f) = rest.split_at(usize::from(k));
        (Some(String::from_utf8_lossy(n).into_owned()), f)
    };
    let path = Path::new("f.safetensors");
    if let Ok(loaded) = parse_embeddings(path, EmbeddingsFormat::Safetensors, file, name.as_deref()) {
        let e = &loaded.embeddings;
        assert!(e.rows() > 0 && e.dim() > 0, "empty matrix accepted");
        assert_eq!(e.rows() * e.dim(), e.as_slice().len());
        assert!(
            e.as_slice().iter().all(|v| v.is_finite()),
            "non-finite value accepted"
        );
        // At least two bytes (F16/BF16) per value.
        assert!(e.as_slice().len() * 2 <= file.len());
        assert!(loaded.tokens.is_none() && loaded.texts.is_none());
    }
});
