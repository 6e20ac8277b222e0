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
        // A half-precision row copy: made once (one pass over the pool), kept beside it.
        let copy = match self.row_precision {
            super::RowPrecision::F32 => Estimate::default(),
            p => Estimate {
                ops: 2.0 * nf * df,
                bytes: (p.bytes() as f64) * nf * df,
            },
        };
        base + rows + method + copy
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
}
