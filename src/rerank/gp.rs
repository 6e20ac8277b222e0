//! The Gaussian-process posterior over a pool (boundarymorph-budgeted-reranking.txt §3,
//! App. B; SPEC §3), updated incrementally.
//!
//! The GP models the residual `r = f - mu0` of the oracle against a prior mean, Z-
//! standardised over the observations (the query's included). Writing the standardised
//! posterior mean as `V^T L^{-1} (r - m 1) / s` and de-standardising gives
//! `mean = mu0 + m + a - m b` with `a = V^T L^{-1} r` and `b = V^T L^{-1} 1`: forward
//! substitution never changes earlier entries of `L^{-1} r`, so `a` and `b` grow by one
//! scaled row of `V` per observation and the re-standardisation costs nothing. Appending
//! one observation costs O(t N) (the new row of `V`); `B` calls cost O(B² N), not the
//! paper's O(B³ N).
//!
//! This file keeps the small state (the Cholesky factor `L` of the observed block, the
//! observations, the jitter ladder); the pool-sized state (`V`, `colsq`, `a`, `b`) lives in
//! a [`GpStore`] on the engine's device, and kernel rows are read on demand
//! ([`KernelRows`]): no `N × N` matrix anywhere.

pub use crate::backend::gp::{GpStore, KernelRows, PoolKernel};
use crate::error::{Error, Result};

/// The jitter ladder of SPEC §3: tried in order when a factorisation fails; after the
/// last, a pseudo-inverse.
pub const JITTERS: [f64; 2] = [1e-4, 1e-2];

#[derive(Clone, Debug)]
struct Obs {
    /// `None` for the query.
    idx: Option<usize>,
    /// Residual `y - mu0`.
    r: f64,
}

/// The incremental posterior.
pub struct Gp<'k> {
    rows: &'k dyn KernelRows,
    store: Box<dyn GpStore + 'k>,
    n: usize,
    mu0: Vec<f64>,
    jitter_step: usize,
    obs: Vec<Obs>,
    /// Lower-triangular factor of `K_AA + jitter I`, row by row.
    l: Vec<Vec<f64>>,
    ur: Vec<f64>,
    u1: Vec<f64>,
    /// Set once the jitter ladder is exhausted: posterior recomputed densely from a
    /// pseudo-inverse at every step.
    pinv: Option<Dense>,
}

/// Posterior moments from the pseudo-inverse fallback: `a`, `b` as in the incremental
/// form and the standardised variance.
struct Dense {
    var_z: Vec<f64>,
    a: Vec<f64>,
    b: Vec<f64>,
}

impl<'k> Gp<'k> {
    /// A GP over `rows`'s pool on the CPU with prior mean `mu0` (one per item) and the
    /// query as a zero-cost observation `y = 1` with prior mean `mu0_query`.
    pub fn new(rows: &'k dyn KernelRows, mu0: Vec<f64>, mu0_query: f64) -> Result<Self> {
        let store = Box::new(crate::backend::cpu::gp::CpuStore::new(rows, mu0.clone()));
        Gp::with_store(rows, store, mu0, mu0_query)
    }

    /// [`Gp::new`] with the pool-sized state in `store` (an engine's; its prior means must
    /// be `mu0`).
    pub fn with_store(
        rows: &'k dyn KernelRows,
        store: Box<dyn GpStore + 'k>,
        mu0: Vec<f64>,
        mu0_query: f64,
    ) -> Result<Self> {
        let n = rows.len();
        if mu0.len() != n || store.len() != n {
            return Err(Error::invalid(
                "mu0",
                format!(
                    "{} prior means and a store of {} for a pool of {n}",
                    mu0.len(),
                    store.len()
                ),
            ));
        }
        let mut gp = Gp {
            rows,
            store,
            n,
            mu0,
            jitter_step: 0,
            obs: Vec::new(),
            l: Vec::new(),
            ur: Vec::new(),
            u1: Vec::new(),
            pinv: None,
        };
        gp.push(None, 1.0 - mu0_query)?;
        Ok(gp)
    }

