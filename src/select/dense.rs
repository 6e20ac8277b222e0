//! [`Dense`]: the pool's rows, their exact norms and relevance, the cosines every
//! embedding scorer and coverage read.

use crate::backend::cpu;
use crate::backend::cpu::Screen16;
use crate::backend::picker::Rows;
use crate::embeddings::Matrix;

/// Cosines over a pool's rows (SPEC: "computed on unit-normalized embeddings"): rows that
/// are unit already (within 2^-8) as given, others unit-normalised, every inner product
/// accumulated in `f64` and divided by the rows' exact `f64` norms:
/// `cos(i, j) = <e~_i, e~_j> / (‖e~_i‖ ‖e~_j‖)`. Normalising makes rows that differ only in
/// scale bit-identical, so their scores tie exactly and the lower index wins; dividing by
/// the exact norms keeps residuals of in-span vectors at ~1e-16.
pub(crate) struct Dense<'a> {
    pub e: Matrix<'a>,
    pub inv: &'a [f64],
    /// `cos(x, q)` for every row, when there is a query (and it was not left lazy).
    pub rel: Option<Vec<f64>>,
    /// Relevance left lazy ([`Dense::lazy`]): the query, its inverse norm, and an upper
    /// bound on every row's relevance from one `f32` pass.
    lazy: Option<Lazy<'a>>,
    /// What [`cos_lower`](Self::cos_lower) takes off the `f32` cosine: the product's
    /// error bound at this dimension, and `1e-12` for the `f64` roundings.
    screen: f64,
    /// [`cos_lower`](Self::cos_lower)`(x, g)` for every row `x` and one row `g`, taken in
    /// the pass that bounds the relevance ([`Dense::lazy`]): `g` is the first row, the
    /// top of a retriever's ranking and so, for a pool in its retriever's order, MMR's
    /// first pick, whose bound on every candidate then costs no second read of the pool.
    guess: Option<(usize, Vec<f64>)>,
    /// What [`cos_lower_max`](Self::cos_lower_max) takes off a product of
    /// [`cpu::dot_f32_x8`]: its error bound at this dimension, and `1e-12`.
    screen_x8: f64,
    /// The rows quantised to 16 bits ([`Screen16`], over a resident pool): where present,
    /// the screens read it in place of the `f32` rows (half the bytes), each bound widened
    /// by the row's quantisation error ([`Screen16::slack`]).
    q16: Option<&'a Screen16>,
}

/// Relevance computed per row on demand, with `f32` upper bounds for every row.
struct Lazy<'a> {
    q: &'a [f32],
    inv_q: f64,
    upper: Vec<f64>,
}

