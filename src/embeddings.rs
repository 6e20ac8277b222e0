//! A validated embedding matrix: rows are items, `f32`, row-major.
//!
//! Construction checks the shape and that every value is finite; [`Embeddings::normalize`]
//! makes every row unit length and refuses zero rows. Errors name the source (a file
//! name or a role such as "query"), the row and the column.
//!
//! ```
//! use ctxprune::Embeddings;
//! let mut e = Embeddings::new(2, 2, vec![3.0, 4.0, 0.0, 2.0], "docs")?;
//! e.normalize()?;
//! assert_eq!(e.row(0), &[0.6, 0.8]);
//! let bad = Embeddings::new(2, 2, vec![1.0, f32::NAN, 0.0, 1.0], "docs").unwrap_err();
//! assert!(bad.to_string().contains("row 0"), "{bad}");   // names the source, row and column
//! # Ok::<(), ctxprune::Error>(())
//! ```

use crate::error::{Error, Result};

/// An `rows × dim` matrix of `f32`, row-major, every value finite.
#[derive(Clone, Debug, PartialEq)]
pub struct Embeddings {
    rows: usize,
    dim: usize,
    data: Vec<f32>,
    unit: bool,
    source: String,
}

impl Embeddings {
    /// Wraps `data` (row-major, `rows * dim` values) after checking its length and that
    /// every value is finite. `source` names the matrix in error messages.
    pub fn new(rows: usize, dim: usize, data: Vec<f32>, source: impl Into<String>) -> Result<Self> {
        let source = source.into();
        if dim == 0 {
            return Err(Error::invalid(&source, "embedding dimension is 0"));
        }
        if rows.checked_mul(dim) != Some(data.len()) {
            return Err(Error::invalid(
                &source,
                format!("{} values do not fill {rows} rows of dimension {dim}", data.len()),
            ));
        }
        if let Some(pos) = data.iter().position(|v| !v.is_finite()) {
            return Err(Error::NonFinite {
                source_name: source,
                row: pos / dim,
                col: pos % dim,
                value: data[pos],
            });
        }
        Ok(Embeddings {
            rows,
            dim,
            data,
            unit: false,
            source,
        })
    }

    /// Wraps rows that a [`crate::Pool`] unit-normalised (a pool's
    /// [`embeddings`](crate::Pool::embeddings) when they are [`is_unit`](Self::is_unit),
    /// written out and read back: a pickled pool), kept as they are and marked unit, so a
    /// pool made of them selects exactly as the original.
    /// [`Embeddings::new`]'s checks, and every row's norm within 1e-5 of 1 (a row that is
    /// not is an error naming it: rows from anywhere else go through
    /// [`normalize`](Self::normalize)).
    pub fn from_unit_rows(
        rows: usize,
        dim: usize,
        data: Vec<f32>,
        source: impl Into<String>,
    ) -> Result<Self> {
        let mut e = Embeddings::new(rows, dim, data, source)?;
        for i in 0..rows {
            let n = crate::backend::cpu::dot(e.row(i), e.row(i)).sqrt();
            if (n - 1.0).abs() > 1e-5 {
                return Err(Error::invalid(
                    &e.source,
                    format!("row {i} has norm {n}, not 1: these are not a pool's unit rows"),
                ));
            }
        }
        e.unit = true;
        Ok(e)
    }

    /// Builds the matrix from rows of equal length; a ragged row is an error naming it.
    pub fn from_rows<R: AsRef<[f32]>>(rows: &[R], source: impl Into<String>) -> Result<Self> {
        let source = source.into();
        let first = rows.first().ok_or_else(|| Error::Empty(source.clone()))?;
        let dim = first.as_ref().len();
        let mut data = Vec::with_capacity(rows.len() * dim);
        for (i, r) in rows.iter().enumerate() {
            let r = r.as_ref();
            if r.len() != dim {
                return Err(Error::invalid(
                    &source,
                    format!("row {i} has {} values, row 0 has {dim} (ragged rows)", r.len()),
                ));
            }
            data.extend_from_slice(r);
        }
        Embeddings::new(rows.len(), dim, data, source)
    }

