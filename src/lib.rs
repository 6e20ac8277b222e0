//! # ctxprune
//!
//! Decides what enters an LLM research agent's context, and does it fast.
//!
//! The map of the crate:
//! - [`backend`]: the one backend seam. An [`Engine`] (CPU, or a CUDA device with its
//!   kernels, cuBLAS and a pool of streams) is opened once and shared; the greedy driver
//!   reaches a backend only through [`backend::picker::Picker`], the GP only through
//!   [`backend::gp::GpStore`]; every `unsafe` of the crate is in `backend/cuda/raw/`.
//! - [`pool`]: a [`Pool`], rows checked, copied and made resident on an engine once and reused; [`qk`]:
//!   the attention probe's query and key rows, the other input a backend reads.
//! - [`embed`] (feature `embed`): BERT-family sentence encoders on candle, read from a
//!   sentence-transformers directory, so every command can take text.
//! - [`embeddings`]: the validated embedding matrix every selector reads.
//! - [`similarity`]: cosine / vMF / RBF / Matérn-5/2 kernels, the median-heuristic
//!   bandwidth, symmetric and batched Gram blocks (SPEC §3).
//! - [`select`]: marginal-value scorers and selectors — MMR, GRN, centroid drift, DPP,
//!   submodular coverage, hybrid, lexical — in gating and greedy modes (SPEC §1), behind a
//!   [`select::Selector`] checked once.
//! - [`select::judge`]: the `Judge` trait for caller value models (an LLM judge) and the
//!   paper's learned pre-retrieval controller (two-head MLP, safetensors weights).
//! - [`controller`]: the learned controller as a candle-nn module (feature `embed`; the
//!   decisions log's parser is always built),
//!   trained with AdamW on logged decisions (`decisions.jsonl`), saved as one safetensors
//!   file with its feature layout that [`select::judge::LearnedController`] also reads.
//! - [`pipeline`]: the stage-aware driver of Algorithm 1 with per-stage policies and the
//!   paper's accounting; [`pipeline::replay`] replays a logged research run under the
//!   policies of a stages file ([`pipeline::stages`]), as `ctxprune pipeline` does.
//! - [`rerank`]: budgeted top-k selection with a limited oracle (BoundaryMORPH, BAGEL,
//!   single-stage, RGS) over an incrementally updated GP with kernel rows read on demand
//!   (SPEC §3), behind a [`rerank::Reranker`].
//! - [`cost`]: effective token cost, FLOPs per token from a model's shape, the listwise
//!   window plan, NDCG@k and Recall@k (SPEC §4).
//! - [`mask`]: observation masking of agent trajectories in OpenAI and Anthropic message
//!   formats, with token accounting ([`tokens`]: tiktoken encodings and an approximation);
//!   a shared `Masker` and one `MaskSession` per conversation.
//! - [`io`]: `.npy`, safetensors and JSON-lines loaders with errors that name the row; the
//!   one file-open contract ([`io::file`]) and the one JSON reader ([`io::json`]).
//! - [`limits`]: the one size guard, every bound on a count or a file in one table.
//! - [`demo`]: the built-in seeded data and `ctxprune demo`; [`gpu_check`]: `ctxprune
//!   gpu-check`.
//!
//! A service opens the engine, the pool and the selectors once, then serves requests from
//! any thread:
//!
//! ```
//! use ctxprune::select::{Method, Request, SelectConfig, Selector};
//! use ctxprune::rerank::{Method as Rerank, Precomputed, RerankConfig, Reranker};
//! use ctxprune::{Embeddings, Engine, Pool};
//!
//! let engine = Engine::auto();                   // CUDA when usable, else the CPU
//! if let Some(why) = engine.fallback_reason() { eprintln!("on the CPU: {why}"); }
//! let rows: Vec<f32> = (0..12).map(|i| ((i * 7 % 5) as f32) - 2.0 + 0.1 * i as f32).collect();
//! let pool = Pool::new(&engine, Embeddings::new(4, 3, rows, "corpus")?)?;   // normalised, resident
//! let mmr = Selector::new(&engine, SelectConfig::new(Method::Mmr).k(2))?;   // checked once
//! let q = [1.0f32, 0.0, 0.5];
//! let sel = mmr.select(&pool, &Request { query: Some(&q), ..Request::default() })?;
//! assert_eq!(sel.selected.len(), 2);
//! let bm = Reranker::new(&engine, RerankConfig::new(Rerank::BoundaryMorph, 3, 2))?;
//! let out = bm.rerank(&pool, &q, &mut Precomputed::new(vec![0.9, 0.2, 0.7, 0.1], 3)?)?;
//! assert_eq!(out.selected.len(), 2);
//! # Ok::<(), ctxprune::Error>(())
//! ```
//!
//! The free functions are thin wrappers on the CPU engine:
//!
//! ```
//! use ctxprune::{Embeddings, select::{select, Inputs, Method, Mode, SelectConfig}};
//! // Three documents; keep the ones whose GRN novelty against row 0 is at least 0.5.
//! let e = Embeddings::new(3, 2, vec![1.0, 0.0, 0.9, 0.1, 0.0, 1.0], "docs")?;
//! let cfg = SelectConfig::new(Method::Grn).mode(Mode::Gate).threshold(0.5);
//! let sel = select(&cfg, &Inputs { embeddings: Some(&e), retained: &[0], ..Inputs::default() })?;
//! assert_eq!(sel.selected, vec![2]);
//! # Ok::<(), ctxprune::Error>(())
//! ```
#![deny(missing_docs)]
#![deny(unsafe_code)]

pub mod attention;
pub mod backend;
pub mod cancel;
pub mod controller;
pub mod cost;
pub mod demo;
#[cfg(feature = "embed")]
pub mod embed;
pub mod embeddings;
pub mod error;
pub mod estimate;
pub mod gpu_check;
/// The user guide's Rust blocks (docs/*.md), run as doc tests.
mod guide;
pub mod io;
pub mod limits;
pub mod mask;
pub mod pipeline;
pub mod plot;
pub mod pool;
pub mod probe;
pub mod qk;
pub mod rerank;
pub mod rng;
pub mod select;
#[cfg(feature = "serve")]
pub mod serve;
pub mod similarity;
pub mod tokens;

pub use backend::{BackendChoice, BackendKind, Engine, EngineOptions, Storage};
pub use embeddings::Embeddings;
pub use error::{Error, ErrorKind, Result, Surface};
pub use pool::Pool;
