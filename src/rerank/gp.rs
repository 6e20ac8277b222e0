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
//! Beyond the paper (SPEC §3):
//! - [`Gp::observe_batch`] appends `q` observations as one rank-`q` block: the Schur
//!   complement of the new block is factored on the host, and its rows extend `V`;
//! - [`Gp::revise`] replaces the scores of earlier observations (a batch's fantasised
//!   scores by the oracle's): `L` and `V` do not depend on scores, so only `L^{-1} r` from
//!   the first revised position on changes, and `a` takes that change as one rank-`q`
//!   update;
//! - [`Gp::set_adaptive`] fits the prior's scale `alpha` in `alpha mu0` to the observations
//!   by generalised least squares (in the `K^{-1}` metric, with a ridge `lambda (alpha - 1)²`
//!   toward the paper's prior), clamped to `[0, 1]`: a prior the oracle contradicts fades
//!   to zero. No offset is fitted: the standardisation removes any offset from the
//!   posterior, and with one the fit could not tell a wrong prior from a shifted one while
//!   the observations sit at the top of the prior (where the boundary rule puts them: on
//!   the evaluation's trap problems an offset fit kept `alpha = 1`). `u_p = L^{-1} mu0_A`
//!   and `c = V^T u_p` make the fit and the read-out O(t) and O(N).
//!
//! This file keeps the small state (the Cholesky factor `L` of the observed block, the
//! observations, the jitter ladder); the pool-sized state (`V`, `colsq`, `a`, `b`, `c`)
//! lives in a [`GpStore`] on the engine's device, and kernel rows are read on demand
//! ([`KernelRows`]): no `N × N` matrix anywhere.

pub use crate::backend::gp::{GpStore, KernelRows, PoolKernel, Readout, RowPrecision, RowWeights};
use crate::error::{Error, Result};

/// The jitter ladder of SPEC §3: tried in order when a factorisation fails; after the
/// last, a pseudo-inverse. A GP with another first jitter ([`Gp::with_jitter`], a noise
/// ratio fitted by the evidence) climbs the same ratios: `[j, 100 j]`.
pub const JITTERS: [f64; 2] = [1e-4, 1e-2];

/// The read-out of hyperparameters fitted by the evidence ([`super::evidence`]): the
/// prior's scale and offset and the signal variance replace the standardisation (the
/// noise variance is the GP's jitter times the signal's).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Fitted {
    /// The prior mean's scale.
    pub scale: f64,
    /// The prior mean's offset.
    pub offset: f64,
    /// The signal variance.
    pub signal: f64,
}

#[derive(Clone, Debug)]
struct Obs {
    /// `None` for the query.
    idx: Option<usize>,
    /// Residual `y - mu0`.
    r: f64,
    /// Its prior mean `mu0`.
    p: f64,
}

