//! Similarity kernels over unit embeddings and the Gram blocks built from them.
//!
//! A kernel is an epilogue applied to a cosine (SPEC §3): cosine itself, von Mises–Fisher
//! `exp(kappa (cos - 1))`, RBF and Matérn-5/2 on the chordal distance
//! `r² = ‖x - y‖² = 2 (1 - cos)`. Bandwidths come from the median heuristic
//! ([`median_one_minus_cos`]): `kappa = ln 2 / (1 - median cos)` and `l² = median(1 - cos)`.
//!
//! [`gram`] computes only the upper triangle (GEMM on row panels, in parallel), mirrors it
//! and applies the epilogue; [`gram_batched`] does the same for many small pools at once.

use crate::backend::cpu;
use crate::embeddings::Embeddings;
use crate::error::{Error, Result};
use crate::rng::Rng;
use rayon::prelude::*;

/// A similarity kernel: an epilogue applied to the cosine of two unit embeddings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Kernel {
    /// `cos(x, y)`.
    Cosine,
    /// von Mises–Fisher: `exp(kappa (cos - 1))`, 1 on the diagonal.
    Vmf {
        /// Concentration; see [`median_one_minus_cos`] for the heuristic.
        kappa: f32,
    },
    /// RBF on the chordal distance: `exp(-r² / (2 l²))` with `r² = 2 (1 - cos)`.
    Rbf {
        /// Squared length scale `l²`.
        l2: f32,
    },
    /// Matérn-5/2 on the chordal distance: `(1 + √5 r/l + 5 r²/(3 l²)) exp(-√5 r/l)`.
    Matern52 {
        /// Squared length scale `l²`.
        l2: f32,
    },
}

/// The kernel families, before a bandwidth is chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelKind {
    /// See [`Kernel::Cosine`].
    Cosine,
    /// See [`Kernel::Vmf`].
    Vmf,
    /// See [`Kernel::Rbf`].
    Rbf,
    /// See [`Kernel::Matern52`].
    Matern52,
}

impl std::str::FromStr for KernelKind {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "cosine" | "cos" => Ok(KernelKind::Cosine),
            "vmf" => Ok(KernelKind::Vmf),
            "rbf" => Ok(KernelKind::Rbf),
            "matern52" | "matern" => Ok(KernelKind::Matern52),
            _ => Err(Error::invalid(
                "kernel",
                format!("unknown kernel '{s}' (cosine, vmf, rbf, matern52)"),
            )),
        }
    }
}

impl Kernel {
    /// Checks the bandwidth is finite and positive (a zero `l²` would divide by zero).
    pub fn validate(&self) -> Result<()> {
        let (name, v) = match *self {
            Kernel::Cosine => return Ok(()),
            Kernel::Vmf { kappa } => ("kappa", kappa),
            Kernel::Rbf { l2 } | Kernel::Matern52 { l2 } => ("l2", l2),
        };
        if !(v.is_finite() && v > 0.0) {
            return Err(Error::invalid(name, format!("must be finite and > 0, got {v}")));
        }
        Ok(())
    }

    /// The kernel value for a cosine `c` (clamped to `[-1, 1]` against rounding).
    #[inline]
    #[must_use]
    pub fn apply(&self, c: f32) -> f32 {
        let c = c.clamp(-1.0, 1.0);
        match *self {
            Kernel::Cosine => c,
            Kernel::Vmf { kappa } => (kappa * (c - 1.0)).exp(),
            Kernel::Rbf { l2 } => (-(1.0 - c) / l2).exp(),
            Kernel::Matern52 { l2 } => {
                let r = (2.0 * (1.0 - c) / l2).sqrt(); // r / l
                let s5 = 5.0f32.sqrt() * r;
                (1.0 + s5 + s5 * s5 / 3.0) * (-s5).exp()
            }
        }
    }

    /// The kernel of `kind` with its bandwidth from the median heuristic over `e`
    /// (SPEC §3): `kappa = ln 2 / (1 - med)`, `l² = 1 - med`, where `med` is the median
    /// pairwise cosine; when `1 - med <= 1e-12` (all rows identical) `kappa = 1`, `l² = 1`.
    pub fn with_median_heuristic(kind: KernelKind, e: &Embeddings) -> Result<Kernel> {
        if kind == KernelKind::Cosine {
            return Ok(Kernel::Cosine);
        }
        let m = median_one_minus_cos(e)?;
        let ok = m > 1e-12;
        Ok(match kind {
            KernelKind::Cosine => Kernel::Cosine,
            KernelKind::Vmf => Kernel::Vmf {
                kappa: if ok {
                    (std::f64::consts::LN_2 / m) as f32
                } else {
                    1.0
                },
            },
            KernelKind::Rbf => Kernel::Rbf {
                l2: if ok { m as f32 } else { 1.0 },
            },
            KernelKind::Matern52 => Kernel::Matern52 {
                l2: if ok { m as f32 } else { 1.0 },
            },
        })
    }
}

