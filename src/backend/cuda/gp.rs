//! The GP store on the device ([`GpStore`]; rerank/gp.rs keeps `L`, the observations and
//! the standardisation on the host): `V` (f32, `t × n`), `colsq`, `a`, `b`, `c` (f64), the
//! kernel row of each new observation computed on the device from the resident pool, the
//! posterior moments and GP-UCB's argmax on the device. Per observation: one kernel-row
//! launch, one append launch, and a read of `t` floats (the new column of `V`).

use super::gram::{kernel_row, DevRows};
use super::greedy::ArgmaxBufs;
use super::raw::{self, Buf, Lane};
use super::{checked_len, per_elem, to_i32, to_i64, Device, Poison};
use crate::backend::gp::{check_row, check_rows, GpStore, PoolKernel, Readout, RowReader, RowWeights};
use crate::error::{Error, Result};
use crate::similarity::Kernel;

/// The device GP store over a resident pool.
pub struct DevStore<'a> {
    lane: Lane,
    rows: &'a DevRows,
    inv_host: &'a [f64],
    kernel: Kernel,
    query: Buf<f32>,
    qinv: f64,
    n: usize,
    cap: usize,
    t: usize,
    v: Buf<f32>,
    /// `colsq`, `a`, `b`, `c` back to back.
    sums: Buf<f64>,
    krow: Buf<f32>,
    l: Buf<f64>,
    col: Buf<f32>,
    /// Reweighting's weights.
    w: Buf<f64>,
    mu0: Buf<f64>,
    mean: Buf<f64>,
    var: Buf<f64>,
    scored: Buf<u8>,
    am: ArgmaxBufs,
    poison: Poison,
}

/// The device store for the pool kernel `src` (its rows resident as `dev_rows`) with prior
/// means `mu0`.
pub(crate) fn gp_store<'a>(
    dev: &Device,
    dev_rows: &'a DevRows,
    src: &'a PoolKernel<'a>,
    mu0: &[f64],
) -> Result<Box<dyn GpStore + 'a>> {
    Ok(Box::new(DevStore::new(dev, dev_rows, src, mu0)?))
}

/// A reader of the kernel rows of `src` from its resident copy `dev_rows`: one kernel-row
/// launch and one read of `N` floats per row (RGS's neighbours).
pub(crate) fn kernel_row_reader<'a>(
    dev: &Device,
    dev_rows: &'a DevRows,
    src: &'a PoolKernel<'a>,
) -> Result<Box<dyn RowReader + 'a>> {
    let n = dev_rows.n;
    checked_len("inverse norms", src.rows.inv.len(), n)?;
    if dev.ordinal() != dev_rows.ordinal {
        return Err(Error::invalid(
            "pool",
            format!(
                "resident on cuda:{}, not cuda:{}",
                dev_rows.ordinal,
                dev.ordinal()
            ),
        ));
    }
    let lane = dev.lane()?;
    Ok(Box::new(DevRowReader {
        krow: lane.zeros(n)?,
        host: vec![0.0; n],
        lane,
        rows: dev_rows,
        inv_host: src.rows.inv,
        kernel: src.kernel,
    }))
}

/// Kernel rows of a resident pool, read to the host one at a time.
struct DevRowReader<'a> {
    lane: Lane,
    rows: &'a DevRows,
    inv_host: &'a [f64],
    kernel: Kernel,
    krow: Buf<f32>,
    host: Vec<f32>,
}

impl RowReader for DevRowReader<'_> {
    fn row(&mut self, j: usize, out: &mut [f64]) -> Result<()> {
        check_row(j, self.rows.n, out.len())?;
        let (lane, rows, k) = (&self.lane, self.rows, self.kernel);
        item_row(lane, rows, self.inv_host, k, j, &mut self.krow)?;
        self.lane.read(self.krow.v(), &mut self.host)?;
        out.iter_mut()
            .zip(&self.host)
            .for_each(|(o, &v)| *o = f64::from(v));
        Ok(())
    }

    fn backend(&self) -> crate::backend::BackendKind {
        crate::backend::BackendKind::Cuda
    }
}

/// `out = K(j, pool)`: the kernel row of pool item `j`, from the resident rows.
fn item_row(lane: &Lane, rows: &DevRows, inv: &[f64], k: Kernel, j: usize, out: &mut Buf<f32>) -> Result<()> {
    let d = rows.d;
    kernel_row(
        lane,
        rows,
        rows.x.slice(j * d..(j + 1) * d),
        inv[j],
        k,
        Some(j),
        out,
    )
}

