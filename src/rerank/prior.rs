//! The GP's prior mean over the pool ([`Prior`]), as BoundaryMORPH starts from it.

use super::config::{Prior, FEEDBACK_BETA, FEEDBACK_GAMMA, FEEDBACK_RELEVANT};
use super::gp::PoolKernel;
use crate::error::{Error, Result};

/// The prior mean of every pool row (in MIPS order) under `prior`; the query's is 1 for
/// every prior but [`Prior::Zero`]. [`Prior::Adaptive`] starts from the MIPS percentile
/// (its scale is then fitted by the GP). [`Prior::Score`] reads the rows' cosines with the
/// query (`rows.query_cosines()`), and so does [`Prior::Feedback`] before any feedback
/// ([`feedback_mean`] after); the others read only the pool's size.
#[must_use]
pub fn prior_mean(prior: Prior, rows: &PoolKernel<'_>) -> Vec<f64> {
    use super::gp::KernelRows;
    let n = rows.len();
    match prior {
        Prior::Zero => vec![0.0; n],
        Prior::Mips | Prior::Adaptive => percentile(n),
        Prior::Score | Prior::Feedback => score_shape(&rows.query_cosines()),
    }
}

/// The feedback prior ([`Prior::Feedback`]) after the scores `scored` (pool row, score in
/// `[0, 1]`, in the order they were scored): the score prior's shape of every row's cosine
/// with Rocchio's moved query `q + beta sum_{j in R} y_j x_j / sum_{j in R} y_j - gamma
/// sum_{j in N} (1 - y_j) x_j / sum_{j in N} (1 - y_j)`, where `R` holds the rows scored
/// at least [`FEEDBACK_RELEVANT`] and `N` the others (unit query and rows; an empty set's
/// centroid is left out; beta [`FEEDBACK_BETA`],
/// gamma [`FEEDBACK_GAMMA`]). With no scores, or where the moved query is zero, the score
/// prior. A score outside `[0, 1]` or an index outside the pool is an error naming it.
pub fn feedback_mean(rows: &PoolKernel<'_>, scored: &[(usize, f64)]) -> Result<Vec<f64>> {
    if let Some(&(j, y)) = scored.iter().find(|(_, y)| !(0.0..=1.0).contains(y)) {
        return Err(Error::invalid(
            format!("score of row {j}"),
            format!("{y} is outside [0, 1]"),
        ));
    }
    if scored.is_empty() {
        return Ok(score_shape(&rows.query_cosines()));
    }
    let relevant = |y: f64| y >= FEEDBACK_RELEVANT;
    let rel: f64 = scored.iter().filter(|s| relevant(s.1)).map(|s| s.1).sum();
    let non: f64 = scored.iter().filter(|s| !relevant(s.1)).map(|s| 1.0 - s.1).sum();
    let w: Vec<(usize, f64)> = scored
        .iter()
        .map(|&(j, y)| {
            let w = if relevant(y) {
                if rel > 0.0 {
                    FEEDBACK_BETA * y / rel
                } else {
                    0.0
                }
            } else if non > 0.0 {
                -FEEDBACK_GAMMA * (1.0 - y) / non
            } else {
                0.0
            };
            (j, w)
        })
        .collect();
    Ok(match rows.cosines_with(1.0, &w)? {
        Some(cos) => score_shape(&cos),
        None => score_shape(&rows.query_cosines()),
    })
}

