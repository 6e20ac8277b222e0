//! The embedding scorers of SPEC §1: MMR, GRN, centroid drift and DPP (the hybrid, which
//! adds coverage, is in `hybrid.rs`).
//! Each is a [`Scorer`]: per-candidate caches refreshed with the picks made since, so a
//! greedy step is O(new picks · d) per refreshed candidate.

use super::dense::Dense;
use super::driver::Scorer;
use crate::backend::cpu::{self, orthonormal_extension};

/// What MMR needs of a similarity: relevance to the query and pairwise similarity.
pub(crate) trait Similarity: Sync {
    fn rel(&self, x: usize) -> f64;
    /// An upper bound on [`rel`](Self::rel)`(x)`, possibly cheaper (already at hand): what
    /// the lazy heap's bounds start from. By default `rel` itself.
    fn rel_upper(&self, x: usize) -> f64 {
        self.rel(x)
    }
    fn sim(&self, x: usize, y: usize) -> f64;
    /// A lower bound on `sim(x, y)`, cheaper to compute: the lazy refresh screens with it
    /// and computes `sim` only where the bound cannot settle the comparison. By default
    /// `sim` itself.
    fn sim_lower(&self, x: usize, y: usize) -> f64 {
        self.sim(x, y)
    }
    /// The largest of lower bounds on `sim(x, y)` over `ys` (`-inf` for none), each at
    /// most `sim(x, y)`; by default [`sim_lower`](Self::sim_lower) of each, fused where a
    /// similarity reads `x` once for several `y`.
    fn sim_lower_max(&self, x: usize, ys: &[usize]) -> f64 {
        ys.iter()
            .fold(f64::NEG_INFINITY, |m, &y| m.max(self.sim_lower(x, y)))
    }
    /// Whether [`sim_lower`](Self::sim_lower) is cheaper than [`sim`](Self::sim) (else
    /// the refresh does not screen).
    fn screens(&self) -> bool {
        false
    }
    /// Whether `sim_lower(x, y)` is at hand for every `x` (stored, no product to take).
    fn lower_at_hand(&self, _y: usize) -> bool {
        false
    }
}

impl<T: Similarity> Similarity for &T {
    fn rel(&self, x: usize) -> f64 {
        (**self).rel(x)
    }
    fn rel_upper(&self, x: usize) -> f64 {
        (**self).rel_upper(x)
    }
    fn sim(&self, x: usize, y: usize) -> f64 {
        (**self).sim(x, y)
    }
    fn sim_lower(&self, x: usize, y: usize) -> f64 {
        (**self).sim_lower(x, y)
    }
    fn sim_lower_max(&self, x: usize, ys: &[usize]) -> f64 {
        (**self).sim_lower_max(x, ys)
    }
    fn screens(&self) -> bool {
        (**self).screens()
    }
    fn lower_at_hand(&self, y: usize) -> bool {
        (**self).lower_at_hand(y)
    }
}

impl Similarity for Dense<'_> {
    fn rel(&self, x: usize) -> f64 {
        self.rel_at(x)
    }
    fn rel_upper(&self, x: usize) -> f64 {
        Dense::rel_upper(self, x)
    }
    fn sim(&self, x: usize, y: usize) -> f64 {
        self.cos(x, y)
    }
    fn sim_lower(&self, x: usize, y: usize) -> f64 {
        self.cos_lower(x, y)
    }
    #[inline(always)]
    fn sim_lower_max(&self, x: usize, ys: &[usize]) -> f64 {
        self.cos_lower_max(x, ys)
    }
    fn screens(&self) -> bool {
        true
    }
    fn lower_at_hand(&self, y: usize) -> bool {
        self.guessed(y)
    }
}

/// MMR: `lam·sim(x,q) - (1-lam)·max_{c in C} sim(x,c)`, max term 0 while `C` is empty.
pub(crate) struct Mmr<S> {
    pub sims: S,
    pub lambda: f64,
    picks: Vec<usize>,
}

impl<S> Mmr<S> {
    pub fn new(sims: S, lambda: f64) -> Self {
        Mmr {
            sims,
            lambda,
            picks: Vec::new(),
        }
    }
}

impl<S: Similarity> Mmr<S> {
    /// The gain with relevance `rel` and `max` as the maximum similarity to the picks
    /// (none yet: 0). It grows with `rel` (`lambda >= 0`), so an upper bound on the
    /// relevance gives one on the gain.
    fn score(&self, rel: f64, max: f64) -> f64 {
        let red = if self.picks.is_empty() { 0.0 } else { max };
        self.lambda * rel - (1.0 - self.lambda) * red
    }

    /// `x`'s relevance if `c` holds it, else an upper bound on it.
    fn rel_bound(&self, x: usize, c: &MaxSim) -> f64 {
        if c.rel.is_nan() {
            self.sims.rel_upper(x)
        } else {
            c.rel
        }
    }
}

/// Picks a partial refresh takes between checks of its value ([`Scorer::refresh_until`]).
const CHUNK: usize = 8;

