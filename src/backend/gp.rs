//! What the GP of budgeted top-k (SPEC §3) asks of a backend: kernel rows read on demand
//! from the pool ([`KernelRows`], [`PoolKernel`]) and the pool-sized state of the
//! incremental posterior ([`GpStore`]). `rerank::gp` keeps the small state (the Cholesky
//! factor of the observed block, the observations, the standardisation); a store keeps
//! `V = L^{-1} K(A, pool)` and the running sums `colsq`, `a`, `b`, wherever the engine
//! computes.
//!
//! Nothing here holds an `N × N` matrix: a kernel row is one pass over the pool
//! (`O(N d)`), and the GP reads one per oracle call.

use super::picker::Rows;
use crate::embeddings::Matrix;
use crate::error::{Error, Result};
use crate::similarity::Kernel;
use rayon::prelude::*;

/// Kernel values on the host: rows of `K(pool, pool)` and the query's row.
pub trait KernelRows: Sync {
    /// Pool size.
    fn len(&self) -> usize;
    /// True for an empty pool.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// `out[i] = K(j, i)` for every pool item `i`.
    fn row(&self, j: usize, out: &mut [f64]);
    /// `out[i] = K(query, i)`.
    fn query_row(&self, out: &mut [f64]);
    /// `K(i, j)`; by default read from row `i`.
    fn get(&self, i: usize, j: usize) -> f64 {
        let mut row = vec![0.0; self.len()];
        self.row(i, &mut row);
        row[j]
    }
}

/// Kernel rows `K(j, ·)` read one at a time where the pool lives (RGS's neighbours): on
/// the host from a [`KernelRows`], on a device from its resident copy. An engine makes one
/// ([`Engine::kernel_row_reader`](super::Engine)); a read can fail on a device.
pub(crate) trait RowReader {
    /// `out[i] = K(j, i)` for every pool item `i`.
    fn row(&mut self, j: usize, out: &mut [f64]) -> Result<()>;
    /// Where the rows are computed.
    fn backend(&self) -> super::BackendKind;
}

/// Rows read from host kernel rows.
pub(crate) struct HostRowReader<'a>(pub(crate) &'a dyn KernelRows);

/// Checks a [`RowReader::row`] request: row `j` of a pool of `n` into `out` values.
pub(crate) fn check_row(j: usize, n: usize, out: usize) -> Result<()> {
    if j >= n || out != n {
        return Err(Error::invalid(
            "kernel row",
            format!("row {j} into {out} values for a pool of {n}"),
        ));
    }
    Ok(())
}

impl RowReader for HostRowReader<'_> {
    fn row(&mut self, j: usize, out: &mut [f64]) -> Result<()> {
        check_row(j, self.0.len(), out.len())?;
        self.0.row(j, out);
        Ok(())
    }

    fn backend(&self) -> super::BackendKind {
        super::BackendKind::Cpu
    }
}

/// The precision of the pool copy kernel rows are read from: the pool's own f32 rows (the
/// default and the paper's computation), or a half-precision copy made once per run (half
/// the bytes per kernel-row pass, which is bound by memory bandwidth). The copy's rows are
/// the pool's rows (unit, or within 2^-8 of it) rounded to nearest; cosines are taken between the rounded rows
/// (with their own norms), so the kernel stays the exact kernel of one set of vectors. The
/// arithmetic (the dot products in f64, the GP) is the same in every precision.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum RowPrecision {
    /// The pool's f32 rows.
    #[default]
    F32,
    /// A bfloat16 copy (8-bit mantissa).
    Bf16,
    /// An IEEE binary16 copy (11-bit mantissa).
    F16,
}

impl RowPrecision {
    /// Every precision, in the order errors list them.
    pub const ALL: [RowPrecision; 3] = [RowPrecision::F32, RowPrecision::Bf16, RowPrecision::F16];