    /// Number of rows (items).
    #[must_use]
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Embedding dimension.
    #[must_use]
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// True when there are no rows.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.rows == 0
    }

    /// Row `i`. Panics if `i >= rows()` (an internal indexing contract, not user input).
    #[must_use]
    pub fn row(&self, i: usize) -> &[f32] {
        &self.data[i * self.dim..(i + 1) * self.dim]
    }

    /// The whole matrix, row-major.
    #[must_use]
    pub fn as_slice(&self) -> &[f32] {
        &self.data
    }

    /// Consumes the matrix, returning its row-major values.
    #[must_use]
    pub fn into_vec(self) -> Vec<f32> {
        self.data
    }

    /// The name used in error messages.
    #[must_use]
    pub fn source_name(&self) -> &str {
        &self.source
    }

    /// True once [`normalize`](Self::normalize) has run (or the rows were checked unit).
    #[must_use]
    pub fn is_unit(&self) -> bool {
        self.unit
    }

    /// Scales every row to unit Euclidean length, in place. A zero row is an error that
    /// names it; the matrix is unchanged in that case.
    pub fn normalize(&mut self) -> Result<()> {
        if self.unit {
            return Ok(());
        }
        let dim = self.dim;
        if let Some(row) = self
            .data
            .chunks_exact(dim)
            .position(|r| r.iter().all(|&v| v == 0.0))
        {
            return Err(Error::ZeroNorm {
                source_name: self.source.clone(),
                row,
            });
        }
        use rayon::prelude::*;
        self.data.par_chunks_exact_mut(dim).for_each(|r| {
            // The norm from f64-accumulated products; divide in f64 and round once, so
            // rows equal up to scale become bit-identical.
            let n = crate::backend::cpu::sum_sq(r).sqrt();
            crate::backend::cpu::div_round(r, n);
        });
        self.unit = true;
        Ok(())
    }

    /// `1 / ‖row_i‖` for every row, in `f64` (exact norms of the `f32` rows). A zero row
    /// is an error naming it. Selectors use these to take cosines without copying or
    /// normalising the matrix.
    pub fn inv_norms(&self) -> Result<Vec<f64>> {
        use rayon::prelude::*;
        let inv: Vec<f64> = self
            .data
            .par_chunks_exact(self.dim)
            .map(|r| 1.0 / crate::backend::cpu::sum_sq(r).sqrt())
            .collect();
        if let Some(row) = inv.iter().position(|v| !v.is_finite()) {
            return Err(Error::ZeroNorm {
                source_name: self.source.clone(),
                row,
            });
        }
        Ok(inv)
    }

    /// The unit rows of a borrowed row-major matrix in one pass over it (on every core past
    /// 2,048 rows), with
    /// what the selectors read beside them: each row is checked (finite, non-zero),
    /// divided by its `f64` norm and rounded once to `f32` (as [`normalize`](Self::normalize)),
    /// and, while it is in cache, its exact inverse norm and its relevance
    /// `cos(row, query)` (as the selectors compute it) are taken. The same bits as
    /// [`Embeddings::new`], [`normalize`](Self::normalize), [`inv_norms`](Self::inv_norms)
    /// and a relevance pass run one after another, on every thread count; the errors are
    /// theirs too (the first non-finite value, else the first zero row).
    pub fn unit_rows(
        data: &[f32],
        rows: usize,
        dim: usize,
        source: &str,
        query: Option<&[f32]>,
    ) -> Result<UnitRows> {
        Embeddings::unit_rows_in(Vec::new(), data, rows, dim, source, query)
    }

    /// [`unit_rows`](Self::unit_rows) written into `buf` (its allocation reused, its
    /// contents overwritten): a caller that selects from arrays again and again keeps one
    /// buffer instead of faulting in fresh pages every call. The same bits.
    pub fn unit_rows_in(
        mut buf: Vec<f32>,
        data: &[f32],
        rows: usize,
        dim: usize,
        source: &str,
        query: Option<&[f32]>,
    ) -> Result<UnitRows> {
        use rayon::prelude::*;
        check_shape(data, rows, dim, source)?;
        // A query the selectors would refuse (wrong dimension, not finite, zero) gets no
        // relevance here: the selection names it, after the rows, as it always has.
        let (query, inv_q) = accepted_query(query, dim);
        // Every value is overwritten below; only a buffer that grows is written first.
        if buf.len() >= data.len() {
            buf.truncate(data.len());
        } else {
            buf.resize(data.len(), 0.0);
        }
        let mut out = buf;
        let mut inv = vec![0.0f64; rows];
        let mut rel = vec![0.0f64; rows];
        // Per task: the first non-finite value's position and the first zero row.
        const TASK: usize = 64;
        type Chunks<'c> = ((&'c mut [f32], &'c mut [f64]), &'c mut [f64]);
        let task = |(t, ((o, iv), rv)): (usize, Chunks<'_>)| {
            let base = t * TASK;
            let mut zero = None;
            let rows = o.chunks_exact_mut(dim).zip(iv.iter_mut()).zip(rv.iter_mut());
            for (r, ((orow, i), rl)) in rows.enumerate() {
                let row = &data[(base + r) * dim..(base + r + 1) * dim];
                let n = match row_norm(row) {
                    RowNorm::Norm(n) => n,
                    RowNorm::NonFinite(c) => return (Some((base + r) * dim + c), zero),
                    RowNorm::Zero => {
                        zero = zero.or(Some(base + r));
                        continue;
                    }
                };
                let (uu, uq) = crate::backend::cpu::unit_row(row, n, orow, query);
                *i = 1.0 / uu.sqrt();
                if let Some(iq) = inv_q {
                    *rl = uq * (*i * iq);
                }
            }
            (None, zero)
        };
        let first_bad = if rows < crate::backend::cpu::SMALL_POOL {
            out.chunks_mut(TASK * dim)
                .zip(inv.chunks_mut(TASK))
                .zip(rel.chunks_mut(TASK))
                .enumerate()
                .map(task)
                .fold((None, None), first_of)
        } else {
            out.par_chunks_mut(TASK * dim)
                .zip(inv.par_chunks_mut(TASK))
                .zip(rel.par_chunks_mut(TASK))
                .enumerate()
                .map(task)
                .reduce(|| (None, None), first_of)
        };
        bad_rows(data, dim, source, first_bad)?;
        let e = Embeddings {
            rows,
            dim,
            data: out,
            unit: true,
            source: source.to_string(),
        };
        Ok(UnitRows {
            e,
            inv,
            rel: query.map(|_| rel),
        })
    }

    /// A unit-normalised copy (see [`normalize`](Self::normalize)).
    pub fn normalized(&self) -> Result<Self> {
        let mut e = self.clone();
        e.normalize()?;
        Ok(e)
    }

    /// Checks that `other` has this matrix's dimension; `what` names the pair.
    pub fn check_dim(&self, other: usize, what: &str) -> Result<()> {
        self.view().check_dim(other, what)
    }

    /// The rows `idx`, in that order, as a new matrix.
    pub fn select_rows(&self, idx: &[usize]) -> Result<Self> {
        let mut data = Vec::with_capacity(idx.len() * self.dim);
        for &i in idx {
            if i >= self.rows {
                return Err(Error::invalid(
                    &self.source,
                    format!("row index {i} out of range ({} rows)", self.rows),
                ));
            }
            data.extend_from_slice(self.row(i));
        }
        let mut e = Embeddings::new(idx.len(), self.dim, data, self.source.clone())?;
        e.unit = self.unit;
        Ok(e)
    }
}

