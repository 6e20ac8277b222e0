//! The acquisition rules: the boundary rule of SPEC §3 (plain, and on value per token
//! under a token capacity with its greedy [`Fill`]), GP-UCB, and the verification of the
//! set a run would return (a run's last calls, `RerankConfig::verify`).

use crate::error::{Error, Result};

/// Rank order: `a` before `b` by value descending, then MIPS position ascending.
fn before(values: &[f64], a: usize, b: usize) -> std::cmp::Ordering {
    values[b].total_cmp(&values[a]).then(a.cmp(&b))
}

/// Ranking by (value desc, MIPS position asc).
pub(super) fn rank(values: &[f64]) -> Vec<usize> {
    let mut o: Vec<usize> = (0..values.len()).collect();
    o.sort_by(|&a, &b| before(values, a, b));
    o
}

/// Every position, the top `k` by rank first (as a set, unordered: a selection, not a
/// sort); `1 <= k <= values.len()`.
fn top_first(values: &[f64], k: usize) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..values.len()).collect();
    if k < idx.len() {
        idx.select_nth_unstable_by(k - 1, |&a, &b| before(values, a, b));
    }
    idx
}

/// A token capacity with the documents' counts: the greedy fill.
pub(super) struct Fill<'t> {
    pub(super) tokens: &'t [u64],
    pub(super) cap: u64,
    pub(super) k: usize,
}

impl Fill<'_> {
    /// Value per token, descending (ties by MIPS position).
    pub(super) fn density_order(&self, values: &[f64]) -> Vec<usize> {
        let d: Vec<f64> = values
            .iter()
            .zip(self.tokens)
            .map(|(&v, &t)| v / t as f64)
            .collect();
        rank(&d)
    }

    /// The boundary rule on value per token ([`boundary_pick_tokens`]).
    pub(super) fn boundary(&self, mean: &[f64], var: &[f64], y: &[Option<f64>]) -> Option<usize> {
        let n = mean.len();
        let order = self.density_order(mean);
        let inc = self.take(&order);
        let mut is_inc = vec![false; n];
        inc.iter().for_each(|&i| is_inc[i] = true);
        // Challengers: what is out of the set and could enter it alone.
        let ch: Vec<usize> = order
            .iter()
            .copied()
            .filter(|&j| !is_inc[j] && self.tokens[j] <= self.cap)
            .collect();
        let t = |i: usize| self.tokens[i] as f64;
        let dm: Vec<f64> = (0..n).map(|i| mean[i] / t(i)).collect();
        let dv: Vec<f64> = (0..n).map(|i| var[i] / (t(i) * t(i))).collect();
        boundary_over(&dm, &dv, y, &inc, &ch)
    }

    /// The documents taken, in `order`, while they fit: at most `k` of them and `cap` tokens
    /// (one that does not fit is passed over and the fill goes on).
    pub(super) fn take(&self, order: &[usize]) -> Vec<usize> {
        let (mut used, mut set) = (0u64, Vec::new());
        for &i in order {
            if set.len() == self.k {
                break;
            }
            if let Some(u) = used.checked_add(self.tokens[i]).filter(|&u| u <= self.cap) {
                used = u;
                set.push(i);
            }
        }
        set
    }

    /// The verification rule over the greedy fill by `mean / tokens` ([`verify_pick_tokens`]).
    pub(super) fn verify(&self, mean: &[f64], var: &[f64], y: &[Option<f64>]) -> Option<usize> {
        most_uncertain(var, y, &self.take(&self.density_order(mean)))
    }
}

/// The boundary rule of SPEC §3: incumbents = top-k by mean (ties by MIPS position);
/// over pairs (incumbent, challenger) with an unscored member, the smallest
/// `z = (mu_i - mu_j) / sqrt(s_i² + s_j² + 1e-12)`; ties to the first incumbent, then the
/// first challenger, in rank order. The call goes to the pair's unscored member with the
/// larger sigma (the incumbent when both are unscored with equal sigma). `None` when no
/// pair is left. `var` and `y` must have `mean`'s length.
pub fn boundary_pick(mean: &[f64], var: &[f64], y: &[Option<f64>], k: usize) -> Result<Option<usize>> {
    check_lengths(mean.len(), var.len(), y.len())?;
    Ok(boundary_scan(mean, var, y, k))
}

