//! A request body of `ctxprune serve` from an untrusted client: `Fields::parse` refuses
//! anything that is not one JSON object without repeated keys, and every typed reader
//! (the ones the endpoints call) either returns a value that holds its contract or an
//! error naming the field; nothing panics, and a parse never builds a JSON tree.
//!
//! Input layout: the body's bytes as sent.
#![no_main]

use ctxprune::io::fields::Fields;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(mut f) = Fields::parse(data) else {
        // Whatever the body parser refuses, the JSON reader refuses too (or it is not an
        // object at the top).
        if let Ok(v) = ctxprune::io::json::value(data) {
            assert!(!v.is_object(), "an object was refused");
        }
        return;
    };
    // The body is one object with no repeated key anywhere: serde_json agrees on its keys.
    let v = ctxprune::io::json::value(data).expect("the JSON reader accepts what Fields did");
    assert!(v.is_object());
    let scan = *f.body_scan();
    assert!(scan.values >= 1 && scan.depth >= 1);
    if let Ok(Some(s)) = f.str("method") {
        assert_eq!(v["method"].as_str(), Some(s.as_str()));
    }
    if let Ok(Some(k)) = f.count("k") {
        assert_eq!(v["k"].as_u64(), Some(k as u64));
    }
    if let Ok(Some(x)) = f.num("lambda") {
        assert!(x.is_finite());
    }
    let _ = f.bool("keep_errors");
    if let Ok(Some(c)) = f.nums("costs") {
        assert!(c.iter().all(|x| x.is_finite()));
        assert_eq!(v["costs"].as_array().map(Vec::len), Some(c.len()));
    }
    if let Ok(Some(r)) = f.counts("retained") {
        assert_eq!(v["retained"].as_array().map(Vec::len), Some(r.len()));
    }
    if let Ok(Some(t)) = f.strs("texts") {
        assert_eq!(v["texts"].as_array().map(Vec::len), Some(t.len()));
    }
    if let Ok(Some(q)) = f.vector("query") {
        assert!(q.iter().all(|x| x.is_finite()));
    }
    if let Ok(Some(e)) = f.matrix("embeddings") {
        assert_eq!(e.as_slice().len(), e.rows() * e.dim());
        assert!(e.rows() >= 1 && e.dim() >= 1);
        assert!(e.as_slice().iter().all(|x| x.is_finite()));
    }
    if let Some(raw) = f.raw("messages") {
        // A field's text is itself well-formed JSON.
        let s = Fields::scan(raw);
        assert!(s.values >= 1 && s.values <= scan.values);
    }
    let _ = f.done();
});
