//! Token counters: exact counts for the tiktoken encodings agents use (o200k_base,
//! cl100k_base) and a fast approximation (`ceil(bytes / 4)`).
//! Any HuggingFace `tokenizer.json` loads through the `tokenizers` crate.

use crate::error::{Error, Result};
use std::sync::Arc;

/// Counts tokens in text (`Send + Sync`: one counter serves every thread of a service).
pub trait TokenCounter: Send + Sync {
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

/// A HuggingFace tokenizer loaded from a `tokenizer.json` (special tokens not added).
pub struct HfTokenizer {
    tk: tokenizers::Tokenizer,
}

impl HfTokenizer {
    /// Loads `path` ([`load_tokenizer`]).
    pub fn load(path: &std::path::Path) -> Result<Self> {
        Ok(HfTokenizer {
            tk: load_tokenizer(path)?,
        })
    }

    /// The tokenizer itself (for token offsets, as [`crate::attention::segment`] reads
    /// them).
    #[must_use]
    pub fn tokenizer(&self) -> &tokenizers::Tokenizer {
        &self.tk
    }
}

/// A HuggingFace `tokenizer.json`, the one way the crate reads one: through the file
/// contract ([`crate::io::file`], [`crate::limits::CONFIG_FILE_BYTES`]), its JSON checked by
/// the one JSON reader (a repeated key, which the tokenizers crate would resolve silently,
/// is an error naming it), then built. Errors name the file.
pub fn load_tokenizer(path: &std::path::Path) -> Result<tokenizers::Tokenizer> {
    let bytes = crate::io::file::read(path, crate::limits::CONFIG_FILE_BYTES)?;
    crate::io::json::scan(&bytes).map_err(|e| Error::format(path, format!("invalid JSON: {e}")))?;
    let body = bytes.strip_prefix(b"\xef\xbb\xbf").unwrap_or(&bytes);
    tokenizers::Tokenizer::from_bytes(body).map_err(|e| {
        Error::format(
            path,
            format!(
                "not a usable tokenizer.json: {}",
                crate::error::flatten_lines(&e.to_string())
            ),
        )
    })
}

impl std::fmt::Debug for HfTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HfTokenizer")
            .field("vocab_size", &self.tk.get_vocab_size(true))
            .finish()
    }
}

impl TokenCounter for HfTokenizer {
    fn count(&self, text: &str) -> usize {
        // Encoding a plain string cannot fail for a tokenizer that loaded; count 0 if it
        // ever does rather than panic.
        self.tk.encode(text, false).map_or(0, |e| e.len())
    }
}

/// A counter by name: `o200k_base`, `cl100k_base`, `approx`, or a path to a
/// HuggingFace `tokenizer.json`.
///
/// ```
/// let o200k = ctxprune::tokens::counter("o200k_base")?;   // GPT-4o's encoding, exact
/// assert_eq!(o200k.count("Hello, world!"), 4);
/// let costs = ctxprune::tokens::costs(o200k.as_ref(), &["a passage", "another one"]);
/// assert_eq!(costs.len(), 2);
/// assert!(ctxprune::tokens::counter("gpt2").is_err());     // names the unknown tokenizer
/// # Ok::<(), ctxprune::Error>(())
/// ```
pub fn counter(name: &str) -> Result<Arc<dyn TokenCounter>> {
    // The named encodings are loaded once per process (about 0.3 s for o200k) and shared:
    // a counter holds no state between counts.
    static O200K: std::sync::OnceLock<Arc<dyn TokenCounter>> = std::sync::OnceLock::new();
    static CL100K: std::sync::OnceLock<Arc<dyn TokenCounter>> = std::sync::OnceLock::new();
    let cell = match name {
        "approx" => return Ok(Arc::new(Approx)),
        "o200k_base" => &O200K,
        "cl100k_base" => &CL100K,
        n if n.ends_with(".json") => return Ok(Arc::new(HfTokenizer::load(std::path::Path::new(n))?)),
        n => {
            return Err(Error::invalid(
                "tokenizer",
                format!("unknown tokenizer '{n}' (o200k_base, cl100k_base, approx)"),
            ))
        }
    };
    if let Some(c) = cell.get() {
        return Ok(c.clone());
    }
    let bpe = if name == "o200k_base" {
        tiktoken_rs::o200k_base()
    } else {
        tiktoken_rs::cl100k_base()
    };
    let bpe = bpe.map_err(|e| Error::invalid("tokenizer", format!("cannot load {name}: {e}")))?;
    Ok(cell.get_or_init(|| Arc::new(Tiktoken { bpe })).clone())
}

/// The default tokenizer of every surface that counts texts for a token budget:
/// `o200k_base` (GPT-4o and later).
pub const DEFAULT_TOKENIZER: &str = "o200k_base";

/// Each text's token count by `counter`, as the costs of a token budget (in parallel
/// across texts; the counts do not depend on the thread count).
pub fn costs<S: AsRef<str> + Sync>(counter: &dyn TokenCounter, texts: &[S]) -> Vec<f64> {
    use rayon::prelude::*;
    texts
        .par_iter()
        .map(|t| counter.count(t.as_ref()) as f64)
        .collect()
}
