//! Attention mass on the device (kernels/attention.cu): the layers' Q rows and keys
//! uploaded once ([`DevAttention::new`]), then, for each chunk of at most 64 steps and each
//! layer, a statistics pass over key tiles, a combine and a weights pass adding into
//! `chunk × n_keys` f64 sums, and one range-sum launch per chunk. Memory on the device: the
//! tensors, `H · chunk · tiles` statistics and the `chunk × n_keys` sums; never an `N × N`
//! (or per-head score) matrix, however many steps there are.

use super::raw::{self, Buf, Grid, Lane};
use super::{per_elem, to_i32, to_i64, Device};
use crate::error::{Error, Result};
use crate::qk::Qk;

const TK: usize = 32;
const RB: usize = 8;
/// Steps per chunk.
pub const CHUNK: usize = 64;

/// A trajectory's tensors resident on a device.
pub struct DevAttention {
    lane: Lane,
    h: usize,
    g: usize,
    d: usize,
    steps_host: Vec<usize>,
    steps: Buf<i64>,
    layers: Vec<(Buf<f32>, Buf<f32>)>,
}

impl DevAttention {
    /// Uploads `qk`.
    pub fn new(dev: &Device, qk: &Qk) -> Result<Self> {
        let lane = dev.lane()?;
        to_i32(qk.heads() * CHUNK, "heads × steps")?;
        to_i32(
            qk.n_keys().div_ceil(TK) * CHUNK.div_ceil(RB),
            "key tiles × step blocks",
        )?;
        let steps: Vec<i64> = qk.steps().iter().map(|&t| to_i64(t)).collect();
        let layers = qk
            .layers()
            .iter()
            .map(|l| Ok((lane.upload(&l.q)?, lane.upload(&l.k)?)))
            .collect::<Result<Vec<_>>>()?;
        Ok(DevAttention {
            steps: lane.upload(&steps)?,
            steps_host: qk.steps().to_vec(),
            lane,
            h: qk.heads(),
            g: qk.kv_heads(),
            d: qk.head_dim(),
            layers,
        })
    }

    /// Per step, the mass of every piece (`piece[j]` is key `j`'s piece, all below `np`),
    /// `R × np` row-major, as the CPU's `attention_mass`.
    pub fn run(&self, piece: &[u32], np: usize) -> Result<Vec<f64>> {
        let (h, g, d) = (self.h, self.g, self.d);
        let rn = self.steps_host.len();
        let nk = self.steps_host[rn - 1] + 1;
        super::checked_len("pieces", piece.len(), nk)?;
        if let Some(j) = piece.iter().position(|&p| p as usize >= np) {
            return Err(Error::invalid(
                format!("piece[{j}]"),
                format!("{} is not below {np}", piece[j]),
            ));
        }
        let lane = &self.lane;
        let isd = 1.0 / (d as f64).sqrt();
        let (h32, g32, d32) = (
            to_i32(h, "heads")?,
            to_i32(g, "kv_heads")?,
            to_i32(d, "head_dim")?,
        );
        let tiles_max = nk.div_ceil(TK);
        let mut m: Buf<f32> = lane.zeros(h * CHUNK.min(rn) * tiles_max)?;
        let mut l: Buf<f64> = lane.zeros(h * CHUNK.min(rn) * tiles_max)?;
        let mut mm: Buf<f32> = lane.zeros(h * CHUNK.min(rn))?;
        let mut z: Buf<f64> = lane.zeros(h * CHUNK.min(rn))?;
        let mut acc: Buf<f64> = lane.zeros(CHUNK.min(rn) * nk)?;
        let scale = 1.0 / (self.layers.len() * h) as f64;
        let mut sums = vec![0.0f64; rn * np];
        for r0 in (0..rn).step_by(CHUNK) {
            let rc = CHUNK.min(rn - r0);
            let nkc = self.steps_host[r0 + rc - 1] + 1;
            let tiles = nkc.div_ceil(TK);
            let grid = Grid {
                blocks: ((tiles * rc.div_ceil(RB)) as u32, 1, 1),
                threads: 256,
            };
            let (rc32, t32, rows) = (to_i32(rc, "steps")?, to_i32(tiles, "tiles")?, h * rc);
            let steps = || self.steps.slice(r0..r0 + rc);
            lane.zero(acc.slice_mut(0..rc * nkc))?;
            for (q, k) in &self.layers {
                let q = || q.slice(r0 * h * d..(r0 + rc) * h * d);
                raw::attn_stats_f32(
                    lane,
                    grid,
                    q(),
                    k.v(),
                    steps(),
                    rc32,
                    to_i64(nkc),
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
                    steps(),
                    rc32,
                    to_i32(rows, "heads × steps")?,
                    t32,
                    isd,
                    mm.vm(),
                    z.vm(),
                )?;
                raw::attn_weights_f32(
                    lane,
                    grid,
                    q(),
                    k.v(),
                    steps(),
                    rc32,
                    to_i64(nkc),
                    h32,
                    g32,
                    d32,
                    isd,
                    mm.v(),
                    z.v(),
                    acc.vm(),
                )?;
            }
            // Runs of equal pieces over the chunk's keys: the ranges the last launch sums.
            let (mut lo, mut hi, mut of) = (Vec::new(), Vec::new(), Vec::new());
            for (j, &p) in piece[..nkc].iter().enumerate() {
                if j == 0 || piece[j - 1] != p {
                    lo.push(to_i64(j));
                    hi.push(to_i64(j + 1));
                    of.push(p as usize);
                } else if let Some(e) = hi.last_mut() {
                    *e += 1;
                }
            }
            let nr = lo.len();
            let (lo_d, hi_d) = (lane.upload(&lo)?, lane.upload(&hi)?);
            let mut out: Buf<f64> = lane.zeros(rc * nr)?;
            raw::attn_range_sums_f64(
                lane,
                Grid {
                    blocks: (to_i32(nr, "key ranges")? as u32, rc as u32, 1),
                    threads: 256,
                },
                acc.v(),
                to_i64(nkc),
                steps(),
                rc32,
                lo_d.v(),
                hi_d.v(),
                to_i32(nr, "key ranges")?,
                out.vm(),
            )?;
            let out = lane.download(out.v())?;
            for r in 0..rc {
                let row = &mut sums[(r0 + r) * np..(r0 + r + 1) * np];
                for (x, &p) in of.iter().enumerate() {
                    row[p] += out[r * nr + x];
                }
                row.iter_mut().for_each(|v| *v *= scale);
            }
        }
        Ok(sums)
    }
}

/// Uploads `qk` and runs [`DevAttention::run`].
pub(crate) fn attention_mass(dev: &Device, qk: &Qk, piece: &[u32], np: usize) -> Result<Vec<f64>> {
    DevAttention::new(dev, qk)?.run(piece, np)
}
