//! Submodular coverage (facility location, SPEC §1):
//! `F(C) = sum_{j in P} max(0, max_{i in C} w(i) cos(i, j))`, gain `(F(C+x) - F(C)) / cost(x)`.
//!
//! Up to [`COVERAGE_DENSE_MAX`](super::presets::COVERAGE_DENSE_MAX) items the similarity
//! `s(i, j) = max(0, w(i) cos(i, j))` is kept dense (`N × N`). Above that it is sparsified
//! to each item's [`COVERAGE_KNN`](super::presets::COVERAGE_KNN) largest entries (its
//! k nearest neighbours by `s`, itself included), the standard remedy for facility location
//! at scale: `F` is then computed with every other `s(i, j)` taken as 0. The sparse `F` is
//! a lower bound of the dense one, still monotone submodular, and equal to it whenever no
//! item's coverage comes from outside the k nearest neighbours of the item covering it.
//! Memory is O(N·k) instead of O(N²); time stays O(N²·d) for the exact neighbour search.

use super::dense::Dense;
use super::driver::Scorer;
use crate::backend::cpu;
use crate::error::Result;
use rayon::prelude::*;

enum Sim {
    Dense { n: usize, s: Vec<f32> },
    Sparse { r: usize, idx: Vec<u32>, val: Vec<f32> },
}

/// Facility-location state: the similarity and the current coverage of every item.
pub(crate) struct Coverage<'a> {
    sim: Sim,
    cur: Vec<f32>,
    costs: Option<&'a [f64]>,
}

/// Rows of `s` computed per parallel task for the sparse build.
const SPARSE_ROWS: usize = 64;

impl<'a> Coverage<'a> {
    /// The similarity of `d`'s rows, dense up to `dense_max` items, else each row's `knn`
    /// largest. `cancel` is checked between the sparse build's blocks of rows (its
    /// O(N²·d) neighbour search), so a cancelled build stops within one block per thread.
    pub fn build(
        d: &Dense<'_>,
        costs: Option<&'a [f64]>,
        dense_max: usize,
        knn: usize,
        cancel: Option<&crate::cancel::Cancel>,
    ) -> Result<Self> {
        // The similarity is a GEMM of unit rows: rows kept as given are unit-normalised
        // into a copy first (O(N d) against the GEMM's O(N² d)), so rows equal up to
        // scale get identical rows of `s` and tie exactly.
        let copy = d.e.unit_copy()?;
        let e = copy.as_ref().map_or(d.e, |u| u.e.view());
        let n = e.rows();
        let w = d.weights();
        let sim = if n <= dense_max {
            // Rows are unit; the computed diagonal keeps duplicates' rows of `s`
            // bit-identical (each covers itself by w(i)<e~i,e~i>, w(i) up to f32 rounding).
            let mut s = crate::similarity::cosine_gram_computed_diag(e)?;
            s.par_chunks_mut(n.max(1)).enumerate().for_each(|(i, row)| {
                let wi = w[i] as f32;
                row.iter_mut().for_each(|v| *v = (wi * *v).max(0.0));
            });
            Sim::Dense { n, s }
        } else {
            let r = knn.clamp(1, n);
            let data = e.as_slice();
            let dim = e.dim();
            let parts: Vec<(Vec<u32>, Vec<f32>)> = (0..n.div_ceil(SPARSE_ROWS))
                .into_par_iter()
                .map(|p| {
                    if cancel.is_some_and(crate::cancel::Cancel::is_cancelled) {
                        return (Vec::new(), Vec::new());
                    }
                    let r0 = p * SPARSE_ROWS;
                    let rows = SPARSE_ROWS.min(n - r0);
                    let mut block = vec![0.0f32; rows * n];
                    cpu::gemm_abt(
                        &data[r0 * dim..(r0 + rows) * dim],
                        data,
                        dim,
                        &mut block,
                        n,
                        false,
                    );
                    let mut idx = Vec::with_capacity(rows * r);
                    let mut val = Vec::with_capacity(rows * r);
                    let mut order: Vec<u32> = Vec::with_capacity(n);
                    for (k, row) in block.chunks_mut(n).enumerate() {
                        let i = r0 + k;
                        let wi = w[i];
                        // Unit rows: the GEMM's value is the cosine (diagonal as computed,
                        // as in the dense path).
                        let wf = wi as f32;
                        row.iter_mut().for_each(|v| *v = (wf * *v).max(0.0));
                        order.clear();
                        order.extend(0..n as u32);
                        let by =
                            |a: &u32, b: &u32| row[*b as usize].total_cmp(&row[*a as usize]).then(a.cmp(b));
                        order.select_nth_unstable_by(r - 1, by);
                        let top = &mut order[..r];
                        top.sort_unstable();
                        idx.extend_from_slice(top);
                        val.extend(top.iter().map(|&j| row[j as usize]));
                    }
                    (idx, val)
                })
                .collect();
            crate::cancel::check(cancel)?;
            let mut idx = Vec::with_capacity(n * r);
            let mut val = Vec::with_capacity(n * r);
            for (i, v) in parts {
                idx.extend(i);
                val.extend(v);
            }
            Sim::Sparse { r, idx, val }
        };
        Ok(Coverage {
            sim,
            cur: vec![0.0; n],
            costs,
        })
    }

    /// True when the similarity was sparsified (the pool is above the dense limit).
    pub fn is_sparse(&self) -> bool {
        matches!(self.sim, Sim::Sparse { .. })
    }

    /// `F(C+x) - F(C)`.
    fn delta(&self, x: usize) -> f64 {
        let cur = &self.cur;
        match &self.sim {
            Sim::Dense { n, s } => cpu::sum_pos_diff(&s[x * n..(x + 1) * n], cur),
            Sim::Sparse { r, idx, val } => idx[x * r..(x + 1) * r]
                .iter()
                .zip(&val[x * r..(x + 1) * r])
                .map(|(&j, &v)| f64::from((v - cur[j as usize]).max(0.0)))
                .sum(),
        }
    }
}

impl Scorer for Coverage<'_> {
    type Cand = ();
    fn cand(&self, _: usize) {}
    fn refresh(&self, x: usize, _: &mut ()) -> f64 {
        self.delta(x) / self.costs.map_or(1.0, |c| c[x])
    }
    fn add(&mut self, x: usize, _: &()) {
        let cur = &mut self.cur;
        match &self.sim {
            Sim::Dense { n, s } => cur
                .iter_mut()
                .zip(&s[x * n..(x + 1) * n])
                .for_each(|(c, &v)| *c = c.max(v)),
            Sim::Sparse { r, idx, val } => {
                for (&j, &v) in idx[x * r..(x + 1) * r].iter().zip(&val[x * r..(x + 1) * r]) {
                    cur[j as usize] = cur[j as usize].max(v);
                }
            }
        }
    }
    fn monotone(&self) -> bool {
        true
    }
}
