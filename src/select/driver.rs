//! The two ways every scorer is used (SPEC §1), written once: gating against a fixed
//! retained set, and incremental greedy selection under item and token budgets.
//!
//! Greedy is one loop ([`greedy`]) over a [`Picker`], the backend seam: the CPU's
//! [`LazyPicker`] over a [`Scorer`] here, or a device picker from the engine. The loop owns
//! the budgets and the stopping rules ([`Facts`], written once per method in
//! `select::facts`); a picker only answers "the best open candidate now".
//!
//! A scorer keeps a small cache per candidate (`Cand`) that [`Scorer::refresh`] brings up
//! to date with the picks made since it was last refreshed, so a greedy step costs
//! O(new picks) per refreshed candidate, never a recompute from scratch. When the
//! scorer's gains can only fall as the retained set grows ([`Scorer::monotone`]), the
//! lazy picker refreshes lazily: a max-heap of stale upper bounds, refreshing only the top
//! until a fresh value stays on top. Lazy and eager refreshes run the same arithmetic in
//! the same order, so both return the same set, item for item (tested).
//!
//! A refresh may also stop part way ([`Scorer::refresh_until`]): a candidate whose value
//! over the first few new picks already falls below the heap's next entry goes back at
//! that value (an upper bound, the scorer being monotone) and resumes from there when it
//! next reaches the top. On real-text pools, where most candidates' gains move at every
//! pick, this skips most of the catch-up work: the picks and their gains are the same
//! numbers, since a pick is still an exact, current value that no bound in the heap beats.

use crate::backend::picker::Picker;
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
    /// [`refresh`](Self::refresh) that may stop part way, once the value so far is below
    /// `stop`: `(value, true)` when `c` reached the current `C` (the value `refresh`
    /// returns), `(value, false)` when it stopped short, with `c` keeping how far it got.
    /// Called only while [`monotone`](Self::monotone) holds, where the value so far is an
    /// upper bound on the final one: the lazy picker then leaves the candidate in the
    /// heap at that bound, and a candidate the next picks leave below the top is never
    /// brought fully up to date.
    fn refresh_until(&self, x: usize, c: &mut Self::Cand, _stop: f64) -> (f64, bool) {
        (self.refresh(x, c), true)
    }
    /// Refreshes every `alive` candidate, writing its gain: one eager step's bulk work, on
    /// every core.
    fn refresh_all(&self, cands: &mut [Self::Cand], gains: &mut [f64], alive: &[bool]) {
        for_alive(cands, gains, alive, true, |x, c| self.refresh(x, c));
    }
    /// Where the scorer has a bound cheaper than its refresh: writes an upper bound on
    /// every `alive` candidate's gain under the current picks, leaving `c` ready for
    /// [`refresh_until`](Self::refresh_until) to complete, and returns `true`; `false`
    /// (the default) when it has none. The lazy heap then starts from these bounds
    /// instead of exact gains, and only the candidates that reach its top are brought up
    /// to date. While the scorer is not [`monotone`](Self::monotone) the bounds serve one
    /// step, with no heap kept (the next pick may raise a gain above its bound), and
    /// [`refresh`](Self::refresh) must then return exact gains from them.
    fn bound_all(&self, _cands: &mut [Self::Cand], _gains: &mut [f64], _alive: &[bool]) -> bool {
        false
    }
}

/// `gains[x] = f(x, &mut cands[x])` for every `alive` candidate, on every core for a large
/// pool where `f` reads rows (`reads_rows`; work that reads none, such as bounds already
/// at hand, costs less than waking the other threads).
pub(crate) fn for_alive<C: Send>(
    cands: &mut [C],
    gains: &mut [f64],
    alive: &[bool],
    reads_rows: bool,
    f: impl Fn(usize, &mut C) -> f64 + Sync,
) {
    if !reads_rows || cands.len() < SMALL_POOL {
        for (x, (c, g)) in cands.iter_mut().zip(gains.iter_mut()).enumerate() {
            if alive[x] {
                *g = f(x, c);
            }
        }
        return;
    }
    // At least 64 candidates per task: a small pool is not split into tasks that cost
    // more to hand out than to run.
    cands
        .par_iter_mut()
        .zip(gains.par_iter_mut())
        .enumerate()
        .with_min_len(64)
        .filter(|(x, _)| alive[*x])
        .for_each(|(x, (c, g))| *g = f(x, c));
}

pub(crate) use crate::backend::cpu::SMALL_POOL;

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
    /// Checked before every step: a cancelled selection stops between steps.
    pub cancel: Option<&'a crate::cancel::Cancel>,
}

