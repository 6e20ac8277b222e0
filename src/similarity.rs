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
use crate::embeddings::{Embeddings, Matrix};
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

/// `exp(x)` in `f32`, branch-free so loops over it vectorise: Cephes' range reduction by
/// `ln 2` and degree-5 polynomial, relative error below 2e-7; 0 below `-87.33` (where
/// `f32` leaves the normal range) and saturating at `exp(88.7)`.
#[inline(always)]
#[must_use]
pub fn exp_f32(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const C1: f32 = 0.693_359_4;
    const C2: f32 = -2.121_944_4e-4;
    let under = x < -87.336_54;
    let x = x.clamp(-87.336_54, 88.722_83);
    let n = (x * LOG2E).round();
    let r = x - n * C1 - n * C2;
    let mut y = 1.987_569_1e-4f32;
    y = y.mul_add(r, 1.398_2e-3);
    y = y.mul_add(r, 8.333_452e-3);
    y = y.mul_add(r, 4.166_579_6e-2);
    y = y.mul_add(r, 1.666_666_5e-1);
    y = y.mul_add(r, 0.5);
    let p = y.mul_add(r * r, r) + 1.0;
    let scale = f32::from_bits(((n as i32 + 127) as u32) << 23);
    if under {
        0.0
    } else {
        p * scale
    }
}

#[multiversion::multiversion(targets("x86_64+avx512f+avx512vl+fma", "x86_64+avx2+fma", "aarch64+neon"))]
fn vmf_slice(kappa: f32, v: &mut [f32]) {
    for c in v.iter_mut() {
        *c = exp_f32(kappa * (c.clamp(-1.0, 1.0) - 1.0));
    }
}

#[multiversion::multiversion(targets("x86_64+avx512f+avx512vl+fma", "x86_64+avx2+fma", "aarch64+neon"))]
fn rbf_slice(inv_l2: f32, v: &mut [f32]) {
    for c in v.iter_mut() {
        *c = exp_f32(-(1.0 - c.clamp(-1.0, 1.0)) * inv_l2);
    }
}

