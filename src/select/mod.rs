//! Marginal-value scoring and selection (marginal-value-pruning.txt §3, §5, App. B;
//! SPEC §1).
//!
//! Seven scorers answer `V(x | C, Q)` for a candidate `x`, a retained set `C` and a query:
//! MMR, geometric residual novelty (GRN), centroid drift, DPP determinant ratios,
//! submodular coverage per token, the hybrid, and lexical MMR. Each is used two ways:
//!
//! - [`Mode::Gate`]: score every candidate against a fixed retained set and keep those
//!   with `V >= tau` (Post-Retrieval pruning, Algorithm 1 line 11);
//! - [`Mode::Greedy`]: add the best candidate, update incrementally, repeat until an item
//!   budget `k`, a token budget, the threshold, or the scorer's own "no gain left" stops
//!   it (Pre-Retrieval and Pre-Synthesis).
//!
//! Ties always go to the lower index. Stopping rules (each method's facts are written once,
//! in `Selector::facts`, and hold on every backend): DPP and GRN stop when the best squared
//! residual is below [`presets::RESIDUAL_EPS`]; centroid drift stops when no candidate
//! drifts by more than [`presets::CENTROID_NOISE_FLOOR`]; MMR, lexical MMR and the hybrid
//! rank candidates rather than gain (their scores go negative in ordinary use), so they
//! run to `k` or the token budget unless a threshold is given, as LangChain's
//! `maximal_marginal_relevance`, Pyversity and Haystack do (SPEC §1, revised); coverage
//! keeps adding zero-gain items while they fit unless an item cap stops it. Every method also stops on the item budget `k` and the token budget;
//! under a token budget it takes the best candidate that still fits.
//!
//! A service builds a [`Selector`] once (the config is checked there) and calls
//! [`Selector::select`] on a resident [`Pool`](crate::Pool) from any thread; the free
//! [`select`] is a thin wrapper that does both per call on the CPU.
//!
//! ```
//! use ctxprune::{Embeddings, select::{select, Inputs, Method, SelectConfig}};
//! let e = Embeddings::new(3, 2, vec![1.0, 0.0, 0.99, 0.1, 0.0, 1.0], "docs")?;
//! let q = [1.0f32, 0.5];
//! // lambda 0.5 weighs novelty as much as relevance (the default, 0.75, favours relevance).
//! let cfg = SelectConfig::new(Method::Mmr).k(2).lambda(0.5);
//! let sel = select(&cfg, &Inputs { embeddings: Some(&e), query: Some(&q), ..Inputs::default() })?;
//! assert_eq!(sel.selected, vec![1, 2]); // 0, a near-duplicate of 1, loses to the new direction
//! # Ok::<(), ctxprune::Error>(())
//! ```

mod config;
mod coverage;
mod dense;
mod driver;
mod estimate;
mod hybrid;
pub mod judge;
pub mod lexical;
pub mod options;
pub mod presets;
mod request;
mod scorers;
mod selector;

pub use driver::Stop;
pub use options::{check_reads, SelectOptions};

pub use config::{Method, Mode, Preset, SelectConfig};
pub use request::{Inputs, Request, Selection};
pub use selector::Selector;

use crate::backend::Engine;
use crate::error::Result;

/// Runs `cfg` on `inp` on the CPU: a thin wrapper over [`Selector`] (the config is checked
/// on every call and the rows' norms taken per call; a service keeps a [`Selector`] and a
/// [`Pool`](crate::Pool) instead).
pub fn select(cfg: &SelectConfig, inp: &Inputs<'_>) -> Result<Selection> {
    Selector::new(&Engine::cpu(), cfg.clone())?.select_inputs(inp)
}
