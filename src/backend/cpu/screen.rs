//! [`Screen16`]: a pool's rows quantised to 16 bits a value, the copy the `f32` screens
//! of MMR's lazy heap read over a resident pool. Half the bytes of the `f32` rows, so a
//! pass of bounds over a pool that lives in a cache level (or in main memory) reads half
//! as much; the bounds stay bounds, because each row carries its quantisation error.
//!
//! Row `x` is stored as `scale_x · a_x`, with `a_x` in `i16` (`|a_i| <= 32767`, the
//! largest value of the row at 32767 unless its scale is below `f32`'s normal range) and
//! `scale_x` in `f32`. Its error
//! `err_x >= ‖x - scale_x a_x‖ / ‖x‖` is measured when the copy is made, so for any row
//! `y` the product `scale_x · dot_f32(a_x, y)` ([`super::dot_i16_f32`], the same lanes as
//! [`super::dot_f32`]) is within `γ ‖scale_x a_x‖ ‖y‖ + ‖x - scale_x a_x‖ ‖y‖
//! <= (γ + (1 + γ) err_x) ‖x‖ ‖y‖` of `<x, y>` (γ the kernel's bound): [`Screen16::slack`].
//! A unit row of 384 values is typically within 4e-5; no more than a screen needs.

use crate::embeddings::Matrix;

/// The largest magnitude a quantised value takes.
const TOP: f64 = 32767.0;

/// A pool's rows quantised to `i16` with a scale and a measured error per row (see the
/// module doc).
pub(crate) struct Screen16 {
    dim: usize,
    values: Vec<i16>,
    scale: Vec<f32>,
    err: Vec<f64>,
}

impl Screen16 {
    /// The copy of `e`'s rows, with `inv` their exact `1 / ‖row‖` (the pool's): one read
    /// of the rows, on every core for a large pool. A row with a value that is not
    /// finite, or a norm that is not, gets an infinite error (its bounds bound nothing,
    /// so it is always computed exactly).
    #[must_use]
    pub fn new(e: Matrix<'_>, inv: &[f64]) -> Self {
        use rayon::prelude::*;
        let (n, dim) = (e.rows(), e.dim());
        let mut values = vec![0i16; n * dim];
        let mut scale = vec![0f32; n];
        let mut err = vec![0f64; n];
        let quantise = |x: usize, out: &mut [i16], s: &mut f32, er: &mut f64| {
            let row = e.row(x);
            let top = row.iter().fold(0f32, |m, v| m.max(v.abs()));
            let sc = (f64::from(top) / TOP) as f32;
            let finite = row.iter().all(|v| v.is_finite());
            if !(finite && sc.is_finite() && sc > 0.0 && inv[x].is_finite()) {
                // A zero row (never in a pool) is exact at scale 1; the rest (a value that
                // is not finite, a scale below the smallest `f32`) bound nothing.
                *s = 1.0;
                out.fill(0);
                *er = if finite && top == 0.0 { 0.0 } else { f64::INFINITY };
                return;
            }
            let sc64 = f64::from(sc);
            let mut sq = 0f64;
            for (o, &v) in out.iter_mut().zip(row) {
                let a = (f64::from(v) / sc64).round().clamp(-TOP, TOP);
                *o = a as i16;
                // Exact: `sc · a` has 40 significant bits, and the difference of two
                // values this close is a multiple of `sc`'s last bit below `|v|`.
                let d = f64::from(v) - sc64 * a;
                sq += d * d;
            }
            *s = sc;
            // The sum of squares and the square root round a few times in `f64`; a
            // relative 1e-9 on top covers them.
            *er = sq.sqrt() * inv[x] * (1.0 + 1e-9);
        };
        if n * dim < 1 << 16 {
            for (x, ((o, s), er)) in values
                .chunks_mut(dim.max(1))
                .zip(&mut scale)
                .zip(&mut err)
                .enumerate()
            {
                quantise(x, o, s, er);
            }
        } else {
            values
                .par_chunks_mut(dim.max(1))
                .zip(scale.par_iter_mut())
                .zip(err.par_iter_mut())
                .enumerate()
                .with_min_len(64)
                .for_each(|(x, ((o, s), er))| quantise(x, o, s, er));
        }
        Screen16 {
            dim,
            values,
            scale,
            err,
        }
    }

    /// Row `x`'s quantised values `a_x`.
    #[inline]
    #[must_use]
    pub fn row(&self, x: usize) -> &[i16] {
        &self.values[x * self.dim..(x + 1) * self.dim]
    }

