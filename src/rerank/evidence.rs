//! The GP's evidence (issue 30): the type-II log marginal likelihood of the scores seen so
//! far as a function of the hyperparameters, its gradient, and a bounded fit.
//!
//! The model, in oracle units, over the observed block `A` (the query included):
//!
//! ```text
//! y = scale mu0 + offset + g,    g ~ N(0, Sigma),    Sigma = signal K + noise I,
//! K[i][j] = kernel(cos(i, j); bandwidth)
//! ```
//!
//! The paper's GP (SPEC §3) is one point of this family: `scale = 1`, `offset` the mean
//! residual `m`, `signal` the residuals' population variance `s²`, `noise = 1e-4 s²` (the
//! jitter in standardised units) and the median-heuristic bandwidth
//! ([`Hyper::paper`]). With `r = y - scale mu0 - offset` and `w = Sigma^{-1} r`,
//!
//! ```text
//! log p(y) = -1/2 r'w - 1/2 log|Sigma| - t/2 log(2 pi)
//! d/d theta = 1/2 (w' D w - tr(Sigma^{-1} D)),    D = dSigma/dtheta
//! d/d scale = mu0'w,    d/d offset = 1'w
//! ```
//!
//! `theta` runs over the log bandwidth (`ln kappa` for vMF, `ln l²` for RBF and
//! Matérn-5/2; the cosine kernel has none), `ln signal` and `ln noise`. Everything here is
//! dense f64 on the `t × t` block (`t` is at most the budget plus one): one Cholesky
//! factorisation and one triangular inverse per evaluation, O(t³), nothing pool-sized.
//! The kernel is evaluated in f64 from the cosines with the exact `exp`, so the gradient is
//! that of the function evaluated (the pool's kernel rows use a vectorised f32 `exp`
//! within 2e-7 of it).
//!
//! [`fit`] maximises the evidence over the log bandwidth, `ln signal` and `ln (noise /
//! signal)` (the GP's jitter, kept at or above the paper's 1e-4) in a box, with `scale`
//! and `offset` profiled out by generalised least squares at every evaluation (their
//! optimum given the rest is closed form, so the search is three-dimensional, and by the
//! envelope theorem the profiled gradient is the partial one). It is projected BFGS with a backtracking line
//! search, bounded in iterations, warm-started from any point, deterministic: the same
//! input gives the same bits.

use crate::error::{Error, Result};
use crate::similarity::{Kernel, KernelKind};

/// The hyperparameters of the evidence model (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Hyper {
    /// `ln kappa` (vMF) or `ln l²` (RBF, Matérn-5/2); ignored by the cosine kernel.
    pub log_bandwidth: f64,
    /// `ln` of the signal variance.
    pub log_signal: f64,
    /// `ln` of the noise variance.
    pub log_noise: f64,
    /// The prior mean's scale.
    pub scale: f64,
    /// The prior mean's offset.
    pub offset: f64,
}

/// Indices of [`Evidence::grad`].
pub const BANDWIDTH: usize = 0;
/// See [`BANDWIDTH`].
pub const SIGNAL: usize = 1;
/// See [`BANDWIDTH`].
pub const NOISE: usize = 2;
/// See [`BANDWIDTH`].
pub const SCALE: usize = 3;
/// See [`BANDWIDTH`].
pub const OFFSET: usize = 4;

/// The log marginal likelihood at one point and its gradient, in the order
/// [`BANDWIDTH`], [`SIGNAL`], [`NOISE`] (all three with respect to the logs), [`SCALE`],
/// [`OFFSET`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Evidence {
    /// `log p(y | hyper)`.
    pub value: f64,
    /// Its gradient.
    pub grad: [f64; 5],
}

/// The observed block: cosines between the observations (row-major `t × t`, symmetric,
/// unit diagonal; the query is an observation like any other), their scores and their
/// prior means.
#[derive(Clone, Copy, Debug)]
pub struct Observed<'a> {
    /// `cos[i * t + j]`.
    pub cos: &'a [f64],
    /// The scores `y`.
    pub y: &'a [f64],
    /// The prior means `mu0`.
    pub mu0: &'a [f64],
}

