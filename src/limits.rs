//! The one size guard: every count read from a file or a flag (layers, widths, heads,
//! tokens, rows) passes through here before anything is allocated from it, and every
//! product of counts (rows × dim × layers × bytes) is multiplied with overflow checks
//! against one byte budget. A value out of range is an error saying which bound it broke
//! and what the bound is, never a clamp, a `capacity overflow` panic or an abort on a
//! multi-terabyte allocation.
//!
//! The bounds, in one place. Each is far above what an honest input reaches and far below
//! what would exhaust a machine:
//!
//! | bound | value | what it bounds |
//! |---|---|---|
//! | [`MAX_LAYERS`] | 100,000 | layers of a model (`num_hidden_layers`, `--layers`); the deepest real models have a few hundred |
//! | [`MAX_WIDTH`] | 1,000,000 | hidden, FFN and head sizes, head counts, experts, controller widths; real models stay below 100,000 |
//! | [`MAX_VOCAB`] | 10,000,000 | a tokenizer's vocabulary and type vocabulary (the largest real ones hold about 260,000) |
//! | [`MAX_TOKENS`] | 1,000,000,000 | a context length, sliding window or position count (`--n`, `max_position_embeddings`) |
//! | [`MAX_WINDOWS`] | 100,000 | windows of a listwise reranking plan |
//! | [`MAX_TOKEN_COUNT`] | 2^53 | the token count of one text or document (every such count is exact in an f64) |
//! | [`MAX_EVAL_PROBLEMS`] | 100,000 | seeded problems of `ctxprune eval` (results are kept per problem; 10 take minutes) |
//! | [`MAX_ALLOC_BYTES`] | 16 GiB | one buffer sized by counts from a file or a flag |
//!
//! And the most bytes one read of a file may take ([`crate::io::file`]): a file past its
//! cap is refused naming the file and the cap before a byte is read.
//!
//! | cap | value | files |
//! |---|---|---|
//! | [`CONFIG_FILE_BYTES`] | 64 MiB | configurations, tokenizers, stages files, prompts, segmentations, labels |
//! | [`TEXT_FILE_BYTES`] | 4 GiB | JSON and JSON-lines data: texts, embeddings as JSON, logs, trajectories, masses |
//! | [`TENSOR_FILE_BYTES`] | 64 GiB | `.npy` and `.safetensors` read whole or streamed |
//! | [`PARTS_FILE_BYTES`] | none | files read in parts by seeking (attention Q/K dumps): each read is bounded by [`MAX_ALLOC_BYTES`] instead |

use crate::error::{Error, Result};

/// The largest number of layers a model shape may have (`--layers`, `num_hidden_layers`).
/// No real model comes near (the deepest have a few hundred).
pub const MAX_LAYERS: usize = 100_000;
/// The largest hidden size, FFN size, head size, head count, active-expert count or
/// controller layer width (real models stay below 100,000).
pub const MAX_WIDTH: usize = 1_000_000;
/// The largest vocabulary (word or token-type embeddings' rows).
pub const MAX_VOCAB: usize = 10_000_000;
/// The largest context length, sliding window or position count, in tokens (real models
/// stay below 10,000,000).
pub const MAX_TOKENS: usize = 1_000_000_000;
/// The most windows a listwise plan may have (a depth of 1,000 with stride 10 needs 99).
pub const MAX_WINDOWS: usize = 100_000;
/// The largest token count of one text, item or document: 2^53, the last integer an f64
/// holds exactly (so sums of counts stay exact and finite).
pub const MAX_TOKEN_COUNT: u64 = 1 << 53;
/// The most seeded problems `ctxprune eval` runs (results are kept per problem and per
/// cell; ten problems take minutes, so no honest run comes near).
pub const MAX_EVAL_PROBLEMS: usize = 100_000;
/// The most bytes one buffer sized by counts from a file or a flag may take.
pub const MAX_ALLOC_BYTES: u64 = 16 << 30;

/// The most bytes of a configuration-like file: a model's `config.json`, a
/// `tokenizer.json`, a stages file, a rendered prompt, a segmentation, a labels file.
pub const CONFIG_FILE_BYTES: u64 = 64 << 20;
/// The most bytes of a JSON or JSON-lines data file read whole: texts, embeddings as
/// JSON lines, query vectors and costs as JSON, run and decisions logs, trajectories,
/// attention masses.
pub const TEXT_FILE_BYTES: u64 = 4 << 30;
/// The most bytes of an `.npy` or `.safetensors` file read whole or streamed.
pub const TENSOR_FILE_BYTES: u64 = 64 << 30;
/// No cap on the file: for files read in parts by seeking, where each read is bounded by
/// [`MAX_ALLOC_BYTES`] ([`crate::attention::tensors::TensorFile`]).
pub const PARTS_FILE_BYTES: u64 = u64::MAX;

/// `value` when it is in `1..=max`, else why not, in words the caller prefixes with the
/// field or flag: "must be in 1..=100000, got 1000000000000".
pub fn check(value: u64, max: usize) -> std::result::Result<usize, String> {
    usize::try_from(value)
        .ok()
        .filter(|v| (1..=max).contains(v))
        .ok_or_else(|| format!("must be in 1..={max}, got {value}"))
}

