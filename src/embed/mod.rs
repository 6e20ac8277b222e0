//! Text in: BERT-family sentence encoders on candle (CPU), read from a
//! sentence-transformers directory (feature `embed`, on by default).
//!
//! [`SentenceEncoder::load`] reads `config.json`, `tokenizer.json`, `model.safetensors`,
//! `modules.json`, the pooling config and `sentence_bert_config.json` ([`config`] says
//! which fields and what is refused). [`SentenceEncoder::encode`] then does what
//! sentence-transformers' `encode` does: strip each text, tokenise with `[CLS]`/`[SEP]`,
//! truncate to `max_seq_length` tokens (special tokens included), run the transformer,
//! pool over the real tokens, and L2-normalise when the model has a `Normalize` module.
//!
//! Inputs are sorted by token count and cut into batches of similar length; outputs come
//! back in input order. Nothing is downloaded: the directory must hold the files.
//!
//! Two forward passes compute the same function ([`Forward`]): the default packs the
//! batch's real tokens end to end and runs attention per sequence on every core (no
//! padding, no mask); `Forward::CandleTransformers` (feature `candle-reference`) runs
//! candle-transformers' `BertModel` on the padded batch, and is what the default is tested
//! against (with sentence-transformers' vectors).
//!
//! ```no_run
//! use ctxprune::embed::{EncodeOptions, SentenceEncoder};
//! let enc = SentenceEncoder::load(std::path::Path::new("all-MiniLM-L6-v2"))?;
//! let e = enc.encode(&["What is observation masking?", "A reranker"], &EncodeOptions::default())?;
//! assert_eq!((e.rows(), e.dim()), (2, enc.dim()));
//! # Ok::<(), ctxprune::Error>(())
//! ```

mod bert;
pub mod config;

pub use config::{PoolingMode, SentenceConfig};

use crate::embeddings::Embeddings;
use crate::error::{Error, Result};
use bert::Config as BertConfig;
#[cfg(feature = "candle-reference")]
use candle_core::Tensor;
use candle_core::{DType, Device};
#[cfg(feature = "candle-reference")]
use candle_transformers::models::bert::BertModel;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokenizers::{Tokenizer, TruncationDirection, TruncationParams, TruncationStrategy};

/// Which implementation of the BERT forward pass runs (the same function).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Forward {
    /// Packed tokens, fused per-sequence attention, all cores (the default).
    #[default]
    Packed,
    /// candle-transformers' `BertModel` on padded batches with an attention mask: the
    /// reference the packed pass is tested against (feature `candle-reference`, off by
    /// default: it adds candle-transformers, minutes of compile).
    #[cfg(feature = "candle-reference")]
    CandleTransformers,
}

enum Model {
    Packed(bert::Bert),
    #[cfg(feature = "candle-reference")]
    Candle(BertModel),
}

/// How [`SentenceEncoder::encode`] batches and reports.
#[derive(Clone, Copy)]
pub struct EncodeOptions<'a> {
    /// Texts per forward pass (after sorting by length). By default 32.
    pub batch_size: usize,
    /// Called after each batch with (texts done, total).
    pub progress: Option<&'a (dyn Fn(usize, usize) + Sync)>,
    /// Checked before each batch: a cancelled or late encode stops there, with
    /// [`Error::Cancelled`], and returns nothing.
    pub cancel: Option<&'a crate::cancel::Cancel>,
}

impl Default for EncodeOptions<'_> {
    fn default() -> Self {
        EncodeOptions {
            batch_size: 32,
            progress: None,
            cancel: None,
        }
    }
}

impl std::fmt::Debug for EncodeOptions<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EncodeOptions")
            .field("batch_size", &self.batch_size)
            .field("progress", &self.progress.is_some())
            .field("cancel", &self.cancel.is_some())
            .finish()
    }
}

struct Inner {
    model: Model,
    tokenizer: Tokenizer,
    config: SentenceConfig,
    hidden: usize,
    layers: usize,
    ffn: usize,
    dir: PathBuf,
}