/// A borrowed `rows × dim` row-major matrix of finite `f32`: the rows a selection or a
/// reranker reads, owned by an [`Embeddings`] (a pool's copy) or by the caller (an array
/// selected from once, [`crate::select::Selector::select_rows`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Matrix<'a> {
    data: &'a [f32],
    rows: usize,
    dim: usize,
    unit: bool,
}

impl<'a> Matrix<'a> {
    /// Rows the caller checked (finite, `rows × dim` values), not known to be unit.
    pub(crate) fn borrowed(data: &'a [f32], rows: usize, dim: usize) -> Self {
        debug_assert_eq!(data.len(), rows * dim);
        Matrix {
            data,
            rows,
            dim,
            unit: false,
        }
    }

    pub(crate) fn rows(&self) -> usize {
        self.rows
    }

    pub(crate) fn dim(&self) -> usize {
        self.dim
    }

    /// Row `i` (an internal index: panics past the end).
    pub(crate) fn row(&self, i: usize) -> &'a [f32] {
        &self.data[i * self.dim..(i + 1) * self.dim]
    }

    pub(crate) fn as_slice(&self) -> &'a [f32] {
        self.data
    }

    /// The rows unit-normalised into a copy ([`Embeddings::unit_rows`]), or `None` when
    /// they are unit already: what coverage builds its similarity from, on every backend,
    /// so rows equal up to scale tie exactly there.
    pub(crate) fn unit_copy(&self) -> Result<Option<UnitRows>> {
        if self.unit {
            return Ok(None);
        }
        Embeddings::unit_rows(self.data, self.rows, self.dim, "pool", None).map(Some)
    }

    /// Whether every row was normalised to unit length ([`Embeddings::is_unit`]).
    pub(crate) fn is_unit(&self) -> bool {
        self.unit
    }

    /// Checks that `other` has this matrix's dimension; `what` names the pair.
    pub(crate) fn check_dim(&self, other: usize, what: &str) -> Result<()> {
        if other != self.dim {
            return Err(Error::DimensionMismatch {
                what: what.to_string(),
                expected: self.dim,
                got: other,
            });
        }
        Ok(())
    }
}

