//! The two ways every scorer is used (SPEC §1), written once: gating against a fixed
//! retained set, and incremental greedy selection under item and token budgets.
//!
//! A scorer keeps a small cache per candidate (`Cand`) that [`Scorer::refresh`] brings up
//! to date with the picks made since it was last refreshed, so a greedy step costs
//! O(new picks) per refreshed candidate, never a recompute from scratch. When the
//! scorer's gains can only fall as the retained set grows ([`Scorer::monotone`]), the
//! driver refreshes lazily: a max-heap of stale upper bounds, refreshing only the top
//! until a fresh value stays on top. Lazy and eager refreshes run the same arithmetic in
//! the same order, so both return the same set, item for item (tested).

use rayon::prelude::*;
use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// A marginal-value scorer over candidates `0..n` with a growing retained set `C`.
pub(crate) trait Scorer: Sync {
    /// Per-candidate cache (running max, Cholesky row, projections, ...).
    type Cand: Send + Sync;
    /// The cache of `x` as if `C` were empty.
    fn cand(&self, x: usize) -> Self::Cand;
    /// Brings `c` up to date with the current `C` and returns `V(x | C)`.
    fn refresh(&self, x: usize, c: &mut Self::Cand) -> f64;
    /// Adds `x` to `C`; `c` is `x`'s cache, up to date.
    fn add(&mut self, x: usize, c: &Self::Cand);
    /// True when no gain can increase as `C` grows from its current state.
    fn monotone(&self) -> bool;
    /// Greedy stops when the best gain is below this (the scorer's own "no gain left").
    fn floor(&self) -> Option<f64> {
        None
    }
    /// Without a threshold, greedy stops when the best value is not positive (SPEC §1:
    /// "no candidate has positive gain"); a threshold, when given, replaces this rule.
    fn stops_at_non_positive(&self) -> bool {
        false
    }
    /// Refreshes every `alive` candidate, writing its gain: one greedy step's bulk work.
    /// This is the seam a device backend takes over (one launch per step over
    /// device-resident caches); the default runs [`refresh`](Self::refresh) on every core.
    fn refresh_all(&self, cands: &mut [Self::Cand], gains: &mut [f64], alive: &[bool]) {
        cands
            .par_iter_mut()
            .zip(gains.par_iter_mut())
            .enumerate()
            .filter(|(x, _)| alive[*x])
            .for_each(|(x, (c, g))| *g = self.refresh(x, c));
    }
}

/// Why a greedy selection stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// The item budget `k` was reached.
    ItemBudget,
    /// No remaining candidate fits in the token budget.
    TokenBudget,
    /// The best remaining gain was below the threshold `tau`.
    Threshold,
    /// The best remaining gain was below the scorer's own floor (no gain left).
    NoGain,
    /// Every candidate was selected.
    Exhausted,
}

impl Stop {
    /// A short name for reports.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Stop::ItemBudget => "item_budget",
            Stop::TokenBudget => "token_budget",
            Stop::Threshold => "threshold",
            Stop::NoGain => "no_gain",
            Stop::Exhausted => "exhausted",
        }
    }
}

/// Budgets and threshold of a greedy run.
pub(crate) struct Limits<'a> {
    pub k: Option<usize>,
    pub token_budget: Option<f64>,
    pub costs: Option<&'a [f64]>,
    pub threshold: Option<f64>,
    /// Force eager refreshes even for monotone scorers (the reference for tests).
    pub eager_only: bool,
}

/// A heap entry: an upper bound on `x`'s gain, valid since `stamp` picks.
struct Entry {
    bound: f64,
    x: usize,
    stamp: usize,
}