/// Running max-similarity to the picks, valid through `upto` picks, and a lower bound on
/// it through `lb_upto` picks (from [`Similarity::sim_lower`]; `lb_upto >= upto` once
/// screened); the relevance once computed (`NaN` before: an exact relevance is finite).
pub(crate) struct MaxSim {
    max: f64,
    upto: usize,
    lb: f64,
    lb_upto: usize,
    rel: f64,
}

impl<S: Similarity> Scorer for Mmr<S> {
    type Cand = MaxSim;
    fn cand(&self, _: usize) -> MaxSim {
        MaxSim {
            max: f64::NEG_INFINITY,
            upto: 0,
            lb: f64::NEG_INFINITY,
            lb_upto: 0,
            rel: f64::NAN,
        }
    }
    fn refresh(&self, x: usize, c: &mut MaxSim) -> f64 {
        self.refresh_until(x, c, f64::NEG_INFINITY).0
    }
    // A value returned short of complete is an upper bound (the relevance's bound where
    // it is not yet computed); a complete one is exact: the relevance is computed then.
    fn refresh_until(&self, x: usize, c: &mut MaxSim, stop: f64) -> (f64, bool) {
        let t = self.picks.len();
        let rel = self.rel_bound(x, c);
        // Screening first (a stop to beat and a cheaper bound): a lower bound on each new
        // pick's similarity gives a lower bound on the max, so an upper bound on the
        // score; while that stays below `stop` the candidate is not the pick and needs no
        // exact similarity. The exact pass below decides every value that is returned
        // complete, so the picks do not depend on the screen.
        if stop > f64::NEG_INFINITY && self.sims.screens() {
            let mut at = c.lb_upto.max(c.upto);
            while at < t {
                let end = (at + CHUNK).min(t);
                c.lb = c.lb.max(self.sims.sim_lower_max(x, &self.picks[at..end]));
                at = end;
                let v = self.score(rel, c.max.max(c.lb));
                if v < stop {
                    c.lb_upto = at;
                    return (v, false);
                }
            }
            c.lb_upto = at;
        }
        while c.upto < t {
            let end = (c.upto + CHUNK).min(t);
            for &p in &self.picks[c.upto..end] {
                c.max = c.max.max(self.sims.sim(x, p));
            }
            c.upto = end;
            // The maximum over some of the picks is at most the maximum over all of
            // them, so this score is at least the final one.
            let v = self.score(rel, c.max.max(c.lb));
            if end < t && v < stop {
                return (v, false);
            }
        }
        if c.rel.is_nan() {
            c.rel = self.sims.rel(x);
        }
        (self.score(c.rel, c.max), true)
    }
    // Bounds on every candidate, each from what is cheap: the relevance's bound (exact
    // where computed) and the screen's lower bound on the max over every pick, so
    // `refresh_until` goes straight to the exact pass. Valid for the current picks;
    // with none yet (not monotone) `refresh_until` completes every candidate it is
    // given (there is nothing to catch up but the relevance), as the driver needs.
    fn bound_all(&self, cands: &mut [MaxSim], gains: &mut [f64], alive: &[bool]) -> bool {
        if !self.sims.screens() {
            return false;
        }
        let t = self.picks.len();
        // Before the first pick, and after it when its bounds came with the relevance's,
        // this reads no row: the calling thread does it.
        let reads_rows = self.picks.iter().any(|&p| !self.sims.lower_at_hand(p));
        super::driver::for_alive(cands, gains, alive, reads_rows, |x, c| {
            c.lb =
                c.lb.max(self.sims.sim_lower_max(x, &self.picks[c.lb_upto.max(c.upto)..]));
            c.lb_upto = t;
            self.score(self.rel_bound(x, c), c.max.max(c.lb))
        });
        true
    }
    fn add(&mut self, x: usize, _: &MaxSim) {
        self.picks.push(x);
    }
    // The max term can only grow once C is non-empty (it may be negative right after
    // the first pick, which is why the empty state is excluded).
    fn monotone(&self) -> bool {
        !self.picks.is_empty() && self.lambda <= 1.0
    }
}

/// GRN: `‖x~ - P_C x~‖²` with one orthonormal basis of span(C) kept in `f64`
/// (modified Gram–Schmidt, applied twice: "twice is enough").
pub(crate) struct Grn<'a> {
    pub d: &'a Dense<'a>,
    basis: Vec<Vec<f64>>,
    eps: f64,
}

impl<'a> Grn<'a> {
    /// `eps`: the stopping residual, and the residual below which an added vector is
    /// taken to lie in the span already kept (it adds no basis vector).
    pub fn new(d: &'a Dense<'a>, eps: f64) -> Self {
        Grn {
            d,
            basis: Vec::new(),
            eps,
        }
    }
}

/// Squared residual against the first `upto` basis vectors.
pub(crate) struct Resid {
    r: f64,
    upto: usize,
}

