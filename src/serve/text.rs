//! Text in: the sentence encoders a server loads at start (`ctxprune serve --model
//! [NAME=]DIR`, [`super::ServeConfig::models`]), `POST /v1/embed`, `GET /v1/models`, and
//! what `/v1/select`, `/v1/rerank` and `/v1/mask` read from `"texts"` and
//! `"query_text"`: embeddings computed by the encoder, and token costs counted by a
//! tokenizer when a budget needs them. Every encode is admitted first (its tokens within
//! `max_embed_tokens`, its memory from [`SentenceEncoder::estimate`]) and stops at the
//! request's deadline between batches.

use super::{ApiError, Shared};
use crate::cancel::Cancel;
use crate::embed::{EncodeOptions, SentenceEncoder};
use crate::error::Error;
use crate::estimate::Estimate;
use crate::io::fields::Fields;
use crate::Embeddings;
use axum::http::StatusCode;
use base64::Engine as _;
use serde_json::{json, Value};

/// Texts per forward pass, as `ctxprune embed`'s default.
const BATCH: usize = 32;

/// The entry of `list` (what the server loaded at start) that a request names in
/// `field`, or the list's only one when it names none; `none` is the error when the
/// server loaded none and the request names none.
pub(super) fn loaded<'s, T>(
    list: &'s [(String, T)],
    field: &str,
    name: Option<&str>,
    none: Error,
) -> Result<&'s (String, T), ApiError> {
    let names = || {
        list.iter()
            .map(|(n, _)| n.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    match name {
        None if list.len() == 1 => Ok(&list[0]),
        None if list.is_empty() => Err(none.into()),
        None => Err(Error::invalid(field, format!("required: this server has several ({})", names())).into()),
        Some(n) => list.iter().find(|(m, _)| m == n).ok_or_else(|| {
            let have = if list.is_empty() {
                "none".to_string()
            } else {
                names()
            };
            Error::invalid(field, format!("unknown {field} '{n}' (this server has: {have})")).into()
        }),
    }
}

/// The encoder a request names (`"model"`), or the server's only one.
pub(super) fn encoder<'s>(
    s: &'s Shared,
    name: Option<&str>,
) -> Result<&'s (String, SentenceEncoder), ApiError> {
    let none = Error::invalid(
        "texts",
        "this server has no model to embed texts (start it with --model DIR), or give `embeddings` or a `pool`",
    );
    loaded(&s.cfg.models, "model", name, none)
}

/// Embeds `texts` with `enc` once they are admitted (`what` names the work in a
/// refusal): their tokens within [`super::ServeConfig::max_embed_tokens`], the memory
/// within the request's cap; stops at the request's deadline.
pub(super) fn encode(
    s: &Shared,
    enc: &SentenceEncoder,
    texts: &[&str],
    what: &str,
    cancel: &Cancel,
) -> Result<Embeddings, ApiError> {
    if texts.is_empty() {
        return Err(Error::invalid("texts", "empty (nothing to embed)").into());
    }
    // Tokenising is cheap beside the forward pass: the limit is on the tokens themselves.
    let lens: Vec<usize> = enc.tokenize(texts)?.iter().map(Vec::len).collect();
    let tokens: usize = lens.iter().sum();
    if tokens > s.cfg.max_embed_tokens {
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!(
                "{what} is {tokens} tokens, over the server's limit of {} per request (--max-embed-tokens)",
                s.cfg.max_embed_tokens
            ),
        ));
    }
    let e = enc.estimate(&lens, BATCH);
    s.admit(
        what,
        Estimate {
            ops: 0.0,
            bytes: e.bytes,
        },
    )?;
    let opts = EncodeOptions {
        batch_size: BATCH,
        progress: None,
        cancel: Some(cancel),
    };
    Ok(enc.encode(texts, &opts)?)
}

/// [`encode`] of a request's texts by the model named `name`.
fn encode_named(
    s: &Shared,
    name: &str,
    enc: &SentenceEncoder,
    texts: &[String],
    cancel: &Cancel,
) -> Result<Embeddings, ApiError> {
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let what = format!("embedding {} texts with model '{name}'", refs.len());
    encode(s, enc, &refs, &what, cancel)
}