impl<'a> DevStore<'a> {
    /// An empty store.
    pub(crate) fn new(dev: &Device, rows: &'a DevRows, src: &'a PoolKernel<'a>, mu0: &[f64]) -> Result<Self> {
        let n = rows.n;
        checked_len("mu0", mu0.len(), n)?;
        if src.query.len() != rows.d {
            return Err(Error::DimensionMismatch {
                what: "query vs pool".into(),
                expected: rows.d,
                got: src.query.len(),
            });
        }
        checked_len("inverse norms", src.rows.inv.len(), n)?;
        if dev.ordinal() != rows.ordinal {
            return Err(Error::invalid(
                "pool",
                format!("resident on cuda:{}, not cuda:{}", rows.ordinal, dev.ordinal()),
            ));
        }
        let lane = dev.lane()?;
        let cap = 64.min(n.max(1));
        let qinv = 1.0 / crate::backend::cpu::dot(&src.query, &src.query).sqrt();
        Ok(DevStore {
            query: lane.upload(&src.query)?,
            qinv,
            v: lane.zeros(cap * n)?,
            sums: lane.zeros(4 * n)?,
            w: lane.zeros(cap)?,
            krow: lane.zeros(n)?,
            l: lane.zeros(cap)?,
            col: lane.zeros(cap)?,
            mu0: lane.upload(mu0)?,
            mean: lane.zeros(n)?,
            var: lane.zeros(n)?,
            scored: lane.zeros(n)?,
            am: ArgmaxBufs::new(&lane, n)?,
            lane,
            rows,
            inv_host: src.rows.inv,
            kernel: src.kernel,
            n,
            cap,
            t: 0,
            poison: Poison::default(),
        })
    }

    /// The posterior into the device's `mean` and `var`.
    fn posterior_dev(&mut self, at: Readout) -> Result<()> {
        let n = self.n;
        raw::gp_posterior_f64(
            &self.lane,
            per_elem(n),
            self.mu0.v(),
            self.sums.slice(n..2 * n),
            self.sums.slice(2 * n..3 * n),
            self.sums.slice(3 * n..4 * n),
            self.sums.slice(0..n),
            at.m,
            at.s,
            at.delta,
            to_i64(n),
            self.mean.vm(),
            self.var.vm(),
        )
    }
}

/// Every call is refused after an earlier failure (which may have left `V` or the sums half
/// updated) and remembered when it fails.
impl GpStore for DevStore<'_> {
    fn len(&self) -> usize {
        self.n
    }

    fn rows(&self) -> usize {
        self.t
    }

    fn reset(&mut self) -> Result<()> {
        self.poison.check(self.rows.ordinal)?;
        self.t = 0;
        let r = self.lane.zero(self.sums.vm());
        self.poison.guard(r)
    }

    fn column(&mut self, j: usize) -> Result<Vec<f64>> {
        self.poison.check(self.rows.ordinal)?;
        let r = self.column_inner(j);
        self.poison.guard(r)
    }

    fn append(&mut self, obs: Option<usize>, l: &[f64], lnn: f64, w: RowWeights) -> Result<()> {
        self.poison.check(self.rows.ordinal)?;
        let r = self.append_inner(obs, l, lnn, w);
        self.poison.guard(r)
    }

    fn reweight(&mut self, from: usize, w: &[f64]) -> Result<()> {
        self.poison.check(self.rows.ordinal)?;
        let r = self.reweight_inner(from, w);
        self.poison.guard(r)
    }

    fn reprior(&mut self, mu0: &[f64], w: &[f64]) -> Result<()> {
        self.poison.check(self.rows.ordinal)?;
        let r = self.reprior_inner(mu0, w);
        self.poison.guard(r)
    }

    fn posterior(&mut self, at: Readout, mean: &mut [f64], var: &mut [f64]) -> Result<()> {
        self.poison.check(self.rows.ordinal)?;
        let r = self.posterior_inner(at, mean, var);
        self.poison.guard(r)
    }

    fn ucb_pick(&mut self, at: Readout, scored: &[bool], beta: f64) -> Result<Option<usize>> {
        self.poison.check(self.rows.ordinal)?;
        let r = self.ucb_inner(at, scored, beta);
        self.poison.guard(r)
    }
}