    /// `"f32"`, `"bf16"` or `"f16"`.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            RowPrecision::F32 => "f32",
            RowPrecision::Bf16 => "bf16",
            RowPrecision::F16 => "f16",
        }
    }

    /// Bytes per element of the rows a kernel-row pass reads.
    #[must_use]
    pub fn bytes(self) -> usize {
        match self {
            RowPrecision::F32 => 4,
            RowPrecision::Bf16 | RowPrecision::F16 => 2,
        }
    }
}

impl std::str::FromStr for RowPrecision {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        RowPrecision::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| {
                Error::invalid(
                    "row_precision",
                    format!("unknown row precision '{s}' (f32, bf16, f16)"),
                )
            })
    }
}

/// The half-precision copy of a pool: its rounded rows and their own inverse norms.
enum Half {
    Bf16(Vec<half::bf16>),
    F16(Vec<half::f16>),
}

struct HalfRows {
    half: Half,
    /// `1 / ‖rounded row‖`, in f64.
    inv: Vec<f64>,
}

impl HalfRows {
    /// The copy of `e` in precision `p` (not f32), rows rounded to nearest in parallel.
    /// (A pool's rows are unit or within 2^-8 of it: f16's range holds them.)
    fn new(e: Matrix<'_>, p: RowPrecision) -> Result<HalfRows> {
        use half::slice::HalfFloatSliceExt;
        let (n, d) = (e.rows(), e.dim());
        let src = e.as_slice();
        let mut half = match p {
            RowPrecision::Bf16 => Half::Bf16(vec![half::bf16::ZERO; n * d]),
            RowPrecision::F16 => Half::F16(vec![half::f16::ZERO; n * d]),
            RowPrecision::F32 => unreachable!("f32 rows need no copy"),
        };
        const ROWS: usize = 256;
        let step = (ROWS * d).max(1);
        match &mut half {
            Half::Bf16(v) => v
                .par_chunks_mut(step)
                .zip(src.par_chunks(step))
                .for_each(|(h, x)| {
                    h.iter_mut()
                        .zip(x)
                        .for_each(|(o, &x)| *o = half::bf16::from_bits(super::cpu::f32_to_bf16(x)))
                }),
            Half::F16(v) => v
                .par_chunks_mut(step)
                .zip(src.par_chunks(step))
                .for_each(|(h, x)| h.convert_from_f32_slice(x)),
        }
        let mut hr = HalfRows {
            half,
            inv: vec![0.0; n],
        };
        let mut inv = vec![0.0; n];
        inv.par_chunks_mut(ROWS).enumerate().for_each(|(c, o)| {
            let mut y = vec![0.0f64; d];
            for (t, v) in o.iter_mut().enumerate() {
                let i = c * ROWS + t;
                hr.widen(i, d, &mut y);
                *v = 1.0 / hr.dot(i, d, &y).sqrt();
            }
        });
        if let Some(i) = inv.iter().position(|v| !v.is_finite()) {
            return Err(Error::invalid(
                "row_precision",
                format!("row {i} rounds to zero in {}", p.name()),
            ));
        }
        hr.inv = inv;
        Ok(hr)
    }

    fn bits(&self, i: usize, d: usize) -> &[u16] {
        match &self.half {
            Half::Bf16(v) => bytemuck::cast_slice(&v[i * d..(i + 1) * d]),
            Half::F16(v) => bytemuck::cast_slice(&v[i * d..(i + 1) * d]),
        }
    }

    /// Row `i` widened (exactly) into `y`.
    fn widen(&self, i: usize, d: usize, y: &mut [f64]) {
        let b = self.bits(i, d);
        match self.half {
            Half::Bf16(_) => y
                .iter_mut()
                .zip(b)
                .for_each(|(o, &h)| *o = f64::from(super::cpu::bf16_to_f32(h))),
            Half::F16(_) => y
                .iter_mut()
                .zip(b)
                .for_each(|(o, &h)| *o = f64::from(super::cpu::f16_to_f32(h))),
        }
    }