impl Observed<'_> {
    /// The number of observations, once the lengths are checked.
    fn check(&self) -> Result<usize> {
        let t = self.y.len();
        if t == 0 {
            return Err(Error::invalid(
                "observations",
                "none: the evidence needs at least one",
            ));
        }
        if self.mu0.len() != t {
            return Err(Error::invalid(
                "mu0",
                format!("{} prior means for {t} observations", self.mu0.len()),
            ));
        }
        if t.checked_mul(t) != Some(self.cos.len()) {
            return Err(Error::invalid(
                "cos",
                format!("{} cosines for {t} observations (want {t} x {t})", self.cos.len()),
            ));
        }
        finite("y", self.y)?;
        finite("mu0", self.mu0)?;
        finite("cos", self.cos)?;
        for i in 0..t {
            for j in 0..i {
                if self.cos[i * t + j] != self.cos[j * t + i] {
                    return Err(Error::invalid("cos", format!("not symmetric at ({i}, {j})")));
                }
            }
        }
        Ok(t)
    }
}

fn finite(name: &str, v: &[f64]) -> Result<()> {
    match v.iter().position(|x| !x.is_finite()) {
        Some(i) => Err(Error::invalid(name, format!("entry {i} is {}", v[i]))),
        None => Ok(()),
    }
}

/// A kernel's value at cosine `c` and its derivative with respect to the log bandwidth,
/// in f64 (`c` clamped to `[-1, 1]` as the pool's kernel clamps it).
#[must_use]
pub fn kernel_and_slope(family: KernelKind, log_bandwidth: f64, c: f64) -> (f64, f64) {
    let u = 1.0 - c.clamp(-1.0, 1.0);
    match family {
        KernelKind::Cosine => (1.0 - u, 0.0),
        KernelKind::Vmf => {
            // exp(-kappa u); d/d ln kappa = -kappa u K.
            let kappa = log_bandwidth.exp();
            let k = (-kappa * u).exp();
            (k, -kappa * u * k)
        }
        KernelKind::Rbf => {
            // exp(-u / l²); d/d ln l² = (u / l²) K.
            let a = u / log_bandwidth.exp();
            let k = (-a).exp();
            (k, a * k)
        }
        KernelKind::Matern52 => {
            // t = sqrt(5) sqrt(2u / l²); K = (1 + t + t²/3) e^-t;
            // dK/dt = -(t/3)(1 + t) e^-t and dt/d ln l² = -t/2.
            let t = (5.0 * 2.0 * u / log_bandwidth.exp()).sqrt();
            let e = (-t).exp();
            ((1.0 + t + t * t / 3.0) * e, t * t / 6.0 * (1.0 + t) * e)
        }
    }
}

/// The log bandwidth of a kernel (`ln kappa` or `ln l²`; 0 for the cosine kernel) and its
/// family.
#[must_use]
pub fn log_bandwidth_of(kernel: Kernel) -> (KernelKind, f64) {
    match kernel {
        Kernel::Cosine => (KernelKind::Cosine, 0.0),
        Kernel::Vmf { kappa } => (KernelKind::Vmf, f64::from(kappa).ln()),
        Kernel::Rbf { l2 } => (KernelKind::Rbf, f64::from(l2).ln()),
        Kernel::Matern52 { l2 } => (KernelKind::Matern52, f64::from(l2).ln()),
    }
}

/// The kernel of `family` at a log bandwidth (the inverse of [`log_bandwidth_of`], the
/// bandwidth rounded to f32 as kernels hold it).
#[must_use]
pub fn kernel_of(family: KernelKind, log_bandwidth: f64) -> Kernel {
    let b = log_bandwidth.exp() as f32;
    match family {
        KernelKind::Cosine => Kernel::Cosine,
        KernelKind::Vmf => Kernel::Vmf { kappa: b },
        KernelKind::Rbf => Kernel::Rbf { l2: b },
        KernelKind::Matern52 => Kernel::Matern52 { l2: b },
    }
}

impl Hyper {
    /// The read-out of these hyperparameters for the incremental GP.
    #[must_use]
    pub fn fitted(&self) -> super::gp::Fitted {
        super::gp::Fitted {
            scale: self.scale,
            offset: self.offset,
            signal: self.log_signal.exp(),
        }
    }

