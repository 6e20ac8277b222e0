//! A decisions log from an untrusted source (`ctxprune pipeline train --log`):
//! `parse_decisions` is `Err` on anything malformed (a repeated key: a second `keep`
//! used to flip the label; an unknown field; ragged embeddings), never a panic; what it
//! accepts has one embedding width and finite features.
#![no_main]

use ctxprune::controller::parse_decisions;
use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let Ok(d) = parse_decisions(Path::new("decisions.jsonl"), data, None) else {
        return;
    };
    assert!(!d.is_empty());
    let dim = d[0].embedding_dim();
    for x in &d {
        assert_eq!(x.embedding_dim(), dim);
        assert!(
            x.features().iter().all(|v| v.is_finite()),
            "line {}: non-finite feature",
            x.line
        );
    }
});
