//! Token counters: exact counts for the tiktoken encodings agents use (o200k_base,
//! cl100k_base) and a fast approximation (`ceil(bytes / 4)`).
//! HuggingFace `tokenizer.json` files are not supported in this version.

use crate::error::{Error, Result};

/// Counts tokens in text.
pub trait TokenCounter: Sync {
    /// Tokens in `text`.
    fn count(&self, text: &str) -> usize;
}

/// `ceil(UTF-8 bytes / 4)`: the usual rule of thumb for English text with BPE tokenizers.
#[derive(Clone, Copy, Debug, Default)]
pub struct Approx;

impl TokenCounter for Approx {
    fn count(&self, text: &str) -> usize {
        text.len().div_ceil(4)
    }
}

/// A tiktoken encoding (ranks compiled into the binary: nothing is downloaded).
pub struct Tiktoken {
    bpe: tiktoken_rs::CoreBPE,
}

impl TokenCounter for Tiktoken {
    fn count(&self, text: &str) -> usize {
        self.bpe.encode_ordinary(text).len()
    }
}

/// A counter by name: `o200k_base`, `cl100k_base` or `approx`.
pub fn counter(name: &str) -> Result<Box<dyn TokenCounter>> {
    let bpe = match name {
        "approx" => return Ok(Box::new(Approx)),
        "o200k_base" => tiktoken_rs::o200k_base(),
        "cl100k_base" => tiktoken_rs::cl100k_base(),
        n if n.ends_with(".json") => {
            return Err(Error::invalid(
                "tokenizer",
                format!("HuggingFace tokenizer files ({n}) are not supported in this version; use o200k_base, cl100k_base or approx"),
            ))
        }
        n => return Err(Error::invalid("tokenizer", format!("unknown tokenizer '{n}' (o200k_base, cl100k_base, approx)"))),
    };
    let bpe = bpe.map_err(|e| Error::invalid("tokenizer", format!("cannot load {name}: {e}")))?;
    Ok(Box::new(Tiktoken { bpe }))
}