/// How a pass over the rows takes each row's relevance from the read that takes the
/// row's norm: exact (the bits [`Dense::new`] stores) or, for MMR's lazy heap on the CPU,
/// the bounds [`Dense::lazy`] takes.
pub(crate) enum RelPass<'a> {
    Exact { q: &'a [f32], inv_q: f64 },
    Lazy(LazyPass<'a>),
}

impl<'a> RelPass<'a> {
    /// The pass for `query` (checked: finite, non-zero; its length is the rows'), lazy or
    /// exact; a lazy pass guesses the row `guess` (with its inverse norm) as the first pick.
    pub fn new(query: &'a [f32], lazy: bool, guess: Option<(&'a [f32], f64)>) -> crate::Result<Self> {
        Ok(if lazy {
            RelPass::Lazy(LazyPass::new(query, guess)?)
        } else {
            RelPass::Exact {
                q: query,
                inv_q: inv_query(query)?,
            }
        })
    }

    /// A row's values (inverse norm `inv`): its exact relevance, or its bounds
    /// ([`LazyPass::row`]); the second is NaN where there is none.
    #[inline]
    pub fn row(&self, row: &[f32], inv: f64) -> (f64, f64) {
        match self {
            RelPass::Exact { q, inv_q } => (relevance(cpu::dot(row, q), inv, *inv_q), f64::NAN),
            RelPass::Lazy(l) => l.row(row, inv),
        }
    }

    /// The rows with the relevance this pass took for each of them (`vals`, in row order).
    pub fn into_dense(self, rows: &Rows<'a>, vals: Vec<(f64, f64)>) -> Dense<'a> {
        match self {
            RelPass::Exact { .. } => Dense::with_rel(rows, vals.into_iter().map(|v| v.0).collect()),
            RelPass::Lazy(l) => {
                let (upper, lower) = vals.into_iter().unzip();
                Dense::from_pass(rows, &l, upper, lower)
            }
        }
    }
}

/// Rows a pool must start with, in decreasing relevance, for [`first_pick_guess`] to take
/// it for a retriever's ranking.
const GUESS_PREFIX: usize = 8;

/// Row 0 (with its inverse norm) as the guessed first pick of MMR when the pool looks like
/// a retriever's ranking: its first [`GUESS_PREFIX`] rows come in decreasing relevance
/// (`f32` products, a look at 8 rows; a shuffled pool does so by chance once in 40,320).
/// The guess costs a second product in the pass that bounds the relevance, so it is made
/// only where it is likely right; a wrong one changes nothing but that cost. `row(i)` is
/// row `i` with its inverse norm (`None`: not kept, no guess).
pub(crate) fn first_pick_guess<'a>(
    n: usize,
    q: &[f32],
    row: impl Fn(usize) -> Option<(&'a [f32], f64)>,
) -> Option<(&'a [f32], f64)> {
    if n < GUESS_PREFIX {
        return None;
    }
    let rel = |i: usize| row(i).map(|(r, inv)| f64::from(cpu::dot_f32(r, q)) * inv);
    let mut prev = rel(0)?;
    for i in 1..GUESS_PREFIX {
        let r = rel(i)?;
        if r.is_nan() || r > prev {
            return None;
        }
        prev = r;
    }
    row(0)
}

/// The bounds [`Dense::lazy`] takes from one read of each row: an upper bound on the row's
/// relevance ([`Dense::rel_upper`]) and a lower bound on its cosine to the guessed first
/// pick ([`Dense::cos_lower`]), from `f32` products and their error bounds (one
/// [`cpu::dot_f32`] without a guess, [`cpu::dot_f32_pair`] with one; eight rows of the
/// pool's 16-bit copy a call without a guess where there is one, [`LazyPass::rows16`]).
pub(crate) struct LazyPass<'a> {
    q: &'a [f32],
    inv_q: f64,
    /// Row 0 (the guessed first pick) and its inverse norm.
    guess: Option<(&'a [f32], f64)>,
    screen: f64,
    /// The screen of [`cpu::dot_f32_pair`]'s products (with a guess).
    screen_pair: f64,
    /// The screen of [`cpu::dot_f32_x8`]'s products ([`LazyPass::rows16`]).
    screen_x8: f64,
}

impl<'a> LazyPass<'a> {
    /// The pass for `query` (checked: finite, non-zero; its length is the rows'), with
    /// the row `guess` (and its inverse norm) as the guessed first pick.
    pub fn new(query: &'a [f32], guess: Option<(&'a [f32], f64)>) -> crate::Result<Self> {
        Ok(LazyPass {
            q: query,
            inv_q: inv_query(query)?,
            guess,
            screen: screen(query.len()),
            screen_pair: cpu::dot_f32_pair_bound(query.len()) + 1e-12,
            screen_x8: screen_x8(query.len()),
        })
    }

    /// `(rel_upper, cos_lower to the guess)` of a row with inverse norm `inv` (the second
    /// is NaN without a guess).
    #[inline]
    pub fn row(&self, row: &[f32], inv: f64) -> (f64, f64) {
        // One read of the row for both products, each within the pair's own bound.
        let (rq, lo, screen) = match self.guess {
            Some((g, inv_g)) => {
                let (rq, rg) = cpu::dot_f32_pair(row, self.q, g);
                let lo = f64::from(rg) * inv * inv_g - self.screen_pair;
                (rq, lo, self.screen_pair)
            }
            None => (cpu::dot_f32(row, self.q), f64::NAN, self.screen),
        };
        (self.upper(f64::from(rq) * inv * self.inv_q + screen), lo)
    }

    /// [`row`](Self::row) of the eight rows from `x0` from their 16-bit copy `s` (inverse
    /// norms `inv`), where no first pick is guessed: the query's products with the eight
    /// in one call ([`cpu::dot_f32_i16_x8`]), half the bytes to read, each bound widened
    /// by its row's quantisation error. `None` with a guess (the pair of products reads
    /// the `f32` row).
    #[inline]
    pub fn rows16(&self, s: &Screen16, x0: usize, inv: &[f64]) -> Option<[(f64, f64); cpu::X8]> {
        if self.guess.is_some() {
            return None;
        }
        let rq = cpu::dot_f32_i16_x8(self.q, std::array::from_fn(|j| s.row(x0 + j)));
        Some(std::array::from_fn(|j| {
            let x = x0 + j;
            let c = f64::from(rq[j]) * s.scale(x) * inv[x] * self.inv_q;
            (self.upper(c + s.slack(x, self.screen_x8)), f64::NAN)
        }))
    }

    /// An upper bound as it is stored: an overflowed `f32` product bounds nothing, so
    /// the row is left at the top.
    #[inline(always)]
    fn upper(&self, c: f64) -> f64 {
        if c.is_finite() {
            c
        } else {
            f64::INFINITY
        }
    }
}