impl Scorer for Grn<'_> {
    type Cand = Resid;
    fn cand(&self, _: usize) -> Resid {
        Resid { r: 1.0, upto: 0 }
    }
    // No partial refresh (measured: GRN's residuals stay close together, so a candidate
    // stopped short is nearly always resumed to the end, and the stops only add heap work).
    fn refresh(&self, x: usize, c: &mut Resid) -> f64 {
        let row = self.d.e.row(x);
        for u in &self.basis[c.upto..] {
            let p = cpu::dot_mixed(row, u) * self.d.inv[x];
            c.r -= p * p;
        }
        c.upto = self.basis.len();
        c.r.max(0.0)
    }
    fn add(&mut self, x: usize, _: &Resid) {
        if let Some(v) = orthonormal_extension(self.d.e.row(x), self.d.inv[x], &self.basis, self.eps) {
            self.basis.push(v);
        }
    }
    fn monotone(&self) -> bool {
        true
    }
}

/// DPP greedy MAP by the incremental Cholesky of Chen, Zhang & Zhou (2018): the gain of
/// `x` is `d_x² = det(L_{C+x}) / det(L_C)`, `L_ij = w_i w_j cos(i, j)`.
pub(crate) struct Dpp<'a> {
    pub d: &'a Dense<'a>,
    w: Vec<f64>,
    picks: Vec<usize>,
    /// Cholesky rows `c_p` and pivots `d_p` of the picks.
    pick_c: Vec<Vec<f64>>,
    pick_d: Vec<f64>,
    eps: f64,
}

impl<'a> Dpp<'a> {
    pub fn new(d: &'a Dense<'a>, eps: f64) -> Self {
        Dpp {
            w: d.weights(),
            d,
            picks: Vec::new(),
            pick_c: Vec::new(),
            pick_d: Vec::new(),
            eps,
        }
    }
}

/// The Cholesky row `c_x` (one entry per pick so far) and `d_x²`.
pub(crate) struct CholRow {
    c: Vec<f64>,
    d2: f64,
}

impl Scorer for Dpp<'_> {
    type Cand = CholRow;
    fn cand(&self, x: usize) -> CholRow {
        CholRow {
            c: Vec::new(),
            d2: self.w[x] * self.w[x],
        }
    }
    fn refresh(&self, x: usize, c: &mut CholRow) -> f64 {
        self.refresh_until(x, c, f64::NEG_INFINITY).0
    }
    fn refresh_until(&self, x: usize, c: &mut CholRow, stop: f64) -> (f64, bool) {
        let t = self.picks.len();
        while c.c.len() < t {
            let end = (c.c.len() + CHUNK).min(t);
            for s in c.c.len()..end {
                let p = self.picks[s];
                let lxp = if self.w[x] == 0.0 {
                    0.0
                } else {
                    self.w[x] * self.w[p] * self.d.cos(x, p)
                };
                let proj = cpu::dot_f64(&c.c, &self.pick_c[s][..s]);
                let e = (lxp - proj) / self.pick_d[s];
                c.c.push(e);
                c.d2 -= e * e;
            }
            // The conditional variance only falls with more picks.
            if end < t && c.d2.max(0.0) < stop {
                return (c.d2.max(0.0), false);
            }
        }
        (c.d2.max(0.0), true)
    }
    fn add(&mut self, x: usize, c: &CholRow) {
        // A retained item with no conditional variance left (weight 0, or in the span of
        // the others) adds nothing to the volume; it is kept out of the factor.
        if c.d2 < self.eps {
            return;
        }
        self.picks.push(x);
        self.pick_c.push(c.c.clone());
        self.pick_d.push(c.d2.sqrt());
    }
    fn monotone(&self) -> bool {
        true
    }
}

/// Centroid drift `1 - cos(mu_C, mu_{C+x})` from `‖S‖²` and `<S, x~>`, where `S` is the
/// running sum of the retained unit embeddings (the means' scale cancels in the cosine).
pub(crate) struct Centroid<'a> {
    pub d: &'a Dense<'a>,
    picks: Vec<usize>,
    ss: f64,
}

impl<'a> Centroid<'a> {
    pub fn new(d: &'a Dense<'a>) -> Self {
        Centroid {
            d,
            picks: Vec::new(),
            ss: 0.0,
        }
    }
}

/// `<S, x~>` through `upto` picks.
pub(crate) struct SumDot {
    sd: f64,
    upto: usize,
}

impl Scorer for Centroid<'_> {
    type Cand = SumDot;
    fn cand(&self, _: usize) -> SumDot {
        SumDot { sd: 0.0, upto: 0 }
    }
    fn refresh(&self, x: usize, c: &mut SumDot) -> f64 {
        for &p in &self.picks[c.upto..] {
            c.sd += self.d.cos(x, p);
        }
        c.upto = self.picks.len();
        if self.picks.is_empty() {
            return 1.0;
        }
        let ns = self.ss.max(0.0).sqrt();
        let nsx = (self.ss + 2.0 * c.sd + 1.0).max(0.0).sqrt();
        if ns == 0.0 || nsx == 0.0 {
            return 1.0; // a cosine with a zero vector counts as 0 (SPEC §1)
        }
        1.0 - (self.ss + c.sd) / (ns * nsx)
    }
    fn add(&mut self, x: usize, c: &SumDot) {
        self.ss += 2.0 * c.sd + 1.0;
        self.picks.push(x);
    }
    fn monotone(&self) -> bool {
        false
    }
}