/// A method's own stopping facts (SPEC §1), the same on every backend.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Facts {
    /// Greedy stops when the best gain is below this ("no gain left"): GRN, DPP and
    /// centroid drift. MMR, lexical MMR and the hybrid rank rather than gain and have
    /// none (SPEC §1, revised: they run to `k`); coverage keeps adding zero-gain items
    /// while they fit.
    pub floor: Option<f64>,
}

/// Scores every candidate not in `retained` against it: `(index, V(x | C))` in index
/// order. `cancel` is checked before the bulk pass and after it.
pub(crate) fn gate<S: Scorer>(
    s: &mut S,
    n: usize,
    retained: &[usize],
    cancel: Option<&crate::cancel::Cancel>,
) -> crate::Result<Vec<(usize, f64)>> {
    crate::cancel::check(cancel)?;
    for &r in retained {
        let mut c = s.cand(r);
        s.refresh(r, &mut c);
        s.add(r, &c);
    }
    let mut alive = vec![true; n];
    retained.iter().for_each(|&r| alive[r] = false);
    // Every scorer's fresh cache is a few words: made in one sweep, not on the pool.
    let mut cands: Vec<S::Cand> = (0..n).map(|x| s.cand(x)).collect();
    let mut gains = vec![0.0; n];
    s.refresh_all(&mut cands, &mut gains, &alive);
    crate::cancel::check(cancel)?;
    Ok((0..n).filter(|&x| alive[x]).map(|x| (x, gains[x])).collect())
}

/// Why greedy stops at a best gain of `g`, if it does (SPEC §1): below the threshold, or
/// below the method's floor.
fn stop_rule(g: f64, lim: &Limits<'_>, facts: &Facts) -> Option<Stop> {
    if lim.threshold.is_some_and(|t| g < t) {
        return Some(Stop::Threshold);
    }
    facts.floor.is_some_and(|f| g < f).then_some(Stop::NoGain)
}

/// Greedy selection after `retained` over any picker: `(picks in order, their gains, why
/// it stopped)`. The one greedy loop of the crate.
pub(crate) fn greedy(
    p: &mut dyn Picker,
    n: usize,
    retained: &[usize],
    lim: &Limits<'_>,
    facts: &Facts,
) -> crate::Result<(Vec<usize>, Vec<f64>, Stop)> {
    for &r in retained {
        p.add(r, true)?;
    }
    let mut remaining = lim.token_budget.unwrap_or(f64::INFINITY);
    let cost = |x: usize| lim.costs.map_or(1.0, |c| c[x]);
    let (mut picks, mut picked_gains) = (Vec::new(), Vec::new());
    let stop = loop {
        crate::cancel::check(lim.cancel)?;
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
        if let Some(stop) = stop_rule(g, lim, facts) {
            break stop;
        }
        remaining -= cost(x);
        p.add(x, false)?;
        picks.push(x);
        picked_gains.push(g);
    };
    Ok((picks, picked_gains, stop))
}

/// A heap entry: an upper bound on `x`'s gain, valid since `stamp` picks (the exact gain
/// when `stamp` is the picker's; [`PARTIAL`] for a refresh that stopped short).
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

/// The CPU picker: a scorer's caches on the host, refreshed eagerly on every core until
/// the scorer's gains can only fall, then lazily from a heap of stale upper bounds.
pub(crate) struct LazyPicker<'s, S: Scorer> {
    s: &'s mut S,
    n: usize,
    costs: Option<&'s [f64]>,
    eager_only: bool,
    cands: Option<Vec<S::Cand>>,
    gains: Vec<f64>,
    /// Not in `C` and (once dropped for the budget, for good) still affordable.
    alive: Vec<bool>,
    heap: Option<BinaryHeap<Entry>>,
    /// Picks added since the candidates' caches were built (heap stamps).
    stamp: usize,
}

impl<'s, S: Scorer> LazyPicker<'s, S> {
    /// A picker over candidates `0..n` of `s`; `costs` are the token costs a budget reads;
    /// `eager_only` refreshes every candidate at every step (the lazy path's reference).
    pub(crate) fn new(s: &'s mut S, n: usize, costs: Option<&'s [f64]>, eager_only: bool) -> Self {
        LazyPicker {
            s,
            n,
            costs,
            eager_only,
            cands: None,
            gains: vec![f64::NEG_INFINITY; n],
            alive: vec![true; n],
            heap: None,
            stamp: 0,
        }
    }

