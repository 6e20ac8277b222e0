//! A logged research run from an untrusted source (`ctxprune pipeline --input`):
//! `RunLog::parse` is `Err` on anything malformed (a repeated key, a token count past
//! the largest accepted, a cycle in the tree), never a panic; a log it accepts replays
//! under the default pipeline to finite accounting.
#![no_main]

use ctxprune::pipeline::replay::RunLog;
use ctxprune::pipeline::Pipeline;
use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(log) = RunLog::parse(text, Path::new("run.jsonl"), None) else {
        return;
    };
    assert!(log.dim() > 0);
    let tokens = log
        .items()
        .iter()
        .map(|i| i.tokens)
        .chain(log.subqueries().iter().map(|s| s.tokens));
    for t in tokens {
        assert!(
            t.is_finite() && t > 0.0 && t <= ctxprune::limits::MAX_TOKEN_COUNT as f64,
            "tokens {t}"
        );
    }
    if let Ok(out) = log.replay(Pipeline::default()) {
        let j = out.report.to_json();
        assert!(!has_null(&j), "non-finite accounting: {j}");
    }
});

/// Whether a null is anywhere in `v` (serde_json writes a non-finite number as null).
fn has_null(v: &serde_json::Value) -> bool {
    match v {
        serde_json::Value::Null => true,
        serde_json::Value::Array(a) => a.iter().any(has_null),
        serde_json::Value::Object(o) => o.values().any(has_null),
        _ => false,
    }
}
