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
        if let Some(stop) = stop_rule(g, lim, s.stops_at_non_positive(), s.floor()) {
            break stop;
        }
        alive[x] = false;
        remaining -= cost(x);
        s.add(x, &cands[x]);
        picks.push(x);
        picked_gains.push(g);
    };
    (picks, picked_gains, stop)
}

/// Why greedy stops at a best gain of `g`, if it does (SPEC §1): below the threshold; not
/// positive when the scorer stops there and no threshold is given; below the scorer's floor.
fn stop_rule(g: f64, lim: &Limits<'_>, stops_at_non_positive: bool, floor: Option<f64>) -> Option<Stop> {
    match lim.threshold {
        Some(t) if g < t => return Some(Stop::Threshold),
        None if stops_at_non_positive && g <= 0.0 => return Some(Stop::NoGain),
        _ => {}
    }
    floor.is_some_and(|f| g < f).then_some(Stop::NoGain)
}

/// A greedy selector whose per-candidate state lives on a device: [`add`](Self::add)
/// queues a pick, [`best`](Self::best) folds it in and returns the best open candidate
/// (alive, and within `remaining` tokens when a budget applies) with its gain, ties to
/// the lower index.
pub(crate) trait DevicePicker {
    fn add(&mut self, x: usize, retained: bool) -> crate::Result<()>;
    fn best(&mut self, remaining: Option<f64>) -> crate::Result<Option<(usize, f64)>>;
}

/// [`greedy`] with the candidates' state on a device: the same budgets and stopping rules,
/// one [`DevicePicker::best`] per step. `floor` and `stops_at_non_positive` are the CPU
/// scorer's.
pub(crate) fn greedy_device(
    p: &mut dyn DevicePicker,
    n: usize,
    retained: &[usize],
    lim: &Limits<'_>,
    floor: Option<f64>,
    stops_at_non_positive: bool,
) -> crate::Result<(Vec<usize>, Vec<f64>, Stop)> {
    for &r in retained {
        p.add(r, true)?;
    }
    let mut remaining = lim.token_budget.unwrap_or(f64::INFINITY);
    let cost = |x: usize| lim.costs.map_or(1.0, |c| c[x]);
    let (mut picks, mut picked_gains) = (Vec::new(), Vec::new());
    let stop = loop {
        if lim.k.is_some_and(|k| picks.len() >= k) {
            break Stop::ItemBudget;
        }
        let Some((x, g)) = p.best(lim.token_budget.map(|_| remaining))? else {
            // Nothing open: what is left (if anything) no longer fits the budget.
            let left = n - retained.len() - picks.len();
            break if left > 0 && lim.token_budget.is_some() {
                Stop::TokenBudget
            } else {
                Stop::Exhausted
            };
        };
        if let Some(stop) = stop_rule(g, lim, stops_at_non_positive, floor) {
            break stop;
        }
        remaining -= cost(x);
        p.add(x, false)?;
        picks.push(x);
        picked_gains.push(g);
    };
    Ok((picks, picked_gains, stop))
}

#[cfg(test)]
mod tests {
    //! [`greedy_device`]'s host logic (retained picks, budgets, stopping rules) against
    //! [`greedy`], with a CPU stand-in for the device state: the stand-in refreshes every
    //! open candidate with the scorer's own `refresh` and takes the argmax, which is what
    //! the CUDA step kernels compute.
    use super::*;
    use crate::select::scorers::{Centroid, Dense, Dpp, Grn, Mmr};

    struct Eager<'s, S: Scorer> {
        s: &'s mut S,
        cands: Vec<S::Cand>,
        open: Vec<bool>,
        costs: Option<&'s [f64]>,
    }

    impl<S: Scorer> DevicePicker for Eager<'_, S> {
        fn add(&mut self, x: usize, _retained: bool) -> crate::Result<()> {
            self.s.refresh(x, &mut self.cands[x]);
            self.s.add(x, &self.cands[x]);
            self.open[x] = false;
            Ok(())
        }
        fn best(&mut self, remaining: Option<f64>) -> crate::Result<Option<(usize, f64)>> {
            let mut best: Option<(usize, f64)> = None;
            for x in 0..self.open.len() {
                let fits = remaining.is_none_or(|r| self.costs.map_or(1.0, |c| c[x]) <= r);
                if !self.open[x] || !fits {
                    continue;
                }
                let g = self.s.refresh(x, &mut self.cands[x]);
                if best.is_none_or(|(_, b)| g > b) {
                    best = Some((x, g));
                }
            }
            Ok(best)
        }
    }

    fn both<S: Scorer>(mk: &dyn Fn() -> S, n: usize, retained: &[usize], lim: &Limits<'_>, what: &str) {
        let mut a = mk();
        let want = greedy(&mut a, n, retained, lim);
        let mut b = mk();
        let (floor, nonpos) = (b.floor(), b.stops_at_non_positive());
        let cands = (0..n).map(|x| b.cand(x)).collect();
        let mut p = Eager {
            s: &mut b,
            cands,
            open: vec![true; n],
            costs: lim.costs,
        };
        let got = greedy_device(&mut p, n, retained, lim, floor, nonpos).unwrap();
        assert_eq!(got, want, "{what}");
    }

    #[test]
    fn device_driver_matches_the_cpu_driver() {
        let mut rng = crate::rng::Rng::new(11);
        let (n, d) = (41, 7);
        let data: Vec<f32> = (0..n * d).map(|_| rng.normal() as f32).collect();
        let e = crate::Embeddings::new(n, d, data, "t").unwrap();
        let q: Vec<f32> = (0..d).map(|_| rng.normal() as f32).collect();
        let costs: Vec<f64> = (0..n).map(|_| 1.0 + rng.below(20) as f64).collect();
        let dense = Dense::new(&e, Some(&q)).unwrap();
        for (k, budget, thr, retained) in [
            (Some(9), None, None, vec![]),
            (None, Some(60.0), None, vec![]),
            (Some(5), Some(45.0), None, vec![3, 17]),
            (None, None, Some(0.2), vec![8]),
            (None, None, None, vec![]),
        ] {
            let lim = Limits {
                k,
                token_budget: budget,
                costs: Some(&costs),
                threshold: thr,
                eager_only: false,
            };
            let what = format!("k={k:?} budget={budget:?} tau={thr:?} retained={retained:?}");
            both(
                &|| Mmr::new(&dense, 0.5),
                n,
                &retained,
                &lim,
                &format!("mmr {what}"),
            );
            both(
                &|| Grn::new(&dense, 1e-10),
                n,
                &retained,
                &lim,
                &format!("grn {what}"),
            );
            both(
                &|| Dpp::new(&dense, 1e-10),
                n,
                &retained,
                &lim,
                &format!("dpp {what}"),
            );
            both(
                &|| Centroid::new(&dense),
                n,
                &retained,
                &lim,
                &format!("centroid {what}"),
            );
        }
    }
}
