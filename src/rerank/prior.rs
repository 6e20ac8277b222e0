//! The GP's prior mean over the pool ([`Prior`]), as BoundaryMORPH starts from it.

use super::config::Prior;
use super::gp::PoolKernel;

/// The prior mean of every pool row (in MIPS order) under `prior`; the query's is 1 for
/// every prior but [`Prior::Zero`]. [`Prior::Adaptive`] starts from the MIPS percentile
/// (its scale is then fitted by the GP). [`Prior::Score`] reads the rows' cosines with the
/// query (`rows.query_cosines()`); the others read only the pool's size.
#[must_use]
pub fn prior_mean(prior: Prior, rows: &PoolKernel<'_>) -> Vec<f64> {
    use super::gp::KernelRows;
    let n = rows.len();
    match prior {
        Prior::Zero => vec![0.0; n],
        Prior::Mips | Prior::Adaptive => percentile(n),
        Prior::Score => score_shape(&rows.query_cosines()),
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