    /// The jitter in force (`None` once on the pseudo-inverse).
    #[must_use]
    pub fn jitter(&self) -> Option<f64> {
        JITTERS.get(self.jitter_step).copied()
    }

    /// Number of observations, the query's included.
    #[must_use]
    pub fn observations(&self) -> usize {
        self.obs.len()
    }

    /// Adds the oracle's score `y` of pool item `j`.
    pub fn observe(&mut self, j: usize, y: f64) -> Result<()> {
        if j >= self.n {
            return Err(Error::invalid(
                "observation",
                format!("index {j} outside the pool of {}", self.n),
            ));
        }
        if !y.is_finite() {
            return Err(Error::invalid("observation", format!("score of item {j} is {y}")));
        }
        let r = y - self.mu0[j];
        self.push(Some(j), r)
    }

    fn kernel_row(&self, idx: Option<usize>) -> Vec<f64> {
        let mut row = vec![0.0; self.n];
        match idx {
            Some(j) => self.rows.row(j, &mut row),
            None => self.rows.query_row(&mut row),
        }
        row
    }

    /// Adds an observation: incrementally when the factor extends, else by refactoring
    /// everything on the next rung of the jitter ladder.
    fn push(&mut self, idx: Option<usize>, r: f64) -> Result<()> {
        let o = Obs { idx, r };
        if self.pinv.is_some() {
            self.obs.push(o);
            self.pinv = Some(self.dense_pinv());
        } else if !self.append(&o)? {
            let mut all = std::mem::take(&mut self.obs);
            all.push(o);
            self.rebuild(all, self.jitter_step + 1)?;
        }
        Ok(())
    }

    /// Extends `L`, `V` and the running sums by one observation; false (nothing changed)
    /// when the new pivot is not positive at the current jitter. Errors only from a device.
    fn append(&mut self, o: &Obs) -> Result<bool> {
        let jitter = JITTERS[self.jitter_step];
        // l = L^{-1} k_A(new): for a pool item, column j of V. The query is always the
        // first observation, so its l is empty.
        let l: Vec<f64> = match o.idx {
            Some(j) => self.store.column(j)?,
            None => Vec::new(),
        };
        let ll: f64 = l.iter().map(|x| x * x).sum();
        let lnn2 = 1.0 + jitter - ll;
        if lnn2.is_nan() || lnn2 <= 1e-12 {
            return Ok(false);
        }
        let lnn = lnn2.sqrt();
        let urn = (o.r - l.iter().zip(&self.ur).map(|(a, b)| a * b).sum::<f64>()) / lnn;
        let u1n = (1.0 - l.iter().zip(&self.u1).map(|(a, b)| a * b).sum::<f64>()) / lnn;
        self.store.append(o.idx, &l, lnn, urn, u1n)?;
        let mut lrow = l;
        lrow.push(lnn);
        self.l.push(lrow);
        self.ur.push(urn);
        self.u1.push(u1n);
        self.obs.push(o.clone());
        Ok(true)
    }

    /// Refactors all observations from scratch, from jitter rung `step` up; past the last
    /// rung, the pseudo-inverse.
    fn rebuild(&mut self, all: Vec<Obs>, mut step: usize) -> Result<()> {
        loop {
            self.store.reset()?;
            self.l.clear();
            self.ur.clear();
            self.u1.clear();
            self.obs.clear();
            self.jitter_step = step;
            if step >= JITTERS.len() {
                self.obs = all;
                self.pinv = Some(self.dense_pinv());
                return Ok(());
            }
            let mut extended = true;
            for o in &all {
                if !self.append(o)? {
                    extended = false;
                    break;
                }
            }
            if extended {
                return Ok(());
            }
            step += 1;
        }
    }