/// Pairs used by the median heuristic before it switches from all pairs to a sample.
pub const MEDIAN_EXACT_PAIRS: usize = 200_000;
/// Seed of the fixed pair sample used above [`MEDIAN_EXACT_PAIRS`] (so results repeat).
pub const MEDIAN_SAMPLE_SEED: u64 = 0x6d65_6469_616e;

/// `1 - median_{i<j} cos(e_i, e_j)` (the median of an even count is the mean of the two
/// middle values). Exact over all pairs while there are at most [`MEDIAN_EXACT_PAIRS`];
/// above that, over that many pairs `i != j` drawn with a fixed seed, as SPEC §3 allows.
pub fn median_one_minus_cos(e: &Embeddings) -> Result<f64> {
    let n = e.rows();
    if n < 2 {
        return Ok(0.0);
    }
    let inv = e.inv_norms()?;
    let cos = |i: usize, j: usize| (cpu::dot(e.row(i), e.row(j)) * inv[i] * inv[j]) as f32;
    let pairs = n * (n - 1) / 2;
    let mut v: Vec<f32> = if pairs <= MEDIAN_EXACT_PAIRS {
        (0..n)
            .into_par_iter()
            .flat_map_iter(|i| (i + 1..n).map(move |j| cos(i, j)))
            .collect()
    } else {
        let mut rng = Rng::new(MEDIAN_SAMPLE_SEED);
        let idx: Vec<(usize, usize)> = (0..MEDIAN_EXACT_PAIRS)
            .map(|_| {
                let i = rng.below(n);
                let mut j = rng.below(n - 1);
                if j >= i {
                    j += 1;
                }
                (i, j)
            })
            .collect();
        idx.par_iter().map(|&(i, j)| cos(i, j)).collect()
    };
    let len = v.len();
    let mid = len / 2;
    let (_, &mut hi, _) = v.select_nth_unstable_by(mid, f32::total_cmp);
    let med = if len % 2 == 1 {
        f64::from(hi)
    } else {
        let lo = v[..mid].iter().copied().fold(f32::NEG_INFINITY, f32::max);
        (f64::from(lo) + f64::from(hi)) / 2.0
    };
    Ok(1.0 - med.clamp(-1.0, 1.0))
}

/// Rows per GEMM panel in [`gram`]: a multiple of the micro-kernel heights, and small
/// enough that the triangle wastes little work on the diagonal blocks.
const PANEL: usize = 256;

/// The full `N × N` Gram matrix `K[i][j] = kernel(cos(e_i, e_j))`, row-major, with the
/// diagonal exactly `kernel(1)`. Cosines divide by the rows' norms, so rows need not be
/// unit (a zero row is an error). Only the upper triangle is multiplied; the lower is
/// mirrored.
pub fn gram(e: &Embeddings, kernel: Kernel) -> Result<Vec<f32>> {
    kernel.validate()?;
    let inv = e.inv_norms()?;
    let n = e.rows();
    let mut out = vec![0.0f32; n * n];
    gram_into(e, &inv, kernel, &mut out, true);
    Ok(out)
}

fn gram_into(e: &Embeddings, inv: &[f64], kernel: Kernel, out: &mut [f32], parallel: bool) {
    let n = e.rows();
    let d = e.dim();
    if n == 0 {
        return;
    }
    let data = e.as_slice();
    let panel = |(p, chunk): (usize, &mut [f32])| {
        let r0 = p * PANEL;
        let rows = chunk.len() / n;
        // Upper triangle of this panel: columns r0..n.
        cpu::gemm_abt(
            &data[r0 * d..(r0 + rows) * d],
            &data[r0 * d..],
            d,
            &mut chunk[r0..],
            n,
            false,
        );
    };
    if parallel {
        out.par_chunks_mut(PANEL * n).enumerate().for_each(panel);
    } else {
        out.chunks_mut(PANEL * n).enumerate().for_each(panel);
    }
    // Mirror the strict upper triangle into the lower and apply the epilogue, in tiles.
    let diag = kernel.apply(1.0);
    let fix_row = |(i, row): (usize, &mut [f32])| {
        let unit = e.is_unit();
        for (j, v) in row.iter_mut().enumerate().skip(i + 1) {
            let c = if unit {
                *v
            } else {
                (f64::from(*v) * inv[i] * inv[j]) as f32
            };
            *v = kernel.apply(c);
        }
        row[i] = diag;
    };
    if parallel {
        out.par_chunks_mut(n).enumerate().for_each(fix_row);
    } else {
        out.chunks_mut(n).enumerate().for_each(fix_row);
    }
    const T: usize = 64;
    for bi in (0..n).step_by(T) {
        for bj in (bi..n).step_by(T) {
            for i in bi..(bi + T).min(n) {
                for j in bj.max(i + 1)..(bj + T).min(n) {
                    out[j * n + i] = out[i * n + j];
                }
            }
        }
    }
}