/// The feedback prior with a share from the relevant documents' neighbourhoods
/// ([`super::RerankConfig::feedback_neighbours`]): `(1 - share) r + share n`, where `r` is
/// [`feedback_mean`] and `n` the score prior's shape of every row's largest cosine with a
/// row scored at least [`FEEDBACK_RELEVANT`] (unit rows). Rocchio's centroid of several
/// relevant documents lies between them, and a relevant document far from the query and
/// from the others lifts the prior only a little; `n` lifts every neighbourhood that holds
/// one. With no relevant row yet, or `share` 0, [`feedback_mean`] itself. `share` outside
/// `[0, 1]`, a score outside `[0, 1]` or an index outside the pool is an error naming it.
pub fn feedback_mean_with(rows: &PoolKernel<'_>, scored: &[(usize, f64)], share: f64) -> Result<Vec<f64>> {
    use super::gp::KernelRows;
    check_share(share)?;
    let rocchio = feedback_mean(rows, scored)?;
    if share == 0.0 {
        return Ok(rocchio);
    }
    let mut near = Neighbours::new(rows.len());
    near.add(rows, scored)?;
    Ok(near.mix(rocchio, share))
}

/// A neighbour share outside `[0, 1]`: an error naming it.
pub(crate) fn check_share(share: f64) -> Result<()> {
    if (0.0..=1.0).contains(&share) {
        Ok(())
    } else {
        Err(Error::invalid(
            "feedback_neighbours",
            format!("{share} is outside [0, 1]"),
        ))
    }
}

/// Every pool row's largest cosine with a row scored at least [`FEEDBACK_RELEVANT`],
/// kept as the scores arrive: one pass over the pool for each relevant row, once (a run's
/// re-shapings add only the rows scored since the last). The scores only grow at their
/// end, so the rows are taken in the same order as from scratch: the same bits.
pub(crate) struct Neighbours {
    nearest: Vec<f64>,
    counted: Vec<bool>,
    any: bool,
}

impl Neighbours {
    /// No relevant row yet, over a pool of `n`.
    pub(crate) fn new(n: usize) -> Self {
        Neighbours {
            nearest: vec![f64::NEG_INFINITY; n],
            counted: vec![false; n],
            any: false,
        }
    }

    /// Counts the rows of `scored` at or above [`FEEDBACK_RELEVANT`] not counted yet (the
    /// scores checked by [`feedback_mean`]). An index outside the pool is an error naming
    /// it.
    pub(crate) fn add(&mut self, rows: &PoolKernel<'_>, scored: &[(usize, f64)]) -> Result<()> {
        for &(j, y) in scored {
            if y < FEEDBACK_RELEVANT || self.counted.get(j).copied().unwrap_or(false) {
                continue;
            }
            if let Some(cos) = rows.cosines_with(0.0, &[(j, 1.0)])? {
                self.nearest
                    .iter_mut()
                    .zip(&cos)
                    .for_each(|(a, &c)| *a = a.max(c));
                self.any = true;
            }
            self.counted[j] = true;
        }
        Ok(())
    }

    /// `(1 - share) rocchio + share n` (`n` the score prior's shape of the largest
    /// cosines); `rocchio` itself before any relevant row or with `share` 0.
    pub(crate) fn mix(&self, rocchio: Vec<f64>, share: f64) -> Vec<f64> {
        if !self.any || share == 0.0 {
            return rocchio;
        }
        rocchio
            .iter()
            .zip(score_shape(&self.nearest))
            .map(|(&r, n)| (1.0 - share) * r + share * n)
            .collect()
    }
}

/// The MIPS percentile `(N-1-pos)/(N-1)` (1 for a pool of one).
fn percentile(n: usize) -> Vec<f64> {
    if n == 1 {
        return vec![1.0];
    }
    (0..n).map(|p| (n - 1 - p) as f64 / (n - 1) as f64).collect()
}

/// `sqrt((c - min) / (max - min))` over `cos`; 1 everywhere when the cosines are all equal.
/// `c - min <= max - min` holds after rounding (subtraction is monotone), so every value
/// is in `[0, 1]`.
fn score_shape(cos: &[f64]) -> Vec<f64> {
    let (lo, hi) = cos.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &c| {
        (a.min(c), b.max(c))
    });
    let span = hi - lo;
    if span.is_nan() || span <= 0.0 {
        return vec![1.0; cos.len()];
    }
    cos.iter().map(|&c| ((c - lo) / span).sqrt()).collect()
}
