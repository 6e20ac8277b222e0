//! A rerank server's response body from an untrusted server: `parse_response` returns
//! `Err` on anything malformed, and what it accepts is exactly `n` scores in [0, 1].
//!
//! Input layout: bytes 0..2 are `n` (u16, little-endian, taken modulo 4097), the rest is
//! the body; it is parsed as both a TEI and a Cohere-style response.
#![no_main]

use ctxprune::rerank::http::{parse_response, Api};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let (head, body) = data.split_at(2);
    let n = usize::from(u16::from_le_bytes([head[0], head[1]])) % 4097;
    let Ok(text) = std::str::from_utf8(body) else {
        return;
    };
    for api in [Api::Tei, Api::Cohere] {
        if let Ok(scores) = parse_response(api, text, n) {
            assert_eq!(scores.len(), n, "{api:?}: {} scores for n = {n}", scores.len());
            assert!(
                scores.iter().all(|s| (0.0..=1.0).contains(s)),
                "{api:?}: a score outside [0, 1]: {scores:?}"
            );
        }
    }
});