/// The Gram matrix of every pool in `pools` (each as in [`gram`]), computed in one call
/// with the pools spread over threads: the shape of "many small pools" workloads.
pub fn gram_batched(pools: &[&Embeddings], kernel: Kernel) -> Result<Vec<Vec<f32>>> {
    kernel.validate()?;
    pools
        .par_iter()
        .map(|e| {
            let inv = e.inv_norms()?;
            let n = e.rows();
            let mut out = vec![0.0f32; n * n];
            gram_into(e, &inv, kernel, &mut out, false);
            Ok(out)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn random(n: usize, d: usize, seed: u64) -> Embeddings {
        let mut rng = Rng::new(seed);
        let v = (0..n * d).map(|_| rng.normal() as f32).collect();
        Embeddings::new(n, d, v, "random").unwrap()
    }

    fn slow_cos(a: &[f32], b: &[f32]) -> f64 {
        let ab: f64 = a.iter().zip(b).map(|(&x, &y)| f64::from(x) * f64::from(y)).sum();
        let aa: f64 = a.iter().map(|&x| f64::from(x).powi(2)).sum();
        let bb: f64 = b.iter().map(|&x| f64::from(x).powi(2)).sum();
        ab / (aa.sqrt() * bb.sqrt())
    }

    #[test]
    fn gram_matches_direct_evaluation_for_every_kernel() {
        for &(n, d) in &[(1usize, 5usize), (3, 2), (257, 19), (300, 65)] {
            let e = random(n, d, n as u64);
            for kind in [
                KernelKind::Cosine,
                KernelKind::Vmf,
                KernelKind::Rbf,
                KernelKind::Matern52,
            ] {
                let k = Kernel::with_median_heuristic(kind, &e).unwrap();
                let g = gram(&e, k).unwrap();
                let batched = gram_batched(&[&e, &e], k).unwrap();
                assert_eq!(batched[0], g);
                for i in 0..n {
                    for j in 0..n {
                        let c = if i == j { 1.0 } else { slow_cos(e.row(i), e.row(j)) };
                        let want = match k {
                            Kernel::Cosine => c,
                            Kernel::Vmf { kappa } => (f64::from(kappa) * (c - 1.0)).exp(),
                            Kernel::Rbf { l2 } => (-(2.0 * (1.0 - c)) / (2.0 * f64::from(l2))).exp(),
                            Kernel::Matern52 { l2 } => {
                                let r = (2.0 * (1.0 - c)).max(0.0).sqrt() / f64::from(l2).sqrt();
                                (1.0 + 5f64.sqrt() * r + 5.0 * r * r / 3.0) * (-(5f64.sqrt()) * r).exp()
                            }
                        };
                        let got = f64::from(g[i * n + j]);
                        assert!(
                            (got - want).abs() < 2e-5,
                            "{kind:?} n={n} ({i},{j}): {got} vs {want}"
                        );
                        assert_eq!(g[i * n + j], g[j * n + i], "not symmetric at ({i},{j})");
                    }
                }
            }
        }
    }

    #[test]
    fn median_heuristic_matches_sorted_pairs() {
        let e = random(41, 7, 9);
        let mut cos = vec![];
        for i in 0..41 {
            for j in i + 1..41 {
                cos.push(slow_cos(e.row(i), e.row(j)));
            }
        }
        cos.sort_by(f64::total_cmp);
        let m = cos.len();
        let med = if m % 2 == 1 {
            cos[m / 2]
        } else {
            (cos[m / 2 - 1] + cos[m / 2]) / 2.0
        };
        let got = median_one_minus_cos(&e).unwrap();
        assert!((got - (1.0 - med)).abs() < 1e-6, "{got} vs {}", 1.0 - med);
        match Kernel::with_median_heuristic(KernelKind::Vmf, &e).unwrap() {
            Kernel::Vmf { kappa } => {
                assert!((f64::from(kappa) - std::f64::consts::LN_2 / (1.0 - med)).abs() < 1e-4)
            }
            k => panic!("{k:?}"),
        }
        // All rows identical: the denominator vanishes and kappa falls back to 1.
        let same = Embeddings::new(3, 2, vec![1.0, 0.0, 1.0, 0.0, 1.0, 0.0], "same").unwrap();
        assert_eq!(
            Kernel::with_median_heuristic(KernelKind::Vmf, &same).unwrap(),
            Kernel::Vmf { kappa: 1.0 }
        );
    }
}