    /// The paper's GP (SPEC §3) in this family: the kernel's own bandwidth, `scale = 1`,
    /// `offset` the mean residual `y - mu0`, `signal` the residuals' population variance
    /// (1 when it is <= 1e-24 or there is one observation, as the standardisation takes
    /// std := 1) and `noise = jitter · signal`.
    pub fn paper(kernel: Kernel, obs: &Observed, jitter: f64) -> Result<Hyper> {
        kernel.validate()?;
        let t = obs.check()?;
        if !(jitter.is_finite() && jitter > 0.0) {
            return Err(Error::invalid(
                "jitter",
                format!("must be finite and > 0, got {jitter}"),
            ));
        }
        let r: Vec<f64> = obs.y.iter().zip(obs.mu0).map(|(y, p)| y - p).collect();
        let m = r.iter().sum::<f64>() / t as f64;
        let var = r.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / t as f64;
        // The standardisation's rule: std := 1 when it is <= 1e-12.
        let var = if t <= 1 || var.sqrt() <= 1e-12 { 1.0 } else { var };
        Ok(Hyper {
            log_bandwidth: log_bandwidth_of(kernel).1,
            log_signal: var.ln(),
            log_noise: (jitter * var).ln(),
            scale: 1.0,
            offset: m,
        })
    }

    fn check(&self) -> Result<()> {
        for (name, v) in [
            ("log_bandwidth", self.log_bandwidth),
            ("log_signal", self.log_signal),
            ("log_noise", self.log_noise),
            ("scale", self.scale),
            ("offset", self.offset),
        ] {
            if !v.is_finite() {
                return Err(Error::invalid(name, format!("must be finite, got {v}")));
            }
        }
        Ok(())
    }
}

/// The dense pieces of one evaluation: `Sigma`'s Cholesky factor, `Sigma^{-1}`, and the
/// kernel's log-bandwidth slopes.
struct Factored {
    t: usize,
    /// `Sigma = L L'`, row-major lower triangle.
    l: Vec<f64>,
    /// `Sigma^{-1}`, row-major, full.
    inv: Vec<f64>,
    /// `K` and `dK/d ln bandwidth`, row-major.
    k: Vec<f64>,
    dk: Vec<f64>,
}

impl Factored {
    /// `None` when `Sigma` does not factor (not positive definite in floating point).
    fn new(family: KernelKind, obs: &Observed, h: &Hyper, t: usize) -> Option<Factored> {
        let (signal, noise) = (h.log_signal.exp(), h.log_noise.exp());
        let mut k = vec![0.0; t * t];
        let mut dk = vec![0.0; t * t];
        for i in 0..t {
            for j in 0..=i {
                let (v, s) = if i == j {
                    kernel_and_slope(family, h.log_bandwidth, 1.0)
                } else {
                    kernel_and_slope(family, h.log_bandwidth, obs.cos[i * t + j])
                };
                k[i * t + j] = v;
                k[j * t + i] = v;
                dk[i * t + j] = s;
                dk[j * t + i] = s;
            }
        }
        // Cholesky, row by row.
        let mut l = vec![0.0; t * t];
        for i in 0..t {
            for j in 0..=i {
                let mut v = signal * k[i * t + j] + if i == j { noise } else { 0.0 };
                v -= (0..j).map(|c| l[i * t + c] * l[j * t + c]).sum::<f64>();
                if i == j {
                    if !(v > 0.0 && v.is_finite()) {
                        return None;
                    }
                    l[i * t + i] = v.sqrt();
                } else {
                    l[i * t + j] = v / l[j * t + j];
                }
            }
        }
        // M = L^{-1} (lower triangular), then Sigma^{-1} = M' M.
        let mut m = vec![0.0; t * t];
        for c in 0..t {
            for i in c..t {
                let rhs = if i == c { 1.0 } else { 0.0 };
                let acc: f64 = (c..i).map(|s| l[i * t + s] * m[s * t + c]).sum();
                m[i * t + c] = (rhs - acc) / l[i * t + i];
            }
        }
        let mut inv = vec![0.0; t * t];
        for i in 0..t {
            for j in 0..=i {
                let v: f64 = (i..t).map(|s| m[s * t + i] * m[s * t + j]).sum();
                inv[i * t + j] = v;
                inv[j * t + i] = v;
            }
        }
        Some(Factored { t, l, inv, k, dk })
    }

    /// `Sigma^{-1} v`.
    fn solve(&self, v: &[f64]) -> Vec<f64> {
        let t = self.t;
        (0..t)
            .map(|i| (0..t).map(|j| self.inv[i * t + j] * v[j]).sum())
            .collect()
    }

    fn logdet(&self) -> f64 {
        2.0 * (0..self.t).map(|i| self.l[i * self.t + i].ln()).sum::<f64>()
    }
}

