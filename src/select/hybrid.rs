//! The combined scorer of SPEC §1: relevance, GRN novelty and coverage gain under plain
//! signed weights.

use super::coverage::Coverage;
use super::driver::Scorer;
use super::scorers::{Grn, Resid};

/// Combined / hybrid: `alpha·cos(x,q) + beta·V_GRN + gamma·V_SC`, plain signed weights.
pub(crate) struct Hybrid<'a> {
    pub grn: Grn<'a>,
    pub cov: Coverage<'a>,
    pub w: [f64; 3],
}

impl Scorer for Hybrid<'_> {
    type Cand = Resid;
    fn cand(&self, x: usize) -> Resid {
        self.grn.cand(x)
    }
    fn refresh(&self, x: usize, c: &mut Resid) -> f64 {
        let rel = self.grn.d.rel_at(x);
        let [a, b, g] = self.w;
        let grn = if b == 0.0 { 0.0 } else { self.grn.refresh(x, c) };
        let sc = if g == 0.0 {
            0.0
        } else {
            self.cov.refresh(x, &mut ())
        };
        a * rel + b * grn + g * sc
    }
    fn add(&mut self, x: usize, c: &Resid) {
        self.grn.add(x, c);
        self.cov.add(x, &());
    }
    // The relevance term is fixed; GRN and coverage gains only fall.
    fn monotone(&self) -> bool {
        self.w[1] >= 0.0 && self.w[2] >= 0.0
    }
}
