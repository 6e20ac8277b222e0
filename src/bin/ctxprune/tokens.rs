//! `ctxprune count-tokens`: each text's token count, as a token budget would count it;
//! and the `--tokenizer` every command that counts texts takes.

use ctxprune::tokens::{TokenCounter, DEFAULT_TOKENIZER};
use ctxprune::{io, Error, Result};
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[derive(clap::Args)]
pub struct CountTokensArgs {
    /// Texts as JSON lines with "text", one per row. By default stdin (unless --text).
    #[arg(long)]
    pub input: Option<PathBuf>,
    /// One text to count, instead of JSON lines.
    #[arg(long, conflicts_with = "input")]
    pub text: Option<String>,
    /// o200k_base (default), cl100k_base, approx (4 bytes a token), or a HuggingFace
    /// tokenizer.json.
    #[arg(long, value_hint = clap::ValueHint::FilePath)]
    pub tokenizer: Option<String>,
}

/// The counter `--tokenizer` names, [`DEFAULT_TOKENIZER`] when not given; an error
/// names the flag.
pub fn counter(name: Option<&str>) -> Result<Arc<dyn TokenCounter>> {
    super::cost::flags(
        ctxprune::tokens::counter(name.unwrap_or(DEFAULT_TOKENIZER)),
        &["tokenizer"],
    )
}

/// Texts as JSON lines with "text": from `input`, else stdin (at most 1 GiB: an endless
/// stream is refused, not held).
pub fn read_texts(input: Option<&Path>) -> Result<Vec<String>> {
    if let Some(p) = input {
        return Ok(io::load_texts(p)?.0);
    }
    const MAX: u64 = 1 << 30;
    let mut buf = Vec::new();
    std::io::Read::read_to_end(
        &mut std::io::Read::take(std::io::stdin().lock(), MAX + 1),
        &mut buf,
    )
    .map_err(|e| Error::io("<stdin>", e))?;
    if buf.len() as u64 > MAX {
        return Err(Error::format(
            "<stdin>",
            format!("more than {MAX} bytes of texts"),
        ));
    }
    Ok(io::parse_texts(Path::new("<stdin>"), &buf)?.0)
}

/// Runs `ctxprune count-tokens`: `{"tokenizer", "texts", "total", "tokens": [...]}`.
pub fn run(a: CountTokensArgs) -> Result<()> {
    let c = counter(a.tokenizer.as_deref())?;
    let texts = match &a.text {
        Some(t) => vec![t.clone()],
        None => read_texts(a.input.as_deref())?,
    };
    let counts: Vec<u64> = ctxprune::tokens::costs(c.as_ref(), &texts)
        .into_iter()
        .map(|v| v as u64)
        .collect();
    let out = serde_json::json!({
        "tokenizer": a.tokenizer.as_deref().unwrap_or(DEFAULT_TOKENIZER),
        "texts": texts.len(),
        "total": counts.iter().sum::<u64>(),
        "tokens": counts,
    });
    super::print_out(&format!("{out}\n"))
}
