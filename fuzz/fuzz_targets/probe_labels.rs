//! A probe labels file from an untrusted source (`ctxprune probe --labels`):
//! `parse_labels` is `Err` on anything malformed (a repeated key, an unknown field, a
//! duplicate id, a URL that does not parse), never a panic; what it accepts has non-empty
//! ids and trajectories, unique ids, and 1-based lines in file order.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::collections::HashSet;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(labels) = ctxprune::probe::parse_labels(Path::new("labels.jsonl"), text) else {
        return;
    };
    assert!(!labels.is_empty());
    let mut ids = HashSet::new();
    let mut prev = 0;
    for l in &labels {
        assert!(!l.id.trim().is_empty() && !l.trajectory.trim().is_empty());
        assert!(ids.insert(l.id.clone()), "duplicate id {} accepted", l.id);
        assert!(l.line > prev, "lines out of order");
        prev = l.line;
    }
});
