//! A No-CM trajectory from an untrusted source (the files under `ctxprune probe
//! --trajectories`): parsed and traced as the probe does (`features::trace_text`), `Err`
//! on anything malformed (a repeated key included), never a panic; a trace it returns
//! gives finite features for every prefix.
#![no_main]

use ctxprune::probe::features::{all_prefix_features, trace_text, ToolKinds};
use ctxprune::tokens::Approx;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(tr) = trace_text(text, &ToolKinds::default(), &Approx) else {
        return;
    };
    let f = all_prefix_features(&tr);
    assert_eq!(f.len(), tr.len());
    for row in &f {
        assert!(row.iter().all(|v| v.is_finite()), "features {row:?}");
    }
});
