//! Reading a sentence-transformers model directory: which modules it stacks, how it
//! pools, whether it normalises, and how long an input may be.
//!
//! The files read, as sentence-transformers 5 reads them:
//! - `modules.json`: the module stack. Supported: `Transformer` (a BERT model), then
//!   `Pooling`, then optionally `Normalize`. Any other module (Dense, LayerNorm, a
//!   custom one) is refused by name rather than skipped. Without `modules.json` the
//!   stack is Transformer + mean Pooling, as sentence-transformers builds it for a plain
//!   Hugging Face model.
//! - `<pooling path>/config.json` (usually `1_Pooling/config.json`): the pooling modes.
//!   CLS, mean, max and mean-sqrt-len are supported, several at once concatenated in
//!   sentence-transformers' order (CLS, max, mean, mean-sqrt-len); weighted-mean and
//!   last-token are refused.
//! - `sentence_bert_config.json`: `max_seq_length` (tokens including `[CLS]` and
//!   `[SEP]`; longer inputs are truncated) and `do_lower_case`. Without it,
//!   `max_seq_length` is the smaller of the tokenizer's `model_max_length`
//!   (`tokenizer_config.json`) and the model's `max_position_embeddings`.
//! - `config.json`: the BERT configuration (`model_type` must be `bert`).
//! - `tokenizer.json` and `model.safetensors`.

use crate::error::{Error, Result};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// How token states become one sentence vector.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolingMode {
    /// The first token's (`[CLS]`) state.
    Cls,
    /// The element-wise maximum over the real (unpadded) tokens.
    Max,
    /// The mean over the real tokens.
    Mean,
    /// The sum over the real tokens divided by the square root of their count.
    MeanSqrtLen,
}

impl PoolingMode {
    /// The name sentence-transformers uses in `1_Pooling/config.json`.
    #[must_use]
    pub fn key(self) -> &'static str {
        match self {
            PoolingMode::Cls => "pooling_mode_cls_token",
            PoolingMode::Max => "pooling_mode_max_tokens",
            PoolingMode::Mean => "pooling_mode_mean_tokens",
            PoolingMode::MeanSqrtLen => "pooling_mode_mean_sqrt_len_tokens",
        }
    }

    /// A short name for reports.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            PoolingMode::Cls => "cls",
            PoolingMode::Max => "max",
            PoolingMode::Mean => "mean",
            PoolingMode::MeanSqrtLen => "mean_sqrt_len",
        }
    }
}

/// What the directory says about the sentence encoder around the transformer.
#[derive(Clone, Debug, PartialEq)]
pub struct SentenceConfig {
    /// Pooling modes, concatenated in this order.
    pub pooling: Vec<PoolingMode>,
    /// L2-normalise the pooled vector (a `Normalize` module).
    pub normalize: bool,
    /// Longest input in tokens, special tokens included.
    pub max_seq_length: usize,
    /// Lower-case the text before tokenising.
    pub do_lower_case: bool,
}

/// An optional JSON file of the model directory, read through the file contract
/// ([`crate::io::file`]) and the one JSON reader (a repeated key is an error naming it).
fn read_json(path: &Path) -> Result<Option<Value>> {
    if !crate::io::file::exists(path)? {
        return Ok(None);
    }
    read_json_file(path).map(Some)
}

/// A JSON file of the model directory ([`read_json`] for one that must exist).
pub(crate) fn read_json_file(path: &Path) -> Result<Value> {
    let bytes = crate::io::file::read(path, crate::limits::CONFIG_FILE_BYTES)?;
    crate::io::json::value(&bytes).map_err(|e| Error::format(path, format!("invalid JSON: {e}")))
}

fn field<'a>(v: &'a Value, path: &Path, key: &str) -> Result<Option<&'a Value>> {
    match v {
        Value::Object(m) => Ok(m.get(key)),
        _ => Err(Error::format(path, "is not a JSON object")),
    }
}

fn bool_field(v: &Value, path: &Path, key: &str) -> Result<bool> {
    match field(v, path, key)? {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(other) => Err(Error::format(
            path,
            format!("\"{key}\" is {other}, not true or false"),
        )),
    }
}

