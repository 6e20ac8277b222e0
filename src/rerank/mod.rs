//! Budgeted top-k selection (boundarymorph-budgeted-reranking.txt §2–3, App. B–C;
//! SPEC §3): choose the `k` documents that enter a generator's context when the
//! cross-encoder (the oracle) may be called only `B` times.
//!
//! The pool arrives in MIPS order (row 0 = MIPS top-1). Methods:
//! - BoundaryMORPH: GP over the pool (vMF kernel, MIPS-percentile prior, the query as a
//!   zero-cost observation) with the boundary acquisition rule of SPEC §3;
//! - its ablations: zero prior ([`Prior::Zero`]) and UCB acquisition ([`Acquisition::Ucb`]);
//! - BAGEL: zero prior, GP-UCB with `beta_t = beta0 / sqrt(t + 1)`, warm start on the MIPS
//!   top-floor(B/2);
//! - single-stage rerank of the MIPS top-B;
//! - RGS as in App. C.2 (MIPS seeds, then greedy expansion over a k-NN graph of the pool)
//!   and the simpler `rgs-simple` (one seed);
//!
//! and beyond the paper (issue 15; SPEC §3):
//! - batches: `batch = q` picks `q` documents per round and makes one oracle call with them.
//!   Inside a round each pick after the first sees the earlier ones as observed at their
//!   posterior mean (kriging believer: their variance falls to zero and their neighbours'
//!   with it), then the acquisition rule runs again; the oracle's scores then replace the
//!   fantasies as one rank-`q` update ([`gp::Gp::revise`]). `q = 1` is the paper's method
//!   call for call;
//! - an adaptive prior ([`Prior::Adaptive`]): the MIPS prior's scale fitted to the scores as
//!   they arrive, so a prior the oracle contradicts fades to zero;
//! - a score prior ([`Prior::Score`]): the shape of the MIPS scores themselves (min-max
//!   scaled, square root) instead of their ranks ([`prior_mean`]);
//! - a feedback prior ([`Prior::Feedback`]): the score prior re-shaped every
//!   [`FEEDBACK_EVERY`] calls from the query moved by the scores (Rocchio's relevance
//!   feedback, [`feedback_mean`]), optionally with a share from the neighbourhoods of the
//!   documents scored relevant ([`feedback_mean_with`]), under a GP that keeps its kernel
//!   rows ([`gp::Gp::set_prior`]);
//! - a token capacity: the selected set is the greedy fill of `T` tokens by posterior value
//!   per token, and the boundary rule compares the set's members with the rest on value per
//!   token.
//!
//! The GP's hyperparameters can be judged by their evidence ([`evidence`]: the log
//! marginal likelihood of the scores seen, its gradient, and a bounded type-II maximum
//! likelihood fit).
//!
//! Oracles: [`Precomputed`] scores for evaluation, and (feature `http`) clients for TEI
//! and Cohere-style rerank servers with a batching queue ([`http`]). [`eval`] is the
//! seeded benchmark behind `ctxprune eval`.

mod acquire;
pub mod auto;
mod config;
mod estimate;
pub mod eval;
pub mod eval_set;
pub mod evidence;
pub mod gp;
#[cfg(feature = "http")]
pub mod http;
pub mod metrics;
pub mod options;
pub mod oracle;
pub mod peaks;
pub mod plot;
mod prior;
mod reranker;
mod rgs;
mod run;

use crate::error::Result;
use crate::pool::Pool;
use crate::similarity::Kernel;
pub use acquire::{boundary_pick, boundary_pick_tokens, ucb_pick, verify_pick, verify_pick_tokens};
pub use config::{
    Acquisition, Hyperparameters, KernelChoice, Method, Prior, RerankConfig, EVIDENCE_FIRST,
    EVIDENCE_MAX_OBSERVATIONS, FEEDBACK_BETA, FEEDBACK_EVERY, FEEDBACK_GAMMA, FEEDBACK_RELEVANT,
};
use gp::PoolKernel;
pub use gp::RowPrecision;
pub use options::RerankOptions;
pub use oracle::{Oracle, Precomputed};
pub use prior::{feedback_mean, feedback_mean_with, prior_mean};
pub use reranker::{probe_ranks, rerank, rerank_tokens, Reranked, Reranker};

/// The pool's kernel read on demand (rows of `K(pool, pool)` computed when asked, the
/// query's row once): what the GP and RGS read, and what tests refit densely against.
pub fn kernel_rows<'p>(pool: &'p Pool, query: &[f32], kernel: Kernel) -> Result<PoolKernel<'p>> {
    PoolKernel::new(pool.rows(), query, kernel)
}

/// [`kernel_rows`] read from a copy of the pool in `precision` ([`RowPrecision`]; f32 is
/// [`kernel_rows`] itself).
pub fn kernel_rows_in<'p>(
    pool: &'p Pool,
    query: &[f32],
    kernel: Kernel,
    precision: RowPrecision,
) -> Result<PoolKernel<'p>> {
    PoolKernel::with_precision(pool.rows(), query, kernel, precision)
}