/// The norms within which a pool keeps rows as given: every row's `f64` norm within 2^-8
/// of 1, as embedding models return them (unit in `f32`, or rounded to f16 or bf16).
/// Cosines divide each product by the rows' exact `f64` norms either way; rows kept as
/// given save the unit copy (a one-shot selection borrows the caller's array). Rows
/// outside it (unnormalised models, hand-made vectors) are unit-normalised into a copy
/// ([`Embeddings::unit_rows`]): dividing in `f64` and rounding once to `f32` makes rows
/// equal up to scale bit-identical, so they tie exactly. Kept rows that are exact
/// multiples of one another (possible for sparse or low-precision rows, such as `e1` and
/// `0.99609375 e1`) have cosines that may differ in the last bit instead; dense model
/// embeddings are not exact multiples of one another in practice.
const KEPT_NORMS: std::ops::RangeInclusive<f64> = 0.99609375..=1.00390625;

/// What [`Embeddings::kept_inv_norms`] found.
pub(crate) enum Norms {
    /// Every row's norm is within [`KEPT_NORMS`]: the rows are kept as given, with these
    /// `1 / ‖row‖` ([`kept_inv_norm`]) and, when a per-row function was given, its value
    /// for every row.
    Kept {
        inv: Vec<f64>,
        per_row: Option<Vec<(f64, f64)>>,
    },
    /// A row's norm is outside it: the rows need a unit copy.
    OutOfRange,
}

/// What a pass over the rows takes from each row while it is in cache, given the row and
/// its inverse norm (the selectors' relevance: `select::dense::RelPass::row`).
pub(crate) type PerRow<'f> = &'f (dyn Fn(&[f32], f64) -> (f64, f64) + Sync);

/// `1 / ‖row‖` (`f64`, from [`crate::backend::cpu::sum_sq`]) when the row's norm is within
/// [`KEPT_NORMS`], the bits [`Embeddings::kept_inv_norms`] keeps; `None` otherwise (not
/// finite, zero, or not near unit length).
pub(crate) fn kept_inv_norm(row: &[f32]) -> Option<f64> {
    match row_norm(row) {
        RowNorm::Norm(n) if KEPT_NORMS.contains(&n) => Some(1.0 / n),
        _ => None,
    }
}

