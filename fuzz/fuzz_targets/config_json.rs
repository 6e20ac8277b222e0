//! A HuggingFace `config.json` from an untrusted source: `ModelShape::from_json` returns
//! `Err` on anything malformed or out of range, and a shape it accepts gives finite FLOPs
//! (or an `Err` naming the context) at any context length.
//!
//! Input layout: bytes 0..4 are the context length (u32, little-endian; `u32::MAX` stands
//! for `usize::MAX`), the rest is the file's text.
#![no_main]

use ctxprune::cost::{ModelShape, MAX_TOKENS};
use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    if data.len() < 4 {
        return;
    }
    let (head, body) = data.split_at(4);
    let raw = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
    let context = if raw == u32::MAX { usize::MAX } else { raw as usize };
    let Ok(text) = std::str::from_utf8(body) else {
        return;
    };
    let Ok(shape) = ModelShape::from_json(text, Path::new("config.json")) else {
        return;
    };
    shape.validate().expect("a shape from_json accepted validates");
    match shape.flops(context) {
        Ok(f) => {
            assert!((1..=MAX_TOKENS).contains(&context), "context {context} accepted");
            assert!(f.total.is_finite() && f.total >= 0.0, "total {}", f.total);
            assert!(f.per_layer.iter().all(|x| x.is_finite() && *x >= 0.0));
            assert!(!f.per_layer.is_empty(), "no layers");
        }
        // Out-of-range contexts (0, > MAX_TOKENS) and totals too large to be finite.
        Err(e) => assert!(!e.to_string().is_empty()),
    }
    // Small contexts always work for a validated shape.
    let one = shape.flops(1).expect("FLOPs at context 1");
    assert!(one.total.is_finite());
});
