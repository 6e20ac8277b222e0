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

/// A pool's kernel, read on demand: `K(i, j) = kernel(cos(i, j))` with
/// `cos(i, j) = <x_i, x_j> (inv_i inv_j)` accumulated in f64 and rounded once to f32 before
/// the kernel (as the Gram's f32 epilogue), so `K` is exactly symmetric; the diagonal is
/// exactly `kernel(1)`. The query's row is computed once.
pub struct PoolKernel<'a> {
    pub(crate) rows: Rows<'a>,
    pub(crate) kernel: Kernel,
    /// The query, unit-normalised.
    pub(crate) query: Vec<f32>,
    qrow: Vec<f32>,
}

impl<'a> PoolKernel<'a> {
    pub(crate) fn new(rows: Rows<'a>, query: &[f32], kernel: Kernel) -> Result<Self> {
        kernel.validate()?;
        rows.e.check_dim(query.len(), "query vs pool")?;
        let query = crate::embeddings::unit_vector(query, "query")?;
        let qinv = 1.0 / super::cpu::dot(&query, &query).sqrt();
        let mut q64 = vec![0.0; rows.e.rows()];
        let mut qrow = vec![0.0f32; rows.e.rows()];
        let mut pk = PoolKernel {
            rows,
            kernel,
            query,
            qrow: Vec::new(),
        };
        pk.kernel_of(&pk.query, qinv, None, &mut q64);
        qrow.iter_mut().zip(&q64).for_each(|(o, &v)| *o = v as f32);
        pk.qrow = qrow;
        Ok(pk)
    }

    /// The kernel.
    #[must_use]
    pub fn kernel(&self) -> Kernel {
        self.kernel
    }

    /// `K(i, j)` (one dot product; for tests and small reads).
    #[must_use]
    pub fn get(&self, i: usize, j: usize) -> f64 {
        if i == j {
            return f64::from(self.kernel.apply(1.0));
        }
        let e = self.rows.e;
        let c = super::cpu::dot(e.row(i), e.row(j)) * (self.rows.inv[i] * self.rows.inv[j]);
        f64::from(self.kernel.apply(c as f32))
    }

    /// `out[i] = K(y, i)` for a vector `y` with inverse norm `yinv`; `self_idx` is the pool
    /// row `y` is (its entry is set to `kernel(1)`).
    fn kernel_of(&self, y: &[f32], yinv: f64, self_idx: Option<usize>, out: &mut [f64]) {
        let e = self.rows.e;
        super::cpu::matvec(e.as_slice(), e.dim(), y, out);
        const CH: usize = 1024;
        let (inv, k) = (self.rows.inv, self.kernel);
        out.par_chunks_mut(CH).enumerate().for_each(|(c, o)| {
            let mut buf = [0.0f32; CH];
            let b = &mut buf[..o.len()];
            for (t, (v, &x)) in b.iter_mut().zip(o.iter()).enumerate() {
                *v = (x * (inv[c * CH + t] * yinv)) as f32;
            }
            k.apply_slice(b);
            o.iter_mut().zip(b.iter()).for_each(|(x, &v)| *x = f64::from(v));
        });
        if let Some(j) = self_idx {
            out[j] = f64::from(k.apply(1.0));
        }
    }
}

impl KernelRows for PoolKernel<'_> {
    fn len(&self) -> usize {
        self.rows.e.rows()
    }
    fn row(&self, j: usize, out: &mut [f64]) {
        self.kernel_of(self.rows.e.row(j), self.rows.inv[j], Some(j), out);
    }
    fn query_row(&self, out: &mut [f64]) {
        out.iter_mut()
            .zip(&self.qrow)
            .for_each(|(o, &v)| *o = f64::from(v));
    }
    fn get(&self, i: usize, j: usize) -> f64 {
        PoolKernel::get(self, i, j)
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