    /// The posterior by an eigen-decomposition pseudo-inverse of `K_AA` (the last rung).
    fn dense_pinv(&mut self) -> Dense {
        let t = self.obs.len();
        let n = self.n;
        let idx: Vec<Option<usize>> = self.obs.iter().map(|o| o.idx).collect();
        let rows: Vec<Vec<f64>> = idx.iter().map(|&i| self.kernel_row(i)).collect();
        let kaa = faer::Mat::<f64>::from_fn(t, t, |i, j| match (idx[i], idx[j]) {
            (_, Some(j2)) => rows[i][j2],
            (Some(i2), None) => rows[j][i2],
            (None, None) => 1.0,
        });
        let (mut w, mut lam) = (Vec::new(), Vec::new());
        if let Ok(evd) = kaa.self_adjoint_eigen(faer::Side::Lower) {
            let s = evd.S().column_vector();
            let u = evd.U();
            let max = (0..t).map(|i| s[i]).fold(0.0f64, f64::max);
            for k in 0..t {
                if s[k] > 1e-12 * max.max(1e-300) {
                    lam.push(s[k]);
                    w.push((0..t).map(|i| u[(i, k)]).collect::<Vec<f64>>());
                }
            }
        }
        // T = diag(1/sqrt(lam)) U^T: K^+ = T^T T.
        let r: Vec<f64> = self.obs.iter().map(|o| o.r).collect();
        let tr: Vec<f64> = w
            .iter()
            .zip(&lam)
            .map(|(u, l)| u.iter().zip(&r).map(|(a, b)| a * b).sum::<f64>() / l.sqrt())
            .collect();
        let t1: Vec<f64> = w
            .iter()
            .zip(&lam)
            .map(|(u, l)| u.iter().sum::<f64>() / l.sqrt())
            .collect();
        let mut a = vec![0.0; n];
        let mut b = vec![0.0; n];
        let mut var_z = vec![1.0; n];
        for i in 0..n {
            let mut sq = 0.0;
            for (k, (u, l)) in w.iter().zip(&lam).enumerate() {
                let proj: f64 = (0..t).map(|s| u[s] * rows[s][i]).sum::<f64>() / l.sqrt();
                sq += proj * proj;
                a[i] += proj * tr[k];
                b[i] += proj * t1[k];
            }
            var_z[i] = 1.0 - sq;
        }
        Dense { var_z, a, b }
    }

    /// Mean and population standard deviation of the observed residuals (std := 1 when
    /// it is <= 1e-12 or there is one observation).
    fn standardisation(&self) -> (f64, f64) {
        let t = self.obs.len() as f64;
        let m = self.obs.iter().map(|o| o.r).sum::<f64>() / t;
        let var = self.obs.iter().map(|o| (o.r - m).powi(2)).sum::<f64>() / t;
        let s = var.sqrt();
        (m, if self.obs.len() <= 1 || s <= 1e-12 { 1.0 } else { s })
    }

    /// Posterior mean and variance of every pool item, in oracle units (SPEC §3; scored
    /// items are not special-cased here: callers replace them by their observations).
    pub fn posterior(&mut self, mean: &mut [f64], var: &mut [f64]) -> Result<()> {
        crate::backend::gp::check_len("mean", mean.len(), self.n)?;
        crate::backend::gp::check_len("var", var.len(), self.n)?;
        let (m, s) = self.standardisation();
        match &self.pinv {
            Some(d) => {
                for i in 0..self.n {
                    mean[i] = (self.mu0[i] + m) + (d.a[i] - m * d.b[i]);
                    var[i] = s * s * d.var_z[i].max(0.0);
                }
                Ok(())
            }
            None => self.store.posterior(m, s, mean, var),
        }
    }

    /// GP-UCB's pick: the unscored item with the largest `mean + sqrt(beta) sigma`, ties
    /// to the lower index (on the store's device).
    pub fn ucb(&mut self, scored: &[bool], beta: f64) -> Result<Option<usize>> {
        crate::backend::gp::check_len("scored", scored.len(), self.n)?;
        if self.pinv.is_some() {
            let (mut mean, mut var) = (vec![0.0; self.n], vec![0.0; self.n]);
            self.posterior(&mut mean, &mut var)?;
            return Ok(crate::backend::gp::ucb_argmax(&mean, &var, scored, beta));
        }
        let (m, s) = self.standardisation();
        self.store.ucb_pick(m, s, scored, beta)
    }
}