#[multiversion::multiversion(targets("x86_64+avx512f+avx512vl+fma", "x86_64+avx2+fma", "aarch64+neon"))]
fn matern_slice(two_over_l2: f32, v: &mut [f32]) {
    let s5 = 5.0f32.sqrt();
    for c in v.iter_mut() {
        let r = ((1.0 - c.clamp(-1.0, 1.0)) * two_over_l2).sqrt(); // r / l
        let t = s5 * r;
        *c = (1.0 + t + t * t / 3.0) * exp_f32(-t);
    }
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
        let mut v = [c];
        self.apply_slice(&mut v);
        v[0]
    }

    /// [`apply`](Self::apply) to every element, vectorised; the same bits as `apply`.
    pub fn apply_slice(&self, v: &mut [f32]) {
        match *self {
            Kernel::Cosine => v.iter_mut().for_each(|c| *c = c.clamp(-1.0, 1.0)),
            Kernel::Vmf { kappa } => vmf_slice(kappa, v),
            Kernel::Rbf { l2 } => rbf_slice(1.0 / l2, v),
            Kernel::Matern52 { l2 } => matern_slice(2.0 / l2, v),
        }
    }

    /// This kernel with its concentration times `c`: vMF's `kappa · c`, RBF's and
    /// Matérn-5/2's `l² / c`; the cosine kernel as it is. `c = 1` gives the same bits.
    #[must_use]
    pub fn concentrated(self, c: f32) -> Kernel {
        match self {
            Kernel::Cosine => Kernel::Cosine,
            Kernel::Vmf { kappa } => Kernel::Vmf { kappa: kappa * c },
            Kernel::Rbf { l2 } => Kernel::Rbf { l2: l2 / c },
            Kernel::Matern52 { l2 } => Kernel::Matern52 { l2: l2 / c },
        }
    }

    /// The kernel of `kind` with its bandwidth from the median heuristic over `e`
    /// (SPEC §3): `kappa = ln 2 / (1 - med)`, `l² = 1 - med`, where `med` is the median
    /// pairwise cosine; when `1 - med <= 1e-12` (all rows identical) `kappa = 1`, `l² = 1`.
    pub fn with_median_heuristic(kind: KernelKind, e: &Embeddings) -> Result<Kernel> {
        if kind == KernelKind::Cosine {
            return Ok(Kernel::Cosine);
        }
        Ok(Kernel::from_median(kind, median_one_minus_cos(e)?))
    }

    /// The kernel of `kind` for a median-heuristic statistic `m = 1 - median cos`
    /// ([`median_one_minus_cos`]): `kappa = ln 2 / m`, `l² = m`; 1 when `m <= 1e-12`.
    #[must_use]
    pub fn from_median(kind: KernelKind, m: f64) -> Kernel {
        let ok = m > 1e-12;
        match kind {
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
        }
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

/// Blocks at or below this size are multiplied whole (both triangles); above it the
/// triangle is split in two halves and one off-diagonal GEMM.
const LEAF: usize = 256;

/// The full `N × N` Gram matrix `K[i][j] = kernel(cos(e_i, e_j))`, row-major, exactly
/// symmetric, with the diagonal exactly `kernel(1)`. Cosines divide by the rows' norms,
/// so rows need not be unit (a zero row is an error).
///
/// Only the upper triangle is multiplied: the triangle of `[A1; A2]` is the triangle of
/// `A1`, the triangle of `A2`, and one GEMM `A1 A2ᵀ` whose transpose fills the lower
/// block. Each GEMM uses every core; the epilogue (norm scaling and kernel) is fused into
/// the pass that writes the transpose.
pub fn gram(e: &Embeddings, kernel: Kernel) -> Result<Vec<f32>> {
    let mut out = vec![0.0f32; e.rows() * e.rows()];
    gram_into(e, kernel, &mut out)?;
    Ok(out)
}

/// [`gram`] into a caller's buffer of `N × N` values, every one overwritten. Reusing one
/// buffer across calls saves the page faults of a fresh allocation (about 0.15 s per
/// 400 MB on the project's machine, a third of an N = 10,000 Gram).
pub fn gram_into(e: &Embeddings, kernel: Kernel, out: &mut [f32]) -> Result<()> {
    kernel.validate()?;
    let n = e.rows();
    if out.len() != n * n {
        return Err(Error::invalid(
            "out",
            format!("buffer of {} values for a {n} x {n} Gram", out.len()),
        ));
    }
    let inv = e.inv_norms()?;
    gram_fill(e.view(), &inv, kernel, out, true, true);
    Ok(())
}

/// [`gram`] of rows whose inverse norms are known (a pool's).
pub(crate) fn gram_rows(e: Matrix<'_>, inv: &[f64], kernel: Kernel) -> Result<Vec<f32>> {
    kernel.validate()?;
    let mut out = vec![0.0f32; e.rows() * e.rows()];
    gram_fill(e, inv, kernel, &mut out, true, true);
    Ok(out)
}

/// The cosine Gram of rows that are already unit, with the diagonal as the GEMM computes
/// it (`<e_i, e_i>`, 1 up to rounding) rather than forced to 1: bit-identical rows then
/// get bit-identical rows of the Gram, so a duplicate's coverage gain is exactly 0.
pub(crate) fn cosine_gram_computed_diag(e: Matrix<'_>) -> Result<Vec<f32>> {
    debug_assert!(e.is_unit());
    let n = e.rows();
    let mut out = vec![0.0f32; n * n];
    gram_fill(e, &[], Kernel::Cosine, &mut out, true, false);
    Ok(out)
}

/// Fills `out` (`n × n`); `parallel` lets GEMMs and passes use every core.
fn gram_fill(e: Matrix<'_>, inv: &[f64], kernel: Kernel, out: &mut [f32], parallel: bool, force_diag: bool) {
    let n = e.rows();
    if n == 0 {
        return;
    }
    let ctx = Tri {
        data: e.as_slice(),
        d: e.dim(),
        n,
        inv: if e.is_unit() {
            None
        } else {
            Some(inv.iter().map(|&v| v as f32).collect())
        },
        kernel,
        parallel,
        force_diag,
    };
    ctx.tri(0, n, out);
}

struct Tri<'a> {
    data: &'a [f32],
    d: usize,
    n: usize,
    /// `1/‖row‖` in f32: the output is f32, so scaling in f32 costs ~1 ulp and vectorises.
    inv: Option<Vec<f32>>,
    kernel: Kernel,
    parallel: bool,
    /// Set the diagonal to `kernel(1)` exactly (else keep the computed one).
    force_diag: bool,
}