/// The boundary rule under a token capacity (as a run with `token_capacity = cap` and
/// capacity `k` applies it): incumbents are the greedy fill of `cap` tokens (and at most `k`
/// documents) by `mean / tokens` (ties by position), challengers the others that fit alone;
/// the pairs compare value per token, `z = (mu_i/t_i - mu_j/t_j) / sqrt(s_i²/t_i² +
/// s_j²/t_j² + 1e-12)`, with the ties and the choice of member as [`boundary_pick`].
pub fn boundary_pick_tokens(
    mean: &[f64],
    var: &[f64],
    y: &[Option<f64>],
    tokens: &[u64],
    cap: u64,
    k: usize,
) -> Result<Option<usize>> {
    Ok(checked_fill(mean, var, y, tokens, cap, k)?.boundary(mean, var, y))
}

/// The verification rule (a run's last calls, `RerankConfig::verify`): of the
/// set the run would return now, the top-`k` by mean (ties by MIPS position), the unscored
/// member with the largest variance (ties to the lower index). `None` when every member
/// is scored, or `k` is 0. `var` and `y` must have `mean`'s length.
pub fn verify_pick(mean: &[f64], var: &[f64], y: &[Option<f64>], k: usize) -> Result<Option<usize>> {
    check_lengths(mean.len(), var.len(), y.len())?;
    Ok(verify_scan(mean, var, y, k))
}

/// The verification rule under a token capacity: [`verify_pick`] over the set the run
/// would return, the greedy fill of `cap` tokens (and at most `k` documents) by
/// `mean / tokens` (ties by position).
pub fn verify_pick_tokens(
    mean: &[f64],
    var: &[f64],
    y: &[Option<f64>],
    tokens: &[u64],
    cap: u64,
    k: usize,
) -> Result<Option<usize>> {
    Ok(checked_fill(mean, var, y, tokens, cap, k)?.verify(mean, var, y))
}

/// The fill of a public token-capacity rule, its inputs checked: the lengths match and
/// no count is 0.
fn checked_fill<'t>(
    mean: &[f64],
    var: &[f64],
    y: &[Option<f64>],
    tokens: &'t [u64],
    cap: u64,
    k: usize,
) -> Result<Fill<'t>> {
    check_lengths(mean.len(), var.len(), y.len())?;
    check_lengths(mean.len(), tokens.len(), mean.len())?;
    if let Some(i) = tokens.iter().position(|&t| t == 0) {
        return Err(Error::invalid(format!("tokens[{i}]"), "is 0"));
    }
    Ok(Fill { tokens, cap, k })
}

pub(super) fn verify_scan(mean: &[f64], var: &[f64], y: &[Option<f64>], k: usize) -> Option<usize> {
    if k == 0 {
        return None;
    }
    let k = k.min(mean.len());
    most_uncertain(var, y, &top_first(mean, k)[..k])
}

/// The unscored member of `set` with the largest variance, ties to the lower index.
fn most_uncertain(var: &[f64], y: &[Option<f64>], set: &[usize]) -> Option<usize> {
    set.iter()
        .copied()
        .filter(|&j| y[j].is_none())
        .min_by(|&a, &b| var[b].total_cmp(&var[a]).then(a.cmp(&b)))
}

/// The same lengths for `mean`, `var` and the scores.
fn check_lengths(n: usize, var: usize, y: usize) -> Result<()> {
    if var != n || y != n {
        return Err(Error::invalid(
            "posterior",
            format!("{n} means, {var} variances and {y} scores (all must match)"),
        ));
    }
    Ok(())
}