impl Embeddings {
    /// One pass over a borrowed row-major matrix (on every core past
    /// [`SMALL_POOL`](crate::backend::cpu::SMALL_POOL) rows): takes each row's exact inverse
    /// norm (the [`inv_norms`](Self::inv_norms) bits) and, when every row is within
    /// [`KEPT_NORMS`], checks every value finite and every row non-zero, with the errors
    /// of [`Embeddings::unit_rows`] (the first non-finite value, else the first zero row).
    /// At the first row outside the range the pass stops and says so: the unit copy the
    /// rows then need checks them as it makes them, so rows that are not unit (a raw
    /// model's) cost a row or two here, not a read. `per_row`, when given, is evaluated on
    /// every kept row with its inverse norm in the same read (the selectors take each
    /// row's relevance so, with no second read).
    pub(crate) fn kept_inv_norms(
        data: &[f32],
        rows: usize,
        dim: usize,
        source: &str,
        per_row: Option<PerRow<'_>>,
    ) -> Result<Norms> {
        use rayon::prelude::*;
        use std::sync::atomic::{AtomicBool, Ordering};
        check_shape(data, rows, dim, source)?;
        let mut inv = vec![0.0f64; rows];
        // Zeroed pages, never touched without a per-row function.
        let mut vals = vec![(0.0f64, 0.0f64); rows];
        let far = AtomicBool::new(false);
        const TASK: usize = 256;
        // Per task: the first non-finite value's position and the first zero row.
        type Chunks<'c> = (&'c mut [f64], &'c mut [(f64, f64)]);
        let task = |(t, (iv, vv)): (usize, Chunks<'_>)| {
            let mut zero = None;
            for (r, i) in iv.iter_mut().enumerate() {
                if far.load(Ordering::Relaxed) {
                    break;
                }
                let at = t * TASK + r;
                let row = &data[at * dim..(at + 1) * dim];
                let n = match row_norm(row) {
                    RowNorm::Norm(n) => n,
                    RowNorm::NonFinite(c) => return (Some(at * dim + c), zero),
                    RowNorm::Zero => {
                        zero = zero.or(Some(at));
                        continue;
                    }
                };
                if !KEPT_NORMS.contains(&n) {
                    far.store(true, Ordering::Relaxed);
                    break;
                }
                *i = 1.0 / n;
                // The row is in cache from its norm: this costs no second read.
                if let Some(f) = per_row {
                    vv[r] = f(row, *i);
                }
            }
            (None, zero)
        };
        let (bad, zero) = if rows < crate::backend::cpu::SMALL_POOL {
            inv.chunks_mut(TASK)
                .zip(vals.chunks_mut(TASK))
                .enumerate()
                .map(task)
                .fold((None, None), first_of)
        } else {
            inv.par_chunks_mut(TASK)
                .zip(vals.par_chunks_mut(TASK))
                .enumerate()
                .map(task)
                .reduce(|| (None, None), first_of)
        };
        if far.into_inner() {
            return Ok(Norms::OutOfRange);
        }
        bad_rows(data, dim, source, (bad, zero))?;
        Ok(Norms::Kept {
            inv,
            per_row: per_row.map(|_| vals),
        })
    }

    /// The matrix as the selectors read it.
    pub(crate) fn view(&self) -> Matrix<'_> {
        Matrix {
            data: &self.data,
            rows: self.rows,
            dim: self.dim,
            unit: self.unit,
        }
    }
}

/// A query the selectors accept (dimension `dim`, finite, non-zero) with its exact inverse
/// norm; `(None, None)` for one they refuse (the selection names it, after the rows).
fn accepted_query(query: Option<&[f32]>, dim: usize) -> (Option<&[f32]>, Option<f64>) {
    let query = query.filter(|q| q.len() == dim && unit_vector(q, "query").is_ok());
    (query, query.map(|q| 1.0 / crate::backend::cpu::sum_sq(q).sqrt()))
}

/// `rows × dim` values from `data`, or why not (a zero dimension, a length that does not
/// fill the rows), naming `source`.
fn check_shape(data: &[f32], rows: usize, dim: usize, source: &str) -> Result<()> {
    if dim == 0 {
        return Err(Error::invalid(source, "embedding dimension is 0"));
    }
    if rows.checked_mul(dim) != Some(data.len()) {
        return Err(Error::invalid(
            source,
            format!("{} values do not fill {rows} rows of dimension {dim}", data.len()),
        ));
    }
    Ok(())
}

/// The first bad value and the first zero row of two runs of rows, `a` before `b`: how a
/// checking pass combines its tasks' findings, in row order on every thread count.
fn first_of(a: FirstBad, b: FirstBad) -> FirstBad {
    (a.0.or(b.0), a.1.or(b.1))
}

/// What a checking pass finds in a run of rows: the position of the first non-finite
/// value and the first zero row.
type FirstBad = (Option<usize>, Option<usize>);

