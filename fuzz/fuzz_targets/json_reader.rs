//! The crate's one JSON reader (`io::json`) against serde_json on untrusted text: it
//! accepts exactly what serde_json accepts, less the texts that repeat a key in some
//! object or use one of serde_json's private keys; what it accepts it reads to the same value; its counts bound the parse.
//!
//! Input layout: the text's bytes.
#![no_main]

use ctxprune::io::json;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let ours = json::value(data);
    let scan = json::scan(data);
    // The two passes agree on what they accept, and on why they refuse.
    assert_eq!(ours.is_ok(), scan.is_ok(), "{ours:?} vs {scan:?}");
    let text = data.strip_prefix(b"\xef\xbb\xbf").unwrap_or(data);
    let theirs: Result<serde_json::Value, _> = serde_json::from_slice(text);
    match (&ours, &theirs) {
        (Ok(a), Ok(b)) => assert_eq!(a, b),
        (Ok(_), Err(e)) => panic!("accepted what serde_json refuses: {e}"),
        // serde_json keeps the last of a repeated key, and reads an object with one of
        // its private keys as the raw JSON in its string; we refuse both, and say so.
        (Err(e), Ok(_)) => assert!(
            e.starts_with("duplicate key") || e.starts_with("reserved key"),
            "{e}"
        ),
        (Err(e), Err(_)) => assert!(!e.is_empty() && !e.contains('\n'), "{e}"),
    }
    if let (Ok(v), Ok(s)) = (&ours, &scan) {
        fn count(v: &serde_json::Value) -> usize {
            1 + match v {
                serde_json::Value::Array(a) => a.iter().map(count).sum(),
                serde_json::Value::Object(o) => o.values().map(count).sum(),
                _ => 0,
            }
        }
        assert_eq!(count(v), s.values);
        let typed: serde_json::Value = json::from_slice(data).expect("from_slice accepts it too");
        assert_eq!(&typed, v);
    }
});