impl PartialEq for Entry {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Entry {
    // Larger bound first; on equal bounds the lower index first (SPEC: ties by index).
    fn cmp(&self, o: &Self) -> Ordering {
        self.bound.total_cmp(&o.bound).then_with(|| o.x.cmp(&self.x))
    }
}

/// The best of `gains` over `alive`: largest gain, ties to the lower index.
fn argmax(gains: &[f64], alive: &[bool]) -> Option<usize> {
    let mut best: Option<usize> = None;
    for (x, (&g, &a)) in gains.iter().zip(alive).enumerate() {
        if a && best.is_none_or(|b| g > gains[b]) {
            best = Some(x);
        }
    }
    best
}

/// Adds the retained set to the scorer, in the given order.
fn add_retained<S: Scorer>(s: &mut S, retained: &[usize]) {
    for &r in retained {
        let mut c = s.cand(r);
        s.refresh(r, &mut c);
        s.add(r, &c);
    }
}

/// Scores every candidate not in `retained` against it: `(index, V(x | C))` in index
/// order.
pub(crate) fn gate<S: Scorer>(s: &mut S, n: usize, retained: &[usize]) -> Vec<(usize, f64)> {
    add_retained(s, retained);
    let mut alive = vec![true; n];
    retained.iter().for_each(|&r| alive[r] = false);
    let mut cands: Vec<S::Cand> = (0..n).into_par_iter().map(|x| s.cand(x)).collect();
    let mut gains = vec![0.0; n];
    s.refresh_all(&mut cands, &mut gains, &alive);
    (0..n).filter(|&x| alive[x]).map(|x| (x, gains[x])).collect()
}

/// Greedy selection after `retained`: `(picks in order, their gains, why it stopped)`.
pub(crate) fn greedy<S: Scorer>(
    s: &mut S,
    n: usize,
    retained: &[usize],
    lim: &Limits<'_>,
) -> (Vec<usize>, Vec<f64>, Stop) {
    add_retained(s, retained);
    let mut alive = vec![true; n];
    retained.iter().for_each(|&r| alive[r] = false);
    let mut cands: Vec<S::Cand> = (0..n).into_par_iter().map(|x| s.cand(x)).collect();
    let mut gains = vec![f64::NEG_INFINITY; n];
    let mut remaining = lim.token_budget.unwrap_or(f64::INFINITY);
    let cost = |x: usize| lim.costs.map_or(1.0, |c| c[x]);
    let mut heap: Option<BinaryHeap<Entry>> = None;
    let (mut picks, mut picked_gains) = (Vec::new(), Vec::new());
    let mut any_dropped_for_budget = false;

    let stop = loop {
        if lim.k.is_some_and(|k| picks.len() >= k) {
            break Stop::ItemBudget;
        }
        // Candidates that no longer fit never will: the budget only shrinks.
        let best = if let Some(h) = heap.as_mut() {
            let mut best = None;
            while let Some(e) = h.pop() {
                if cost(e.x) > remaining {
                    any_dropped_for_budget = true;
                    continue;
                }
                if e.stamp == picks.len() {
                    best = Some(e.x);
                    break;
                }
                let g = s.refresh(e.x, &mut cands[e.x]);
                gains[e.x] = g;
                h.push(Entry {
                    bound: g,
                    x: e.x,
                    stamp: picks.len(),
                });
            }
            best
        } else {
            for (x, a) in alive.iter_mut().enumerate() {
                if *a && cost(x) > remaining {
                    *a = false;
                    any_dropped_for_budget = true;
                }
            }
            s.refresh_all(&mut cands, &mut gains, &alive);
            if !lim.eager_only && s.monotone() {
                // From here on gains only fall: switch to lazy refreshes.
                let h: BinaryHeap<Entry> = (0..n)
                    .filter(|&x| alive[x])
                    .map(|x| Entry {
                        bound: gains[x],
                        x,
                        stamp: picks.len(),
                    })
                    .collect();
                heap = Some(h);
                continue;
            }
            argmax(&gains, &alive)
        };
        let Some(x) = best else {
            break if any_dropped_for_budget {
                Stop::TokenBudget
            } else {
                Stop::Exhausted
            };
        };
        let g = gains[x];
        match lim.threshold {
            Some(t) if g < t => break Stop::Threshold,
            None if s.stops_at_non_positive() && g <= 0.0 => break Stop::NoGain,
            _ => {}
        }
        if s.floor().is_some_and(|f| g < f) {
            break Stop::NoGain;
        }
        alive[x] = false;
        remaining -= cost(x);
        s.add(x, &cands[x]);
        picks.push(x);
        picked_gains.push(g);
    };
    (picks, picked_gains, stop)
}