/// A sentence encoder loaded once and shared (`Clone + Send + Sync`, an `Arc` inside).
#[derive(Clone)]
pub struct SentenceEncoder {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for SentenceEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SentenceEncoder")
            .field("dir", &self.inner.dir)
            .field("dim", &self.dim())
            .field("config", &self.inner.config)
            .finish()
    }
}

/// A candle error as this crate's, naming what was being done.
#[cfg(feature = "candle-reference")]
fn candle_err(what: &str) -> impl Fn(candle_core::Error) -> Error + '_ {
    move |e| {
        Error::invalid(
            "embed",
            format!("{what}: {}", crate::error::flatten_lines(&e.to_string())),
        )
    }
}

/// Every size of `config.json` within [`crate::limits`] before anything is sized by it
/// (an absurd `num_hidden_layers` would otherwise size a list of layers); errors name the
/// file and the field.
fn check_sizes(c: &BertConfig, path: &Path) -> Result<()> {
    use crate::limits::{field, MAX_LAYERS, MAX_TOKENS, MAX_VOCAB, MAX_WIDTH};
    for (name, v, max) in [
        ("num_hidden_layers", c.num_hidden_layers, MAX_LAYERS),
        ("hidden_size", c.hidden_size, MAX_WIDTH),
        ("num_attention_heads", c.num_attention_heads, MAX_WIDTH),
        ("intermediate_size", c.intermediate_size, MAX_WIDTH),
        ("vocab_size", c.vocab_size, MAX_VOCAB),
        ("type_vocab_size", c.type_vocab_size, MAX_VOCAB),
        ("max_position_embeddings", c.max_position_embeddings, MAX_TOKENS),
    ] {
        field(path, name, v as u64, max)?;
    }
    Ok(())
}

/// The encoder layers the weights hold (`[prefix]encoder.layer.{l}.*`) against the
/// config's `num_hidden_layers`: more layers in the weights than the config names would
/// leave some unused without a word, fewer would fail half-way; both are errors naming
/// both counts, as is a gap in the layer numbers.
fn check_layers(weights: &[u8], st_path: &Path, config_layers: usize, cfg_path: &Path) -> Result<()> {
    let st = safetensors::SafeTensors::deserialize(weights).map_err(|e| {
        Error::format(
            st_path,
            format!(
                "not a valid safetensors file: {}",
                crate::error::flatten_lines(&e.to_string())
            ),
        )
    })?;
    let mut layers = std::collections::BTreeSet::new();
    for name in st.names() {
        if let Some((_, rest)) = name.split_once("encoder.layer.") {
            let digits: &str = rest.split('.').next().unwrap_or("");
            if let Ok(l) = digits.parse::<u64>() {
                layers.insert(l);
            }
        }
    }
    let held = layers.len();
    if let Some(&last) = layers.last() {
        if last + 1 != held as u64 {
            let gap = (0..).find(|l| !layers.contains(l)).unwrap_or(0);
            return Err(Error::format(
                st_path,
                format!("holds encoder.layer.{last} but not encoder.layer.{gap}"),
            ));
        }
    }
    if held != config_layers {
        return Err(Error::format(
            cfg_path,
            format!(
                "\"num_hidden_layers\" is {config_layers} but {} holds {held} encoder layers: \
                 the config and the weights must name the same layers",
                st_path.display()
            ),
        ));
    }
    Ok(())
}

impl SentenceEncoder {
    /// Loads a sentence-transformers directory (see the module docs).
    pub fn load(dir: &Path) -> Result<Self> {
        Self::load_with(dir, Forward::default())
    }

