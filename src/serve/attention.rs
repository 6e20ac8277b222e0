//! Where an agent's attention goes and which queries masking rescues, over HTTP, for the
//! inputs that fit a request: `POST /v1/attention/segment` (a rendered prompt, tokenised
//! by a tokenizer the server loaded at start), `POST /v1/attention/decay` (masses, as
//! `attention mass --json` writes them) and `POST /v1/probe` (labelled trajectories given
//! inline). Attention mass itself reads the model's Q/K tensors, gigabytes past any
//! request body: it stays a CLI and Python job.

use super::{ApiError, Shared};
use crate::attention::segment;
use crate::error::Error;
use crate::estimate::{self, Estimate};
use crate::io::fields::Fields;
use serde_json::Value;
use std::sync::Arc;

/// The tokenizer.json a request names (`"tokenizer"`), or the server's only one.
fn loaded_tokenizer<'s>(
    s: &'s Shared,
    name: Option<&str>,
) -> Result<&'s (String, Arc<crate::tokens::HfTokenizer>), ApiError> {
    let none = Error::invalid(
        "tokenizer",
        "this server has no tokenizer.json to segment with (start it with --tokenizer NAME=FILE)",
    );
    super::text::loaded(&s.cfg.tokenizers, "tokenizer", name, none)
}

/// `POST /v1/attention/segment`: `{"prompt": "...", "tokenizer"?: NAME, "template"?:
/// "qwen"}` -> the segmentation `attention segment` prints (`n_tokens`, `turns`, `steps`,
/// `spans`), the prompt tokenised by a tokenizer.json loaded with `--tokenizer NAME=FILE`.
pub fn segment(s: &Shared, body: &[u8]) -> Result<Value, ApiError> {
    let mut f = s.fields(body)?;
    let prompt = f
        .str("prompt")?
        .ok_or_else(|| Error::invalid("prompt", "required"))?;
    let tokenizer = f.str("tokenizer")?;
    let template = f.str("template")?;
    f.done()?;
    let template = segment::Template::by_name(template.as_deref().unwrap_or("qwen"))?;
    let (_, tk) = loaded_tokenizer(s, tokenizer.as_deref())?;
    let bytes = prompt.len() as f64;
    s.admit(
        "segmenting this prompt",
        // BPE merges and the offsets of every token: a few dozen operations and words a byte.
        Estimate {
            ops: 64.0 * bytes,
            bytes: 32.0 * bytes,
        },
    )?;
    let seg = segment::segment(&prompt, &template, tk.tokenizer()).map_err(|e| match e {
        Error::Format { msg, .. } | Error::InvalidArgument { msg, .. } => Error::invalid("prompt", msg),
        e => e,
    })?;
    serde_json::to_value(&seg).map_err(|e| Error::invalid("prompt", e.to_string()).into())
}

/// `POST /v1/attention/decay`: `{"masses": [...]}` (the objects `ctxprune attention mass
/// --json` writes, one per trajectory) -> the decay curves (`attention decay --json`).
pub fn decay(s: &Shared, body: &[u8]) -> Result<Value, ApiError> {
    let mut f = s.fields(body)?;
    let masses = f
        .raw("masses")
        .ok_or_else(|| Error::invalid("masses", "required"))?;
    f.done()?;
    s.admit("reading these masses", estimate::json(&Fields::scan(masses)))?;
    let masses: Vec<crate::attention::Mass> = crate::io::json::from_str(masses).map_err(|m| {
        Error::invalid(
            "masses",
            format!("not a list of masses (attention mass --json): {m}"),
        )
    })?;
    let d = crate::attention::figures::decay(&masses)?;
    serde_json::to_value(&d).map_err(|e| Error::invalid("decay", e.to_string()).into())
}

/// `POST /v1/probe`: `{"queries": [{"id", "trajectory": [messages...], "rescued", "gold"?,
/// "cited"?}, ...], "prefixes"?, "folds"?, "seed"?, "search_tools"?, "open_tools"?,
/// "tokenizer"?}` -> the report `ctxprune probe --json` writes. Each query is a line of
/// labels.jsonl whose `trajectory` holds the messages instead of a file name.
pub fn probe(s: &Shared, body: &[u8]) -> Result<Value, ApiError> {
    let mut f = s.fields(body)?;
    let queries = f
        .raw("queries")
        .ok_or_else(|| Error::invalid("queries", "required"))?;
    let defaults = crate::probe::Options::default();
    let opts = crate::probe::Options {
        prefixes: f.count("prefixes")?.unwrap_or(defaults.prefixes),
        folds: f.count("folds")?.unwrap_or(defaults.folds),
        seed: f.count("seed")?.unwrap_or(0) as u64,
        search_tools: f.strs("search_tools")?.unwrap_or(defaults.search_tools),
        open_tools: f.strs("open_tools")?.unwrap_or(defaults.open_tools),
    };
    let tokenizer = f.str("tokenizer")?;
    f.done()?;
    s.admit(
        "probing these trajectories",
        // The tree of values, every trajectory parsed and its observations' tokens counted
        // (BPE: a few dozen operations a byte); the fits are of a few hundred rows.
        estimate::json(&Fields::scan(queries))
            + Estimate {
                ops: 64.0 * queries.len() as f64,
                bytes: 4.0 * queries.len() as f64,
            },
    )?;
    let counter = s.counter(tokenizer.as_deref().unwrap_or(crate::tokens::DEFAULT_TOKENIZER))?;
    let v = crate::io::json::value_str(queries).map_err(|m| Error::invalid("queries", m))?;
    let items = crate::probe::parse_inline("queries", &v)?;
    let report = crate::probe::probe_inline(&items, &opts, counter.as_ref())?;
    serde_json::to_value(&report).map_err(|e| Error::invalid("queries", e.to_string()).into())
}
