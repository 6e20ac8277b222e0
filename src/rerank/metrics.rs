//! nCG@k and CE-nCG@k (boundarymorph-budgeted-reranking.txt §4.2; SPEC §3), and their
//! token-normalised variant for a token capacity.

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

/// Token-normalised nCG: `sum_{d in S} g(d) / OPT(T)` with `OPT(T)` the fractional
/// knapsack optimum of the gains within `T` tokens (documents by `g / tokens` descending,
/// ties by index, the last one taken in part), an upper bound on any set of at most `T`
/// tokens, so the value is in `[0, 1]` for a feasible set; 1 when no document has positive
/// gain. `tokens` must have `gains`' length; a zero count counts as 1.
#[must_use]
pub fn ncg_tokens(selected: &[usize], gains: &[f64], tokens: &[u64], cap: u64) -> f64 {
    let got: f64 = selected
        .iter()
        .map(|&i| gains.get(i).copied().unwrap_or(0.0))
        .sum();
    let t = |i: usize| tokens.get(i).copied().unwrap_or(1).max(1) as f64;
    let mut o: Vec<usize> = (0..gains.len()).filter(|&i| gains[i] > 0.0).collect();
    o.sort_by(|&a, &b| (gains[b] / t(b)).total_cmp(&(gains[a] / t(a))).then(a.cmp(&b)));
    let (mut left, mut best) = (cap as f64, 0.0);
    for i in o {
        if left <= 0.0 {
            break;
        }
        let take = t(i).min(left);
        best += gains[i] * take / t(i);
        left -= take;
    }
    if best <= 0.0 {
        1.0
    } else {
        got / best
    }
}
