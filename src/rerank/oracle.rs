//! The oracle (the cross-encoder) behind a batch call.

use crate::error::{Error, Result};

/// Scores documents in `[0, 1]`; one batch call may score many. `Send`, so a service can
/// hand a request's oracle to the thread that reranks.
pub trait Oracle: Send {
    /// Scores of `items` (pool indices), in the same order.
    fn score(&mut self, items: &[usize]) -> Result<Vec<f64>>;
}

/// Precomputed scores (for evaluation): counts calls and refuses more than its budget.
#[derive(Clone, Debug)]
pub struct Precomputed {
    scores: Vec<f64>,
    budget: usize,
    calls: usize,
}

impl Precomputed {
    /// Scores for every pool item (each in `[0, 1]`), answering at most `budget` items.
    pub fn new(scores: Vec<f64>, budget: usize) -> Result<Self> {
        if let Some(i) = scores.iter().position(|s| !(0.0..=1.0).contains(s)) {
            return Err(Error::invalid(
                format!("oracle-scores[{i}]"),
                format!("{} is outside [0, 1]", scores[i]),
            ));
        }
        Ok(Precomputed {
            scores,
            budget,
            calls: 0,
        })
    }

    /// Items scored so far.
    #[must_use]
    pub fn calls(&self) -> usize {
        self.calls
    }
}

impl Oracle for Precomputed {
    fn score(&mut self, items: &[usize]) -> Result<Vec<f64>> {
        if self.calls + items.len() > self.budget {
            return Err(Error::invalid(
                "oracle",
                format!(
                    "{} more calls would exceed the budget of {} ({} used)",
                    items.len(),
                    self.budget,
                    self.calls
                ),
            ));
        }
        let out = items
            .iter()
            .map(|&i| {
                self.scores.get(i).copied().ok_or_else(|| {
                    Error::invalid(
                        "oracle",
                        format!("item {i} outside the {} scores", self.scores.len()),
                    )
                })
            })
            .collect::<Result<Vec<f64>>>()?;
        self.calls += items.len();
        Ok(out)
    }
}