    /// Row `x`'s scale: the row is `scale · a_x` within its error.
    #[inline]
    #[must_use]
    pub fn scale(&self, x: usize) -> f64 {
        f64::from(self.scale[x])
    }

    /// An upper bound on `‖x - scale_x a_x‖ / ‖x‖` (infinite for a row that bounds
    /// nothing); the screens read it through [`slack`](Self::slack).
    #[cfg(test)]
    #[must_use]
    pub fn err(&self, x: usize) -> f64 {
        self.err[x]
    }

    /// What a cosine from row `x`'s copy takes off (or adds): `screen + (1 + screen) ·
    /// err_x`, with `screen` the kernel's bound on an `f32` cosine of exact rows (its
    /// `γ`, plus the margin for the `f64` scalings).
    #[inline]
    #[must_use]
    pub fn slack(&self, x: usize, screen: f64) -> f64 {
        screen + (1.0 + screen) * self.err[x]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    /// Every row's measured error bounds the distance of its copy from it, against a
    /// direct evaluation in exact rational steps (`f64` products of an `f32` and an
    /// `i16` scaled are exact; the sum is taken in `f64` and compared with a margin far
    /// below the one the error keeps), and is not vacuous (within 1e-6 of it, relative);
    /// the largest value of a row is stored at 32767; a row with a value that is not
    /// finite (an infinity; a NaN among zeros) bounds nothing; rows of odd sizes and
    /// scales from 1e-30 to 1e30.
    #[test]
    fn each_rows_error_bounds_its_copy() {
        let mut rng = Rng::new(41);
        for &(n, d) in &[(1usize, 1usize), (7, 3), (33, 97), (101, 384), (3, 1031)] {
            for &scale in &[1e-30f64, 1e-3, 1.0, 1e3, 1e30] {
                let mut data: Vec<f32> = (0..n * d).map(|_| (rng.normal() * scale) as f32).collect();
                if n > 2 {
                    data[d] = f32::INFINITY;
                    data[2 * d..3 * d].fill(0.0);
                }
                if n > 3 {
                    // NaN among zeros: no largest value to scale by.
                    data[3 * d..4 * d].fill(0.0);
                    data[3 * d] = f32::NAN;
                }
                let inv: Vec<f64> = data
                    .chunks(d)
                    .map(|r| 1.0 / r.iter().map(|&v| f64::from(v).powi(2)).sum::<f64>().sqrt())
                    .collect();
                let s = Screen16::new(Matrix::borrowed(&data, n, d), &inv);
                for x in 0..n {
                    let row = &data[x * d..(x + 1) * d];
                    if row.iter().any(|v| !v.is_finite()) {
                        assert_eq!(s.err(x), f64::INFINITY, "row {x}");
                        continue;
                    }
                    if row.iter().all(|&v| v == 0.0) {
                        assert_eq!(s.err(x), 0.0, "row {x}");
                        assert!(s.row(x).iter().all(|&a| a == 0), "row {x}");
                        continue;
                    }
                    let top = row.iter().map(|v| v.abs()).fold(0.0f32, f32::max);
                    let at = row.iter().position(|v| v.abs() == top).unwrap();
                    assert_eq!(s.row(x)[at].unsigned_abs(), 32767, "row {x}");
                    assert!(s.row(x).iter().all(|&a| a != i16::MIN), "row {x}");
                    let dist: f64 = row
                        .iter()
                        .zip(s.row(x))
                        .map(|(&v, &a)| (f64::from(v) - s.scale(x) * f64::from(a)).powi(2))
                        .sum::<f64>()
                        .sqrt()
                        * inv[x];
                    assert!(
                        s.err(x) >= dist,
                        "n {n}, d {d}, scale {scale}, row {x}: {} < {dist}",
                        s.err(x)
                    );
                    assert!(
                        s.err(x) <= dist * (1.0 + 1e-6) + 1e-300,
                        "n {n}, d {d}, scale {scale}, row {x}: {} against {dist}",
                        s.err(x)
                    );
                    // A quantisation step is `top / 32767`; half a step a value at most.
                    let step = f64::from(top) / 32767.0;
                    assert!(
                        dist <= 0.5 * step * (d as f64).sqrt() * inv[x] * (1.0 + 1e-6),
                        "row {x}"
                    );
                }
            }
        }
    }
}
