//! The GP store on the CPU ([`GpStore`]): `V` in f32 (each row computed in f64 and rounded
//! once for storage, halving the memory the O(t N) update streams), `colsq`, `a`, `b`, `c` in
//! f64; kernel rows from a [`KernelRows`] source, on demand.

use crate::backend::gp::{check_len, check_rows, posterior_mean, GpStore, KernelRows, Readout, RowWeights};
use crate::error::Result;
use rayon::prelude::*;

/// The CPU GP store.
pub struct CpuStore<'a> {
    rows: &'a dyn KernelRows,
    n: usize,
    mu0: Vec<f64>,
    t: usize,
    v: Vec<f32>,
    colsq: Vec<f64>,
    a: Vec<f64>,
    b: Vec<f64>,
    c: Vec<f64>,
    scratch: Vec<f64>,
}

impl<'a> CpuStore<'a> {
    /// An empty store over `rows` with prior means `mu0` (one per pool item).
    pub fn new(rows: &'a dyn KernelRows, mu0: Vec<f64>) -> Self {
        let n = rows.len();
        CpuStore {
            rows,
            n,
            mu0,
            t: 0,
            v: Vec::new(),
            colsq: vec![0.0; n],
            a: vec![0.0; n],
            b: vec![0.0; n],
            c: vec![0.0; n],
            scratch: vec![0.0; n],
        }
    }
}

impl GpStore for CpuStore<'_> {
    fn len(&self) -> usize {
        self.n
    }

    fn rows(&self) -> usize {
        self.t
    }

    fn reset(&mut self) -> Result<()> {
        self.t = 0;
        self.v.clear();
        for s in [&mut self.colsq, &mut self.a, &mut self.b, &mut self.c] {
            s.iter_mut().for_each(|x| *x = 0.0);
        }
        Ok(())
    }

    fn column(&mut self, j: usize) -> Result<Vec<f64>> {
        if j >= self.n {
            return Err(crate::error::Error::invalid(
                "GP column",
                format!("index {j} outside the pool of {}", self.n),
            ));
        }
        Ok((0..self.t).map(|s| f64::from(self.v[s * self.n + j])).collect())
    }

    fn append(&mut self, obs: Option<usize>, l: &[f64], lnn: f64, w: RowWeights) -> Result<()> {
        check_len("GP append: l", l.len(), self.t)?;
        let (t, n) = (self.t, self.n);
        let mut row = std::mem::take(&mut self.scratch);
        match obs {
            Some(j) => self.rows.row(j, &mut row),
            None => self.rows.query_row(&mut row),
        }
        // row = (K(new, pool) - l^T V) / l_nn, then colsq, a, b, c, and the stored f32 row, in
        // one pass over column chunks on every core.
        self.v.resize((t + 1) * n, 0.0);
        const CH: usize = 512;
        let (old, new) = self.v.split_at_mut(t * n);
        let old: &[f32] = old;
        row.par_chunks_mut(CH)
            .zip(new.par_chunks_mut(CH))
            .zip(self.colsq.par_chunks_mut(CH))
            .zip(self.a.par_chunks_mut(CH).zip(self.b.par_chunks_mut(CH)))
            .zip(self.c.par_chunks_mut(CH))
            .enumerate()
            .for_each(|(c, ((((out, vnew), cs), (aa, bb)), cc))| {
                let c0 = c * CH;
                let len = out.len();
                let seg = |s: usize| &old[s * n + c0..s * n + c0 + len];
                let mut s = 0;
                while s + 4 <= l.len() {
                    let ls = [l[s], l[s + 1], l[s + 2], l[s + 3]];
                    super::sub_ltv4(ls, seg(s), seg(s + 1), seg(s + 2), seg(s + 3), out);
                    s += 4;
                }
                for (k, &ls) in l.iter().enumerate().skip(s) {
                    super::axpy_mixed(-ls, seg(k), out);
                }
                for i in 0..out.len() {
                    let x = out[i] / lnn;
                    out[i] = x;
                    vnew[i] = x as f32;
                    cs[i] += x * x;
                    aa[i] += w.r * x;
                    bb[i] += w.one * x;
                    cc[i] += w.prior * x;
                }
            });
        self.scratch = row;
        self.t += 1;
        Ok(())
    }

    fn reweight(&mut self, from: usize, w: &[f64]) -> Result<()> {
        check_rows(from, w.len(), self.t)?;
        add_rows(&self.v, self.n, from, w, &mut self.a);
        Ok(())
    }

    fn reprior(&mut self, mu0: &[f64], w: &[f64]) -> Result<()> {
        check_len("GP prior: mu0", mu0.len(), self.n)?;
        check_rows(0, w.len(), self.t)?;
        self.mu0.copy_from_slice(mu0);
        add_rows(&self.v, self.n, 0, w, &mut self.c);
        Ok(())
    }

    fn posterior(&mut self, at: Readout, mean: &mut [f64], var: &mut [f64]) -> Result<()> {
        check_len("GP posterior: mean", mean.len(), self.n)?;
        check_len("GP posterior: var", var.len(), self.n)?;
        for i in 0..self.n {
            mean[i] = posterior_mean(self.mu0[i], self.a[i], self.b[i], self.c[i], at);
            var[i] = at.s * at.s * (1.0 - self.colsq[i]).max(0.0);
        }
        Ok(())
    }
}

/// `out += sum_s w[s] V[from + s]` over the stored rows `v` (`n` a row), in `s` order.
fn add_rows(v: &[f32], n: usize, from: usize, w: &[f64], out: &mut [f64]) {
    out.par_chunks_mut(512).enumerate().for_each(|(c, oo)| {
        let c0 = c * 512;
        for (i, x) in oo.iter_mut().enumerate() {
            let mut acc = *x;
            for (s, &ws) in w.iter().enumerate() {
                acc = ws.mul_add(f64::from(v[(from + s) * n + c0 + i]), acc);
            }
            *x = acc;
        }
    });
}
