//! A rendered chat prompt from an untrusted source (`ctxprune attention segment`): the
//! Qwen template's segmentation is `Err` on anything malformed, never a panic, and what it
//! accepts is well formed: spans sorted, disjoint, on char boundaries, and (one token per
//! char) a checked `Segmentation`.
#![no_main]

use ctxprune::attention::segment::{char_spans, segment_offsets, Template};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let prompt = String::from_utf8_lossy(data);
    let t = Template::qwen();
    if let Ok((spans, steps, turns)) = char_spans(&prompt, &t) {
        let mut prev = 0;
        for s in &spans {
            assert!(s.start < s.end && s.start >= prev && s.end <= prompt.len(), "bad span {s:?}");
            assert!(prompt.is_char_boundary(s.start) && prompt.is_char_boundary(s.end));
            assert!(s.turn < turns);
            prev = s.end;
        }
        assert!(steps.iter().all(|&b| b <= prompt.len()));
        // One token per char.
        let offsets: Vec<(usize, usize)> = prompt.char_indices().map(|(i, c)| (i, i + c.len_utf8())).collect();
        if let Ok(seg) = segment_offsets(&prompt, &t, &offsets) {
            seg.check().expect("segment_offsets returned an unchecked segmentation");
            assert_eq!(seg.n_tokens, offsets.len());
        }
    }
});