    fn cost(&self, x: usize) -> f64 {
        self.costs.map_or(1.0, |c| c[x])
    }

    /// One step over bounds while gains may still rise (no heap kept): the best bound's
    /// exact gain, then the exact gains of the others whose bounds reach it. A candidate
    /// left out has a bound, so a gain, below the first exact gain, and the best found
    /// is at least that; ties go to the lower index, as everywhere.
    fn best_of_bounds(&mut self) -> Option<(usize, f64)> {
        let (s, cands) = (&*self.s, self.cands.as_mut()?);
        let (alive, gains) = (&self.alive, &mut self.gains);
        let first = (0..self.n)
            .filter(|&x| alive[x])
            .reduce(|b, x| if gains[x] > gains[b] { x } else { b })?;
        gains[first] = s.refresh(first, &mut cands[first]);
        let (reach, mut best) = (gains[first], first);
        for x in 0..self.n {
            if alive[x] && x != first && gains[x] >= reach {
                gains[x] = s.refresh(x, &mut cands[x]);
                if gains[x] > gains[best] || (gains[x] == gains[best] && x < best) {
                    best = x;
                }
            }
        }
        Some((best, gains[best]))
    }

    /// The heap's best open candidate, refreshing stale tops.
    fn heap_best(&mut self, remaining: f64) -> Option<usize> {
        let (s, cands) = (&*self.s, self.cands.as_mut()?);
        let h = self.heap.as_mut()?;
        while let Some(e) = h.peek() {
            let x = e.x;
            // Candidates that no longer fit never will: the budget only shrinks.
            if !self.alive[x] || self.costs.map_or(1.0, |c| c[x]) > remaining {
                self.alive[x] = false;
                h.pop();
                continue;
            }
            if e.stamp == self.stamp {
                return Some(x);
            }
            h.pop();
            let stop = h.peek().map_or(f64::NEG_INFINITY, |e| e.bound);
            let (g, complete) = s.refresh_until(x, &mut cands[x], stop);
            if complete {
                self.gains[x] = g;
            }
            h.push(Entry {
                bound: g,
                x,
                stamp: if complete { self.stamp } else { PARTIAL },
            });
        }
        None
    }
}

/// The stamp of an entry whose refresh stopped short: never a picker's stamp.
const PARTIAL: usize = usize::MAX;

impl<S: Scorer> Picker for LazyPicker<'_, S> {
    fn add(&mut self, x: usize, _retained: bool) -> crate::Result<()> {
        if x >= self.n {
            return Err(crate::Error::invalid(
                "pick",
                format!("index {x} outside the pool of {}", self.n),
            ));
        }
        match self.cands.as_mut() {
            // Before the first step (the retained set): a fresh cache.
            None => {
                let mut c = self.s.cand(x);
                self.s.refresh(x, &mut c);
                self.s.add(x, &c);
            }
            Some(cands) => {
                self.s.refresh(x, &mut cands[x]);
                self.s.add(x, &cands[x]);
                self.stamp += 1;
            }
        }
        self.alive[x] = false;
        Ok(())
    }

    fn best(&mut self, remaining: Option<f64>) -> crate::Result<Option<(usize, f64)>> {
        let remaining = remaining.unwrap_or(f64::INFINITY);
        if self.cands.is_none() {
            let s = &*self.s;
            self.cands = Some((0..self.n).map(|x| s.cand(x)).collect());
        }
        if self.heap.is_none() {
            for x in 0..self.n {
                if self.alive[x] && self.cost(x) > remaining {
                    self.alive[x] = false;
                }
            }
            // Bounds where the scorer has them. Once gains only fall (monotone), the lazy
            // heap, kept from step to step; before, one step over the bounds.
            let monotone = self.s.monotone();
            let mut bounded = false;
            if let Some(cands) = self.cands.as_mut() {
                bounded = !self.eager_only && self.s.bound_all(cands, &mut self.gains, &self.alive);
                if !bounded {
                    self.s.refresh_all(cands, &mut self.gains, &self.alive);
                }
            }
            if !self.eager_only && monotone {
                let stamp = if bounded { PARTIAL } else { self.stamp };
                self.heap = Some(
                    (0..self.n)
                        .filter(|&x| self.alive[x])
                        .map(|x| Entry {
                            bound: self.gains[x],
                            x,
                            stamp,
                        })
                        .collect(),
                );
            } else if bounded {
                return Ok(self.best_of_bounds());
            } else {
                let mut best: Option<usize> = None;
                for x in 0..self.n {
                    if self.alive[x] && best.is_none_or(|b| self.gains[x] > self.gains[b]) {
                        best = Some(x);
                    }
                }
                return Ok(best.map(|x| (x, self.gains[x])));
            }
        }
        Ok(self.heap_best(remaining).map(|x| (x, self.gains[x])))
    }
}

