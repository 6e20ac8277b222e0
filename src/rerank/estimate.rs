//! The cost of a rerank from its sizes ([`crate::estimate`]): kernel rows and the GP's
//! incremental posterior, as upper bounds.

use super::{Method, RerankConfig};
use crate::estimate::Estimate;

impl RerankConfig {
    /// The cost of this rerank over a pool of `n` rows of `d` dimensions, before it runs,
    /// oracle time aside. Every scored document costs a kernel row (`O(n d)`); the GP
    /// methods add the rank-one update of `V = L^{-1} K(A, pool)` (`O(n t)` at the `t`-th
    /// observation) and keep `V` (`t` rows of `n` f32).
    #[must_use]
    pub fn estimate(&self, n: usize, d: usize) -> Estimate {
        let (nf, df) = (n as f64, d as f64);
        let b = self.budget.min(n) as f64;
        // The query's kernel row, the median heuristic (a sample of pairs), the final
        // ranking.
        let base = Estimate {
            ops: 2.0 * nf * df + 64.0 * nf,
            bytes: 64.0 * nf,
        };
        let rows = Estimate {
            ops: 2.0 * b * nf * df,
            bytes: 8.0 * nf,
        };
        let method = match self.method {
            Method::SingleStage => Estimate::default(),
            Method::Rgs | Method::RgsSimple => Estimate {
                // Each scored document's neighbours: a selection over its kernel row.
                ops: b * nf * 4.0,
                bytes: 8.0 * b * self.graph_degree as f64,
            },
            Method::BoundaryMorph | Method::Bagel => Estimate {
                // sum over t < B of the O(n t) update, plus a posterior and an
                // acquisition pass per round.
                ops: b * b * nf + 16.0 * b * nf,
                bytes: 4.0 * (b + 1.0) * nf + 64.0 * nf,
            },
        };
        // Hyperparameters by the evidence: the fits (dense on the t x t block of calls, at
        // most 1 + 30 x 40 evaluations of about 2 t³ each, at t = 10, 20, ... while t is below
        // EVIDENCE_MAX_OBSERVATIONS) and the rebuilds after them, each replaying the calls
        // so far (t kernel rows and the O(n t) updates).
        let evidence =
            if self.hyperparameters == super::Hyperparameters::Evidence || self.switch_below.is_some() {
                let (mut ops, mut bytes) = (0.0f64, 0.0f64);
                let mut t = super::EVIDENCE_FIRST;
                while t < self.budget.min(n) && t < super::EVIDENCE_MAX_OBSERVATIONS {
                    let tf = (t + 1) as f64;
                    ops += 1201.0 * 2.0 * tf * tf * tf + 2.0 * tf * nf * df + tf * tf * nf;
                    bytes = bytes.max(48.0 * tf * tf);
                    t *= 2;
                }
                Estimate { ops, bytes }
            } else {
                Estimate::default()
            };
        // A half-precision row copy: made once (one pass over the pool), kept beside it.
        let copy = match self.row_precision {
            super::RowPrecision::F32 => Estimate::default(),
            p => Estimate {
                ops: 2.0 * nf * df,
                bytes: (p.bytes() as f64) * nf * df,
            },
        };
        base + rows + method + copy + evidence
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gp_methods_are_quadratic_in_the_budget() {
        let bm = |b| RerankConfig::new(Method::BoundaryMorph, b, 10).estimate(10_000, 384);
        let (a, c) = (bm(100), bm(1000));
        assert!(c.ops > 20.0 * a.ops && c.bytes > 5.0 * a.bytes, "{a:?} {c:?}");
        let single = RerankConfig::new(Method::SingleStage, 100, 10).estimate(10_000, 384);
        assert!(single.ops < a.ops);
        // A budget above the pool is capped at the pool.
        assert_eq!(bm(10_000), bm(1_000_000));
    }

    #[test]
    fn the_evidence_adds_its_fits_and_rebuilds_up_to_its_cap() {
        let est = |b, h| {
            let mut c = RerankConfig::new(Method::BoundaryMorph, b, 10);
            c.hyperparameters = h;
            c.estimate(10_000, 384)
        };
        use super::super::Hyperparameters::{Evidence, Paper};
        // No fit before the first is due: the same estimate as the paper's.
        let first = super::super::EVIDENCE_FIRST;
        assert_eq!(est(first, Evidence), est(first, Paper));
        for b in [first + 1, 100, 1000] {
            assert!(est(b, Evidence).ops > est(b, Paper).ops, "{b}");
        }
        // Fits stop at the cap (the last at 160 calls): beyond it only the budget's own
        // cost grows.
        let extra = |b| est(b, Evidence).ops - est(b, Paper).ops;
        assert_eq!(extra(400), extra(5000));
        assert!(extra(400) > extra(100));
    }
}