    /// [`SentenceEncoder::load`] with a chosen forward pass.
    pub fn load_with(dir: &Path, forward: Forward) -> Result<Self> {
        // The directory contract: a FIFO, a device or a file given as the model is refused
        // by what it is; the files inside go through the file contract.
        if let Err(e) = crate::io::file::dir(dir) {
            let what = match e {
                Error::Format { msg, .. } => msg,
                _ => "is not a directory".to_string(),
            };
            return Err(Error::format(
                dir,
                format!(
                    "{what} (a sentence-transformers model: config.json, tokenizer.json, model.safetensors)"
                ),
            ));
        }
        let cfg_path = dir.join("config.json");
        let raw = config::read_json_file(&cfg_path)?;
        match raw.get("model_type").and_then(|v| v.as_str()) {
            Some("bert") => {}
            Some(other) => {
                return Err(Error::unsupported(
                    "embed",
                    format!(
                        "{}: model_type '{other}' (this encoder runs BERT models)",
                        cfg_path.display()
                    ),
                ))
            }
            None => return Err(Error::format(&cfg_path, "missing \"model_type\" (a string)")),
        }
        #[cfg(feature = "candle-reference")]
        let raw_config = raw.clone();
        let bert: BertConfig = serde_json::from_value(raw)
            .map_err(|e| Error::format(&cfg_path, format!("not a BERT configuration: {e}")))?;
        check_sizes(&bert, &cfg_path)?;
        if bert.hidden_size == 0
            || bert.num_attention_heads == 0
            || bert.hidden_size % bert.num_attention_heads != 0
        {
            return Err(Error::format(
                &cfg_path,
                format!(
                    "hidden_size {} is not a positive multiple of num_attention_heads {}",
                    bert.hidden_size, bert.num_attention_heads
                ),
            ));
        }
        let config = config::read(dir, bert.max_position_embeddings)?;

        let tok_path = dir.join("tokenizer.json");
        let mut tokenizer = crate::tokens::load_tokenizer(&tok_path)?;
        // sentence-transformers truncates to max_seq_length and pads per batch; the file's
        // own truncation and fixed padding (128 for all-MiniLM-L6-v2) do not apply.
        tokenizer.with_padding(None);
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: config.max_seq_length,
                strategy: TruncationStrategy::LongestFirst,
                stride: 0,
                direction: TruncationDirection::Right,
            }))
            .map_err(|e| {
                Error::format(
                    &tok_path,
                    format!("cannot truncate to max_seq_length {}: {e}", config.max_seq_length),
                )
            })?;

        let st_path = dir.join("model.safetensors");
        let weights = crate::io::safetensors_header::read(&st_path)?;
        check_layers(&weights, &st_path, bert.num_hidden_layers, &cfg_path)?;
        let vb = candle_nn::VarBuilder::from_buffered_safetensors(weights, DType::F32, &Device::Cpu)
            .map_err(|e| {
                Error::format(
                    &st_path,
                    format!(
                        "not a safetensors file: {}",
                        crate::error::flatten_lines(&e.to_string())
                    ),
                )
            })?;
        let model = match forward {
            Forward::Packed => bert::Bert::load(&vb, &bert).map(Model::Packed),
            #[cfg(feature = "candle-reference")]
            Forward::CandleTransformers => {
                serde_json::from_value::<candle_transformers::models::bert::Config>(raw_config)
                    .map_err(|e| candle_core::Error::Msg(format!("not a BERT configuration: {e}")))
                    .and_then(|c| BertModel::load(vb, &c))
                    .map(Model::Candle)
            }
        }
        .map_err(|e| {
            Error::format(
                &st_path,
                format!(
                    "does not hold the BERT weights config.json describes: {}",
                    crate::error::flatten_lines(&e.to_string())
                ),
            )
        })?;
        Ok(SentenceEncoder {
            inner: Arc::new(Inner {
                model,
                tokenizer,
                hidden: bert.hidden_size,
                layers: bert.num_hidden_layers,
                ffn: bert.intermediate_size,
                config,
                dir: dir.to_path_buf(),
            }),
        })
    }

    /// Width of the output vectors (hidden size times the number of pooling modes).
    #[must_use]
    pub fn dim(&self) -> usize {
        self.inner.hidden * self.inner.config.pooling.len()
    }

    /// The sentence-transformers settings read from the directory.
    #[must_use]
    pub fn config(&self) -> &SentenceConfig {
        &self.inner.config
    }

    /// The model directory.
    #[must_use]
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// What embedding texts of these token lengths ([`SentenceEncoder::tokenize`], special
    /// tokens included) will cost ([`crate::estimate`]): every layer's projections,
    /// feed-forward and attention, batched `batch_size` at a time.
    #[must_use]
    pub fn estimate(&self, token_lengths: &[usize], batch_size: usize) -> crate::estimate::Estimate {
        let i = &self.inner;
        let (h, f, l) = (i.hidden as f64, i.ffn as f64, i.layers as f64);
        let (tokens, sq) = token_lengths
            .iter()
            .fold((0.0, 0.0), |(a, b), &t| (a + t as f64, b + (t * t) as f64));
        // Per token and layer: q, k, v, o (4 h^2) and the feed-forward (2 h f), two
        // operations a multiply-add; attention: scores and the weighted sum (4 h per pair).
        let ops = l * (2.0 * (4.0 * h * h + 2.0 * h * f) * tokens + 4.0 * h * sq);
        let b = batch_size.clamp(1, token_lengths.len().max(1)) as f64;
        let m = token_lengths.iter().copied().max().unwrap_or(0) as f64;
        // One batch's activations at its peak (the widest of the states, the feed-forward
        // and the attention scores of every head), the token ids, and the output rows.
        let heads = (h / 64.0).max(1.0);
        let bytes = 4.0 * b * m * (4.0 * h + f + heads * m)
            + 16.0 * tokens
            + 4.0 * token_lengths.len() as f64 * self.dim() as f64;
        crate::estimate::Estimate { ops, bytes }
    }

    /// Token ids of each text after stripping and truncation, special tokens included.
    pub fn tokenize(&self, texts: &[&str]) -> Result<Vec<Vec<u32>>> {
        let lower = self.inner.config.do_lower_case;
        let prepared: Vec<String> = texts
            .iter()
            .map(|t| {
                let t = t.trim();
                if lower {
                    t.to_lowercase()
                } else {
                    t.to_string()
                }
            })
            .collect();
        let enc = self.inner.tokenizer.encode_batch(prepared, true).map_err(|e| {
            Error::invalid(
                "texts",
                format!(
                    "tokenizer failed: {}",
                    crate::error::flatten_lines(&e.to_string())
                ),
            )
        })?;
        Ok(enc.into_iter().map(|e| e.get_ids().to_vec()).collect())
    }

    /// Embeds `texts` (one row each, in order). An empty list is an error.
    pub fn encode(&self, texts: &[&str], opts: &EncodeOptions<'_>) -> Result<Embeddings> {
        if texts.is_empty() {
            return Err(Error::Empty("texts to embed".into()));
        }
        if opts.batch_size == 0 {
            return Err(Error::invalid("batch size", "must be at least 1"));
        }
        let ids = self.tokenize(texts)?;
        // Longest first (ties by index), so a batch pads to nearly its own length.
        let mut order: Vec<usize> = (0..ids.len()).collect();
        order.sort_by(|&a, &b| ids[b].len().cmp(&ids[a].len()).then(a.cmp(&b)));
        let dim = self.dim();
        let mut out = vec![0f32; texts.len() * dim];
        let mut done = 0;
        for batch in order.chunks(opts.batch_size) {
            if let Some(c) = opts.cancel {
                c.check()?;
            }
            let rows: Vec<&[u32]> = batch.iter().map(|&i| ids[i].as_slice()).collect();
            let pooled = self.forward(&rows)?;
            for (k, &i) in batch.iter().enumerate() {
                out[i * dim..(i + 1) * dim].copy_from_slice(&pooled[k * dim..(k + 1) * dim]);
            }
            done += batch.len();
            if let Some(p) = opts.progress {
                p(done, texts.len());
            }
        }
        Embeddings::new(texts.len(), dim, out, "embeddings")
    }

    /// One batch through the transformer, pooled (and normalised): `rows × dim`.
    fn forward(&self, rows: &[&[u32]]) -> Result<Vec<f32>> {
        let h = self.inner.hidden;
        match &self.inner.model {
            Model::Packed(m) => {
                let states = m.forward(rows)?;
                let mut starts = Vec::with_capacity(rows.len());
                let mut o = 0;
                for r in rows {
                    starts.push(o);
                    o += r.len();
                }
                Ok(self.pool(rows, |r, t| &states[(starts[r] + t) * h..(starts[r] + t + 1) * h]))
            }
            #[cfg(feature = "candle-reference")]
            Model::Candle(m) => {
                let (b, len) = (rows.len(), rows.iter().map(|r| r.len()).max().unwrap_or(0));
                let mut ids = vec![0u32; b * len];
                let mut mask = vec![0u32; b * len];
                for (r, row) in rows.iter().enumerate() {
                    ids[r * len..r * len + row.len()].copy_from_slice(row);
                    mask[r * len..r * len + row.len()].fill(1);
                }
                let e = candle_err("transformer forward pass");
                let dev = Device::Cpu;
                let ids_t = Tensor::from_vec(ids, (b, len), &dev).map_err(&e)?;
                let mask_t = Tensor::from_vec(mask, (b, len), &dev).map_err(&e)?;
                let types = ids_t.zeros_like().map_err(&e)?;
                let hs = m.forward(&ids_t, &types, Some(&mask_t)).map_err(&e)?;
                let states: Vec<f32> = hs.flatten_all().and_then(|t| t.to_vec1()).map_err(&e)?;
                Ok(self.pool(rows, |r, t| &states[(r * len + t) * h..(r * len + t + 1) * h]))
            }
        }
    }

    /// Pools each row's token states (`tok(row, t)`) and normalises: `rows × dim`.
    fn pool<'s>(&self, rows: &[&[u32]], tok: impl Fn(usize, usize) -> &'s [f32]) -> Vec<f32> {
        let h = self.inner.hidden;
        let dim = self.dim();
        let mut out = vec![0f32; rows.len() * dim];
        for (r, row) in rows.iter().enumerate() {
            let n = row.len();
            let dst = &mut out[r * dim..(r + 1) * dim];
            for (m, mode) in self.inner.config.pooling.iter().enumerate() {
                let d = &mut dst[m * h..(m + 1) * h];
                match mode {
                    PoolingMode::Cls => d.copy_from_slice(tok(r, 0)),
                    PoolingMode::Max => {
                        d.copy_from_slice(tok(r, 0));
                        for t in 1..n {
                            d.iter_mut().zip(tok(r, t)).for_each(|(a, &v)| *a = a.max(v));
                        }
                    }
                    PoolingMode::Mean | PoolingMode::MeanSqrtLen => {
                        let mut acc = vec![0f64; h];
                        for t in 0..n {
                            acc.iter_mut()
                                .zip(tok(r, t))
                                .for_each(|(a, &v)| *a += f64::from(v));
                        }
                        let div = if *mode == PoolingMode::Mean {
                            n as f64
                        } else {
                            (n as f64).sqrt()
                        };
                        d.iter_mut().zip(&acc).for_each(|(x, &a)| *x = (a / div) as f32);
                    }
                }
            }
            if self.inner.config.normalize {
                // torch.nn.functional.normalize: x / max(||x||, 1e-12).
                let norm = dst.iter().map(|&v| f64::from(v).powi(2)).sum::<f64>().sqrt();
                let s = 1.0 / norm.max(1e-12);
                dst.iter_mut().for_each(|v| *v = (f64::from(*v) * s) as f32);
            }
        }
        out
    }
}
