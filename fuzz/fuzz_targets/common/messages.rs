//! The body of the two message-format targets: parse a trajectory, mask it, and check the
//! cheap properties of the result.

use ctxprune::mask::masker::{Anchor, MaskConfig, Masker, Unit, DEFAULT_PLACEHOLDER};
use ctxprune::mask::{Format, Trajectory};

/// FNV-1a over the input: picks the masking options, so every input is also a plain
/// messages file (the seeds are real trajectories) and each mutation tries other options.
fn hash(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

fn config(data: &[u8]) -> MaskConfig {
    let h = hash(data);
    let bits = |shift: u32, n: u64| ((h >> shift) % n) as usize;
    MaskConfig {
        window: bits(0, 7),
        keep_errors: bits(3, 2) == 0,
        keep_first: bits(4, 2) == 0,
        tools_keep: if bits(5, 4) == 0 {
            vec!["search".into()]
        } else {
            Vec::new()
        },
        tools_mask: if bits(7, 4) == 0 {
            vec!["open".into()]
        } else {
            Vec::new()
        },
        trigger_tokens: if bits(9, 4) == 0 { Some(bits(11, 64)) } else { None },
        clear_at_least: if bits(17, 4) == 0 { bits(19, 64) } else { 0 },
        step: 1 + bits(25, 3),
        unit: if bits(33, 2) == 0 { Unit::ToolUses } else { Unit::Turns },
        anchor: if bits(35, 2) == 0 { Anchor::Start } else { Anchor::Window },
        hold: bits(37, 2) == 0,
        clear_tool_inputs: bits(39, 2) == 0,
        placeholder: match bits(27, 6) {
            0 => "{tool}|{args}|{tokens}|{lines}|{tool}".into(),
            // Adjacent numeric fields and literal braces.
            1 => "{{tokens}{lines}} {args} {x-y}".into(),
            _ => DEFAULT_PLACEHOLDER.into(),
        },
    }
}

/// Tool names and call counts per turn.
fn shape(t: &Trajectory) -> Vec<Vec<String>> {
    t.turns()
        .iter()
        .map(|t| t.calls.iter().map(|c| c.tool.clone()).collect())
        .collect()
}

pub fn run(data: &[u8], format: Format) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(traj) = Trajectory::parse(text, Some(format)) else {
        return;
    };
    // Unchanged, the output is the input, byte for byte.
    assert_eq!(traj.to_json(), text, "parse + to_json changed the text");

    // Detection agrees with the format given: a document valid in `format` has no marker
    // of the other, so auto-detection reads it the same way.
    match Trajectory::parse(text, None) {
        Ok(auto) => {
            assert!(
                auto.format().is_none() || auto.format() == Some(format),
                "detected {:?}, parses as {format:?}",
                auto.format()
            );
            assert_eq!(shape(&auto), shape(&traj), "auto-detected turns differ");
        }
        Err(e) => panic!("parses as {format:?} but not with detection: {e}"),
    }

    let counter = ctxprune::tokens::counter("approx").expect("the approx counter");
    let masker = Masker::new(config(data), counter).expect("a valid mask config");

    // Once, on a fresh masker: the output is JSON, and with nothing to mask it is the
    // input.
    let (edits, _) = masker.plan(&traj);
    let mut once = traj.clone();
    let stats = masker.mask(&mut once);
    let json = once.to_json();
    if let Err(e) = serde_json::from_str::<serde_json::Value>(&json) {
        panic!("masked output is not JSON ({e}): {json}");
    }
    if edits.is_empty() {
        assert_eq!(json, text, "nothing masked, yet the output changed");
    }
    let answered = traj
        .turns()
        .iter()
        .flat_map(|t| &t.calls)
        .filter(|c| c.observation.is_some())
        .count();
    assert_eq!(stats.turns, traj.turns().len());
    assert_eq!(stats.observations_masked + stats.observations_kept, answered);

    // Twice in memory: the same bytes as once.
    masker.mask(&mut once);
    assert_eq!(once.to_json(), json, "masking twice differs from masking once");

    // A session masks the same way as a fresh masker, also when reused on the result.
    let mut session = masker.session();
    let mut twice = traj.clone();
    session.mask(&mut twice);
    assert_eq!(
        twice.to_json(),
        json,
        "a session masks differently from a fresh masker"
    );
    session.mask(&mut twice);
    assert_eq!(
        twice.to_json(),
        json,
        "a session's second mask changed the output"
    );

    // The masked output read back: a trajectory of the same shape, which masking leaves
    // as it is (an agent loop re-masks its masked history every turn).
    match Trajectory::parse(&json, Some(format)) {
        Ok(mut again) => {
            assert_eq!(shape(&again), shape(&traj), "masking changed the turns");
            masker.mask(&mut again);
            assert_eq!(again.to_json(), json, "re-masking the masked output changed it");
        }
        Err(e) => panic!("masked output no longer parses as a trajectory: {e}"),
    }
}
