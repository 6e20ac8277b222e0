//! Inputs the fuzz targets (fuzz/, scripts/fuzz.sh) found to crash, hang or mislead a
//! parser, each kept as a test so the bug stays fixed. Each test names its target and
//! gives the input's bytes as the fuzzer wrote them (base64 in the comment) or as built
//! here.

use ctxprune::io::{parse_embeddings, parse_npy_f32, EmbeddingsFormat};
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Runs `f` on a thread and fails the test when it has not returned within `limit` (the
/// thread is left running: a hung parser cannot be stopped, and the test binary ends it
/// when it exits).
fn within<T: Send + 'static>(limit: Duration, what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    let start = Instant::now();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(limit) {
        Ok(v) => v,
        Err(_) => panic!("{what}: no answer after {:?} (a hang)", start.elapsed()),
    }
}

/// A `.npy` (format 1.0) with `header` as its header text, padded as numpy pads it, and
/// 16 zero bytes of data.
fn npy_with_header(header: &str) -> Vec<u8> {
    let mut h = header.to_string();
    while (10 + h.len() + 1) % 64 != 0 {
        h.push(' ');
    }
    h.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&u16::try_from(h.len()).unwrap().to_le_bytes());
    out.extend_from_slice(h.as_bytes());
    out.extend_from_slice(&[0u8; 16]);
    out
}

/// Target `npy` (timeout): a header of unbalanced '{' makes npyz's header parser
/// (py_literal, a pest grammar) backtrack exponentially, about 3x per brace: 13 take
/// seconds, 15 most of a minute, 20 hours. ctxprune hands npyz any header under 1 MiB, so
/// a 128-byte file hangs a loader or a service. It must be refused (an `Err`) at once.
/// The fuzzer's first find (base64):
/// k05VTVBZAQB2AHsnZGUoY3InOiAnPGY4Jywge3t7e3t7e3t7e3t7J2ZvcnRyYW5fb3JkZXInOiBGYWxzZSwgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgCgAAgD8AAAAAAAAAAAAAAAA=
#[test]
fn npy_header_of_nested_braces_is_refused_quickly() {
    let bytes = npy_with_header(&"{".repeat(15));
    let limit = Duration::from_secs(5);
    let b = bytes.clone();
    let r = within(limit, "parse_npy_f32 on a header of 15 '{'", move || {
        parse_npy_f32(Path::new("f.npy"), &b).map(|_| ())
    });
    assert!(r.is_err(), "a header of braces was accepted");
    let r = within(limit, "parse_embeddings on a header of 15 '{'", move || {
        parse_embeddings(Path::new("f.npy"), EmbeddingsFormat::Npy, &bytes, None).map(|_| ())
    });
    assert!(r.is_err(), "a header of braces was accepted");
}

/// Target `npy` (panic, "attempt to multiply with overflow" in npyz's strides): a shape
/// with a zero dimension holds no data, so the element count (0) passes the size check,
/// but npyz multiplies the other dimensions into strides without overflow checks. It must
/// be refused, naming the shape. The fuzzer's find (base64):
/// k05VTVBZAS92AHsnZGVzY3InOiAnPGY0JywgJ2ZvcnRyYW5fb3JkZXInOiBGYWxzZSwgJ3NoYXBlJzogKDAsODc5MDUsIDk5OTk5OTk3LDEwLCA5OTk5OTk5OTk5OTkyNCksIH0gICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgIAAAAAgIAAAA
#[test]
fn npy_shape_whose_strides_overflow_is_refused() {
    for header in [
        "{'descr': '<f4', 'fortran_order': False, 'shape': (0, 87905, 99999997, 10, 999999999999924), }",
        "{'descr': '<f4', 'fortran_order': True, 'shape': (4294967296, 4294967296, 0), }",
    ] {
        let bytes = npy_with_header(header);
        let e = parse_npy_f32(Path::new("f.npy"), &bytes).expect_err(header);
        assert!(e.to_string().contains("overflow a 64-bit count"), "{header}: {e}");
        let e = parse_embeddings(Path::new("f.npy"), EmbeddingsFormat::Npy, &bytes, None).expect_err(header);
        assert!(e.to_string().contains("overflow a 64-bit count"), "{header}: {e}");
    }
}

/// Target `json_reader` (found in CI, stop 37): an object whose key is serde_json's
/// private raw-value token, `{"$serde_json::private::RawValue": "<json>"}`, is read by
/// serde_json (with its `raw_value` feature, which the crate enables) as the JSON text in
/// the string. Our first pass saw an object with one key, so a typed read holding a
/// `serde_json::Value` could receive a repeated key the check never saw. Such keys are
/// refused by name.
#[test]
fn serde_json_private_key_is_refused_by_the_json_reader() {
    use ctxprune::io::json;
    let smuggled = br#"{"x": {"$serde_json::private::RawValue": "{\"k\": 1, \"k\": 2}"}}"#;
    for e in [
        json::value(smuggled).unwrap_err(),
        json::scan(smuggled).unwrap_err(),
        json::from_slice::<serde_json::Value>(smuggled).unwrap_err(),
    ] {
        assert!(
            e.starts_with("reserved key \"$serde_json::private::RawValue\""),
            "{e}"
        );
    }
}