/// [`check`] for the flag or argument `name` ([`Error::InvalidArgument`]).
pub fn size(name: &str, value: usize, max: usize) -> Result<usize> {
    // usize is at most 64 bits on every supported target, so the widening is exact.
    check(value as u64, max).map_err(|m| Error::invalid(name, m))
}

/// [`check`] for the field `field` of the file `path` ([`Error::Format`]):
/// `path: "num_hidden_layers" must be in 1..=100000, got 1000000000000`.
pub fn field(path: &std::path::Path, field: &str, value: u64, max: usize) -> Result<usize> {
    check(value, max).map_err(|m| Error::format(path, format!("\"{field}\" {m}")))
}

/// The bytes of a buffer of `counts` multiplied together, `elem` bytes each, when they fit
/// in [`MAX_ALLOC_BYTES`]; else why not (naming the counts as `names` spells them, e.g.
/// `"--layers 8 x --n 32768 x --kv-heads 4 x --head-dim 256"`).
pub fn bytes_of(counts: &[(&str, usize)], elem: usize) -> std::result::Result<usize, String> {
    let product = counts
        .iter()
        .try_fold(elem as u64, |acc, &(_, c)| acc.checked_mul(c as u64));
    match product {
        Some(b) if b <= MAX_ALLOC_BYTES => Ok(b as usize),
        _ => {
            let terms: Vec<String> = counts.iter().map(|(n, c)| format!("{n} {c}")).collect();
            let total = product.map_or_else(|| "more than 2^64".to_string(), |b| b.to_string());
            Err(format!(
                "{} x {elem} bytes is {total} bytes, above the {MAX_ALLOC_BYTES} bytes one buffer may take",
                terms.join(" x ")
            ))
        }
    }
}

/// [`bytes_of`] as an [`Error::InvalidArgument`] named `name`.
pub fn bytes(name: &str, counts: &[(&str, usize)], elem: usize) -> Result<usize> {
    bytes_of(counts, elem).map_err(|m| Error::invalid(name, m))
}

/// A token count (a number as a file or a flag gives it): whole, `>= 1`, and at most
/// [`MAX_TOKEN_COUNT`]; else why not, in words the caller prefixes with the field:
/// "is 4.6e18, above the largest accepted token count 9007199254740992".
pub fn token_count(x: f64) -> std::result::Result<u64, String> {
    if x.is_finite() && x > MAX_TOKEN_COUNT as f64 {
        return Err(format!(
            "is {x:e}, above the largest accepted token count {MAX_TOKEN_COUNT}"
        ));
    }
    if x.is_finite() && x >= 1.0 && x.fract() == 0.0 {
        Ok(x as u64)
    } else {
        Err(format!("is {x}, not a whole number >= 1"))
    }
}

/// A buffer of `len` zeros of `T`, its memory reserved with `try_reserve_exact` so a size
/// the machine cannot hold is an error naming `what`, not an abort. `len` must already be
/// bounded ([`bytes`]).
pub fn zeroed<T: Clone + Default>(len: usize, what: &str) -> Result<Vec<T>> {
    let mut v: Vec<T> = Vec::new();
    v.try_reserve_exact(len)
        .map_err(|e| Error::invalid(what, format!("cannot reserve {len} values: {e}")))?;
    v.resize(len, T::default());
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_in_range_pass_and_others_say_which_bound() {
        assert_eq!(check(1, 10), Ok(1));
        assert_eq!(check(10, 10), Ok(10));
        for v in [0, 11, 1_000_000_000_000, 100_000_000_000_000_000, u64::MAX] {
            assert_eq!(check(v, 10).unwrap_err(), format!("must be in 1..=10, got {v}"));
        }
        let e = size("--layers", usize::MAX, MAX_LAYERS).unwrap_err().to_string();
        assert_eq!(
            e,
            "invalid --layers: must be in 1..=100000, got 18446744073709551615"
        );
        let e = field(std::path::Path::new("c.json"), "n", 0, 5)
            .unwrap_err()
            .to_string();
        assert_eq!(e, "c.json: \"n\" must be in 1..=5, got 0");
    }

    #[test]
    fn products_are_checked_without_overflow() {
        assert_eq!(bytes_of(&[("a", 3), ("b", 5)], 4), Ok(60));
        let e = bytes_of(&[("--n", 1 << 40), ("--layers", 1 << 40)], 4).unwrap_err();
        assert!(
            e.contains("--n 1099511627776 x --layers 1099511627776 x 4 bytes is more than 2^64"),
            "{e}"
        );
        let e = bytes_of(&[("rows", 1 << 30), ("dim", 1 << 5)], 4).unwrap_err();
        assert!(
            e.contains("is 137438953472 bytes, above the 17179869184 bytes"),
            "{e}"
        );
    }

    #[test]
    fn token_counts_say_the_real_reason() {
        assert_eq!(token_count(12.0), Ok(12));
        assert_eq!(token_count(MAX_TOKEN_COUNT as f64), Ok(MAX_TOKEN_COUNT));
        let e = token_count(2f64.powi(62)).unwrap_err();
        assert!(
            e.contains("above the largest accepted token count 9007199254740992"),
            "{e}"
        );
        for bad in [0.0, 0.5, -3.0, f64::NAN, f64::INFINITY] {
            assert!(
                token_count(bad).unwrap_err().contains("not a whole number >= 1"),
                "{bad}"
            );
        }
    }
}