/// `1 / ‖q‖` of a query, checked (finite, non-zero) only: relevance divides by the
/// query's exact norm, and scaling the query scales every candidate's relevance alike.
fn inv_query(q: &[f32]) -> crate::Result<f64> {
    crate::embeddings::unit_vector(q, "query")?;
    Ok(1.0 / cpu::sum_sq(q).sqrt())
}

/// `cos(x, q)` from `<e~_x, q>` and the two inverse norms: the one scaling of the stored
/// and the lazy relevance (their bits must agree).
#[inline]
fn relevance(dot: f64, inv_x: f64, inv_q: f64) -> f64 {
    dot * (inv_x * inv_q)
}

/// [`Dense::screen_x8`] for rows of `d` dimensions.
fn screen_x8(d: usize) -> f64 {
    cpu::dot_f32_x8_bound(d) + 1e-12
}

/// [`Dense::screen`] for rows of `d` dimensions.
fn screen(d: usize) -> f64 {
    cpu::dot_f32_bound(d) + 1e-12
}

impl<'a> Dense<'a> {
    /// The pool's rows with the relevance of every row to `query`.
    pub fn new(rows: &Rows<'a>, query: Option<&[f32]>) -> crate::Result<Self> {
        let e = rows.e;
        let inv = rows.inv;
        let rel = match query {
            None => None,
            Some(q) => {
                let inv_q = inv_query(q)?;
                let mut r = vec![0.0; e.rows()];
                cpu::matvec(e.as_slice(), e.dim(), q, &mut r);
                r.iter_mut()
                    .zip(inv)
                    .for_each(|(v, &i)| *v = relevance(*v, i, inv_q));
                Some(r)
            }
        };
        Ok(Dense {
            e,
            inv,
            rel,
            lazy: None,
            screen: screen(e.dim()),
            guess: None,
            screen_x8: screen_x8(e.dim()),
            q16: rows.screen,
        })
    }