    /// `<row_i, y>` in f64 (the fixed lane layout of the CPU dot products).
    fn dot(&self, i: usize, d: usize, y: &[f64]) -> f64 {
        match self.half {
            Half::Bf16(_) => super::cpu::dot_bf16(self.bits(i, d), y),
            Half::F16(_) => super::cpu::dot_f16(self.bits(i, d), y),
        }
    }
}

/// A pool's kernel, read on demand: `K(i, j) = kernel(cos(i, j))` with
/// `cos(i, j) = <x_i, x_j> (inv_i inv_j)` accumulated in f64 and rounded once to f32 before
/// the kernel (as the Gram's f32 epilogue), so `K` is exactly symmetric; the diagonal is
/// exactly `kernel(1)`. The query's row is computed once. With a half-precision
/// [`RowPrecision`], `x` and `inv` are the rounded copy's rows and inverse norms (the query
/// stays f32).
///
/// A kernel row is one fused parallel pass over the rows: each task takes a fixed block of
/// rows, takes their dot products with the row (widened once to f64, so every product and
/// sum is the one [`super::cpu::dot`] makes), scales them and applies the kernel. Every
/// entry depends only on its own row, so the bits do not depend on the thread count.
pub struct PoolKernel<'a> {
    pub(crate) rows: Rows<'a>,
    pub(crate) kernel: Kernel,
    /// The query, unit-normalised.
    pub(crate) query: Vec<f32>,
    qrow: Vec<f32>,
    half: Option<HalfRows>,
}

/// Rows per task of a kernel-row pass.
const ROW_BLOCK: usize = 1024;

impl<'a> PoolKernel<'a> {
    pub(crate) fn new(rows: Rows<'a>, query: &[f32], kernel: Kernel) -> Result<Self> {
        Self::with_precision(rows, query, kernel, RowPrecision::F32)
    }

    pub(crate) fn with_precision(
        rows: Rows<'a>,
        query: &[f32],
        kernel: Kernel,
        p: RowPrecision,
    ) -> Result<Self> {
        kernel.validate()?;
        rows.e.check_dim(query.len(), "query vs pool")?;
        let query = crate::embeddings::unit_vector(query, "query")?;
        let qinv = 1.0 / super::cpu::dot(&query, &query).sqrt();
        let half = match p {
            RowPrecision::F32 => None,
            _ => Some(HalfRows::new(rows.e, p)?),
        };
        let mut q64 = vec![0.0; rows.e.rows()];
        let mut pk = PoolKernel {
            rows,
            kernel,
            query,
            qrow: Vec::new(),
            half,
        };
        let y: Vec<f64> = pk.query.iter().map(|&v| f64::from(v)).collect();
        pk.kernel_of(&y, qinv, None, &mut q64);
        pk.qrow = q64.iter().map(|&v| v as f32).collect();
        Ok(pk)
    }

    /// The kernel.
    #[must_use]
    pub fn kernel(&self) -> Kernel {
        self.kernel
    }

    /// The precision kernel rows are read in.
    #[must_use]
    pub fn precision(&self) -> RowPrecision {
        match self.half.as_ref().map(|h| &h.half) {
            None => RowPrecision::F32,
            Some(Half::Bf16(_)) => RowPrecision::Bf16,
            Some(Half::F16(_)) => RowPrecision::F16,
        }
    }

    /// Bytes of rows one kernel-row pass reads (`N d` elements in the row precision).
    #[must_use]
    pub fn row_pass_bytes(&self) -> usize {
        self.rows.e.rows() * self.rows.e.dim() * self.precision().bytes()
    }

    /// Row `j` widened to f64 and its inverse norm.
    fn widened(&self, j: usize) -> (Vec<f64>, f64) {
        let e = self.rows.e;
        match &self.half {
            None => (e.row(j).iter().map(|&v| f64::from(v)).collect(), self.rows.inv[j]),
            Some(h) => {
                let mut y = vec![0.0; e.dim()];
                h.widen(j, e.dim(), &mut y);
                (y, h.inv[j])
            }
        }
    }