/// The log marginal likelihood of `obs` under `h` and its gradient (see the module docs).
/// An error names the input when the lengths disagree, a value is not finite, or `Sigma`
/// is not positive definite in floating point (a noise variance far below the signal's).
pub fn evidence(family: KernelKind, obs: &Observed, h: &Hyper) -> Result<Evidence> {
    let t = obs.check()?;
    h.check()?;
    let f = Factored::new(family, obs, h, t).ok_or_else(|| not_pd(h))?;
    Ok(evaluate(&f, obs, h))
}

fn not_pd(h: &Hyper) -> Error {
    Error::invalid(
        "hyperparameters",
        format!(
            "the covariance does not factor at signal {:e}, noise {:e} (raise the noise)",
            h.log_signal.exp(),
            h.log_noise.exp()
        ),
    )
}

fn evaluate(f: &Factored, obs: &Observed, h: &Hyper) -> Evidence {
    let t = f.t;
    let (signal, noise) = (h.log_signal.exp(), h.log_noise.exp());
    let r: Vec<f64> = obs
        .y
        .iter()
        .zip(obs.mu0)
        .map(|(y, p)| y - h.scale * p - h.offset)
        .collect();
    let w = f.solve(&r);
    let rw: f64 = r.iter().zip(&w).map(|(a, b)| a * b).sum();
    let value = -0.5 * rw - 0.5 * f.logdet() - 0.5 * t as f64 * (2.0 * std::f64::consts::PI).ln();
    // 1/2 (w' D w - tr(Sigma^{-1} D)) for D = signal dK, signal K and noise I.
    let (mut bw, mut sig) = (0.0, 0.0);
    for i in 0..t {
        for j in 0..t {
            let a = w[i] * w[j] - f.inv[i * t + j];
            bw += a * f.dk[i * t + j];
            sig += a * f.k[i * t + j];
        }
    }
    let noi: f64 = (0..t).map(|i| w[i] * w[i] - f.inv[i * t + i]).sum();
    let grad = [
        0.5 * signal * bw,
        0.5 * signal * sig,
        0.5 * noise * noi,
        obs.mu0.iter().zip(&w).map(|(a, b)| a * b).sum(),
        w.iter().sum(),
    ];
    Evidence { value, grad }
}

/// How [`fit`] searches.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FitOptions {
    /// Most BFGS iterations. By default 30.
    pub max_iter: usize,
    /// Box of the log bandwidth (ignored by the cosine kernel), widened to hold the start's.
    /// By default `[ln 1e-2, ln 1e3]`.
    pub log_bandwidth: (f64, f64),
    /// Box of `ln signal`.
    pub log_signal: (f64, f64),
    /// Box of `ln (noise / signal)`, the GP's jitter. By default `[ln 1e-4, ln 10]`: no less
    /// than the paper's jitter, which keeps the incremental GP's factor (its `V` in f32)
    /// as well conditioned as the paper's.
    pub log_noise_ratio: (f64, f64),
    /// Fit the prior's scale (else held at the start's).
    pub fit_scale: bool,
    /// Box of the scale when fitted. By default `[0, 1]`: the prior as given or faded, as
    /// the adaptive prior.
    pub scale: (f64, f64),
    /// Fit the prior's offset (else held at the start's).
    pub fit_offset: bool,
    /// Stop when the largest projected gradient entry is below this. By default 1e-6.
    pub gtol: f64,
}

impl Default for FitOptions {
    fn default() -> Self {
        FitOptions {
            max_iter: 30,
            log_bandwidth: ((1e-2f64).ln(), (1e3f64).ln()),
            log_signal: ((1e-6f64).ln(), (1e2f64).ln()),
            log_noise_ratio: ((1e-4f64).ln(), 10f64.ln()),
            fit_scale: true,
            scale: (0.0, 1.0),
            fit_offset: true,
            gtol: 1e-6,
        }
    }
}

impl FitOptions {
    /// Checks every box is finite and ordered and the counts are sane.
    pub fn validate(&self) -> Result<()> {
        for (name, (lo, hi)) in [
            ("log_bandwidth", self.log_bandwidth),
            ("log_signal", self.log_signal),
            ("log_noise_ratio", self.log_noise_ratio),
            ("scale", self.scale),
        ] {
            if !(lo.is_finite() && hi.is_finite() && lo <= hi) {
                return Err(Error::invalid(
                    name,
                    format!("the box must be finite with low <= high, got [{lo}, {hi}]"),
                ));
            }
        }
        if !(self.gtol.is_finite() && self.gtol >= 0.0) {
            return Err(Error::invalid(
                "gtol",
                format!("must be finite and >= 0, got {}", self.gtol),
            ));
        }
        Ok(())
    }

