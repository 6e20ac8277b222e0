//! nCG@k and CE-nCG@k (boundarymorph-budgeted-reranking.txt §4.2; SPEC §3).

/// `sum_{d in S} g(d) / sum_{d in S*} g(d)` with `S*` the `|S|` best documents by `g`;
/// 1 when no document has positive gain (every set is then optimal).
#[must_use]
pub fn ncg(selected: &[usize], gains: &[f64]) -> f64 {
    let got: f64 = selected
        .iter()
        .map(|&i| gains.get(i).copied().unwrap_or(0.0))
        .sum();
    let mut g = gains.to_vec();
    g.sort_by(|a, b| b.total_cmp(a));
    let best: f64 = g.iter().take(selected.len()).sum();
    if best <= 0.0 {
        1.0
    } else {
        got / best
    }
}
