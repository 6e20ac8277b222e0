//! [`Dense`]: the pool's rows, their exact norms and relevance, the cosines every
//! embedding scorer and coverage read.

use crate::backend::cpu;
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
}

/// Relevance computed per row on demand, with `f32` upper bounds for every row.
struct Lazy<'a> {
    q: &'a [f32],
    inv_q: f64,
    upper: Vec<f64>,
}

/// `1 / ‖q‖` of a query, checked (finite, non-zero) only: relevance divides by the
/// query's exact norm, and scaling the query scales every candidate's relevance alike.
fn inv_query(q: &[f32]) -> crate::Result<f64> {
    crate::embeddings::unit_vector(q, "query")?;
    Ok(1.0 / cpu::dot(q, q).sqrt())
}

/// `cos(x, q)` from `<e~_x, q>` and the two inverse norms: the one scaling of the stored
/// and the lazy relevance (their bits must agree).
#[inline]
fn relevance(dot: f64, inv_x: f64, inv_q: f64) -> f64 {
    dot * (inv_x * inv_q)
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
        let inv_q = inv_query(query)?;
        let screen = screen(e.dim());
        let bound = |x: usize| {
            let c = f64::from(cpu::dot_f32(e.row(x), query)) * inv[x] * inv_q + screen;
            // An overflowed `f32` product bounds nothing: the row is left at the top.
            if c.is_finite() {
                c
            } else {
                f64::INFINITY
            }
        };
        let upper = if e.rows() < super::driver::SMALL_POOL {
            (0..e.rows()).map(bound).collect()
        } else {
            use rayon::prelude::*;
            (0..e.rows())
                .into_par_iter()
                .with_min_len(256)
                .map(bound)
                .collect()
        };
        Ok(Dense {
            e,
            inv,
            rel: None,
            lazy: Some(Lazy {
                q: query,
                inv_q,
                upper,
            }),
            screen,
        })
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
        }
    }

    #[inline]
    pub fn cos(&self, x: usize, y: usize) -> f64 {
        cpu::dot(self.e.row(x), self.e.row(y)) * self.inv[x] * self.inv[y]
    }

    /// A lower bound on [`cos`](Self::cos)`(x, y)`: the product in `f32`
    /// ([`cpu::dot_f32`]) less its error bound, a few times cheaper. The rows' norms are
    /// `1 / inv`, so the bound on the product over `‖x‖ ‖y‖` is the bound on the cosine;
    /// `1e-12` covers the `f64` roundings of the scaling and of [`cos`] itself.
    #[inline]
    pub fn cos_lower(&self, x: usize, y: usize) -> f64 {
        let c = f64::from(cpu::dot_f32(self.e.row(x), self.e.row(y))) * self.inv[x] * self.inv[y];
        c - self.screen
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Resident;

    /// Lazy relevance gives the stored relevance's bits for every row, and its `f32`
    /// bounds hold above them within twice the screen, on rows of odd sizes and
    /// scales (Gaussian; a shared direction; 1e-3 to 1e3 per row; a query of 1e4).
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
            };
            let eager = Dense::new(&rows, Some(&q)).unwrap();
            let lazy = Dense::lazy(&rows, &q).unwrap();
            let slack = 2.0 * screen(d);
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