    /// The pool's rows with relevance to `query` left lazy: one pass of `f32`
    /// products gives an upper bound on every row's relevance
    /// ([`rel_upper`](Self::rel_upper)), and [`rel_at`](Self::rel_at) computes a row's
    /// exact relevance, the bits [`Dense::new`] would have stored, when a scorer needs it.
    /// For a picker that reads relevance through bounds (MMR's lazy heap): the rows that
    /// never reach the top of its heap never get an exact product.
    pub fn lazy(rows: &Rows<'a>, query: &'a [f32]) -> crate::Result<Self> {
        let (e, inv) = (rows.e, rows.inv);
        let guess = first_pick_guess(e.rows(), query, |i| Some((e.row(i), inv[i])));
        let pass = LazyPass::new(query, guess)?;
        // Eight rows a call from the pool's 16-bit copy where there is one and no first
        // pick is guessed; else (and for the last rows) one at a time from the rows.
        let block = |b: usize, out: &mut [(f64, f64)]| {
            let x0 = b * cpu::X8;
            let eight = rows.screen.filter(|_| out.len() == cpu::X8);
            if let Some(v) = eight.and_then(|s| pass.rows16(s, x0, inv)) {
                out.copy_from_slice(&v);
                return;
            }
            for (j, o) in out.iter_mut().enumerate() {
                *o = pass.row(e.row(x0 + j), inv[x0 + j]);
            }
        };
        let mut vals = vec![(0.0, 0.0); e.rows()];
        if e.rows() < super::driver::SMALL_POOL {
            vals.chunks_mut(cpu::X8)
                .enumerate()
                .for_each(|(b, o)| block(b, o));
        } else {
            use rayon::prelude::*;
            vals.par_chunks_mut(cpu::X8)
                .with_min_len(32)
                .enumerate()
                .for_each(|(b, o)| block(b, o));
        }
        let (upper, lower) = vals.into_iter().unzip();
        Ok(Dense::from_pass(rows, &pass, upper, lower))
    }

    /// The pool's rows with relevance left lazy, from the bounds of `pass` over every row
    /// (`upper`, and `lower` where it guessed a first pick, row 0), taken by
    /// [`Dense::lazy`] or in the read that took the rows' norms.
    pub fn from_pass(rows: &Rows<'a>, pass: &LazyPass<'a>, upper: Vec<f64>, lower: Vec<f64>) -> Self {
        Dense {
            e: rows.e,
            inv: rows.inv,
            rel: None,
            lazy: Some(Lazy {
                q: pass.q,
                inv_q: pass.inv_q,
                upper,
            }),
            screen: pass.screen,
            guess: pass.guess.map(|_| (0, lower)),
            screen_x8: screen_x8(rows.e.dim()),
            q16: rows.screen,
        }
    }

    /// `cos(x, q)`: stored, computed now when lazy (the same bits), 0 without a query.
    #[inline]
    pub fn rel_at(&self, x: usize) -> f64 {
        match (&self.rel, &self.lazy) {
            (Some(r), _) => r[x],
            // `matvec`'s row is `dot` of the row, scaled as `Dense::new` scales it.
            (None, Some(l)) => relevance(cpu::dot(self.e.row(x), l.q), self.inv[x], l.inv_q),
            (None, None) => 0.0,
        }
    }

    /// An upper bound on [`rel_at`](Self::rel_at)`(x)`: the `f32` product plus its error
    /// bound when lazy (as [`cos_lower`](Self::cos_lower) takes it off), else the value.
    #[inline]
    pub fn rel_upper(&self, x: usize) -> f64 {
        match &self.lazy {
            Some(l) => l.upper[x],
            None => self.rel_at(x),
        }
    }

    /// The pool's (unit) rows with relevance already computed (by
    /// [`crate::Embeddings::unit_rows`], in the pass that made the rows): the same
    /// numbers [`Dense::new`] computes.
    pub fn with_rel(rows: &Rows<'a>, rel: Vec<f64>) -> Self {
        Dense {
            e: rows.e,
            inv: rows.inv,
            rel: Some(rel),
            lazy: None,
            screen: screen(rows.e.dim()),
            guess: None,
            screen_x8: screen_x8(rows.e.dim()),
            q16: rows.screen,
        }
    }