    /// `K(i, j)` (one dot product; for tests and small reads). An index outside the pool
    /// is an error naming it.
    pub fn get(&self, i: usize, j: usize) -> Result<f64> {
        let n = self.rows.e.rows();
        if let Some(x) = [i, j].into_iter().find(|&x| x >= n) {
            return Err(Error::invalid(
                "get",
                format!("index {x} outside the pool of {n}"),
            ));
        }
        Ok(self.entry(i, j))
    }

    /// `K(i, j)` for indices in the pool.
    fn entry(&self, i: usize, j: usize) -> f64 {
        if i == j {
            return f64::from(self.kernel.apply(1.0));
        }
        let e = self.rows.e;
        let c = match &self.half {
            None => super::cpu::dot(e.row(i), e.row(j)) * (self.rows.inv[i] * self.rows.inv[j]),
            Some(h) => {
                let (y, _) = self.widened(j);
                h.dot(i, e.dim(), &y) * (h.inv[i] * h.inv[j])
            }
        };
        f64::from(self.kernel.apply(c as f32))
    }

    /// `out[i] = K(y, i)` for a vector `y` (widened to f64) with inverse norm `yinv`;
    /// `self_idx` is the pool row `y` is (its entry is set to `kernel(1)`).
    fn kernel_of(&self, y: &[f64], yinv: f64, self_idx: Option<usize>, out: &mut [f64]) {
        let e = self.rows.e;
        let d = e.dim();
        debug_assert_eq!(out.len(), e.rows());
        let k = self.kernel;
        let half = self.half.as_ref();
        let inv = half.map_or(self.rows.inv, |h| &h.inv[..]);
        out.par_chunks_mut(ROW_BLOCK).enumerate().for_each(|(c, o)| {
            let base = c * ROW_BLOCK;
            let mut buf = [0.0f32; ROW_BLOCK];
            let b = &mut buf[..o.len()];
            for (t, v) in b.iter_mut().enumerate() {
                *v = cos_f64(e, half, inv, d, base + t, y, yinv) as f32;
            }
            k.apply_slice(b);
            o.iter_mut().zip(b.iter()).for_each(|(x, &v)| *x = f64::from(v));
        });
        if let Some(j) = self_idx {
            out[j] = f64::from(k.apply(1.0));
        }
    }

    /// Every pool row's cosine with the query, from the f32 rows (whatever the row
    /// precision) in f64, not rounded: the MIPS scores the score prior is shaped from
    /// ([`crate::rerank::prior_mean`]).
    #[must_use]
    pub fn query_cosines(&self) -> Vec<f64> {
        let y: Vec<f64> = self.query.iter().map(|&v| f64::from(v)).collect();
        let yinv = 1.0 / super::cpu::dot(&self.query, &self.query).sqrt();
        self.cosines_of(&y, yinv)
    }

    /// Every pool row's cosine with `wq q + sum_j w_j x_j / |x_j|`: the unit query and
    /// unit pool rows `j` weighted (a query moved by relevance feedback), from the f32 rows
    /// as [`PoolKernel::query_cosines`] reads them; the vector is summed in f64, the
    /// query first and then the rows in the order given. `None` when the vector is zero.
    /// An index outside the pool, or a weight that is not finite, is an error naming it.
    pub fn cosines_with(&self, wq: f64, w: &[(usize, f64)]) -> Result<Option<Vec<f64>>> {
        let e = self.rows.e;
        if !wq.is_finite() {
            return Err(Error::invalid("query weight", format!("is {wq}")));
        }
        let mut y: Vec<f64> = self.query.iter().map(|&v| wq * f64::from(v)).collect();
        for &(j, wj) in w {
            if j >= e.rows() {
                return Err(Error::invalid(
                    "feedback",
                    format!("index {j} outside the pool of {}", e.rows()),
                ));
            }
            if !wj.is_finite() {
                return Err(Error::invalid(
                    format!("feedback weight of row {j}"),
                    format!("is {wj}"),
                ));
            }
            let s = wj * self.rows.inv[j];
            y.iter_mut()
                .zip(e.row(j))
                .for_each(|(a, &x)| *a = s.mul_add(f64::from(x), *a));
        }
        let norm = y.iter().map(|v| v * v).sum::<f64>().sqrt();
        if !(norm > 0.0 && norm.is_finite()) {
            return Ok(None);
        }
        Ok(Some(self.cosines_of(&y, 1.0 / norm)))
    }