impl Tri<'_> {
    /// Kernel values of the raw inner products in `row[cols]` of matrix row `i`.
    fn epilogue(&self, i: usize, c0: usize, vals: &mut [f32]) {
        if let Some(inv) = &self.inv {
            let ii = inv[i];
            for (v, &ij) in vals.iter_mut().zip(&inv[c0..]) {
                *v = *v * ii * ij;
            }
        }
        self.kernel.apply_slice(vals);
    }

    /// Fills rows/cols `lo..hi` of the Gram; `out` holds rows `lo..hi` (full width).
    fn tri(&self, lo: usize, hi: usize, out: &mut [f32]) {
        let (n, d) = (self.n, self.d);
        let m = hi - lo;
        let rows = |a: usize, b: usize| &self.data[a * d..b * d];
        if m <= LEAF {
            cpu::gemm_abt(rows(lo, hi), rows(lo, hi), d, &mut out[lo..], n, false);
            let diag = self.kernel.apply(1.0);
            for r in 0..m {
                let i = lo + r;
                let (head, tail) = out.split_at_mut(r * n);
                let row = &mut tail[..n];
                if self.force_diag {
                    self.epilogue(i, i + 1, &mut row[i + 1..hi]);
                    row[i] = diag;
                } else {
                    self.epilogue(i, i, &mut row[i..hi]);
                }
                // Mirror into the earlier rows' lower parts is done by them: copy our
                // lower part from the rows above, which already hold the kernel values.
                for (k, prev) in head.chunks_exact(n).enumerate() {
                    row[lo + k] = prev[i];
                }
            }
            return;
        }
        // Split at a multiple of 64 near the middle: keeps GEMM panels aligned.
        let mid = lo + (m / 2).div_ceil(64) * 64;
        let (top, bottom) = out.split_at_mut((mid - lo) * n);
        // Off-diagonal block rows lo..mid, cols mid..hi, then its epilogue.
        cpu::gemm_abt(rows(lo, mid), rows(mid, hi), d, &mut top[mid..], n, self.parallel);
        let fix = |(r, row): (usize, &mut [f32])| self.epilogue(lo + r, mid, &mut row[mid..hi]);
        if self.parallel {
            top.par_chunks_mut(n).enumerate().for_each(fix);
        } else {
            top.chunks_mut(n).enumerate().for_each(fix);
        }
        // Its transpose into rows mid..hi, cols lo..mid, 16 destination rows per task so
        // every cache line read from `top` is used whole.
        const T: usize = 16;
        let top_ro: &[f32] = top;
        let transpose = |(b, dst): (usize, &mut [f32])| {
            let j0 = mid + b * T;
            let cnt = dst.len() / n;
            for (r, src) in top_ro.chunks_exact(n).enumerate() {
                for jj in 0..cnt {
                    dst[jj * n + lo + r] = src[j0 + jj];
                }
            }
        };
        if self.parallel {
            bottom.par_chunks_mut(T * n).enumerate().for_each(transpose);
        } else {
            bottom.chunks_mut(T * n).enumerate().for_each(transpose);
        }
        if self.parallel {
            rayon::join(|| self.tri(lo, mid, top), || self.tri(mid, hi, bottom));
        } else {
            self.tri(lo, mid, top);
            self.tri(mid, hi, bottom);
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
            gram_fill(e.view(), &inv, kernel, &mut out, false, true);
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
        for &(n, d) in &[(1usize, 5usize), (3, 2), (257, 19), (300, 65), (1100, 7)] {
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
    fn exp_f32_is_accurate_over_the_range_kernels_use() {
        let mut worst = 0.0f64;
        for k in 0..=200_000 {
            let x = -87.0 + 175.0 * f64::from(k) / 200_000.0;
            let got = f64::from(exp_f32(x as f32));
            let want = f64::from(x as f32).exp();
            worst = worst.max((got - want).abs() / want);
        }
        assert!(worst < 3e-7, "max relative error {worst}");
        assert_eq!(exp_f32(-100.0), 0.0);
        assert_eq!(exp_f32(0.0), 1.0);
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
