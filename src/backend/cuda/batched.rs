//! Greedy MMR over many equal-sized pools, every pool's step in one launch: the shape of
//! a service answering many small requests at once.

use super::raw::{self, Buf};
use super::{per_half_warp, to_i32, to_i64, Device};
use crate::error::{Error, Result};

/// Decodes `ctx_pack(gain, index)` (kernels/common.cuh); 0 is "no candidate".
#[must_use]
pub fn unpack(key: u64) -> Option<(usize, f64)> {
    if key == 0 {
        return None;
    }
    let u = (key >> 32) as u32;
    let bits = if u & 0x8000_0000 != 0 { u & 0x7fff_ffff } else { !u };
    let idx = 0xffff_ffffu32 - (key as u32);
    Some((idx as usize, f64::from(f32::from_bits(bits))))
}

/// Greedy MMR over many pools of one size and dimension, every pool's step in one launch
/// (no threshold, `k` picks per pool, or all of a pool's items when it has fewer; SPEC §1:
/// MMR scores rank, so greedy runs to `k`). The
/// pools are uploaded once; [`run`](Self::run) can repeat. Gains are compared rounded to
/// f32 (the 64-bit atomic argmax packs value and index), so near-ties within 1e-7 may
/// resolve differently from `select`.
pub struct MmrBatched {
    dev: Device,
    x: Buf<f32>,
    inv: Buf<f64>,
    rel: Buf<f64>,
    pools: usize,
    n: usize,
    d: usize,
}

impl MmrBatched {
    /// `rows`: the pools' unit rows back to back (`pools × n × d`); `inv`: their exact
    /// inverse norms; `rel`: each row's cosine to its pool's query.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        dev: &Device,
        rows: &[f32],
        inv: &[f64],
        rel: &[f64],
        pools: usize,
        n: usize,
        d: usize,
    ) -> Result<Self> {
        if pools == 0
            || n == 0
            || d == 0
            || rows.len() != pools * n * d
            || inv.len() != pools * n
            || rel.len() != pools * n
        {
            return Err(Error::invalid(
                "pools",
                format!(
                    "{} values, {} norms, {} relevances for {pools} pools of {n} x {d}",
                    rows.len(),
                    inv.len(),
                    rel.len()
                ),
            ));
        }
        if let Some(i) = rows.iter().position(|v| !v.is_finite()) {
            return Err(Error::invalid(
                "pools",
                format!("value {i} of the rows is {}", rows[i]),
            ));
        }
        if let Some(i) = inv.iter().chain(rel).position(|v| !v.is_finite()) {
            return Err(Error::invalid(
                "pools",
                format!("norm or relevance {i} is not finite"),
            ));
        }
        let lane = dev.lane()?;
        let b = MmrBatched {
            x: lane.upload(rows)?,
            inv: lane.upload(inv)?,
            rel: lane.upload(rel)?,
            dev: dev.clone(),
            pools,
            n,
            d,
        };
        lane.sync()?;
        Ok(b)
    }

    /// Each pool's picks with their gains.
    pub fn run(&self, lambda: f64, k: usize) -> Result<Vec<Vec<(usize, f64)>>> {
        let (pools, n) = (self.pools, self.n);
        let lane = self.dev.lane()?;
        let mut maxsim = lane.filled(pools * n, f64::NEG_INFINITY)?;
        let mut alive = lane.filled(pools * n, 1u8)?;
        let mut keys = lane.zeros::<u64>(2 * pools)?;
        let mut p_host = vec![-1i64; pools];
        let mut p = lane.upload(&p_host)?;
        let mut out: Vec<Vec<(usize, f64)>> = vec![Vec::new(); pools];
        let (np, nn, di) = (to_i32(pools, "pools")?, to_i64(n), to_i32(self.d, "dim")?);
        let mut got = vec![0u64; pools];
        for step in 0..k.min(n) {
            // Two key slots alternate: this step's argmax and the next step's, reset here.
            let slot = step % 2;
            {
                let (lo, hi) = keys.split_mut(pools);
                let (kp, kr) = if slot == 0 { (lo, hi) } else { (hi, lo) };
                raw::mmr_step_batched_f64(
                    &lane,
                    per_half_warp(pools * n),
                    self.x.v(),
                    np,
                    nn,
                    di,
                    p.v(),
                    self.inv.v(),
                    self.rel.v(),
                    lambda,
                    maxsim.vm(),
                    alive.vm(),
                    kp,
                    kr,
                )?;
            }
            lane.read(keys.slice(slot * pools..(slot + 1) * pools), &mut got)?;
            let mut open = false;
            for (b, &key) in got.iter().enumerate() {
                if p_host[b] == -2 {
                    continue;
                }
                match unpack(key) {
                    Some((i, g)) => {
                        out[b].push((i, g));
                        p_host[b] = to_i64(i);
                        open = true;
                    }
                    _ => p_host[b] = -2,
                }
            }
            if !open {
                break;
            }
            lane.write(&p_host, p.vm())?;
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::unpack;

    /// kernels/common.cuh's `ctx_pack`, line for line.
    fn pack(v: f32, i: u32) -> u64 {
        let u = if v == 0.0 { 0 } else { v.to_bits() };
        let u = if u & 0x8000_0000 != 0 { !u } else { u | 0x8000_0000 };
        (u64::from(u) << 32) | u64::from(0xffff_ffff - i)
    }

    #[test]
    fn packed_keys_order_by_value_then_lower_index_and_decode() {
        let vals = [
            f32::NEG_INFINITY,
            -3.5,
            -1e-30,
            -0.0,
            0.0,
            1e-30,
            0.25,
            7.0,
            f32::INFINITY,
        ];
        let mut keys = Vec::new();
        for (a, &v) in vals.iter().enumerate() {
            for i in [0u32, 1, 9_999, 4_000_000_000] {
                let k = pack(v, i);
                let (j, g) = unpack(k).unwrap();
                assert_eq!(j, i as usize);
                assert!(g == f64::from(v), "{v} decoded as {g}");
                keys.push((k, a, i));
            }
        }
        // The largest key is the largest value (signed zeros equal), then the lower index.
        for &(k1, a1, i1) in &keys {
            for &(k2, a2, i2) in &keys {
                let (v1, v2) = (vals[a1], vals[a2]);
                let want = v1 > v2 || (v1 == v2 && i1 < i2);
                assert_eq!(k1 > k2, want, "{v1}@{i1} vs {v2}@{i2}");
            }
        }
        assert_eq!(unpack(0), None);
    }
}