    /// Every pool row's cosine with `y` (inverse norm `yinv`) from the f32 rows, in f64.
    fn cosines_of(&self, y: &[f64], yinv: f64) -> Vec<f64> {
        let e = self.rows.e;
        let inv = self.rows.inv;
        let mut out = vec![0.0; e.rows()];
        out.par_chunks_mut(ROW_BLOCK).enumerate().for_each(|(c, o)| {
            for (t, v) in o.iter_mut().enumerate() {
                *v = cos_f64(e, None, inv, e.dim(), c * ROW_BLOCK + t, y, yinv);
            }
        });
        out
    }

    /// The cosine between two observations (`None`: the query) as the kernel sees it:
    /// accumulated in f64 and rounded once to f32 (1 between an observation and itself).
    /// What the GP's evidence ([`crate::rerank::evidence`]) is taken over. An index outside
    /// the pool is an error naming it.
    pub fn cosine(&self, a: Option<usize>, b: Option<usize>) -> Result<f64> {
        let e = self.rows.e;
        if let Some(i) = [a, b].into_iter().flatten().find(|&i| i >= e.rows()) {
            return Err(Error::invalid(
                "cosine",
                format!("index {i} outside the pool of {}", e.rows()),
            ));
        }
        let inv = self.half.as_ref().map_or(self.rows.inv, |h| &h.inv[..]);
        let c = match (a, b) {
            _ if a == b => 1.0,
            (Some(i), Some(j)) => {
                let (y, yinv) = self.widened(j);
                cos_f64(e, self.half.as_ref(), inv, e.dim(), i, &y, yinv) as f32
            }
            (Some(i), None) | (None, Some(i)) => {
                let y: Vec<f64> = self.query.iter().map(|&v| f64::from(v)).collect();
                let qinv = 1.0 / super::cpu::dot(&self.query, &self.query).sqrt();
                cos_f64(e, self.half.as_ref(), inv, e.dim(), i, &y, qinv) as f32
            }
            (None, None) => 1.0,
        };
        Ok(f64::from(c))
    }
}

/// The cosine of pool row `r` with `y` (widened to f64, inverse norm `yinv`), as one entry
/// of a kernel row computes it before its one rounding to f32: the dot product in f64
/// (from the half-precision copy when there is one), scaled.
fn cos_f64(
    e: Matrix<'_>,
    half: Option<&HalfRows>,
    inv: &[f64],
    d: usize,
    r: usize,
    y: &[f64],
    yinv: f64,
) -> f64 {
    let x = match half {
        None => super::cpu::dot_mixed(e.row(r), y),
        Some(h) => h.dot(r, d, y),
    };
    x * (inv[r] * yinv)
}

impl KernelRows for PoolKernel<'_> {
    fn len(&self) -> usize {
        self.rows.e.rows()
    }
    fn row(&self, j: usize, out: &mut [f64]) {
        let (y, yinv) = self.widened(j);
        self.kernel_of(&y, yinv, Some(j), out);
    }
    fn query_row(&self, out: &mut [f64]) {
        out.iter_mut()
            .zip(&self.qrow)
            .for_each(|(o, &v)| *o = f64::from(v));
    }
    fn get(&self, i: usize, j: usize) -> f64 {
        self.entry(i, j)
    }
}

/// What an appended row of `V` adds into the running sums: `a += r x`, `b += one x`,
/// `c += prior x` (the row's entries of `L^{-1}` times the residuals, the ones and the
/// prior means).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RowWeights {
    /// Weight into `a` (the residuals `y - mu0`).
    pub r: f64,
    /// Weight into `b` (the ones).
    pub one: f64,
    /// Weight into `c` (the prior means).
    pub prior: f64,
}