fn usize_field(v: &Value, path: &Path, key: &str) -> Result<Option<usize>> {
    match field(v, path, key)? {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => n
            .as_u64()
            .and_then(|x| usize::try_from(x).ok())
            .map(Some)
            .ok_or_else(|| Error::format(path, format!("\"{key}\" is {n}, not a non-negative integer"))),
        Some(other) => Err(Error::format(
            path,
            format!("\"{key}\" is {other}, not an integer"),
        )),
    }
}

/// Reads the sentence-transformers files of `dir` (see the module docs).
/// `max_position_embeddings` bounds `max_seq_length`.
pub fn read(dir: &Path, max_position_embeddings: usize) -> Result<SentenceConfig> {
    let modules_path = dir.join("modules.json");
    let mut pooling_dir: Option<PathBuf> = None;
    let mut normalize = false;
    match read_json(&modules_path)? {
        None => {}
        Some(Value::Array(mods)) => {
            let mut seen_transformer = false;
            for (i, m) in mods.iter().enumerate() {
                let at = |msg: String| Error::format(&modules_path, format!("module {i}: {msg}"));
                let ty = match m.get("type") {
                    Some(Value::String(t)) => t.as_str(),
                    _ => return Err(at("missing \"type\" (a string)".into())),
                };
                let path = match m.get("path") {
                    Some(Value::String(p)) => p.as_str(),
                    None | Some(Value::Null) => "",
                    Some(other) => return Err(at(format!("\"path\" is {other}, not a string"))),
                };
                let short = ty.rsplit('.').next().unwrap_or(ty);
                match (short, i) {
                    ("Transformer", 0) => seen_transformer = true,
                    ("Pooling", 1) if seen_transformer => pooling_dir = Some(dir.join(path)),
                    ("Normalize", 2) if pooling_dir.is_some() => normalize = true,
                    _ => {
                        return Err(Error::unsupported(
                            "embed",
                            format!(
                                "{}: module {i} is {ty}; this encoder runs Transformer, \
                                 Pooling, then optionally Normalize",
                                modules_path.display()
                            ),
                        ))
                    }
                }
            }
            if pooling_dir.is_none() {
                return Err(Error::format(
                    &modules_path,
                    "has no Pooling module after the Transformer",
                ));
            }
        }
        Some(_) => return Err(Error::format(&modules_path, "is not a JSON array of modules")),
    }
    let pooling = match pooling_dir {
        None => vec![PoolingMode::Mean],
        Some(p) => {
            let path = p.join("config.json");
            let v = read_json(&path)?.ok_or_else(|| {
                Error::format(&path, "is missing (modules.json names a Pooling module here)")
            })?;
            for key in ["pooling_mode_weightedmean_tokens", "pooling_mode_lasttoken"] {
                if bool_field(&v, &path, key)? {
                    return Err(Error::unsupported(
                        "embed",
                        format!("{}: \"{key}\" is not supported", path.display()),
                    ));
                }
            }
            let mut modes = Vec::new();
            for m in [
                PoolingMode::Cls,
                PoolingMode::Max,
                PoolingMode::Mean,
                PoolingMode::MeanSqrtLen,
            ] {
                if bool_field(&v, &path, m.key())? {
                    modes.push(m);
                }
            }
            if modes.is_empty() {
                return Err(Error::format(&path, "turns on no pooling mode"));
            }
            modes
        }
    };
    let sbert_path = dir.join("sentence_bert_config.json");
    let (mut max_seq, mut lower) = (None, false);
    if let Some(v) = read_json(&sbert_path)? {
        max_seq = usize_field(&v, &sbert_path, "max_seq_length")?;
        lower = bool_field(&v, &sbert_path, "do_lower_case")?;
    }
    let max_seq_length = match max_seq {
        Some(m) => m,
        None => {
            let tc = dir.join("tokenizer_config.json");
            let from_tok = match read_json(&tc)? {
                Some(v) => usize_field(&v, &tc, "model_max_length")?,
                None => None,
            };
            from_tok.map_or(max_position_embeddings, |t| t.min(max_position_embeddings))
        }
    };
    if max_seq_length < 3 || max_seq_length > max_position_embeddings {
        return Err(Error::format(
            &sbert_path,
            format!(
                "\"max_seq_length\" is {max_seq_length}; it must be in [3, {max_position_embeddings}] \
                 (the model's max_position_embeddings)"
            ),
        ));
    }
    Ok(SentenceConfig {
        pooling,
        normalize,
        max_seq_length,
        do_lower_case: lower,
    })
}