#[cfg(test)]
mod tests {
    //! The lazy picker against an eager stand-in for a device (it refreshes every open
    //! candidate with the scorer's own `refresh` and takes the argmax, which is what the
    //! CUDA step kernels compute), through the same greedy loop.
    use super::*;
    use crate::backend::picker::Rows;
    use crate::backend::Resident;
    use crate::select::dense::Dense;
    use crate::select::scorers::{Centroid, Dpp, Grn, Mmr};

    struct Eager<'s, S: Scorer> {
        s: &'s mut S,
        cands: Vec<S::Cand>,
        open: Vec<bool>,
        costs: Option<&'s [f64]>,
    }

    impl<S: Scorer> Picker for Eager<'_, S> {
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

    fn both<S: Scorer>(
        mk: &dyn Fn() -> S,
        n: usize,
        retained: &[usize],
        lim: &Limits<'_>,
        facts: &Facts,
        what: &str,
    ) {
        let mut a = mk();
        let want = greedy(
            &mut LazyPicker::new(&mut a, n, lim.costs, false),
            n,
            retained,
            lim,
            facts,
        )
        .unwrap();
        let mut b = mk();
        let cands = (0..n).map(|x| b.cand(x)).collect();
        let mut p = Eager {
            s: &mut b,
            cands,
            open: vec![true; n],
            costs: lim.costs,
        };
        let got = greedy(&mut p, n, retained, lim, facts).unwrap();
        assert_eq!(got, want, "{what}");
    }

    /// Pools where the passages share a common direction, as real text does (every gain
    /// moves at every pick), with budgets long enough that refreshes stop part way
    /// ([`Scorer::refresh_until`]) and resume: the lazy picker returns the eager
    /// picker's picks and gains, bit for bit.
    #[test]
    fn partial_refreshes_give_the_eager_picks() {
        for (seed, n, d, common) in [
            (3u64, 301usize, 23usize, 1.5f64),
            (4, 257, 9, 3.0),
            (5, 199, 40, 0.5),
        ] {
            let mut rng = crate::rng::Rng::new(seed);
            let c0: Vec<f64> = (0..d).map(|_| rng.normal()).collect();
            let data: Vec<f32> = (0..n * d)
                .map(|i| (common * c0[i % d] + rng.normal()) as f32)
                .collect();
            let e = crate::Embeddings::new(n, d, data, "t")
                .unwrap()
                .normalized()
                .unwrap();
            let inv = e.inv_norms().unwrap();
            let q: Vec<f32> = (0..d)
                .map(|j| (common * c0[j] + 0.5 * rng.normal()) as f32)
                .collect();
            let costs: Vec<f64> = (0..n).map(|_| 1.0 + rng.below(9) as f64).collect();
            let host = Resident::Host;
            let rows = Rows {
                e: e.view(),
                inv: &inv,
                resident: &host,
                screen: None,
            };
            let dense = Dense::new(&rows, Some(&q)).unwrap();
            for (k, budget, retained) in [
                (Some(97), None, vec![]),
                (Some(61), Some(250.0), vec![]),
                (Some(70), None, vec![5, 40, 2]),
            ] {
                let lim = Limits {
                    k,
                    token_budget: budget,
                    costs: Some(&costs),
                    threshold: None,
                    cancel: None,
                };
                let what = format!("seed {seed} k={k:?} budget={budget:?} retained={retained:?}");
                for lam in [0.2, 0.5, 0.85] {
                    both(
                        &|| Mmr::new(&dense, lam),
                        n,
                        &retained,
                        &lim,
                        &Facts { floor: None },
                        &format!("mmr {lam} {what}"),
                    );
                }
                both(
                    &|| Dpp::new(&dense, 1e-10),
                    n,
                    &retained,
                    &lim,
                    &Facts { floor: Some(1e-10) },
                    &format!("dpp {what}"),
                );
            }
        }
    }

    #[test]
    fn device_shaped_picker_matches_the_lazy_picker() {
        let mut rng = crate::rng::Rng::new(11);
        let (n, d) = (41, 7);
        let data: Vec<f32> = (0..n * d).map(|_| rng.normal() as f32).collect();
        let e = crate::Embeddings::new(n, d, data, "t")
            .unwrap()
            .normalized()
            .unwrap();
        let inv = e.inv_norms().unwrap();
        let q: Vec<f32> = (0..d).map(|_| rng.normal() as f32).collect();
        let costs: Vec<f64> = (0..n).map(|_| 1.0 + rng.below(20) as f64).collect();
        let host = Resident::Host;
        let rows = Rows {
            e: e.view(),
            inv: &inv,
            resident: &host,
            screen: None,
        };
        let dense = Dense::new(&rows, Some(&q)).unwrap();
        let floor = |f: f64| Facts { floor: Some(f) };
        let scores = Facts { floor: None };
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
                cancel: None,
            };
            let what = format!("k={k:?} budget={budget:?} tau={thr:?} retained={retained:?}");
            both(
                &|| Mmr::new(&dense, 0.5),
                n,
                &retained,
                &lim,
                &scores,
                &format!("mmr {what}"),
            );
            both(
                &|| Grn::new(&dense, 1e-10),
                n,
                &retained,
                &lim,
                &floor(1e-10),
                &format!("grn {what}"),
            );
            both(
                &|| Dpp::new(&dense, 1e-10),
                n,
                &retained,
                &lim,
                &floor(1e-10),
                &format!("dpp {what}"),
            );
            both(
                &|| Centroid::new(&dense),
                n,
                &retained,
                &lim,
                &floor(crate::select::presets::CENTROID_NOISE_FLOOR),
                &format!("centroid {what}"),
            );
        }
    }

    /// A scorer whose gain is `w[x]` less its largest similarity to the picks (0 with
    /// none: not monotone at first), with bounds `gain + slack[x]` from `bound_all`, so
    /// the best bound is seldom the best gain, and gains tie (`w` in steps of 1/8).
    struct Loose {
        w: Vec<f64>,
        slack: Vec<f64>,
        sim: Vec<f64>,
        n: usize,
        picks: Vec<usize>,
    }

    impl Loose {
        fn gain(&self, x: usize) -> f64 {
            let red = self
                .picks
                .iter()
                .map(|&p| self.sim[x * self.n + p])
                .fold(0.0, f64::max);
            self.w[x] - red
        }
    }

    impl Scorer for Loose {
        type Cand = ();
        fn cand(&self, _: usize) {}
        fn refresh(&self, x: usize, _: &mut ()) -> f64 {
            self.gain(x)
        }
        fn add(&mut self, x: usize, _: &()) {
            self.picks.push(x);
        }
        fn monotone(&self) -> bool {
            !self.picks.is_empty()
        }
        fn bound_all(&self, _: &mut [()], gains: &mut [f64], alive: &[bool]) -> bool {
            for x in 0..self.n {
                if alive[x] {
                    gains[x] = self.gain(x) + self.slack[x];
                }
            }
            true
        }
    }

    /// Heaps and first steps started from bounds (`Scorer::bound_all`), loose ones that
    /// rank the candidates otherwise than their gains, give the eager picker's picks and
    /// gains, ties to the lower index included, with and without retained rows and a
    /// token budget.
    #[test]
    fn steps_from_bounds_give_the_eager_picks() {
        for (seed, n) in [(7u64, 41usize), (8, 130), (9, 7)] {
            let mut rng = crate::rng::Rng::new(seed);
            let w: Vec<f64> = (0..n).map(|_| rng.below(9) as f64 / 8.0).collect();
            let slack: Vec<f64> = (0..n).map(|_| [0.0, 0.1, 0.4][rng.below(3)]).collect();
            let mut sim = vec![0.0; n * n];
            for x in 0..n {
                for y in 0..x {
                    let v = rng.below(5) as f64 / 8.0 - 0.25;
                    sim[x * n + y] = v;
                    sim[y * n + x] = v;
                }
            }
            let costs: Vec<f64> = (0..n).map(|_| 1.0 + rng.below(4) as f64).collect();
            let mk = || Loose {
                w: w.clone(),
                slack: slack.clone(),
                sim: sim.clone(),
                n,
                picks: Vec::new(),
            };
            for (k, budget, retained) in [(Some(n), None, vec![]), (Some(5), Some(9.0), vec![n / 2])] {
                let lim = Limits {
                    k,
                    token_budget: budget,
                    costs: Some(&costs),
                    threshold: None,
                    cancel: None,
                };
                let what = format!("loose seed {seed} k={k:?} budget={budget:?} retained={retained:?}");
                both(&mk, n, &retained, &lim, &Facts { floor: None }, &what);
            }
        }
    }
}