/// How the posterior is read from the sums: the standardisation's mean `m` and scale `s`,
/// and `delta = 1 - alpha`, the share of the prior mean faded out (0: the prior as given).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Readout {
    /// Mean of the observed residuals.
    pub m: f64,
    /// Their scale (population std, or 1).
    pub s: f64,
    /// `1 - alpha` for a prior `alpha mu0`.
    pub delta: f64,
}

/// The pool-sized state of the incremental GP posterior (rerank/gp.rs; SPEC §3):
/// `V = L^{-1} K(A, pool)` row by row and the running sums `colsq = sum_s V[s]²`,
/// `a = V^T u_r`, `b = V^T u_1`, `c = V^T u_p`.
pub trait GpStore {
    /// Pool size `N`.
    fn len(&self) -> usize;
    /// True for an empty pool.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Rows of `V` appended so far.
    fn rows(&self) -> usize;
    /// Forgets every row (a refactorisation restarts from here).
    fn reset(&mut self) -> Result<()>;
    /// Column `j` of `V` (one value per row): `l = L^{-1} k_A(j)` for pool item `j`.
    fn column(&mut self, j: usize) -> Result<Vec<f64>>;
    /// Appends the row of observation `obs` (a pool item; `None`: the query):
    /// `(K(obs, pool) - l^T V) / lnn`, and adds it into the sums with weights `w`.
    fn append(&mut self, obs: Option<usize>, l: &[f64], lnn: f64, w: RowWeights) -> Result<()>;
    /// `a += sum_s w[s] V[from + s]` (residuals of those rows changed by `w`), in `s` order.
    fn reweight(&mut self, from: usize, w: &[f64]) -> Result<()>;
    /// Replaces the prior means by `mu0` (one per pool item) and adds `sum_s w[s] V[s]`
    /// into `c` (the whitened prior means of the observations changed by `w`, one per row
    /// from the first), in `s` order: a prior that changes during a run (the feedback
    /// prior) without new kernel rows.
    fn reprior(&mut self, mu0: &[f64], w: &[f64]) -> Result<()>;
    /// The posterior in oracle units:
    /// `mean = ((mu0 + m) + (a - m b)) + delta (c - mu0)`, `var = s² max(1 - colsq, 0)`.
    fn posterior(&mut self, at: Readout, mean: &mut [f64], var: &mut [f64]) -> Result<()>;
    /// GP-UCB's pick: the unscored item (`scored[i]` false) with the largest
    /// `mean + sqrt(beta) sqrt(var)`, ties to the lower index.
    fn ucb_pick(&mut self, at: Readout, scored: &[bool], beta: f64) -> Result<Option<usize>> {
        let n = self.len();
        let (mut mean, mut var) = (vec![0.0; n], vec![0.0; n]);
        self.posterior(at, &mut mean, &mut var)?;
        Ok(ucb_argmax(&mean, &var, scored, beta))
    }
}

/// Checks [`GpStore::reweight`]'s rows: `from + count` within the `t` rows.
pub(crate) fn check_rows(from: usize, count: usize, t: usize) -> Result<()> {
    if from.checked_add(count).is_some_and(|e| e <= t) {
        Ok(())
    } else {
        Err(Error::invalid(
            "GP reweight",
            format!("rows {from}..{from}+{count} outside the {t} rows"),
        ))
    }
}

/// One posterior entry as every store computes it (the device's kernel does the same).
#[inline]
#[must_use]
pub fn posterior_mean(mu0: f64, a: f64, b: f64, c: f64, at: Readout) -> f64 {
    // Grouped so structurally equal means stay bit-equal (zero prior, query only: a == b
    // and m == 1, so every mean is exactly 1 and ties go to MIPS order), and delta = 0
    // leaves the paper's prior's mean bit for bit.
    ((mu0 + at.m) + (a - at.m * b)) + at.delta * (c - mu0)
}

