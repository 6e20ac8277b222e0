//! The user guide's Rust examples, as doc tests.
//!
//! Each item below includes one page of the guide (docs/, an mdBook) in rustdoc, so
//! `cargo test` (its doc tests) compiles and runs every Rust block of that page as it
//! is written there. The items exist only when rustdoc collects doc tests
//! (`#[cfg(doctest)]`): they add nothing to the library or its documentation.
//! python/tests/test_guide.py checks that every page with a Rust block is included here
//! and runs the pages' Python and shell blocks.

/// docs/selection.md
#[cfg(doctest)]
#[doc = include_str!("../docs/selection.md")]
pub struct Selection;

/// docs/rerank.md
#[cfg(doctest)]
#[doc = include_str!("../docs/rerank.md")]
pub struct Rerank;

/// docs/masking.md
#[cfg(doctest)]
#[doc = include_str!("../docs/masking.md")]
pub struct Masking;

/// docs/cost.md
#[cfg(doctest)]
#[doc = include_str!("../docs/cost.md")]
pub struct Cost;

/// docs/attention.md
#[cfg(doctest)]
#[doc = include_str!("../docs/attention.md")]
pub struct Attention;

/// docs/pipeline.md
#[cfg(doctest)]
#[doc = include_str!("../docs/pipeline.md")]
pub struct Pipeline;

/// docs/text.md
#[cfg(doctest)]
#[doc = include_str!("../docs/text.md")]
pub struct Text;

/// docs/rust.md
#[cfg(doctest)]
#[doc = include_str!("../docs/rust.md")]
pub struct Rust;

/// docs/gpu.md
#[cfg(doctest)]
#[doc = include_str!("../docs/gpu.md")]
pub struct Gpu;