    #[inline]
    pub fn cos(&self, x: usize, y: usize) -> f64 {
        cpu::dot(self.e.row(x), self.e.row(y)) * self.inv[x] * self.inv[y]
    }

    /// Whether [`cos_lower`](Self::cos_lower)`(x, y)` is stored for every `x` (`y` is the
    /// guessed first pick).
    #[inline]
    pub fn guessed(&self, y: usize) -> bool {
        self.guess.as_ref().is_some_and(|(g, _)| *g == y)
    }

    /// A lower bound on [`cos`](Self::cos)`(x, y)`: the product in `f32`
    /// ([`cpu::dot_f32`]) less its error bound, a few times cheaper (for the guessed first
    /// pick, the bound stored by the lazy pass, from [`cpu::dot_f32_pair`]). The rows' norms are
    /// `1 / inv`, so the bound on the product over `‖x‖ ‖y‖` is the bound on the cosine;
    /// `1e-12` covers the `f64` roundings of the scaling and of [`cos`] itself. With the
    /// pool's 16-bit copy, `x`'s row is read from it ([`cpu::dot_i16_f32`], times its
    /// scale) and the bound widened by its quantisation error ([`Screen16::slack`]).
    #[inline]
    pub fn cos_lower(&self, x: usize, y: usize) -> f64 {
        if let Some((g, lower)) = &self.guess {
            if y == *g {
                return lower[x];
            }
        }
        let (inv_x, inv_y) = (self.inv[x], self.inv[y]);
        match self.q16 {
            Some(s) => {
                let c = f64::from(cpu::dot_i16_f32(s.row(x), self.e.row(y))) * s.scale(x);
                c * inv_x * inv_y - s.slack(x, self.screen)
            }
            None => f64::from(cpu::dot_f32(self.e.row(x), self.e.row(y))) * inv_x * inv_y - self.screen,
        }
    }

    /// The largest of [`cos_lower`](Self::cos_lower)-like lower bounds on `cos(x, y)`
    /// over `ys` (`-inf` for none): a bound stored for the guessed first pick, and the
    /// others' products taken eight at a time in one read of `x`'s row
    /// ([`cpu::dot_f32_x8`], less its own error bound; a group of fewer than three
    /// takes [`cpu::dot_f32`] each, a larger one pads with its last row). With the pool's
    /// 16-bit copy, `x`'s row is read from it ([`cpu::dot_i16_x8`]), each bound widened
    /// by its quantisation error.
    #[inline(always)]
    pub fn cos_lower_max(&self, x: usize, ys: &[usize]) -> f64 {
        // One or two (a refresh one pick behind, the first pick's bound on every row):
        // the single products, inlined where the loop calls them.
        if ys.len() < 3 {
            return self.cos_lower_each(x, ys);
        }
        self.cos_lower_max_grouped(x, ys)
    }

    /// The largest [`cos_lower`](Self::cos_lower)`(x, y)` over `ys`, one product each.
    #[inline(always)]
    fn cos_lower_each(&self, x: usize, ys: &[usize]) -> f64 {
        ys.iter()
            .fold(f64::NEG_INFINITY, |m, &y| m.max(self.cos_lower(x, y)))
    }

    /// [`cos_lower_max`](Self::cos_lower_max) over three or more rows.
    fn cos_lower_max_grouped(&self, x: usize, ys: &[usize]) -> f64 {
        let mut best = f64::NEG_INFINITY;
        let mut group = [0usize; cpu::X8];
        let mut n = 0;
        let flush = |group: &[usize], best: &mut f64| {
            if group.len() < 3 {
                *best = best.max(self.cos_lower_each(x, group));
                return;
            }
            let row = |j: usize| self.e.row(group[j.min(group.len() - 1)]);
            let rows = std::array::from_fn(row);
            let (dots, scale, slack) = match self.q16 {
                Some(s) => (
                    cpu::dot_i16_x8(s.row(x), rows),
                    s.scale(x),
                    s.slack(x, self.screen_x8),
                ),
                None => (cpu::dot_f32_x8(self.e.row(x), rows), 1.0, self.screen_x8),
            };
            for (&y, &p) in group.iter().zip(&dots) {
                let c = f64::from(p) * scale * self.inv[x] * self.inv[y] - slack;
                *best = best.max(c);
            }
        };
        for &y in ys {
            if self.guessed(y) {
                best = best.max(self.cos_lower(x, y));
                continue;
            }
            group[n] = y;
            n += 1;
            if n == cpu::X8 {
                flush(&group, &mut best);
                n = 0;
            }
        }
        flush(&group[..n], &mut best);
        best
    }

