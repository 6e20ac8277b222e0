//! Attention mass on the CPU (the reference path of `attention::mass`).
//!
//! Steps run in chunks of at most 64. Per chunk, layer and key head `g`: the query rows of
//! the `H / G` heads reading `g`, stacked (`(H/G)·chunk × d`), times the key block
//! (`n_keys × d`, strided in the layer's rows) with faer's GEMM in f32; then for every step
//! `r`, in a fixed order over its heads, the row's maximum over `j ≤ t_r`,
//! `Z = Σ exp((s_j − max)/√d)` in f64, and `exp(·)/Z` added into the step's f64 row of
//! per-token weights. Finally each step's weights are summed into pieces (spans, then
//! unassigned) and divided by `L · H`. Memory: the score block (`(H/G)·chunk × n_keys` f32)
//! and `chunk × n_keys` f64, never `N × N` however many steps there are. Steps run in
//! parallel (rayon); each step's sums are in a fixed order, so the result does not depend on
//! the thread count.

use crate::error::{Error, Result};
use crate::qk::Qk;
use rayon::prelude::*;

/// Steps per chunk.
const CHUNK: usize = 64;

/// Per step, the mass of every piece (`piece[j]` is key `j`'s piece, `np` pieces): an
/// `R × np` row-major matrix.
pub(crate) fn attention_mass(qk: &Qk, piece: &[u32], np: usize) -> Result<Vec<f64>> {
    use faer::{linalg::matmul::matmul, Accum, MatMut, MatRef, Par};
    if piece.len() != qk.n_keys() || piece.iter().any(|&p| p as usize >= np) {
        return Err(Error::invalid(
            "pieces",
            format!("{} pieces below {np} for {} keys", piece.len(), qk.n_keys()),
        ));
    }
    let (h, g, d) = (qk.heads(), qk.kv_heads(), qk.head_dim());
    let hpg = h / g;
    let all_steps = qk.steps();
    let rn_all = all_steps.len();
    let inv_sqrt_d = 1.0 / (d as f64).sqrt();
    let scale = 1.0 / (qk.layers().len() * h) as f64;
    let mut out = vec![0.0f64; rn_all * np];
    for r0 in (0..rn_all).step_by(CHUNK) {
        let steps = &all_steps[r0..(r0 + CHUNK).min(rn_all)];
        let r_n = steps.len();
        let n_keys = steps[r_n - 1] + 1;
        let mut acc = vec![0.0f64; r_n * n_keys];
        let mut qg = vec![0.0f32; hpg * r_n * d];
        let mut scores = vec![0.0f32; hpg * r_n * n_keys];
        for layer in qk.layers() {
            for kg in 0..g {
                // Row hl·chunk + r of qg: head kg·hpg + hl of step r0 + r.
                for hl in 0..hpg {
                    let head = kg * hpg + hl;
                    for r in 0..r_n {
                        let src = &layer.q[(r0 + r) * h * d + head * d..][..d];
                        qg[(hl * r_n + r) * d..][..d].copy_from_slice(src);
                    }
                }
                let lhs = MatRef::from_row_major_slice(&qg, hpg * r_n, d);
                let rhs = MatRef::from_row_major_slice_with_stride(&layer.k[kg * d..], n_keys, d, g * d)
                    .transpose();
                let dst = MatMut::from_column_major_slice_mut(&mut scores, n_keys, hpg * r_n).transpose_mut();
                matmul(dst, Accum::Replace, lhs, rhs, 1.0f32, Par::rayon(0));
                let scores = &scores;
                acc.par_chunks_mut(n_keys).enumerate().for_each(|(r, row)| {
                    let t = steps[r];
                    let mut w = vec![0.0f64; t + 1];
                    for hl in 0..hpg {
                        let s = &scores[(hl * r_n + r) * n_keys..][..=t];
                        let m = s.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b)) as f64;
                        let mut z = 0.0f64;
                        for (wj, &sj) in w.iter_mut().zip(s) {
                            *wj = ((sj as f64 - m) * inv_sqrt_d).exp();
                            z += *wj;
                        }
                        let iz = 1.0 / z;
                        for (a, wj) in row.iter_mut().zip(&w) {
                            *a += wj * iz;
                        }
                    }
                });
            }
        }
        out[r0 * np..(r0 + r_n) * np]
            .par_chunks_mut(np)
            .enumerate()
            .for_each(|(r, o)| {
                let row = &acc[r * n_keys..][..=steps[r]];
                for (&a, &p) in row.iter().zip(piece) {
                    o[p as usize] += a;
                }
                o.iter_mut().for_each(|x| *x *= scale);
            });
    }
    Ok(out)
}
