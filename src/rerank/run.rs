//! The oracle ledger of one run: every call, the scores it returned (checked in `[0, 1]`)
//! and which documents are scored.

use super::Oracle;
use crate::error::{Error, Result};

pub(super) struct Run<'o> {
    pub(super) n: usize,
    pub(super) scored: Vec<usize>,
    pub(super) scores: Vec<f64>,
    pub(super) y: Vec<Option<f64>>,
    pub(super) rounds: usize,
    pub(super) oracle: &'o mut dyn Oracle,
}

impl Run<'_> {
    pub(super) fn call(&mut self, items: &[usize]) -> Result<Vec<f64>> {
        if items.is_empty() {
            return Ok(Vec::new());
        }
        let ys = self.oracle.score(items)?;
        self.rounds += 1;
        let bad = |msg: String| Error::Oracle {
            oracle: "answer".into(),
            status: None,
            msg,
        };
        if ys.len() != items.len() {
            return Err(bad(format!(
                "returned {} scores for {} items",
                ys.len(),
                items.len()
            )));
        }
        for (&j, &y) in items.iter().zip(&ys) {
            if !(0.0..=1.0).contains(&y) {
                return Err(bad(format!("score of item {j} is {y}, outside [0, 1]")));
            }
            self.y[j] = Some(y);
            self.scored.push(j);
            self.scores.push(y);
        }
        Ok(ys)
    }

    /// Every call so far with its score, in the order they were made.
    pub(super) fn observed(&self) -> Vec<(usize, f64)> {
        self.scored
            .iter()
            .copied()
            .zip(self.scores.iter().copied())
            .collect()
    }

    /// Final values of the methods without a GP: scored documents above the tail, by
    /// score; the tail in MIPS order.
    pub(super) fn scored_above_tail(&self) -> Vec<f64> {
        let n = self.n;
        (0..n)
            .map(|i| self.y[i].map_or(-1.0 - i as f64 / n as f64, |y| 1.0 + y))
            .collect()
    }

    /// A scored document's mean is its observation and its sigma 0 (SPEC §3).
    pub(super) fn overlay(&self, mean: &mut [f64], var: &mut [f64]) {
        for i in 0..self.n {
            if let Some(y) = self.y[i] {
                mean[i] = y;
                var[i] = 0.0;
            }
        }
    }
}