/// The embeddings of a request's `"texts"` and its `"query_text"` (`None` when not
/// given), by the model it names; admitted as one piece of work.
pub(super) fn embed_request(
    s: &Shared,
    model: Option<&str>,
    texts: &[String],
    query_text: Option<&str>,
    cancel: &Cancel,
) -> Result<(Embeddings, Option<Vec<f32>>), ApiError> {
    let (name, enc) = encoder(s, model)?;
    let e = encode_named(s, name, enc, texts, cancel)?;
    let q = match query_text {
        Some(t) => Some(
            enc.encode(
                &[t],
                &EncodeOptions {
                    cancel: Some(cancel),
                    ..Default::default()
                },
            )?
            .row(0)
            .to_vec(),
        ),
        None => None,
    };
    Ok((e, q))
}

/// Each text's token count by the named `tokenizer` (default
/// [`crate::tokens::DEFAULT_TOKENIZER`]), as the costs of a token budget; admitted first.
pub(super) fn count(s: &Shared, texts: &[String], tokenizer: Option<&str>) -> Result<Vec<f64>, ApiError> {
    let bytes: usize = texts.iter().map(String::len).sum();
    s.admit(
        &format!("counting the tokens of {} texts", texts.len()),
        // BPE merges: a few dozen operations a byte at most; one count per text.
        Estimate {
            ops: 64.0 * bytes as f64,
            bytes: 16.0 * bytes as f64 + 8.0 * texts.len() as f64,
        },
    )?;
    let c = s.counter(tokenizer.unwrap_or(crate::tokens::DEFAULT_TOKENIZER))?;
    Ok(crate::tokens::costs(c.as_ref(), texts))
}

/// `POST /v1/embed`: `{"texts": [...], "model"?, "encoding"?: "float" | "base64"}` ->
/// `{"model", "dim", "rows", "embeddings"}`: rows of floats (each f32 written so that it
/// reads back as the same f32), or `{"base64", "dtype": "f32", "shape"}` (little-endian
/// f32 bytes; the form `/v1/select` takes back).
pub fn embed(s: &Shared, body: &[u8], cancel: &Cancel) -> Result<Value, ApiError> {
    let mut f = s.fields(body)?;
    let texts = f
        .strs("texts")?
        .ok_or_else(|| Error::invalid("texts", "required"))?;
    let model = f.str("model")?;
    let encoding = f.str("encoding")?;
    f.done()?;
    let base64 = match encoding.as_deref() {
        None | Some("float") => false,
        Some("base64") => true,
        Some(o) => {
            return Err(Error::invalid("encoding", format!("unknown encoding '{o}' (float, base64)")).into())
        }
    };
    let (name, enc) = encoder(s, model.as_deref())?;
    let e = encode_named(s, name, enc, &texts, cancel)?;
    let (n, d) = (e.rows(), e.dim());
    let embeddings = if base64 {
        let bytes: Vec<u8> = e.as_slice().iter().flat_map(|v| v.to_le_bytes()).collect();
        json!({
            "base64": base64::engine::general_purpose::STANDARD.encode(bytes),
            "dtype": "f32",
            "shape": [n, d],
        })
    } else {
        // serde_json writes an f32 as the shortest decimal that reads back as it.
        Value::Array((0..n).map(|i| json!(e.row(i))).collect())
    };
    Ok(json!({"model": name, "dim": d, "rows": n, "embeddings": embeddings}))
}

/// `GET /v1/models`: the encoders this server loaded.
pub fn models(s: &Shared) -> Value {
    let list: Vec<Value> = s
        .cfg
        .models
        .iter()
        .map(|(name, enc)| {
            let c = enc.config();
            json!({
                "name": name,
                "dim": enc.dim(),
                "max_seq_length": c.max_seq_length,
                "normalize": c.normalize,
                "pooling": c.pooling.iter().map(|m| m.name()).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({ "models": list })
}

/// The fields of text-in every route reads the same way: `"model"` and `"tokenizer"`
/// (taken here so each route can say when they do not apply).
pub(super) struct TextFields {
    pub model: Option<String>,
    pub tokenizer: Option<String>,
}

impl TextFields {
    pub fn read(f: &mut Fields<'_>) -> crate::Result<TextFields> {
        Ok(TextFields {
            model: f.str("model")?,
            tokenizer: f.str("tokenizer")?,
        })
    }
}
