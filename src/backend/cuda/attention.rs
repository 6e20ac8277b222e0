//! Attention mass on the device (kernels/attention.cu): the layers' Q rows and keys
//! uploaded once ([`DevAttention::new`]), then per layer a statistics pass over key tiles,
//! a combine and a weights pass adding into `R × n_keys` f64 sums, and one range-sum
//! launch at the end. Memory on the device: the tensors, `H · R · tiles` statistics and the
//! `R × n_keys` sums; never an `N × N` (or `R × N` per head) score matrix.

use super::raw::{self, Buf, Grid, Lane};
use super::{per_elem, to_i32, to_i64, Device};
use crate::attention::Qk;
use crate::error::Result;

const TK: usize = 32;
const RB: usize = 8;

/// A trajectory's tensors resident on a device.
pub struct DevAttention {
    lane: Lane,
    h: usize,
    g: usize,
    d: usize,
    rn: usize,
    nk: usize,
    steps: Buf<i64>,
    layers: Vec<(Buf<f32>, Buf<f32>)>,
}

impl DevAttention {
    /// Uploads `qk`.
    pub fn new(dev: &Device, qk: &Qk) -> Result<Self> {
        let lane = dev.lane()?;
        to_i32(qk.steps().len(), "reasoning steps")?;
        to_i32(qk.heads() * qk.steps().len(), "heads × steps")?;
        to_i32(qk.n_keys().div_ceil(TK), "key tiles")?;
        let steps: Vec<i64> = qk.steps().iter().map(|&t| to_i64(t)).collect();
        let layers = qk
            .layers()
            .iter()
            .map(|l| Ok((lane.upload(&l.q)?, lane.upload(&l.k)?)))
            .collect::<Result<Vec<_>>>()?;
        Ok(DevAttention {
            steps: lane.upload(&steps)?,
            lane,
            h: qk.heads(),
            g: qk.kv_heads(),
            d: qk.head_dim(),
            rn: qk.steps().len(),
            nk: qk.n_keys(),
            layers,
        })
    }

    /// Per step, the mass of every piece (`piece[j]` is key `j`'s piece, all below `np`),
    /// `R × np` row-major, as the CPU's `attention_mass`.
    pub fn run(&self, piece: &[u32], np: usize) -> Result<Vec<f64>> {
        let (h, g, d, rn, nk) = (self.h, self.g, self.d, self.rn, self.nk);
        super::checked_len("pieces", piece.len(), nk)?;
        let lane = &self.lane;
        let tiles = nk.div_ceil(TK);
        let grid = Grid {
            blocks: (tiles as u32, rn.div_ceil(RB) as u32, 1),
            threads: 256,
        };
        let isd = 1.0 / (d as f64).sqrt();
        let (rn32, h32, g32, d32, t32) = (
            to_i32(rn, "steps")?,
            to_i32(h, "heads")?,
            to_i32(g, "kv_heads")?,
            to_i32(d, "head_dim")?,
            to_i32(tiles, "tiles")?,
        );
        let rows = h * rn;
        let mut m: Buf<f32> = lane.zeros(rows * tiles)?;
        let mut l: Buf<f64> = lane.zeros(rows * tiles)?;
        let mut mm: Buf<f32> = lane.zeros(rows)?;
        let mut z: Buf<f64> = lane.zeros(rows)?;
        let mut acc: Buf<f64> = lane.zeros(rn * nk)?;
        for (q, k) in &self.layers {
            raw::attn_stats_f32(
                lane,
                grid,
                q.v(),
                k.v(),
                self.steps.v(),
                rn32,
                to_i64(nk),
                h32,
                g32,
                d32,
                isd,
                t32,
                m.vm(),
                l.vm(),
            )?;
            raw::attn_combine_f64(
                lane,
                per_elem(rows),
                m.v(),
                l.v(),
                to_i32(rows, "heads × steps")?,
                t32,
                isd,
                mm.vm(),
                z.vm(),
            )?;
            raw::attn_weights_f32(
                lane,
                grid,
                q.v(),
                k.v(),
                self.steps.v(),
                rn32,
                to_i64(nk),
                h32,
                g32,
                d32,
                isd,
                mm.v(),
                z.v(),
                acc.vm(),
            )?;
        }
        // Runs of equal pieces: the ranges the last launch sums.
        let mut lo = Vec::new();
        let mut hi = Vec::new();
        let mut of = Vec::new();
        for (j, &p) in piece.iter().enumerate() {
            if j == 0 || piece[j - 1] != p {
                lo.push(to_i64(j));
                hi.push(to_i64(j + 1));
                of.push(p as usize);
            } else if let Some(e) = hi.last_mut() {
                *e += 1;
            }
        }
        let nr = lo.len();
        let lo_d = lane.upload(&lo)?;
        let hi_d = lane.upload(&hi)?;
        let mut out: Buf<f64> = lane.zeros(rn * nr)?;
        raw::attn_range_sums_f64(
            lane,
            Grid {
                blocks: (nr as u32, rn as u32, 1),
                threads: 256,
            },
            acc.v(),
            to_i64(nk),
            self.steps.v(),
            rn32,
            lo_d.v(),
            hi_d.v(),
            to_i32(nr, "key ranges")?,
            out.vm(),
        )?;
        let out = lane.download(out.v())?;
        let scale = 1.0 / (self.layers.len() * h) as f64;
        let mut sums = vec![0.0f64; rn * np];
        for r in 0..rn {
            for (x, &p) in of.iter().enumerate() {
                sums[r * np + p] += out[r * nr + x];
            }
            sums[r * np..(r + 1) * np].iter_mut().for_each(|v| *v *= scale);
        }
        Ok(sums)
    }
}

/// Uploads `qk` and runs [`DevAttention::run`].
pub(crate) fn attention_mass(dev: &Device, qk: &Qk, piece: &[u32], np: usize) -> Result<Vec<f64>> {
    DevAttention::new(dev, qk)?.run(piece, np)
}
