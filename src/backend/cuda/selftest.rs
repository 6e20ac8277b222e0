//! The check [`Device::open`](super::Device::open) runs before a device is used: Grams of
//! a small odd-sized pool through both code paths, and a greedy MMR selection, against
//! direct CPU evaluations.

use super::gram::{gram_into, DevPool, GramPath};
use super::greedy::GreedyDev;
use super::{unavailable, upload_rows, Device};
use crate::backend::cpu;
use crate::backend::picker::{Picker, PickerInputs, PickerKind};
use crate::backend::report::max_rel_err;
use crate::embeddings::Embeddings;
use crate::error::Result;
use crate::similarity::Kernel;

/// Greedy MMR by its definition: every score recomputed at every step from exact cosines
/// (`inv`: the rows' inverse norms), ties to the lower index, run to `k` (SPEC §1); picks
/// with their gains. The reference of the self-test and the check.
pub(crate) fn mmr_direct(
    u: &Embeddings,
    inv: &[f64],
    rel: &[f64],
    lambda: f64,
    k: usize,
) -> Vec<(usize, f64)> {
    let cos = |a: usize, b: usize| cpu::dot(u.row(a), u.row(b)) * inv[a] * inv[b];
    let mut picks: Vec<(usize, f64)> = Vec::new();
    while picks.len() < k {
        let mut best: Option<(usize, f64)> = None;
        for x in (0..u.rows()).filter(|x| !picks.iter().any(|p| p.0 == *x)) {
            let red = picks
                .iter()
                .map(|&(p, _)| cos(x, p))
                .fold(f64::NEG_INFINITY, f64::max);
            let red = if picks.is_empty() { 0.0 } else { red };
            let v = lambda * rel[x] - (1.0 - lambda) * red;
            if best.is_none_or(|(_, b)| v > b) {
                best = Some((x, v));
            }
        }
        match best {
            Some(b) => picks.push(b),
            None => break,
        }
    }
    picks
}

/// Runs the self-test; an error says what disagreed.
pub fn self_test(dev: &Device) -> Result<()> {
    let o = Some(dev.ordinal());
    let mut rng = crate::rng::Rng::new(0x5e1f_7e57);
    let (n, d) = (37, 19);
    let data: Vec<f32> = (0..n * d).map(|_| rng.normal() as f32).collect();
    let e = Embeddings::new(n, d, data, "self-test")?;
    let lane = dev.lane()?;
    let pool = DevPool::upload(&lane, &e)?;
    let mut g = lane.zeros::<f32>(n * n)?;
    for (k, path) in [
        (Kernel::Cosine, GramPath::Tiled),
        (Kernel::Vmf { kappa: 3.0 }, GramPath::Tiled),
        (Kernel::Matern52 { l2: 0.7 }, GramPath::Cublas),
    ] {
        if path == GramPath::Cublas && !lane.has_blas() {
            continue;
        }
        lane.fill(&mut g, f32::NAN)?;
        gram_into(&lane, pool.r(), k, Some(path), &mut g)?;
        let got = lane.download(g.v())?;
        let want = crate::similarity::gram(&e, k)?;
        let m = max_rel_err(&got, &want);
        if m.is_nan() || m > 1e-4 {
            return Err(unavailable(
                o,
                format!("self-test: {k:?} Gram ({path:?}) differs from the CPU by {m:e}"),
            ));
        }
    }
    drop(lane);
    // Greedy MMR on a resident pool against the definition.
    let u = e.normalized()?;
    let inv = u.inv_norms()?;
    let rows = upload_rows(dev, u.view(), &inv)?;
    let rel: Vec<f64> = (0..n)
        .map(|i| cpu::dot(u.row(i), u.row(0)) * inv[i] * inv[0])
        .collect();
    let inputs = PickerInputs {
        rel: Some(&rel),
        ..PickerInputs::default()
    };
    let mut p = GreedyDev::new(
        dev,
        &rows,
        u.view(),
        &inv,
        PickerKind::Mmr { lambda: 0.5 },
        &inputs,
    )?;
    let mut got = Vec::new();
    while got.len() < 8 {
        match p.best(None)? {
            Some((x, _)) => {
                p.add(x, false)?;
                got.push(x);
            }
            None => break,
        }
    }
    let want: Vec<usize> = mmr_direct(&u, &inv, &rel, 0.5, 8)
        .into_iter()
        .map(|p| p.0)
        .collect();
    if got != want {
        return Err(unavailable(
            o,
            format!("self-test: greedy MMR picked {got:?}, the CPU {want:?}"),
        ));
    }
    Ok(())
}