    /// The boxes of the three log coordinates; the bandwidth's widened to hold `start`'s
    /// (a median heuristic outside the default box is not moved before the search).
    fn boxes(&self, family: KernelKind, start: f64) -> [(f64, f64); 3] {
        let bw = if family == KernelKind::Cosine {
            (0.0, 0.0)
        } else {
            (self.log_bandwidth.0.min(start), self.log_bandwidth.1.max(start))
        };
        [bw, self.log_signal, self.log_noise_ratio]
    }
}

/// What [`fit`] found.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Fit {
    /// The hyperparameters reached.
    pub hyper: Hyper,
    /// The evidence there and its gradient.
    pub evidence: Evidence,
    /// BFGS iterations taken.
    pub iterations: usize,
    /// Evidence evaluations made (each one factorisation of the `t × t` block).
    pub evaluations: usize,
    /// True when the projected gradient fell below `gtol` (else the iterations ran out or
    /// the line search could not improve).
    pub converged: bool,
}

/// `scale` and `offset` maximising the evidence for `Sigma` (generalised least squares of
/// `y` on `[mu0, 1]` in the `Sigma^{-1}` metric), each held where `opts` says, the scale
/// within its box.
fn profile(f: &Factored, obs: &Observed, start: &Hyper, opts: &FitOptions) -> (f64, f64) {
    let one = vec![1.0; f.t];
    let wp = f.solve(obs.mu0);
    let w1 = f.solve(&one);
    let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f64>();
    let (pp, p1, oo) = (dot(obs.mu0, &wp), dot(&one, &wp), dot(&one, &w1));
    let (py, oy) = (dot(&wp, obs.y), dot(&w1, obs.y));
    let offset_for = |a: f64| {
        if oo > 0.0 {
            (oy - a * p1) / oo
        } else {
            start.offset
        }
    };
    let clamp = |a: f64| a.clamp(opts.scale.0, opts.scale.1);
    match (opts.fit_scale, opts.fit_offset) {
        (false, false) => (start.scale, start.offset),
        (false, true) => (start.scale, offset_for(start.scale)),
        (true, false) => {
            let a = if pp > 0.0 {
                (py - start.offset * p1) / pp
            } else {
                start.scale
            };
            (clamp(a), start.offset)
        }
        (true, true) => {
            let det = pp * oo - p1 * p1;
            // A prior mean constant over the observations cannot be told from the offset:
            // the scale is held.
            let floor = 1e-12 * (pp * oo).max(f64::MIN_POSITIVE);
            if det.is_nan() || det <= floor {
                return (start.scale, offset_for(start.scale));
            }
            let a = clamp((py * oo - oy * p1) / det);
            (a, offset_for(a))
        }
    }
}

