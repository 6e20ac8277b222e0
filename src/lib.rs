//! # ctxprune
//!
//! Decides what enters an LLM research agent's context, and does it fast.
//!
//! The map of the crate:
//! - [`embeddings`]: the validated embedding matrix every selector reads.
//! - [`similarity`]: cosine / vMF / RBF / Matérn-5/2 kernels, the median-heuristic
//!   bandwidth, symmetric and batched Gram blocks (SPEC §3).
//! - [`select`]: marginal-value scorers and selectors — MMR, GRN, centroid drift, DPP,
//!   submodular coverage, hybrid, lexical — in gating and greedy modes (SPEC §1).
//! - [`select::judge`]: the `Judge` trait for caller value models (an LLM judge) and the
//!   paper's learned pre-retrieval controller (two-head MLP, safetensors weights).
//! - [`pipeline`]: the stage-aware driver of Algorithm 1 with per-stage policies and the
//!   paper's accounting.
//! - [`rerank`]: budgeted top-k selection with a limited oracle (BoundaryMORPH, BAGEL,
//!   single-stage, RGS) over an incrementally updated GP (SPEC §3).
//! - [`cost`]: effective token cost, FLOPs per token from a model's shape, the listwise
//!   window plan, NDCG@k and Recall@k (SPEC §4).
//! - [`mask`]: observation masking of agent trajectories in OpenAI and Anthropic message
//!   formats, with token accounting ([`tokens`]: tiktoken encodings and an approximation).
//! - [`backend`]: the backend boundary (CPU reference primitives; the CUDA backend:
//!   detection, NVRTC compile and cache, device primitives, `gpu-check`).
//! - [`io`]: `.npy`, safetensors and JSON-lines loaders with errors that name the row.
//! - [`demo`]: the built-in seeded synthetic pool behind `ctxprune demo`.
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

pub mod backend;
pub mod cost;
pub mod demo;
pub mod embeddings;
pub mod error;
pub mod gpu_check;
pub mod io;
pub mod mask;
pub mod pipeline;
pub mod pool;
pub mod rerank;
pub mod rng;
pub mod select;
pub mod similarity;
pub mod tokens;

pub use backend::{BackendChoice, BackendKind, Engine, EngineOptions};
pub use embeddings::Embeddings;
pub use error::{Error, ErrorKind, Result};
pub use pool::Pool;