    /// `w(x) = max(cos(x, q), 0)` for every row with a query, `w(x) = 1` without one
    /// (SPEC §1: diversity alone).
    pub fn weights(&self) -> Vec<f64> {
        if self.rel.is_none() && self.lazy.is_none() {
            return vec![1.0; self.e.rows()];
        }
        (0..self.e.rows()).map(|x| self.rel_at(x).max(0.0)).collect()
    }
}

/// Sorts `rows` in decreasing cosine to `to` (each row's `f64` product over its `f64`
/// norm): a retriever's order, in which MMR's first pick is guessed. For tests.
#[cfg(test)]
pub(crate) fn in_retriever_order(rows: &mut [Vec<f32>], to: &[f64]) {
    let cos = |r: &[f32]| {
        let dot: f64 = r.iter().zip(to).map(|(&a, &b)| f64::from(a) * b).sum();
        dot / r.iter().map(|&v| f64::from(v).powi(2)).sum::<f64>().sqrt()
    };
    rows.sort_by(|a, b| cos(b).total_cmp(&cos(a)));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Resident;

    /// Lazy relevance gives the stored relevance's bits for every row, and its `f32`
    /// bounds hold above them within twice the screen, on rows of odd sizes and
    /// scales (Gaussian; a shared direction; 1e-3 to 1e3 per row; a query of 1e4).
    /// Row 0 is guessed as the first pick when the first 8 rows come in decreasing
    /// relevance (ties included), not otherwise (one pair out of order, fewer than 8
    /// rows); with the guess, `cos_lower(x, 0)` is below the exact cosine and
    /// `rel_upper(x)` above the relevance, each within twice the fused pair's bound.
    #[test]
    fn the_first_pick_is_guessed_in_a_retrievers_order_only() {
        let (n, d) = (301usize, 33usize);
        let mut rng = crate::rng::Rng::new(5);
        let q: Vec<f32> = (0..d).map(|_| rng.normal() as f32).collect();
        let raw: Vec<Vec<f32>> = (0..n)
            .map(|_| {
                q.iter()
                    .map(|&v| (f64::from(v) + 2.0 * rng.normal()) as f32)
                    .collect()
            })
            .collect();
        let mut sorted = raw.clone();
        in_retriever_order(&mut sorted, &q.iter().map(|&v| f64::from(v)).collect::<Vec<_>>());
        let mut swapped = sorted.clone();
        swapped.swap(5, 6);
        let mut tied = sorted.clone();
        tied[3] = tied[2].clone();
        for (rows, m, guessed) in [
            (&sorted, n, true),
            (&tied, n, true),
            (&swapped, n, false),
            (&raw, n, false),
            (&sorted, 7, false),
        ] {
            let e = crate::Embeddings::new(m, d, rows[..m].concat(), "t")
                .unwrap()
                .normalized()
                .unwrap();
            let inv = e.inv_norms().unwrap();
            let host = Resident::Host;
            let r = Rows {
                e: e.view(),
                inv: &inv,
                resident: &host,
                screen: None,
            };
            let lazy = Dense::lazy(&r, &q).unwrap();
            assert_eq!(lazy.guess.is_some(), guessed, "{m} rows, guessed {guessed}");
            let plain = Dense::new(&r, Some(&q)).unwrap();
            let slack = 2.0 * (cpu::dot_f32_pair_bound(d) + 1e-12);
            for x in 0..m {
                let (lo, cos) = (lazy.cos_lower(x, 0), plain.cos(x, 0));
                assert!(lo <= cos && cos - lo <= slack, "row {x}: {lo} against {cos}");
                let up = lazy.rel_upper(x);
                let rel = plain.rel_at(x);
                assert!(up >= rel && up - rel <= slack, "row {x}: {up} against {rel}");
            }
        }
    }

    /// [`Dense::cos_lower_max`] of row `x` over sets of 0 to 19 rows (spread over the
    /// pool of `n` from `x`: single products, padded and full groups of eight) is below
    /// the largest cosine (`-inf` for none) and within `slack` of it.
    fn lower_max_holds(dense: &Dense<'_>, x: usize, n: usize, slack: f64, what: &str) {
        for len in 0..20 {
            let start = (x * 7 + len) % n;
            let ys: Vec<usize> = (0..len).map(|j| (start + j * 3) % n).collect();
            let lo = dense.cos_lower_max(x, &ys);
            let max = ys
                .iter()
                .map(|&y| dense.cos(x, y))
                .fold(f64::NEG_INFINITY, f64::max);
            assert!(lo <= max, "{what} x {x} ys {ys:?}: {lo} above {max}");
            if len > 0 {
                assert!(max - lo <= slack, "{what} x {x} ys {ys:?}: {lo} against {max}");
            }
        }
    }

    /// The fused screen's bound on the largest cosine to a set of rows is below it and
    /// within twice its screen of it, for every set size from none (`-inf`) to 19 (groups
    /// of eight, padded groups, single products), the guessed first pick (a stored bound)
    /// among them or not, on near-duplicate rows (cosines near 1) of odd dimension.
    #[test]
    fn the_fused_screen_bounds_the_largest_cosine_from_below() {
        for (seed, n, d) in [(7u64, 41usize, 5usize), (8, 97, 385)] {
            let mut rng = crate::rng::Rng::new(seed);
            let c0: Vec<f64> = (0..d).map(|_| rng.normal()).collect();
            let mut raw: Vec<Vec<f32>> = (0..n)
                .map(|_| c0.iter().map(|&c| (c + 0.2 * rng.normal()) as f32).collect())
                .collect();
            // In decreasing relevance to c0 (a retriever's order), so row 0 is guessed.
            in_retriever_order(&mut raw, &c0);
            let e = crate::Embeddings::new(n, d, raw.concat(), "t")
                .unwrap()
                .normalized()
                .unwrap();
            let inv = e.inv_norms().unwrap();
            let q: Vec<f32> = c0.iter().map(|&v| v as f32).collect();
            let host = Resident::Host;
            let rows = Rows {
                e: e.view(),
                inv: &inv,
                resident: &host,
                screen: None,
            };
            let dense = Dense::lazy(&rows, &q).unwrap();
            assert!(dense.guessed(0), "seed {seed}: rows in decreasing relevance");
            let slack = 2.0
                * dense
                    .screen_x8
                    .max(dense.screen)
                    .max(cpu::dot_f32_pair_bound(d) + 1e-12);
            for x in 0..n {
                lower_max_holds(&dense, x, n, slack, &format!("seed {seed}"));
            }
        }
    }

    /// With the pool's 16-bit copy ([`Screen16`]), the screens stay bounds, each within
    /// twice its slack (the kernel's bound plus the row's quantisation error) of the
    /// value: the lazy relevance above the stored bits (eight rows a call where no first
    /// pick is guessed, one at a time for the last rows and with a guess), the cosine
    /// bounds below the cosines for sets of 0 to 19 rows (single products, padded and
    /// full groups of eight). Rows of odd sizes in a retriever's order and shuffled, one
    /// pool past the size that splits the pass across threads.
    #[test]
    fn the_16_bit_copys_screens_are_bounds() {
        for (seed, n, d, sorted) in [
            (11u64, 43usize, 7usize, true),
            (12, 43, 7, false),
            (13, 301, 385, false),
            (14, 2111, 65, false),
        ] {
            let mut rng = crate::rng::Rng::new(seed);
            let c0: Vec<f64> = (0..d).map(|_| rng.normal()).collect();
            let mut raw: Vec<Vec<f32>> = (0..n)
                .map(|i| {
                    let w = 10f64.powi((i % 5) as i32 - 2);
                    c0.iter()
                        .map(|&c| (w * (c + 0.3 * rng.normal())) as f32)
                        .collect()
                })
                .collect();
            if sorted {
                in_retriever_order(&mut raw, &c0);
            }
            let e = crate::Embeddings::new(n, d, raw.concat(), "t").unwrap();
            let inv = e.inv_norms().unwrap();
            let screen = Screen16::new(e.view(), &inv);
            let q: Vec<f32> = c0.iter().map(|&v| v as f32).collect();
            let host = Resident::Host;
            let rows = Rows {
                e: e.view(),
                inv: &inv,
                resident: &host,
                screen: Some(&screen),
            };
            let dense = Dense::lazy(&rows, &q).unwrap();
            assert_eq!(dense.guessed(0), sorted, "seed {seed}");
            let exact = Dense::new(&rows, Some(&q)).unwrap();
            let widest = dense
                .screen_x8
                .max(dense.screen)
                .max(cpu::dot_f32_pair_bound(d) + 1e-12);
            for x in 0..n {
                let slack = 2.0 * screen.slack(x, widest);
                let (up, r) = (dense.rel_upper(x), exact.rel_at(x));
                assert_eq!(dense.rel_at(x).to_bits(), r.to_bits(), "seed {seed} row {x}");
                assert!(
                    up >= r && up - r <= slack,
                    "seed {seed} row {x}: {up} against {r}"
                );
                // `slack` covers the guessed pick's bound too (from the f32 rows, within
                // `widest`).
                lower_max_holds(&dense, x, n, slack, &format!("seed {seed}"));
            }
        }
    }

    #[test]
    fn lazy_relevance_is_the_stored_bits_under_its_bounds() {
        for (seed, n, d) in [(1u64, 37usize, 5usize), (2, 301, 384), (3, 2111, 65)] {
            let mut rng = crate::rng::Rng::new(seed);
            let c0: Vec<f64> = (0..d).map(|_| rng.normal()).collect();
            let data: Vec<f32> = (0..n * d)
                .map(|i| {
                    let scale = 10f64.powi((i / d) as i32 % 7 - 3);
                    (scale * (2.0 * c0[i % d] + rng.normal())) as f32
                })
                .collect();
            let e = crate::Embeddings::new(n, d, data, "t")
                .unwrap()
                .normalized()
                .unwrap();
            let inv = e.inv_norms().unwrap();
            let q: Vec<f32> = (0..d).map(|j| (1e4 * (c0[j] + rng.normal())) as f32).collect();
            let host = Resident::Host;
            let rows = Rows {
                e: e.view(),
                inv: &inv,
                resident: &host,
                screen: None,
            };
            let eager = Dense::new(&rows, Some(&q)).unwrap();
            let lazy = Dense::lazy(&rows, &q).unwrap();
            // Rows guessed or not (a pool in decreasing relevance, or not): the pass's
            // products are the pair's or `dot_f32`'s.
            let slack = 2.0 * (screen(d).max(cpu::dot_f32_pair_bound(d) + 1e-12));
            for x in 0..n {
                let want = eager.rel.as_ref().unwrap()[x];
                assert_eq!(lazy.rel_at(x).to_bits(), want.to_bits(), "seed {seed} row {x}");
                let up = lazy.rel_upper(x);
                assert!(
                    up >= want && up - want <= slack,
                    "seed {seed} row {x}: {up} against {want}"
                );
            }
            assert_eq!(lazy.weights(), eager.weights());
        }
    }
}
