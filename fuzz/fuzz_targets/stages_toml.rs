//! A stages file from an untrusted source (`ctxprune pipeline --config`): `Stages::parse`
//! is `Err` on anything malformed (a repeated key, an unknown policy or option), never a
//! panic. (A controller policy's weights path is read through the file contract: a
//! device or FIFO it names is refused, not read.)
#![no_main]

use ctxprune::pipeline::stages::Stages;
use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(st) = Stages::parse(text, Path::new("/nonexistent/stages.toml")) {
        assert!(st.max_nodes > 0, "max_nodes 0 accepted");
        for (name, s) in st.stages() {
            assert!(!name.is_empty() && !s.description.is_empty());
        }
    }
});