/// Maximises the evidence from `start` (see the module docs). The start is moved into the
/// boxes first (the bandwidth's box is widened to hold it). An error names the input when `obs`, `start` or `opts` is bad, or when the
/// covariance does not factor at the start.
pub fn fit(family: KernelKind, obs: &Observed, start: &Hyper, opts: &FitOptions) -> Result<Fit> {
    let t = obs.check()?;
    start.check()?;
    opts.validate()?;
    let boxes = opts.boxes(family, start.log_bandwidth);
    let project = |x: [f64; 3]| -> [f64; 3] { std::array::from_fn(|i| x[i].clamp(boxes[i].0, boxes[i].1)) };
    let mut evaluations = 0usize;
    // The negative profiled evidence at x, with the hyperparameters it was taken at.
    let mut eval = |x: [f64; 3]| -> Option<(f64, [f64; 3], Hyper, Evidence)> {
        evaluations += 1;
        let mut h = Hyper {
            log_bandwidth: x[0],
            log_signal: x[1],
            log_noise: x[1] + x[2],
            ..*start
        };
        let f = Factored::new(family, obs, &h, t)?;
        (h.scale, h.offset) = profile(&f, obs, start, opts);
        let e = evaluate(&f, obs, &h);
        // In (ln signal, ln ratio), ln noise = ln signal + ln ratio.
        let g = [
            -e.grad[BANDWIDTH],
            -(e.grad[SIGNAL] + e.grad[NOISE]),
            -e.grad[NOISE],
        ];
        e.value.is_finite().then_some((-e.value, g, h, e))
    };
    let mut x = project([
        start.log_bandwidth,
        start.log_signal,
        start.log_noise - start.log_signal,
    ]);
    let (mut fx, mut g, mut h, mut e) = eval(x).ok_or_else(|| not_pd(start))?;
    // Inverse-Hessian estimate.
    let mut hinv = [[0.0; 3]; 3];
    let reset = |m: &mut [[f64; 3]; 3]| {
        *m = [[0.0; 3]; 3];
        (0..3).for_each(|i| m[i][i] = 1.0);
    };
    reset(&mut hinv);
    // A coordinate at its bound whose gradient pushes outward is held.
    let free = |x: &[f64; 3], g: &[f64; 3]| -> [bool; 3] {
        std::array::from_fn(|i| {
            let (lo, hi) = boxes[i];
            lo < hi && !((x[i] <= lo && g[i] > 0.0) || (x[i] >= hi && g[i] < 0.0))
        })
    };
    let pgrad = |x: &[f64; 3], g: &[f64; 3]| -> f64 {
        let fr = free(x, g);
        (0..3).filter(|&i| fr[i]).map(|i| g[i].abs()).fold(0.0, f64::max)
    };
    let mut iterations = 0;
    let mut converged = pgrad(&x, &g) <= opts.gtol;
    while !converged && iterations < opts.max_iter {
        iterations += 1;
        let fr = free(&x, &g);
        let mut d: [f64; 3] = std::array::from_fn(|i| {
            if fr[i] {
                -(0..3).filter(|&j| fr[j]).map(|j| hinv[i][j] * g[j]).sum::<f64>()
            } else {
                0.0
            }
        });
        let slope: f64 = (0..3).map(|i| d[i] * g[i]).sum();
        // Not a descent direction (or not a number): start again from steepest descent.
        if slope.is_nan() || slope >= 0.0 {
            reset(&mut hinv);
            d = std::array::from_fn(|i| if fr[i] { -g[i] } else { 0.0 });
        }
        // No step longer than 2 in any log coordinate (a factor of e²).
        let longest = d.iter().map(|v| v.abs()).fold(0.0, f64::max);
        if longest > 2.0 {
            d.iter_mut().for_each(|v| *v *= 2.0 / longest);
        }
        let mut step = 1.0;
        let mut next = None;
        for _ in 0..40 {
            let xn = project(std::array::from_fn(|i| x[i] + step * d[i]));
            if let Some(r) = eval(xn) {
                // The projected step must go downhill, and by enough (Armijo).
                let decrease: f64 = (0..3).map(|i| g[i] * (xn[i] - x[i])).sum();
                if decrease < 0.0 && r.0 <= fx + 1e-4 * decrease {
                    next = Some((xn, r));
                    break;
                }
            }
            step *= 0.5;
        }
        let Some((xn, (fn_, gn, hn, en))) = next else {
            break;
        };
        let s: [f64; 3] = std::array::from_fn(|i| xn[i] - x[i]);
        let yv: [f64; 3] = std::array::from_fn(|i| gn[i] - g[i]);
        let sy: f64 = (0..3).map(|i| s[i] * yv[i]).sum();
        if sy > 1e-12 {
            // H <- (I - rho s y') H (I - rho y s') + rho s s'.
            let rho = 1.0 / sy;
            let hy: [f64; 3] = std::array::from_fn(|i| (0..3).map(|j| hinv[i][j] * yv[j]).sum());
            let yhy: f64 = (0..3).map(|i| yv[i] * hy[i]).sum();
            for i in 0..3 {
                for j in 0..3 {
                    hinv[i][j] +=
                        -rho * (hy[i] * s[j] + s[i] * hy[j]) + (rho * rho * yhy + rho) * s[i] * s[j];
                }
            }
        }
        let small = (fx - fn_).abs() <= 1e-12 * (1.0 + fx.abs());
        (x, fx, g, h, e) = (xn, fn_, gn, hn, en);
        converged = pgrad(&x, &g) <= opts.gtol;
        if small {
            break;
        }
    }
    Ok(Fit {
        hyper: h,
        evidence: e,
        iterations,
        evaluations,
        converged,
    })
}
