//! A segmentation file from an untrusted source (`ctxprune attention mass --segments`):
//! `Segmentation::from_json` is `Err` on anything malformed (a repeated key included),
//! never a panic; what it accepts is checked and bounded (no more turns than spans, every
//! step inside a reasoning span), so the per-step matrices it sizes are backed by its text.
#![no_main]

use ctxprune::attention::{pieces, Role, Segmentation};
use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(seg) = Segmentation::from_json(text, Path::new("seg.json")) else {
        return;
    };
    seg.check().expect("from_json returned an unchecked segmentation");
    assert!(
        seg.turns <= seg.spans.len().max(1),
        "{} turns over {} spans",
        seg.turns,
        seg.spans.len()
    );
    for (r, &t) in seg.steps.iter().enumerate() {
        let sp = seg.span_at(t).expect("a step outside every span");
        assert_eq!(sp.role, Role::Reasoning);
        assert_eq!(seg.step_turn(r), Some(sp.turn));
    }
    // The pieces of the keys up to the last step, when that is a size the text backs.
    if let Some(&last) = seg.steps.last() {
        if last < 1 << 16 {
            let p = pieces(&seg, last + 1);
            assert!(p.iter().all(|&x| (x as usize) <= seg.spans.len()));
        }
    }
});
