//! An Anthropic-format trajectory from an untrusted source: `Trajectory::parse` with the
//! format given returns `Err` on anything malformed; what parses writes back byte for
//! byte, reads the same with format detection, and masks into JSON that parses again,
//! with masking idempotent (see common/messages.rs).
#![no_main]

use ctxprune::mask::Format;
use libfuzzer_sys::fuzz_target;

#[path = "common/messages.rs"]
mod messages;

fuzz_target!(|data: &[u8]| messages::run(data, Format::Anthropic));
