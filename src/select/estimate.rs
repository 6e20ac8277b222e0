//! The cost of a selection from its sizes ([`crate::estimate`]): the dominant terms of
//! each method's path, as upper bounds.

use super::{Method, Mode, Request, SelectConfig};
use crate::estimate::Estimate;

/// Per element of a row's top-r selection (comparisons and random reads), in operations.
const SELECT_OPS: f64 = 24.0;

impl SelectConfig {
    /// The cost of this selection of `req` over `n` candidates of `d` dimensions, before it
    /// runs. Greedy steps are counted as full passes over the candidates (the lazy heap
    /// usually refreshes far fewer), to `k`, to the most items the token budget can hold
    /// (its cheapest items), or to every candidate.
    #[must_use]
    pub fn estimate(&self, n: usize, d: usize, req: &Request<'_>) -> Estimate {
        let nf = n as f64;
        let df = d as f64;
        let retained = req.retained.len();
        let text_bytes: usize = req.texts.map_or(0, |t| t.iter().map(|x| x.len() + 1).sum());
        let open = n.saturating_sub(retained);
        let fits = match (self.token_budget, req.costs) {
            (Some(b), Some(c)) => {
                let mut c: Vec<f64> = c.to_vec();
                c.sort_unstable_by(f64::total_cmp);
                let mut left = b;
                c.iter()
                    .take_while(|&&x| {
                        left -= x;
                        left >= 0.0
                    })
                    .count()
            }
            _ => open,
        };
        // Picks made: the retained set, then the greedy steps (gating: none).
        let steps = match self.mode {
            Mode::Gate => 0,
            Mode::Greedy => self.k.unwrap_or(open).min(open).min(fits),
        } as f64;
        let picks = retained as f64 + steps;
        // Per-candidate state every path keeps: gains, flags, costs, the heap.
        let base = Estimate {
            ops: nf * (1.0 + picks),
            bytes: 48.0 * nf,
        };
        let dense_pass = |per_pick: f64| Estimate {
            // One relevance pass, then `per_pick` work per candidate per pick.
            ops: 2.0 * nf * df + nf * (picks + 1.0) * per_pick,
            bytes: 0.0,
        };
        let coverage = || {
            if n <= self.coverage_dense_max {
                Estimate {
                    // The Gram, then per pick an O(n) refresh of every candidate; the unit
                    // copy of rows kept as given that the Gram is built from.
                    ops: 2.0 * nf * nf * df + nf * nf * (picks + 1.0),
                    bytes: 4.0 * nf * nf + 4.0 * nf * df,
                }
            } else {
                let r = self.coverage_knn.clamp(1, n) as f64;
                let threads = rayon::current_num_threads().max(1) as f64;
                Estimate {
                    // Every row's similarities (a GEMM), the top-r selection of each row,
                    // then per pick an O(r) refresh of every candidate.
                    ops: nf * nf * (2.0 * df + SELECT_OPS) + nf * r * (picks + 1.0),
                    // The sparse rows, a block of 64 rows plus an order per thread, and
                    // the unit copy of rows kept as given.
                    bytes: 8.0 * nf * r + threads * (64.0 * 4.0 * nf + 4.0 * nf) + 4.0 * nf * df,
                }
            }
        };
        let method = match self.method {
            Method::Mmr => dense_pass(2.0 * df),
            Method::Centroid => dense_pass(2.0 * df),
            // A projection on the new basis vector, and its orthogonalisation.
            Method::Grn => {
                dense_pass(4.0 * df)
                    + Estimate {
                        ops: 4.0 * picks * picks * df,
                        bytes: 8.0 * picks * df,
                    }
            }
            // A kernel entry and a Cholesky row entry per candidate per pick.
            Method::Dpp => {
                dense_pass(2.0 * df + 2.0 * picks)
                    + Estimate {
                        ops: 0.0,
                        bytes: 8.0 * nf * picks,
                    }
            }
            Method::Coverage => coverage(),
            Method::Hybrid => dense_pass(4.0 * df) + coverage(),
            Method::Lexical => {
                let t = text_bytes as f64;
                Estimate {
                    // Tokenising and profiling, then per pick a sparse similarity of every
                    // candidate with it (at most the texts' tokens).
                    ops: 20.0 * t + (picks + 1.0) * (2.0 * t + 4.0 * nf),
                    // Tokens, counts, TF-IDF entries and bigrams per text byte at most,
                    // the vocabulary, and a profile per text.
                    bytes: 48.0 * t + 200.0 * nf,
                }
            }
        };
        base + method
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn costs_grow_with_the_sizes_and_coverage_is_quadratic() {
        let none = Request::default();
        let mmr = SelectConfig::new(Method::Mmr).k(10);
        let a = mmr.estimate(1000, 64, &none);
        assert!(mmr.estimate(2000, 64, &none).ops > 1.9 * a.ops);
        assert!(
            SelectConfig::new(Method::Mmr)
                .k(100)
                .estimate(1000, 64, &none)
                .ops
                > 5.0 * a.ops
        );
        // Without k, greedy may run to every candidate...
        let all = SelectConfig::new(Method::Mmr).estimate(1000, 64, &none);
        assert!(all.ops > 50.0 * a.ops);
        // ...unless a token budget holds fewer: 10 of the cheapest items fit here.
        let costs: Vec<f64> = (0..1000).map(|i| 1.0 + (i % 7) as f64).collect();
        let budgeted = Request {
            costs: Some(&costs),
            ..Request::default()
        };
        let b = SelectConfig::new(Method::Mmr)
            .token_budget(10.5)
            .estimate(1000, 64, &budgeted);
        assert_eq!(b, a);
        // Gating is one pass after the retained picks.
        let retained = Request {
            retained: &[1, 2, 3],
            ..Request::default()
        };
        let gate = SelectConfig::new(Method::Grn)
            .mode(Mode::Gate)
            .estimate(1000, 64, &retained);
        assert!(
            gate.ops
                < SelectConfig::new(Method::Grn)
                    .k(10)
                    .estimate(1000, 64, &retained)
                    .ops
        );
        let cov = SelectConfig::new(Method::Coverage).k(10);
        let small = cov.estimate(4000, 8, &none);
        // The Gram, the unit copy of the rows it is built from, the per-candidate state.
        assert_eq!(small.bytes as usize, 4 * 4000 * 4000 + 4 * 4000 * 8 + 48 * 4000);
        let big = cov.estimate(200_000, 2, &none);
        assert!(big.ops > 1e12, "{big:?}");
        // The sparse similarity keeps 64 neighbours a row, not n.
        assert!(big.bytes < 8.0 * 200_000.0 * 64.0 * 2.0 + 1e9, "{big:?}");
        let texts = vec!["x".repeat(99); 100];
        let lex = SelectConfig::new(Method::Lexical).k(5).estimate(
            100,
            0,
            &Request {
                texts: Some(&texts),
                ..Request::default()
            },
        );
        assert!(lex.bytes >= 48.0 * 10_000.0);
    }
}