/// A row's norm as a pass over unchecked rows finds it.
enum RowNorm {
    /// The f64 norm ([`crate::backend::cpu::sum_sq`]), finite and > 0.
    Norm(f64),
    /// The column of the row's first non-finite value.
    NonFinite(usize),
    /// Every value is 0.
    Zero,
}

fn row_norm(row: &[f32]) -> RowNorm {
    // The f64 sum of squares of f32 values is finite unless a value is not.
    let n = crate::backend::cpu::sum_sq(row).sqrt();
    if !n.is_finite() {
        RowNorm::NonFinite(row.iter().position(|v| !v.is_finite()).unwrap_or(0))
    } else if n == 0.0 {
        RowNorm::Zero
    } else {
        RowNorm::Norm(n)
    }
}

/// The error of a pass that found, in row order, the first non-finite value (its position
/// in `data`) and the first zero row: the value is named first, as [`Embeddings::new`]
/// names it before [`Embeddings::normalize`] finds the zero row.
fn bad_rows(
    data: &[f32],
    dim: usize,
    source: &str,
    (bad, zero): (Option<usize>, Option<usize>),
) -> Result<()> {
    if let Some(pos) = bad {
        return Err(Error::NonFinite {
            source_name: source.to_string(),
            row: pos / dim,
            col: pos % dim,
            value: data[pos],
        });
    }
    if let Some(row) = zero {
        return Err(Error::ZeroNorm {
            source_name: source.to_string(),
            row,
        });
    }
    Ok(())
}

/// What [`Embeddings::unit_rows`] returns: the unit rows, their exact inverse norms, and
/// each row's relevance to the query when one was given.
#[derive(Clone, Debug)]
pub struct UnitRows {
    /// The unit-normalised rows.
    pub e: Embeddings,
    /// `1 / ‖row‖` of each unit row, in `f64` (1 up to rounding).
    pub inv: Vec<f64>,
    /// `cos(row, query)` of each row, as the selectors compute it; `None` without a
    /// query, or with one the selectors refuse.
    pub rel: Option<Vec<f64>>,
}

/// Validates a single vector (a query) and returns it unit-normalised.
pub fn unit_vector(v: &[f32], source: &str) -> Result<Vec<f32>> {
    let mut e = Embeddings::new(1, v.len(), v.to_vec(), source)?;
    e.normalize()?;
    Ok(e.into_vec())
}

/// `x` as f32, or why it cannot be one: a finite value that overflows to an infinity, or
/// a non-zero value that underflows to 0. NaN and infinities pass through (the matrix
/// checks refuse them, naming the row). Every loader and front end narrows through this.
#[inline]
pub fn narrow_f32(x: f64) -> std::result::Result<f32, String> {
    let y = x as f32;
    if x.is_finite() && !y.is_finite() {
        return Err(format!("{x:e} does not fit in f32 (largest {:e})", f32::MAX));
    }
    if y == 0.0 && x != 0.0 {
        return Err(format!("{x:e} underflows f32 to 0"));
    }
    Ok(y)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_nan_ragged_zero_and_names_the_row() {
        let e = Embeddings::new(2, 2, vec![1.0, 0.0, f32::NAN, 1.0], "x.npy").unwrap_err();
        assert!(e.to_string().contains("row 1, column 0"), "{e}");
        let e = Embeddings::from_rows(&[vec![1.0, 2.0], vec![1.0]], "r").unwrap_err();
        assert!(e.to_string().contains("row 1 has 1 values"), "{e}");
        let mut z = Embeddings::new(2, 2, vec![1.0, 1.0, 0.0, 0.0], "z").unwrap();
        let e = z.normalize().unwrap_err();
        assert!(e.to_string().contains("row 1 has zero norm"), "{e}");
        assert!(Embeddings::from_rows::<Vec<f32>>(&[], "empty").is_err());
    }

    #[test]
    fn normalize_gives_unit_rows() {
        let mut e = Embeddings::new(2, 3, vec![3.0, 4.0, 0.0, 0.0, -2.0, 0.0], "a").unwrap();
        e.normalize().unwrap();
        assert_eq!(e.row(0), &[0.6, 0.8, 0.0]);
        assert_eq!(e.row(1), &[0.0, -1.0, 0.0]);
        assert!(e.is_unit());
    }
}
