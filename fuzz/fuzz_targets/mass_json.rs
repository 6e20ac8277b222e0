//! An attention mass file from an untrusted source (`ctxprune attention decay` reads
//! them): parsed by the one JSON reader (`Err` on a repeated key), checked by
//! `Mass::check` (every value a share in [0, 1]), then aggregated by `figures::decay`:
//! never a panic, and what decay returns is finite everywhere (no NaN or infinity, which
//! its JSON would write as null).
#![no_main]

use ctxprune::attention::{figures, Mass};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(m) = ctxprune::io::json::from_slice::<Mass>(data) else {
        return;
    };
    if m.check().is_err() {
        assert!(
            figures::decay(std::slice::from_ref(&m)).is_err(),
            "decay took a mass check refused"
        );
        return;
    }
    let d = figures::decay(&[m.clone(), m]).expect("decay of checked masses");
    for r in &d.roles {
        for v in r.mean.iter().chain(&r.cumulative) {
            assert!(v.is_finite() && *v >= 0.0, "decay value {v}");
        }
    }
    assert!(d.edges.iter().all(|e| e.is_finite()));
});