pub(super) fn boundary_scan(mean: &[f64], var: &[f64], y: &[Option<f64>], k: usize) -> Option<usize> {
    use std::cmp::Ordering;
    use std::collections::BinaryHeap;
    let n = mean.len();
    if n <= k || k == 0 {
        return None;
    }
    let mut idx = top_first(mean, k);
    let (inc, ch) = idx.split_at_mut(k);
    inc.sort_unstable_by(|&a, &b| before(mean, a, b));
    let inc: &[usize] = inc;
    // Challengers come off a heap in rank order, only as far as the scan needs them.
    struct C<'m>(usize, &'m [f64]);
    impl PartialEq for C<'_> {
        fn eq(&self, o: &Self) -> bool {
            self.cmp(o) == Ordering::Equal
        }
    }
    impl Eq for C<'_> {}
    impl PartialOrd for C<'_> {
        fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
            Some(self.cmp(o))
        }
    }
    impl Ord for C<'_> {
        fn cmp(&self, o: &Self) -> Ordering {
            self.1[self.0].total_cmp(&o.1[o.0]).then(o.0.cmp(&self.0))
        }
    }
    let smax2 = ch.iter().map(|&j| var[j]).fold(0.0f64, f64::max);
    let mut heap: BinaryHeap<C<'_>> = ch.iter().map(|&j| C(j, mean)).collect();
    scan_pairs(mean, var, y, inc, smax2, || heap.pop().map(|c| c.0))
}

/// The boundary rule over given incumbents and challengers, each in rank order (a token
/// capacity's greedy set and the documents that could enter it).
fn boundary_over(mean: &[f64], var: &[f64], y: &[Option<f64>], inc: &[usize], ch: &[usize]) -> Option<usize> {
    let smax2 = ch.iter().map(|&j| var[j]).fold(0.0f64, f64::max);
    let mut it = ch.iter().copied();
    scan_pairs(mean, var, y, inc, smax2, || it.next())
}

/// The pair scan of the boundary rule: challengers come from `next` in rank order, only as
/// far as the scan needs them: the gap to an incumbent only grows along the ranking, so
/// once `gap / sqrt(s_i² + smax2 + 1e-12)` reaches the best z (`smax2` bounds the
/// challengers' variances), no later challenger can beat it.
fn scan_pairs(
    mean: &[f64],
    var: &[f64],
    y: &[Option<f64>],
    inc: &[usize],
    smax2: f64,
    mut next: impl FnMut() -> Option<usize>,
) -> Option<usize> {
    let mut ranked: Vec<usize> = Vec::new();
    let mut best: Option<(f64, usize, usize)> = None;
    for &i in inc {
        let si2 = var[i];
        let mut p = 0;
        loop {
            if p == ranked.len() {
                match next() {
                    Some(c) => ranked.push(c),
                    None => break,
                }
            }
            let j = ranked[p];
            p += 1;
            let gap = mean[i] - mean[j];
            if let Some((bz, _, _)) = best {
                if gap / (si2 + smax2 + 1e-12).sqrt() >= bz {
                    break;
                }
            }
            if y[i].is_some() && y[j].is_some() {
                continue;
            }
            let z = gap / (si2 + var[j] + 1e-12).sqrt();
            if best.is_none_or(|(bz, _, _)| z < bz) {
                best = Some((z, i, j));
            }
        }
    }
    let (_, i, j) = best?;
    Some(match (y[i].is_none(), y[j].is_none()) {
        (true, false) => i,
        (false, true) => j,
        _ => {
            if var[j] > var[i] {
                j
            } else {
                i
            }
        }
    })
}

/// `argmax mu + sqrt(beta) sigma` over unscored items (`y[i]` is `None`), ties to the
/// lower index. `var` and `y` must have `mean`'s length.
pub fn ucb_pick(mean: &[f64], var: &[f64], y: &[Option<f64>], beta: f64) -> Result<Option<usize>> {
    check_lengths(mean.len(), var.len(), y.len())?;
    let scored: Vec<bool> = y.iter().map(Option::is_some).collect();
    Ok(crate::backend::gp::ucb_argmax(mean, var, &scored, beta))
}