impl DevStore<'_> {
    fn column_inner(&mut self, j: usize) -> Result<Vec<f64>> {
        if j >= self.n {
            return Err(Error::invalid(
                "GP column",
                format!("index {j} outside the pool of {}", self.n),
            ));
        }
        if self.t == 0 {
            return Ok(Vec::new());
        }
        let (n, t, jj) = (to_i64(self.n), to_i32(self.t, "GP rows")?, to_i64(j));
        raw::gp_col_f32(&self.lane, per_elem(self.t), self.v.v(), n, t, jj, self.col.vm())?;
        let mut c = vec![0.0f32; self.t];
        self.lane.read(self.col.slice(0..self.t), &mut c)?;
        Ok(c.into_iter().map(f64::from).collect())
    }

    fn append_inner(&mut self, obs: Option<usize>, l: &[f64], lnn: f64, w: RowWeights) -> Result<()> {
        checked_len("GP append: l", l.len(), self.t)?;
        let n = self.n;
        if self.t == self.cap {
            let new_cap = (self.cap * 2).max(1);
            let mut v = self.lane.zeros::<f32>(new_cap * n)?;
            self.lane.copy(self.v.slice(0..self.cap * n), v.vm())?;
            self.v = v;
            self.l = self.lane.zeros(new_cap)?;
            self.col = self.lane.zeros(new_cap)?;
            self.w = self.lane.zeros(new_cap)?;
            self.cap = new_cap;
        }
        match obs {
            Some(j) => {
                if j >= n {
                    return Err(Error::invalid(
                        "GP append",
                        format!("index {j} outside the pool of {n}"),
                    ));
                }
                let (lane, rows, k) = (&self.lane, self.rows, self.kernel);
                item_row(lane, rows, self.inv_host, k, j, &mut self.krow)?;
            }
            None => kernel_row(
                &self.lane,
                self.rows,
                self.query.v(),
                self.qinv,
                self.kernel,
                None,
                &mut self.krow,
            )?,
        }
        self.lane.write(l, self.l.vm())?;
        let (nn, t) = (to_i64(n), to_i32(self.t, "GP rows")?);
        raw::gp_append_f32(
            &self.lane,
            per_elem(n),
            self.v.vm(),
            nn,
            t,
            self.l.v(),
            self.krow.v(),
            lnn,
            w.r,
            w.one,
            w.prior,
            self.sums.vm(),
        )?;
        self.t += 1;
        Ok(())
    }

    fn reweight_inner(&mut self, from: usize, w: &[f64]) -> Result<()> {
        check_rows(from, w.len(), self.t)?;
        let n = self.n;
        self.add_rows(from, w, n..2 * n)
    }

    fn reprior_inner(&mut self, mu0: &[f64], w: &[f64]) -> Result<()> {
        checked_len("mu0", mu0.len(), self.n)?;
        check_rows(0, w.len(), self.t)?;
        self.lane.write(mu0, self.mu0.vm())?;
        let n = self.n;
        self.add_rows(0, w, 3 * n..4 * n)
    }

    /// `sums[at] += sum_s w[s] V[from + s]` (`at`: `a`'s or `c`'s range of the sums).
    fn add_rows(&mut self, from: usize, w: &[f64], at: std::ops::Range<usize>) -> Result<()> {
        if w.is_empty() {
            return Ok(());
        }
        let n = self.n;
        self.lane.write(w, self.w.vm())?;
        raw::gp_reweight_f32(
            &self.lane,
            per_elem(n),
            self.v.v(),
            to_i64(n),
            to_i32(from, "GP rows")?,
            to_i32(w.len(), "GP rows")?,
            self.w.v(),
            self.sums.slice_mut(at),
        )
    }

    fn posterior_inner(&mut self, at: Readout, mean: &mut [f64], var: &mut [f64]) -> Result<()> {
        checked_len("GP posterior: mean", mean.len(), self.n)?;
        checked_len("GP posterior: var", var.len(), self.n)?;
        self.posterior_dev(at)?;
        self.lane.read(self.mean.v(), mean)?;
        self.lane.read(self.var.v(), var)
    }

    fn ucb_inner(&mut self, at: Readout, scored: &[bool], beta: f64) -> Result<Option<usize>> {
        checked_len("scored", scored.len(), self.n)?;
        self.posterior_dev(at)?;
        let flags: Vec<u8> = scored.iter().map(|&s| u8::from(s)).collect();
        self.lane.write(&flags, self.scored.vm())?;
        let am = &mut self.am;
        raw::ucb_argmax_f64(
            &self.lane,
            per_elem(self.n),
            self.mean.v(),
            self.var.v(),
            self.scored.v(),
            beta.sqrt(),
            to_i64(self.n),
            am.pv.vm(),
            am.pi.vm(),
            am.ticket.vm(),
            am.out.vm(),
        )?;
        Ok(am.read(&self.lane)?.map(|p| p.0))
    }
}

/// The GP posterior in oracle units on the device from given running sums (the check of
/// the posterior kernel against its host definition).
pub(crate) fn posterior_of(
    lane: &Lane,
    mu0: &[f64],
    [a, b, c]: [&[f64]; 3],
    colsq: &[f64],
    at: Readout,
) -> Result<(Vec<f64>, Vec<f64>)> {
    let n = mu0.len();
    for (what, v) in [("a", a), ("b", b), ("c", c), ("colsq", colsq)] {
        checked_len(what, v.len(), n)?;
    }
    let (mu0, a, b, c, colsq) = (
        lane.upload(mu0)?,
        lane.upload(a)?,
        lane.upload(b)?,
        lane.upload(c)?,
        lane.upload(colsq)?,
    );
    let mut mean = lane.filled(n, f64::NAN)?;
    let mut var = lane.filled(n, f64::NAN)?;
    raw::gp_posterior_f64(
        lane,
        per_elem(n),
        mu0.v(),
        a.v(),
        b.v(),
        c.v(),
        colsq.v(),
        at.m,
        at.s,
        at.delta,
        to_i64(n),
        mean.vm(),
        var.vm(),
    )?;
    Ok((lane.download(mean.v())?, lane.download(var.v())?))
}