/// The incremental posterior.
pub struct Gp<'k> {
    rows: &'k dyn KernelRows,
    store: Box<dyn GpStore + 'k>,
    n: usize,
    mu0: Vec<f64>,
    jitter_step: usize,
    /// The ladder's first rung (1e-4 as SPEC §3 gives it).
    jitter0: f64,
    /// Hyperparameters fitted by the evidence (`None`: the standardisation of SPEC §3).
    fitted: Option<Fitted>,
    obs: Vec<Obs>,
    /// Lower-triangular factor of `K_AA + jitter I`, row by row.
    l: Vec<Vec<f64>>,
    ur: Vec<f64>,
    u1: Vec<f64>,
    up: Vec<f64>,
    /// The adaptive prior's ridge toward `alpha = 1` (`None`: the prior as given).
    adaptive: Option<f64>,
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
    c: Vec<f64>,
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
        Gp::with_jitter(rows, store, mu0, mu0_query, JITTERS[0])
    }

    /// [`Gp::with_store`] with `jitter` (the noise variance over the signal's) as the
    /// ladder's first rung in place of SPEC §3's 1e-4; the ladder goes on at `100 jitter`.
    pub fn with_jitter(
        rows: &'k dyn KernelRows,
        store: Box<dyn GpStore + 'k>,
        mu0: Vec<f64>,
        mu0_query: f64,
        jitter: f64,
    ) -> Result<Self> {
        if !(jitter.is_finite() && jitter > 0.0) {
            return Err(Error::invalid(
                "jitter",
                format!("must be finite and > 0, got {jitter}"),
            ));
        }
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
            jitter0: jitter,
            fitted: None,
            obs: Vec::new(),
            l: Vec::new(),
            ur: Vec::new(),
            u1: Vec::new(),
            up: Vec::new(),
            adaptive: None,
            pinv: None,
        };
        gp.push(Obs {
            idx: None,
            r: 1.0 - mu0_query,
            p: mu0_query,
        })?;
        Ok(gp)
    }

    /// Fits the prior's scale from here on (see the module docs): `lambda > 0` is the ridge
    /// toward the prior as given, in units of the unit-variance kernel (1 weighs about as
    /// much as one independent observation at the top of the prior).
    pub fn set_adaptive(&mut self, lambda: f64) -> Result<()> {
        if !(lambda.is_finite() && lambda > 0.0) {
            return Err(Error::invalid(
                "adaptive prior",
                format!("the ridge must be finite and > 0, got {lambda}"),
            ));
        }
        self.adaptive = Some(lambda);
        Ok(())
    }

    /// The prior's scale in force: 1 unless adaptive.
    #[must_use]
    pub fn alpha(&self) -> f64 {
        1.0 - self.delta()
    }

    /// `1 - alpha`: 0 for a fixed prior; else the ridge-regularised generalised
    /// least-squares fit of `(y - mu0) + delta mu0` to zero in the `K^{-1}` metric, clamped to
    /// `[0, 1]`.
    fn delta(&self) -> f64 {
        let Some(lambda) = self.adaptive else {
            return 0.0;
        };
        if self.pinv.is_some() {
            return self.delta_dense(lambda);
        }
        let dot = |x: &[f64], y: &[f64]| x.iter().zip(y).map(|(a, b)| a * b).sum::<f64>();
        solve_delta(dot(&self.up, &self.up), dot(&self.ur, &self.up), lambda)
    }

    /// [`Gp::delta`] on the pseudo-inverse rung: the same normal equations with `K^+`.
    fn delta_dense(&self, lambda: f64) -> f64 {
        let t = self.obs.len();
        let (_, kaa) = self.dense_kaa();
        let Some((w, lam)) = eigen_pinv(&kaa, t) else {
            return 0.0;
        };
        let proj = |v: &[f64]| project(&w, &lam, v);
        let r: Vec<f64> = self.obs.iter().map(|o| o.r).collect();
        let p: Vec<f64> = self.obs.iter().map(|o| o.p).collect();
        let (ur, up) = (proj(&r), proj(&p));
        let dot = |x: &[f64], y: &[f64]| x.iter().zip(y).map(|(a, b)| a * b).sum::<f64>();
        solve_delta(dot(&up, &up), dot(&ur, &up), lambda)
    }

    /// The jitter in force (`None` once on the pseudo-inverse).
    #[must_use]
    pub fn jitter(&self) -> Option<f64> {
        self.rung(self.jitter_step)
    }

    /// Rung `step` of the jitter ladder (`None` past the last).
    fn rung(&self, step: usize) -> Option<f64> {
        JITTERS.get(step).map(|j| self.jitter0 * (j / JITTERS[0]))
    }

    /// Reads the posterior with hyperparameters fitted by the evidence from here on (see
    /// [`Fitted`]); `None` goes back to the standardisation. Errors name a value that is not
    /// finite, or a signal variance that is not positive.
    pub fn set_fitted(&mut self, fitted: Option<Fitted>) -> Result<()> {
        if let Some(f) = fitted {
            for (name, v) in [("scale", f.scale), ("offset", f.offset), ("signal", f.signal)] {
                if !v.is_finite() {
                    return Err(Error::invalid(name, format!("must be finite, got {v}")));
                }
            }
            if f.signal <= 0.0 {
                return Err(Error::invalid("signal", format!("must be > 0, got {}", f.signal)));
            }
        }
        self.fitted = fitted;
        Ok(())
    }

    /// The observations so far, the query's first: pool index (`None` for the query), score
    /// and prior mean (what the evidence is taken over).
    #[must_use]
    pub fn observed(&self) -> Vec<(Option<usize>, f64, f64)> {
        self.obs.iter().map(|o| (o.idx, o.r + o.p, o.p)).collect()
    }

    /// Number of observations, the query's included.
    #[must_use]
    pub fn observations(&self) -> usize {
        self.obs.len()
    }

    /// Adds the oracle's score `y` of pool item `j`.
    pub fn observe(&mut self, j: usize, y: f64) -> Result<()> {
        let o = self.obs_of(j, y)?;
        self.push(o)
    }

    /// The observation of score `y` for pool item `j`, checked.
    fn obs_of(&self, j: usize, y: f64) -> Result<Obs> {
        if j >= self.n {
            return Err(Error::invalid(
                "observation",
                format!("index {j} outside the pool of {}", self.n),
            ));
        }
        if !y.is_finite() {
            return Err(Error::invalid("observation", format!("score of item {j} is {y}")));
        }
        let p = self.mu0[j];
        Ok(Obs {
            idx: Some(j),
            r: y - p,
            p,
        })
    }

    /// Adds the scores of several pool items as one rank-`q` append: the block's Schur
    /// complement `K_BB + jitter I - L_AB^T L_AB` is factored here and its rows extend `V`
    /// (in exact arithmetic the same as `q` calls of [`Gp::observe`]; a block that does not
    /// factor at the current jitter falls back to them, and they to the jitter ladder).
    pub fn observe_batch(&mut self, items: &[(usize, f64)]) -> Result<()> {
        let obs: Vec<Obs> = items
            .iter()
            .map(|&(j, y)| self.obs_of(j, y))
            .collect::<Result<_>>()?;
        if self.pinv.is_some() || obs.len() <= 1 {
            return obs.into_iter().try_for_each(|o| self.push(o));
        }
        let q = obs.len();
        let jitter = self.rung(self.jitter_step).unwrap_or(JITTERS[0]);
        // L_AB: the columns of V at the block's items; S = K_BB + jitter - L_AB^T L_AB.
        let cols: Vec<Vec<f64>> = items
            .iter()
            .map(|&(j, _)| self.store.column(j))
            .collect::<Result<_>>()?;
        let mut l22 = vec![vec![0.0; q]; q];
        let mut ok = true;
        'factor: for a in 0..q {
            for b in 0..=a {
                let kab = if a == b {
                    1.0 + jitter
                } else {
                    self.rows.get(items[a].0, items[b].0)
                };
                let mut v = kab - cols[a].iter().zip(&cols[b]).map(|(x, y)| x * y).sum::<f64>();
                v -= (0..b).map(|c| l22[a][c] * l22[b][c]).sum::<f64>();
                if a == b {
                    if v.is_nan() || v <= 1e-12 {
                        ok = false;
                        break 'factor;
                    }
                    l22[a][a] = v.sqrt();
                } else {
                    l22[a][b] = v / l22[b][b];
                }
            }
        }
        if !ok {
            return obs.into_iter().try_for_each(|o| self.push(o));
        }
        for (a, o) in obs.into_iter().enumerate() {
            let mut l = cols[a].clone();
            l.extend_from_slice(&l22[a][..a]);
            self.extend(o, l, l22[a][a])?;
        }
        Ok(())
    }

    /// Replaces the scores of observed pool items (each observed once since the last
    /// replacement; a batch's fantasised scores by the oracle's): `L^{-1} r` changes from the
    /// first replaced position on, and `a` by that change times the rows of `V` (one
    /// rank-`q` update).
    pub fn revise(&mut self, items: &[(usize, f64)]) -> Result<()> {
        let mut first = self.obs.len();
        for &(j, y) in items {
            if !y.is_finite() {
                return Err(Error::invalid("observation", format!("score of item {j} is {y}")));
            }
            let pos = self
                .obs
                .iter()
                .rposition(|o| o.idx == Some(j))
                .ok_or_else(|| Error::invalid("revision", format!("item {j} has not been observed")))?;
            self.obs[pos].r = y - self.obs[pos].p;
            first = first.min(pos);
        }
        if first == self.obs.len() {
            return Ok(());
        }
        if self.pinv.is_some() {
            self.pinv = Some(self.dense_pinv());
            return Ok(());
        }
        let mut dw = Vec::with_capacity(self.obs.len() - first);
        for s in first..self.obs.len() {
            let new = self.forward(s, &self.ur, self.obs[s].r);
            dw.push(new - self.ur[s]);
            self.ur[s] = new;
        }
        self.store.reweight(first, &dw)
    }

    /// Replaces the prior means of the pool by `mu0` (one per item; the query's stays):
    /// the observations keep their scores, their residuals and prior means follow, and the
    /// posterior is the one a GP built with `mu0` and fed the same observations in the same
    /// order would have (to rounding), without new kernel rows: `L` and `V` do not depend
    /// on the prior, so `L^{-1} r` and `L^{-1} mu0_A` are solved again (O(t²)) and `a` and
    /// `c` take their changes as one pass over `V` each. An error names a length other
    /// than the pool's or a value that is not finite.
    pub fn set_prior(&mut self, mu0: Vec<f64>) -> Result<()> {
        crate::backend::gp::check_len("prior", mu0.len(), self.n)?;
        if let Some(i) = mu0.iter().position(|v| !v.is_finite()) {
            return Err(Error::invalid(format!("prior[{i}]"), format!("is {}", mu0[i])));
        }
        for o in &mut self.obs {
            if let Some(j) = o.idx {
                let y = o.r + o.p;
                o.p = mu0[j];
                o.r = y - o.p;
            }
        }
        self.mu0 = mu0;
        if self.pinv.is_some() {
            self.store.reprior(&self.mu0, &[])?;
            self.pinv = Some(self.dense_pinv());
            return Ok(());
        }
        let t = self.obs.len();
        let (mut dr, mut dp) = (Vec::with_capacity(t), Vec::with_capacity(t));
        for s in 0..t {
            let (r, p) = (
                self.forward(s, &self.ur, self.obs[s].r),
                self.forward(s, &self.up, self.obs[s].p),
            );
            dr.push(r - self.ur[s]);
            dp.push(p - self.up[s]);
            self.ur[s] = r;
            self.up[s] = p;
        }
        self.store.reweight(0, &dr)?;
        self.store.reprior(&self.mu0, &dp)
    }

    /// Entry `s` of `L^{-1} v` by forward substitution, given its first `s` entries `u`
    /// and `v`'s entry `v_s`.
    fn forward(&self, s: usize, u: &[f64], v: f64) -> f64 {
        let row = &self.l[s];
        let acc: f64 = row[..s].iter().zip(u).map(|(a, b)| a * b).sum();
        (v - acc) / row[s]
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
    fn push(&mut self, o: Obs) -> Result<()> {
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
        let Some(jitter) = self.rung(self.jitter_step) else {
            return Ok(false);
        };
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
        self.extend(o.clone(), l, lnn2.sqrt())?;
        Ok(true)
    }

    /// Extends the factor by the row `[l, lnn]` for observation `o`, and the store with it.
    fn extend(&mut self, o: Obs, l: Vec<f64>, lnn: f64) -> Result<()> {
        let sub = |u: &[f64], v: f64| (v - l.iter().zip(u).map(|(a, b)| a * b).sum::<f64>()) / lnn;
        let w = RowWeights {
            r: sub(&self.ur, o.r),
            one: sub(&self.u1, 1.0),
            prior: sub(&self.up, o.p),
        };
        self.store.append(o.idx, &l, lnn, w)?;
        let mut lrow = l;
        lrow.push(lnn);
        self.l.push(lrow);
        self.ur.push(w.r);
        self.u1.push(w.one);
        self.up.push(w.prior);
        self.obs.push(o);
        Ok(())
    }

    /// Refactors all observations from scratch, from jitter rung `step` up; past the last
    /// rung, the pseudo-inverse.
    fn rebuild(&mut self, all: Vec<Obs>, mut step: usize) -> Result<()> {
        loop {
            self.store.reset()?;
            self.l.clear();
            self.ur.clear();
            self.u1.clear();
            self.up.clear();
            self.obs.clear();
            self.jitter_step = step;
            if self.rung(step).is_none() {
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

    /// The observations' kernel rows over the pool and `K_AA` from them.
    fn dense_kaa(&self) -> (Vec<Vec<f64>>, faer::Mat<f64>) {
        let t = self.obs.len();
        let idx: Vec<Option<usize>> = self.obs.iter().map(|o| o.idx).collect();
        let rows: Vec<Vec<f64>> = idx.iter().map(|&i| self.kernel_row(i)).collect();
        let kaa = faer::Mat::<f64>::from_fn(t, t, |i, j| match (idx[i], idx[j]) {
            (_, Some(j2)) => rows[i][j2],
            (Some(i2), None) => rows[j][i2],
            (None, None) => 1.0,
        });
        (rows, kaa)
    }

    /// The posterior by an eigen-decomposition pseudo-inverse of `K_AA` (the last rung).
    fn dense_pinv(&mut self) -> Dense {
        let t = self.obs.len();
        let n = self.n;
        let (rows, kaa) = self.dense_kaa();
        let (w, lam) = eigen_pinv(&kaa, t).unwrap_or_default();
        // T = diag(1/sqrt(lam)) U^T: K^+ = T^T T.
        let proj = |v: &[f64]| project(&w, &lam, v);
        let r: Vec<f64> = self.obs.iter().map(|o| o.r).collect();
        let p: Vec<f64> = self.obs.iter().map(|o| o.p).collect();
        let (tr, t1, tp) = (proj(&r), proj(&vec![1.0; t]), proj(&p));
        let mut a = vec![0.0; n];
        let mut b = vec![0.0; n];
        let mut c = vec![0.0; n];
        let mut var_z = vec![1.0; n];
        for i in 0..n {
            let mut sq = 0.0;
            for (k, (u, l)) in w.iter().zip(&lam).enumerate() {
                let proj: f64 = (0..t).map(|s| u[s] * rows[s][i]).sum::<f64>() / l.sqrt();
                sq += proj * proj;
                a[i] += proj * tr[k];
                b[i] += proj * t1[k];
                c[i] += proj * tp[k];
            }
            var_z[i] = 1.0 - sq;
        }
        Dense { var_z, a, b, c }
    }

    /// The read-out: with [`Fitted`] hyperparameters, their offset, the root of their
    /// signal variance and one minus their scale; else the prior's fade `delta`, then the
    /// mean and population standard deviation of the observed residuals under the faded
    /// prior, `r + delta mu0` (std := 1 when it is <= 1e-12 or there is one observation).
    pub fn readout(&self) -> Readout {
        if let Some(f) = self.fitted {
            return Readout {
                m: f.offset,
                s: f.signal.sqrt(),
                delta: 1.0 - f.scale,
            };
        }
        let delta = self.delta();
        let t = self.obs.len() as f64;
        let res = |o: &Obs| o.r + delta * o.p;
        let m = self.obs.iter().map(res).sum::<f64>() / t;
        let var = self.obs.iter().map(|o| (res(o) - m).powi(2)).sum::<f64>() / t;
        let s = var.sqrt();
        Readout {
            m,
            s: if self.obs.len() <= 1 || s <= 1e-12 { 1.0 } else { s },
            delta,
        }
    }

    /// Posterior mean and variance of every pool item, in oracle units (SPEC §3; scored
    /// items are not special-cased here: callers replace them by their observations).
    pub fn posterior(&mut self, mean: &mut [f64], var: &mut [f64]) -> Result<()> {
        crate::backend::gp::check_len("mean", mean.len(), self.n)?;
        crate::backend::gp::check_len("var", var.len(), self.n)?;
        let at = self.readout();
        match &self.pinv {
            Some(d) => {
                for i in 0..self.n {
                    mean[i] = crate::backend::gp::posterior_mean(self.mu0[i], d.a[i], d.b[i], d.c[i], at);
                    var[i] = at.s * at.s * d.var_z[i].max(0.0);
                }
                Ok(())
            }
            None => self.store.posterior(at, mean, var),
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
        let at = self.readout();
        self.store.ucb_pick(at, scored, beta)
    }
}

/// `diag(1/sqrt(lam)) U^T v`: `v` whitened by the pseudo-inverse (`K^+ = T^T T`).
fn project(w: &[Vec<f64>], lam: &[f64], v: &[f64]) -> Vec<f64> {
    w.iter()
        .zip(lam)
        .map(|(u, l)| u.iter().zip(v).map(|(a, b)| a * b).sum::<f64>() / l.sqrt())
        .collect()
}

/// The eigenpairs of `K_AA` above `1e-12` of the largest: what the pseudo-inverse keeps.
#[allow(clippy::type_complexity)]
fn eigen_pinv(kaa: &faer::Mat<f64>, t: usize) -> Option<(Vec<Vec<f64>>, Vec<f64>)> {
    let evd = kaa.self_adjoint_eigen(faer::Side::Lower).ok()?;
    let s = evd.S().column_vector();
    let u = evd.U();
    let max = (0..t).map(|i| s[i]).fold(0.0f64, f64::max);
    let (mut w, mut lam) = (Vec::new(), Vec::new());
    for k in 0..t {
        if s[k] > 1e-12 * max.max(1e-300) {
            lam.push(s[k]);
            w.push((0..t).map(|i| u[(i, k)]).collect::<Vec<f64>>());
        }
    }
    Some((w, lam))
}

/// The adaptive prior's fade: with `e = u_r + delta u_p` (the whitened residual of
/// `y - (1 - delta) mu0`), minimises `|e|² + lambda delta²`, from `pp = u_p·u_p` and
/// `rp = u_r·u_p`: `delta = -rp / (pp + lambda)`, clamped to `[0, 1]` (0 when not finite).
#[must_use]
pub fn solve_delta(pp: f64, rp: f64, lambda: f64) -> f64 {
    let delta = -rp / (pp + lambda);
    if delta.is_finite() {
        delta.clamp(0.0, 1.0)
    } else {
        0.0
    }
}
