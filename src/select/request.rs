//! A selection's input and output: [`Inputs`] (the free function's borrowed pool),
//! [`Request`] (everything but a resident pool) and [`Selection`].

use super::{Method, Mode, Stop};
use crate::backend::BackendKind;
use crate::embeddings::Embeddings;

/// What to select from, all borrowed: the free function [`select`](super::select())'s input. Rows of
/// `embeddings` (or entries of `texts`) are the pool; `retained` names rows already in
/// the context `C`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Inputs<'a> {
    /// The pool's embeddings (any norm; cosines divide by the norms). Not needed by lexical.
    pub embeddings: Option<&'a Embeddings>,
    /// The query embedding (MMR, DPP and hybrid need it; coverage weighs by it if given).
    pub query: Option<&'a [f32]>,
    /// The pool's texts (lexical).
    pub texts: Option<&'a [String]>,
    /// The query text (lexical).
    pub query_text: Option<&'a str>,
    /// Token cost of every pool item (> 0). By default every item costs 1.
    pub costs: Option<&'a [f64]>,
    /// Rows already retained, in the order they were added.
    pub retained: &'a [usize],
    /// Stops the selection between greedy steps (and between blocks of coverage's
    /// neighbour search) once cancelled or past its deadline, with
    /// [`Error::Cancelled`](crate::Error::Cancelled). By default none: the selection runs to its end.
    pub cancel: Option<&'a crate::cancel::Cancel>,
}

/// One selection request against a resident [`Pool`](crate::Pool): everything but the pool.
#[derive(Clone, Copy, Debug, Default)]
pub struct Request<'a> {
    /// The query embedding (MMR, DPP and hybrid need it; coverage weighs by it if given).
    pub query: Option<&'a [f32]>,
    /// The pool's texts (lexical).
    pub texts: Option<&'a [String]>,
    /// The query text (lexical).
    pub query_text: Option<&'a str>,
    /// Token cost of every pool item (> 0). By default every item costs 1.
    pub costs: Option<&'a [f64]>,
    /// Rows already retained, in the order they were added.
    pub retained: &'a [usize],
    /// Stops the selection between greedy steps (and between blocks of coverage's
    /// neighbour search) once cancelled or past its deadline, with
    /// [`Error::Cancelled`](crate::Error::Cancelled). By default none: the selection runs to its end.
    pub cancel: Option<&'a crate::cancel::Cancel>,
}

impl<'a> Inputs<'a> {
    pub(super) fn request(&self) -> Request<'a> {
        Request {
            query: self.query,
            texts: self.texts,
            query_text: self.query_text,
            costs: self.costs,
            retained: self.retained,
            cancel: self.cancel,
        }
    }
}

/// The outcome of a selection.
#[derive(Clone, Debug, PartialEq)]
pub struct Selection {
    /// The method used.
    pub method: Method,
    /// The mode used.
    pub mode: Mode,
    /// Greedy: picks in order. Gate: kept candidates in index order.
    pub selected: Vec<usize>,
    /// `V(x | C)` of each selected item when it was selected.
    pub gains: Vec<f64>,
    /// Why greedy selection stopped (`None` for gating).
    pub stop: Option<Stop>,
    /// The threshold in force, if any.
    pub threshold: Option<f64>,
    /// Sum of the selected items' costs.
    pub tokens_selected: f64,
    /// Things the caller should know (a budget larger than the pool, a sparsified
    /// similarity, a step that ran on the CPU, ...), one sentence each.
    pub notes: Vec<String>,
    /// Where the selection ran.
    pub backend: BackendKind,
}

impl Selection {
    /// The JSON object `ctxprune select` prints (and `ctxprune serve` answers):
    /// `method`, `mode`, `selected`, `gains`, `backend`, `elapsed_ms`, `notes` (what the
    /// caller should know, also printed on stderr by the CLI), and `stopped_by`,
    /// `threshold` and `tokens` (with `costs_given`) where they apply.
    #[must_use]
    pub fn to_json(&self, elapsed_ms: f64, costs_given: bool) -> serde_json::Value {
        let mut out = serde_json::json!({
            "method": self.method.name(),
            "mode": self.mode.name(),
            "selected": self.selected,
            "gains": self.gains,
            "backend": self.backend.name(),
            "elapsed_ms": elapsed_ms,
        });
        if let Some(s) = self.stop {
            out["stopped_by"] = s.as_str().into();
        }
        if let Some(t) = self.threshold {
            out["threshold"] = t.into();
        }
        if costs_given {
            out["tokens"] = self.tokens_selected.into();
        }
        out["notes"] = serde_json::json!(self.notes);
        out
    }
}
