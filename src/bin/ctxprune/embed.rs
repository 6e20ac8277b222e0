//! `ctxprune embed`: texts (JSON lines) in, sentence embeddings out (.npy or
//! .safetensors); and the `--model DIR` encoder that `select`, `rerank`, `mask` and
//! `pipeline` use to take text.

use ctxprune::embed::{EncodeOptions, SentenceEncoder};
use ctxprune::{io, Embeddings, Error, Result};
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
pub struct EmbedArgs {
    /// A sentence-transformers directory (config.json, tokenizer.json, model.safetensors,
    /// modules.json, 1_Pooling/config.json).
    #[arg(long)]
    pub model: PathBuf,
    /// Texts as JSON lines with "text", one per row. By default stdin.
    #[arg(long)]
    pub input: Option<PathBuf>,
    /// Write here (.npy or .safetensors) instead of an .npy on stdout.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Texts per forward pass (inputs are sorted by length first).
    #[arg(long, default_value_t = 32, allow_negative_numbers = true)]
    pub batch_size: usize,
    /// No progress lines on stderr.
    #[arg(long)]
    pub quiet: bool,
}

/// Loads `--model DIR`.
pub fn load(dir: &Path) -> Result<SentenceEncoder> {
    SentenceEncoder::load(dir)
}

/// Embeds `texts`, printing progress on stderr for long inputs unless `quiet`.
pub fn encode(enc: &SentenceEncoder, texts: &[&str], batch_size: usize, quiet: bool) -> Result<Embeddings> {
    if batch_size == 0 {
        return Err(Error::invalid("--batch-size", "must be at least 1"));
    }
    let start = std::time::Instant::now();
    let last = std::sync::Mutex::new(start);
    let report = |done: usize, total: usize| {
        let now = std::time::Instant::now();
        let mut l = last.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if done == total || now.duration_since(*l).as_secs_f64() >= 1.0 {
            *l = now;
            let s = now.duration_since(start).as_secs_f64();
            eprintln!(
                "embed: {done}/{total} texts, {s:.1} s ({:.0} texts/s)",
                done as f64 / s.max(1e-9)
            );
        }
    };
    // Progress only where it helps: more than a few batches.
    let long = !quiet && texts.len() > 4 * batch_size;
    let opts = EncodeOptions {
        batch_size,
        progress: if long { Some(&report) } else { None },
        cancel: None,
    };
    enc.encode(texts, &opts)
}

/// Runs `ctxprune embed`.
pub fn run(a: EmbedArgs) -> Result<()> {
    if a.batch_size == 0 {
        return Err(Error::invalid("--batch-size", "must be at least 1"));
    }
    let out_kind = match &a.out {
        None => None,
        Some(p) => match p.extension().and_then(|e| e.to_str()) {
            Some("npy") => Some(false),
            Some("safetensors") => Some(true),
            _ => {
                return Err(Error::invalid(
                    "--out",
                    format!("{}: the name must end in .npy or .safetensors", p.display()),
                ))
            }
        },
    };
    let enc = load(&a.model)?;
    let texts = super::tokens::read_texts(a.input.as_deref())?;
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let e = encode(&enc, &refs, a.batch_size, a.quiet)?;
    let (rows, dim) = (e.rows(), e.dim());
    let data: Vec<f32> = (0..rows).flat_map(|i| e.row(i).iter().copied()).collect();
    match (&a.out, out_kind) {
        (Some(p), Some(true)) => {
            let c = enc.config();
            let pooling: Vec<&str> = c.pooling.iter().map(|m| m.name()).collect();
            let meta = std::collections::HashMap::from([
                ("model".to_string(), enc.dir().display().to_string()),
                ("pooling".to_string(), pooling.join("+")),
                ("normalize".to_string(), c.normalize.to_string()),
                ("max_seq_length".to_string(), c.max_seq_length.to_string()),
            ]);
            io::write_safetensors_f32(p, "embeddings", rows, dim, &data, meta)
        }
        (Some(p), _) => io::write_npy_f32(p, rows, dim, &data),
        (None, _) => {
            let bytes = io::npy_f32_bytes(&[rows as u64, dim as u64], &data)?;
            let mut out = std::io::stdout().lock();
            std::io::Write::write_all(&mut out, &bytes)
                .and_then(|()| std::io::Write::flush(&mut out))
                .map_err(|e| Error::io("<stdout>", e))
        }
    }
}
