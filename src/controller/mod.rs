//! The learned pre-retrieval controller of marginal-value-pruning.txt App. B.3 (SPEC §1),
//! trained here on candle (feature `embed`) and run either here ([`ControllerModel`], a
//! candle-nn module) or by the plain-Rust [`LearnedController`] (no candle), which reads
//! the same file and gives the same values (to rounding: it sums in f64, candle in f32).
//!
//! The model: features of a candidate in a research state — the mean of the root query's
//! and the retained items' embeddings, the candidate's embedding (a frozen encoder's),
//! then depth, branch order and retained count, exactly as
//! [`LearnedController::features`] lays them out — standardised, a trunk of Linear + ReLU
//! layers, and two heads: a regression head predicting a utility `g(x)` and a
//! classification head predicting `p_keep(x)`. A stage keeps candidates with `p_keep >=
//! tau` and falls back to the top candidate when none passes
//! (`pipeline::Policy::Judge { keep_best_if_none: true, .. }`). Training: [`train`]
//! (AdamW, seeded, early stopping on a held-out split by run, as the paper splits its 360
//! decisions so no trajectory is on both sides).
//!
//! ## `decisions.jsonl`
//!
//! One logged decision per line (blank lines skipped; a field not listed here, or a key
//! given twice, is an error naming it and the line):
//!
//! ```text
//! {"run":"r1","depth":1,"order":0,"retained":3,"state_embedding":[...],"candidate_embedding":[...],"keep":true,"utility":0.7}
//! ```
//!
//! - `run` (string): the trajectory; the split keeps each run on one side.
//! - `depth`, `order`, `retained` (non-negative integers): the structural features.
//! - `state_embedding`, `candidate_embedding` (arrays of numbers, same length on every
//!   line): the state is the mean of the query and retained embeddings, as inference
//!   computes it.
//! - `keep` (boolean): the judge's decision, the classification target.
//! - `utility` (number, optional; `null` counts as absent): the regression target. A
//!   decision without one trains the keep head only (the MSE term skips it).
//!
//! Or texts instead of the two embeddings: `"query"` (string), `"retained_texts"` (array
//! of strings, default empty) and `"candidate"` (string), embedded by a frozen
//! [`Encoder`] (the state is then computed by [`LearnedController::features`] itself;
//! `retained` may be omitted and, if given, must equal the number of texts). A line
//! holding both forms is an error. Every error names the file, the line (from 1) and the
//! field.
//!
//! ## The file
//!
//! One safetensors file, F32: `trunk.{i}.weight` `[out, in]` / `trunk.{i}.bias`,
//! `reg.weight` `[1, h]` / `reg.bias`, `cls.weight` `[1, h]` / `cls.bias`, `input.mean` /
//! `input.std` `[2 D + 3]`, and `__metadata__`:
//!
//! ```text
//! format        ctxprune-controller/1
//! features      state_mean:D,candidate:D,depth,order,retained
//! embedding_dim D
//! hidden        64            (comma list, one per trunk layer)
//! encoder       the encoder's name or directory; empty when the log held embeddings
//! tau           0.5
//! trained       epochs=..,best_epoch=..,seed=..,lr=..,weight_decay=..,batch_size=..,...
//! ```
//!
//! ```
//! use ctxprune::controller::{parse_decisions, train, ControllerModel, TrainConfig};
//! use ctxprune::rng::Rng;
//! use std::path::Path;
//! // A tiny log: keep when the candidate's first coordinate is positive.
//! let mut rng = Rng::new(1);
//! let mut log = String::new();
//! for i in 0..60 {
//!     let c: Vec<f32> = (0..2).map(|_| rng.normal() as f32).collect();
//!     log += &format!(
//!         "{{\"run\":\"r{}\",\"depth\":1,\"order\":0,\"retained\":0,\"state_embedding\":[0.5,0.5],\"candidate_embedding\":{c:?},\"keep\":{}}}\n",
//!         i % 6, c[0] > 0.0
//!     );
//! }
//! let decisions = parse_decisions(Path::new("log.jsonl"), log.as_bytes(), None)?;
//! let cfg = TrainConfig { hidden: vec![8], epochs: 30, lr: 1e-2, ..TrainConfig::default() };
//! let trained = train(&decisions, &cfg)?;
//! let bytes = trained.model.to_safetensors();
//! let again = ControllerModel::from_safetensors(&bytes, Path::new("controller.safetensors"))?;
//! let x = decisions[0].features();
//! assert_eq!(trained.model.predict(&x, 1)?, again.predict(&x, 1)?);
//! # Ok::<(), ctxprune::Error>(())
//! ```
//!
//! [`LearnedController`]: crate::select::judge::LearnedController
//! [`LearnedController::features`]: crate::select::judge::LearnedController::features

mod data;
#[cfg(feature = "embed")]
mod model;
#[cfg(feature = "embed")]
mod train;

pub use data::{load_decisions, parse_decisions, split_by_run, Decision, Encoder, Split};
#[cfg(feature = "embed")]
pub use model::{ControllerModel, ModelInfo, Prediction};
#[cfg(feature = "embed")]
pub use train::{evaluate, train, Metrics, TrainConfig, TrainReport, Trained};

/// A candle error as the crate's: candle reports shape and dtype mistakes, which here
/// come from the inputs.
#[cfg(feature = "embed")]
pub(crate) fn candle_error(e: candle_core::Error) -> crate::error::Error {
    use crate::error::{flatten_lines, Error};
    Error::invalid("controller (candle)", flatten_lines(&e.to_string()))
}
