//! [`Dense`]: the pool's unit rows, their exact norms and relevance, the cosines every
//! embedding scorer and coverage read.

use crate::backend::cpu;
use crate::backend::picker::Rows;
use crate::embeddings::Embeddings;

/// Cosines over a pool of unit-normalised rows (SPEC: "computed on unit-normalized
/// embeddings"), every inner product accumulated in `f64` and divided by the unit rows'
/// exact `f64` norms: `cos(i, j) = <e~_i, e~_j> / (‖e~_i‖ ‖e~_j‖)`. Normalising first makes
/// rows that differ only in scale bit-identical, so their scores tie exactly and the lower
/// index wins; dividing by the exact norms keeps residuals of in-span vectors at ~1e-16.
pub(crate) struct Dense<'a> {
    pub e: &'a Embeddings,
    pub inv: &'a [f64],
    /// `cos(x, q)` for every row, when there is a query.
    pub rel: Option<Vec<f64>>,
    /// What [`cos_lower`](Self::cos_lower) takes off the `f32` cosine: the product's
    /// error bound at this dimension, and `1e-12` for the `f64` roundings.
    screen: f64,
}

/// [`Dense::screen`] for rows of `d` dimensions.
fn screen(d: usize) -> f64 {
    cpu::dot_f32_bound(d) + 1e-12
}

impl<'a> Dense<'a> {
    /// The pool's unit rows with the relevance of every row to `query`.
    pub fn new(rows: &Rows<'a>, query: Option<&[f32]>) -> crate::Result<Self> {
        let e = rows.e;
        let inv = rows.inv;
        let rel = match query {
            None => None,
            Some(q) => {
                // Only checked: relevance divides by the query's exact norm, and scaling
                // the query scales every candidate's relevance alike.
                crate::embeddings::unit_vector(q, "query")?;
                let inv_q = 1.0 / cpu::dot(q, q).sqrt();
                let mut r = vec![0.0; e.rows()];
                cpu::matvec(e.as_slice(), e.dim(), q, &mut r);
                r.iter_mut().zip(inv).for_each(|(v, &i)| *v *= i * inv_q);
                Some(r)
            }
        };
        Ok(Dense {
            e,
            inv,
            rel,
            screen: screen(e.dim()),
        })
    }

    /// The pool's unit rows with relevance already computed (by
    /// [`crate::Embeddings::unit_rows`], in the pass that made the rows): the same
    /// numbers [`Dense::new`] computes.
    pub fn with_rel(rows: &Rows<'a>, rel: Vec<f64>) -> Self {
        Dense {
            e: rows.e,
            inv: rows.inv,
            rel: Some(rel),
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
        self.rel.as_ref().map_or_else(
            || vec![1.0; self.e.rows()],
            |r| r.iter().map(|&c| c.max(0.0)).collect(),
        )
    }
}