/// `argmax mean + sqrt(beta) sqrt(var)` over unscored items, ties to the lower index.
#[must_use]
pub fn ucb_argmax(mean: &[f64], var: &[f64], scored: &[bool], beta: f64) -> Option<usize> {
    let sb = beta.sqrt();
    let mut best: Option<(f64, usize)> = None;
    for i in 0..mean.len() {
        if scored[i] {
            continue;
        }
        let u = mean[i] + sb * var[i].sqrt();
        if best.is_none_or(|(b, _)| u > b) {
            best = Some((u, i));
        }
    }
    best.map(|b| b.1)
}

/// Checks a store call's lengths: `what` has `got` values where `want` are needed.
pub(crate) fn check_len(what: &str, got: usize, want: usize) -> Result<()> {
    if got == want {
        Ok(())
    } else {
        Err(Error::invalid(
            what,
            format!("{got} values where {want} are needed"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Engine;
    use crate::embeddings::Embeddings;
    use crate::pool::Pool;
    use crate::rng::Rng;

    fn pool(n: usize, d: usize, seed: u64) -> (Pool, Vec<f32>) {
        let mut rng = Rng::new(seed);
        let rows: Vec<f32> = (0..n * d).map(|_| rng.normal() as f32).collect();
        let q: Vec<f32> = (0..d).map(|_| rng.normal() as f32).collect();
        (
            Pool::new(&Engine::cpu(), Embeddings::new(n, d, rows, "t").unwrap()).unwrap(),
            q,
        )
    }

    /// Every finite half widens as the `half` crate widens it.
    #[test]
    fn widening_is_exact_for_every_finite_half() {
        for b in 0..=u16::MAX {
            let h = half::f16::from_bits(b);
            if h.is_finite() {
                assert_eq!(
                    super::super::cpu::f16_to_f32(b).to_bits(),
                    h.to_f32().to_bits(),
                    "f16 {b:#06x}"
                );
            }
            let h = half::bf16::from_bits(b);
            if h.is_finite() {
                assert_eq!(
                    super::super::cpu::bf16_to_f32(b).to_bits(),
                    h.to_f32().to_bits(),
                    "bf16 {b:#06x}"
                );
            }
        }
    }

    /// The bf16 copy rounds as `half` does (ties to even), on edge cases and random values.
    #[test]
    fn bf16_rounding_is_halfs() {
        let mut rng = Rng::new(9);
        let edge = [
            0.0f32,
            -0.0,
            1.0,
            -1.0,
            f32::MIN_POSITIVE,
            1e-40,
            f32::MAX,
            f32::MIN,
            // Ties: 1 + 2^-8 rounds down to even, 1 + 3 2^-8 up to even.
            f32::from_bits(0x3F80_8000),
            f32::from_bits(0x3F81_8000),
        ];
        let random = (0..200_000)
            .map(|_| f32::from_bits(rng.next_u64() as u32))
            .filter(|x| x.is_finite());
        for x in edge.into_iter().chain(random) {
            assert_eq!(
                super::super::cpu::f32_to_bf16(x),
                half::bf16::from_f32(x).to_bits(),
                "{x:e}"
            );
        }
    }

    /// Half-precision kernel rows against a slow direct evaluation: each unit row rounded
    /// by `half`, widened to f32, cosines by a plain f64 sum with the rounded rows' norms.
    #[test]
    fn half_rows_match_a_direct_evaluation() {
        let kernel = Kernel::Vmf { kappa: 7.5 };
        for (s, &(n, d)) in [
            (37usize, 1usize),
            (53, 7),
            (41, 33),
            (29, 129),
            (1100, 17),
            (17, 1027),
        ]
        .iter()
        .enumerate()
        {
            let (p, q) = pool(n, d, 11 + s as u64);
            let e = p.embeddings();
            for prec in [RowPrecision::Bf16, RowPrecision::F16] {
                let pk = PoolKernel::with_precision(p.rows(), &q, kernel, prec).unwrap();
                assert_eq!(pk.precision(), prec);
                assert_eq!(pk.row_pass_bytes(), n * d * 2);
                let round = |x: f32| match prec {
                    RowPrecision::Bf16 => half::bf16::from_f32(x).to_f32(),
                    _ => half::f16::from_f32(x).to_f32(),
                };
                let r: Vec<Vec<f64>> = (0..n)
                    .map(|i| e.row(i).iter().map(|&x| f64::from(round(x))).collect())
                    .collect();
                let norm: Vec<f64> = r
                    .iter()
                    .map(|v| v.iter().map(|a| a * a).sum::<f64>().sqrt())
                    .collect();
                let qu = crate::embeddings::unit_vector(&q, "q").unwrap();
                let qn = qu
                    .iter()
                    .map(|&a| f64::from(a) * f64::from(a))
                    .sum::<f64>()
                    .sqrt();
                let close = |got: f64, c: f64, what: &str| {
                    let want = f64::from(kernel.apply(c as f32));
                    assert!(
                        (got - want).abs() <= 2e-6,
                        "{} n={n} d={d} {what}: {got} vs {want}",
                        prec.name()
                    );
                };
                let mut qrow = vec![0.0; n];
                pk.query_row(&mut qrow);
                for i in 0..n {
                    let c =
                        r[i].iter().zip(&qu).map(|(a, &b)| a * f64::from(b)).sum::<f64>() / (norm[i] * qn);
                    close(qrow[i], c, &format!("query, {i}"));
                }
                let mut row = vec![f64::NAN; n];
                let mut other = vec![f64::NAN; n];
                for j in [0, n / 2, n - 1] {
                    pk.row(j, &mut row);
                    for i in 0..n {
                        if i == j {
                            assert_eq!(row[i], f64::from(kernel.apply(1.0)));
                            continue;
                        }
                        let c = r[i].iter().zip(&r[j]).map(|(a, b)| a * b).sum::<f64>() / (norm[i] * norm[j]);
                        close(row[i], c, &format!("({j}, {i})"));
                        assert_eq!(row[i].to_bits(), pk.get(i, j).unwrap().to_bits(), "get({i}, {j})");
                        assert_eq!(row[i].to_bits(), pk.get(j, i).unwrap().to_bits(), "get({j}, {i})");
                    }
                    pk.row(n - 1 - j, &mut other);
                    assert_eq!(row[n - 1 - j].to_bits(), other[j].to_bits(), "symmetry");
                }
            }
        }
    }

    /// The f32 rows are the definition the rest of the crate uses: `dot` of the two rows
    /// times the inverse norms, rounded once, bit for bit.
    #[test]
    fn f32_rows_are_the_dot_definition_bit_for_bit() {
        let kernel = Kernel::Vmf { kappa: 4.0 };
        let (p, q) = pool(2100, 45, 5);
        let pk = PoolKernel::new(p.rows(), &q, kernel).unwrap();
        assert_eq!(pk.precision(), RowPrecision::F32);
        let (e, inv) = (p.embeddings(), p.inv_norms());
        let mut row = vec![0.0; 2100];
        for j in [0usize, 1023, 1024, 2099] {
            pk.row(j, &mut row);
            for i in 0..2100 {
                let want = if i == j {
                    kernel.apply(1.0)
                } else {
                    kernel.apply((super::super::cpu::dot(e.row(i), e.row(j)) * (inv[i] * inv[j])) as f32)
                };
                assert_eq!(row[i].to_bits(), f64::from(want).to_bits(), "({j}, {i})");
            }
        }
    }

    #[test]
    fn row_precision_names() {
        for p in RowPrecision::ALL {
            assert_eq!(p.name().parse::<RowPrecision>().unwrap(), p);
        }
        let e = "fp8".parse::<RowPrecision>().unwrap_err().to_string();
        assert!(
            e.contains("row_precision") && e.contains("'fp8'") && e.contains("f32, bf16, f16"),
            "{e}"
        );
    }
}
