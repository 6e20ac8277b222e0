//! Tests of the CUDA path that need a device, run on the emulated one (feature
//! `cuda-emu`): each pins a difference between the device and the CPU reference, or a
//! break on an edge input, found by running the kernels.

use super::gram::{gram_into, upload_rows, DevPool, Elem, GramPath};
use super::Device;
use crate::backend::gp::{GpStore, PoolKernel, Readout, RowWeights};
use crate::backend::picker::Rows;
use crate::backend::{EngineOptions, Resident};
use crate::embeddings::Embeddings;
use crate::rng::Rng;
use crate::similarity::Kernel;

fn dev() -> Device {
    Device::open(0, &EngineOptions::default()).expect("the emulated device opens")
}

fn random(n: usize, d: usize, seed: u64) -> Embeddings {
    let mut rng = Rng::new(seed);
    let data: Vec<f32> = (0..n * d).map(|_| rng.normal() as f32).collect();
    Embeddings::new(n, d, data, "emu").unwrap()
}

/// Suspect 2: the device GP (kernel rows from the resident pool, the V update, the sums,
/// the posterior) computes the CPU's numbers bit for bit, so "same calls, same top-k"
/// holds even at near-ties.
#[test]
fn the_device_gp_store_is_bit_equal_to_the_cpu_store() {
    let d = dev();
    for (k, seed) in [
        (Kernel::Vmf { kappa: 3.0 }, 1),
        (Kernel::Matern52 { l2: 0.7 }, 2),
        (Kernel::Rbf { l2: 0.9 }, 3),
    ] {
        let e = random(301, 37, seed).normalized().unwrap();
        let inv = e.inv_norms().unwrap();
        let host = Resident::Host;
        let rows = Rows {
            e: e.view(),
            inv: &inv,
            resident: &host,
            screen: None,
        };
        let mut rng = Rng::new(seed + 10);
        let q: Vec<f32> = (0..37).map(|_| rng.normal() as f32).collect();
        let src = PoolKernel::new(rows, &q, k).unwrap();
        let dev_rows = upload_rows(&d, e.view(), &inv).unwrap();
        let n = e.rows();
        let mu0: Vec<f64> = (0..n).map(|p| (n - 1 - p) as f64 / (n - 1) as f64).collect();
        let cpu = Box::new(crate::backend::cpu::gp::CpuStore::new(&src, mu0.clone()));
        let gpu = Box::new(super::gp::DevStore::new(&d, &dev_rows, &src, &mu0).unwrap());
        let mut a = crate::rerank::gp::Gp::with_store(&src, cpu, mu0.clone(), 1.0).unwrap();
        let mut b = crate::rerank::gp::Gp::with_store(&src, gpu, mu0.clone(), 1.0).unwrap();
        // The adaptive prior reads `c` (its fade is not 0), which a new prior updates
        // (`GpStore::reprior`): on two of the kernels, with new priors at steps 12 and 25.
        if seed != 1 {
            a.set_adaptive(1.0).unwrap();
            b.set_adaptive(1.0).unwrap();
        }
        let (mut m1, mut v1, mut m2, mut v2) = (vec![0.0; n], vec![0.0; n], vec![0.0; n], vec![0.0; n]);
        for step in 0..40 {
            let j = rng.below(n);
            let y = rng.uniform();
            a.observe(j, y).unwrap();
            b.observe(j, y).unwrap();
            if step % 13 == 12 {
                let mu: Vec<f64> = (0..n).map(|_| rng.uniform()).collect();
                a.set_prior(mu.clone()).unwrap();
                b.set_prior(mu).unwrap();
                if seed != 1 {
                    assert!(
                        a.alpha() < 1.0,
                        "{k:?} step {step}: the prior fades, so c is read"
                    );
                }
            }
            a.posterior(&mut m1, &mut v1).unwrap();
            b.posterior(&mut m2, &mut v2).unwrap();
            for i in 0..n {
                assert_eq!(
                    m1[i].to_bits(),
                    m2[i].to_bits(),
                    "{k:?} step {step}: mean {i}: {} vs {}",
                    m1[i],
                    m2[i]
                );
                assert_eq!(
                    v1[i].to_bits(),
                    v2[i].to_bits(),
                    "{k:?} step {step}: var {i}: {} vs {}",
                    v1[i],
                    v2[i]
                );
            }
        }
    }
}

/// Suspect 3: the device Gram is exactly symmetric with a diagonal of exactly K(1) (the GP
/// assumes K(j, j) = 1), on both paths, for rows that are not unit.
#[test]
fn the_device_gram_is_exactly_symmetric_with_a_unit_diagonal() {
    let d = dev();
    let e = random(97, 45, 4);
    let lane = d.lane().unwrap();
    let pool = DevPool::upload(&lane, &e).unwrap();
    let mut g = lane.zeros::<f32>(97 * 97).unwrap();
    for k in [
        Kernel::Cosine,
        Kernel::Vmf { kappa: 4.0 },
        Kernel::Rbf { l2: 0.8 },
        Kernel::Matern52 { l2: 0.6 },
    ] {
        for path in [GramPath::Tiled, GramPath::Cublas] {
            gram_into(&lane, pool.r(), k, Some(path), &mut g).unwrap();
            let v = lane.download(g.v()).unwrap();
            for i in 0..97 {
                assert_eq!(v[i * 97 + i], k.apply(1.0), "{k:?} {path:?}: diagonal {i}");
                for j in 0..i {
                    assert_eq!(
                        v[i * 97 + j].to_bits(),
                        v[j * 97 + i].to_bits(),
                        "{k:?} {path:?}: ({i},{j})"
                    );
                }
            }
        }
    }
}

/// Suspect 4: a half-precision pool with a zero row is refused, naming the row (its inverse
/// norm would be inf, and 0 inf = NaN); and the kernel epilogue keeps a NaN a NaN (the old
/// clamp `fminf(fmaxf(NaN, -1), 1)` turned it into -1, a plausible value).
#[test]
fn half_pools_refuse_zero_rows_and_the_epilogue_keeps_nan() {
    let d = dev();
    let lane = d.lane().unwrap();
    let (n, dim) = (5, 4);
    let mut bits = vec![half::f16::from_f32(0.5).to_bits(); n * dim];
    // Row 3: all zero, one of them negative zero.
    bits[3 * dim..4 * dim].copy_from_slice(&[0, 0x8000, 0, 0]);
    let e = DevPool::upload_half(&lane, &bits, n, dim, Elem::F16)
        .err()
        .expect("a zero row is refused");
    assert!(e.to_string().contains("row 3"), "{e}");
    let mut g = lane.upload(&[0.5f32, f32::NAN, f32::NAN, 0.5]).unwrap();
    let inv = lane.upload(&[1.0f32, 1.0]).unwrap();
    for kind in [0, 1, 2, 3] {
        super::raw::gram_epilogue_f32(
            &lane,
            super::matrix(2, 2),
            g.vm(),
            2,
            2,
            2,
            inv.v(),
            inv.v(),
            kind,
            1.0,
        )
        .unwrap();
        let v = lane.download(g.v()).unwrap();
        assert!(v[1].is_nan() && v[2].is_nan(), "kind {kind}: {v:?}");
        lane.write(&[0.5f32, f32::NAN, f32::NAN, 0.5], g.vm()).unwrap();
    }
}

/// Suspect 5: batched MMR never lets a NaN gain win its pool (the packed key of a NaN
/// ranks above +inf); the constructor refuses non-finite inputs too.
#[test]
fn batched_mmr_never_picks_a_nan_gain() {
    let d = dev();
    let e = random(9, 6, 5).normalized().unwrap();
    let inv = e.inv_norms().unwrap();
    let mut rel: Vec<f64> = (0..9).map(|i| 0.1 * i as f64).collect();
    rel[2] = f64::NAN;
    assert!(super::batched::MmrBatched::new(&d, e.as_slice(), &inv, &rel, 1, 9, 6).is_err());
    // The kernel itself, given a NaN relevance: the pool's best is the largest finite gain.
    let lane = d.lane().unwrap();
    let x = lane.upload(e.as_slice()).unwrap();
    let (invd, reld) = (lane.upload(&inv).unwrap(), lane.upload(&rel).unwrap());
    let mut maxsim = lane.filled(9, f64::NEG_INFINITY).unwrap();
    let mut alive = lane.filled(9, 1u8).unwrap();
    let mut keys = lane.zeros::<u64>(2).unwrap();
    let p = lane.upload(&[-1i64]).unwrap();
    let (kp, kr) = keys.split_mut(1);
    super::raw::mmr_step_batched_f64(
        &lane,
        super::per_half_warp(9),
        x.v(),
        1,
        9,
        6,
        p.v(),
        invd.v(),
        reld.v(),
        0.5,
        maxsim.vm(),
        alive.vm(),
        kp,
        kr,
    )
    .unwrap();
    let k = lane.download(keys.slice(0..1)).unwrap()[0];
    assert_eq!(super::batched::unpack(k).map(|p| p.0), Some(8), "key {k:#x}");
}

/// Suspect 6: zero-size inputs are empty results, never an error or a panic: a 0-row Gram,
/// a batch holding an empty pool, an empty upload read back.
#[test]
fn zero_size_inputs_give_empty_results() {
    let d = dev();
    let empty = Embeddings::new(0, 7, vec![], "empty").unwrap();
    assert_eq!(
        super::gram(&d, &empty, Kernel::Cosine).unwrap(),
        Vec::<f32>::new()
    );
    let e = random(5, 7, 6);
    let got = super::gram_batched(&d, &[&empty, &e, &empty], Kernel::Vmf { kappa: 2.0 }).unwrap();
    assert_eq!(got.iter().map(Vec::len).collect::<Vec<_>>(), vec![0, 25, 0]);
    let lane = d.lane().unwrap();
    let b = lane.upload::<f32>(&[]).unwrap();
    assert_eq!(b.len(), 0);
    assert!(lane.download(b.v()).unwrap().is_empty());
    let z = lane.zeros::<f64>(0).unwrap();
    assert_eq!((z.len(), lane.download(z.v()).unwrap().len()), (0, 0));
}

/// Suspect 7: the facility-location similarity of duplicate rows is bit-identical row for
/// row (each element summed by one thread in one order), so a duplicate of a picked item
/// gains exactly 0, as on the CPU, whatever order a GEMM would have used.
#[test]
fn duplicate_rows_have_identical_coverage_similarity() {
    let d = dev();
    let mut e = random(300, 129, 7).normalized().unwrap().into_vec();
    let row = e[11 * 129..12 * 129].to_vec();
    e[250 * 129..251 * 129].copy_from_slice(&row);
    let e = Embeddings::new(300, 129, e, "dups").unwrap();
    let inv = e.inv_norms().unwrap();
    let rows = upload_rows(&d, e.view(), &inv).unwrap();
    let lane = d.lane().unwrap();
    let mut g = lane.zeros::<f32>(300 * 300).unwrap();
    super::gram::dot_gram(&lane, rows.r(), &mut g).unwrap();
    let v = lane.download(g.v()).unwrap();
    let (a, b) = (&v[11 * 300..12 * 300], &v[250 * 300..251 * 300]);
    assert!(
        a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits()),
        "rows 11 and 250 differ"
    );
    assert_eq!(v[11 * 300 + 250].to_bits(), v[11 * 300 + 11].to_bits());
}

/// Suspect 8: a step that fails half-way leaves the picker unusable, never half-updated:
/// every later call says the earlier failure happened (the engine is reopened to go on).
#[test]
fn a_failed_step_poisons_the_picker_and_the_gp_store() {
    use crate::backend::picker::{Picker, PickerInputs, PickerKind};
    let d = dev();
    let e = random(77, 9, 8).normalized().unwrap();
    let inv = e.inv_norms().unwrap();
    let rows = upload_rows(&d, e.view(), &inv).unwrap();
    let rel: Vec<f64> = (0..77).map(|i| (i as f64 / 77.0) - 0.3).collect();
    let inputs = PickerInputs {
        rel: Some(&rel),
        ..PickerInputs::default()
    };
    for kind in [
        PickerKind::Mmr { lambda: 0.5 },
        PickerKind::Centroid,
        PickerKind::Dpp { eps: 1e-10 },
    ] {
        let mut p = super::greedy::GreedyDev::new(&d, &rows, e.view(), &inv, kind, &inputs).unwrap();
        let (x, _) = p.best(None).unwrap().unwrap();
        p.add(x, false).unwrap();
        // The step folding `x` in fails after its first launch (DPP and centroid launch two).
        super::raw::inject_launch_failure(u64::from(!matches!(kind, PickerKind::Mmr { .. })));
        let first = p.best(None).unwrap_err();
        assert_eq!(first.kind(), crate::error::ErrorKind::DeviceFailed, "{first}");
        let again = p.best(None).unwrap_err();
        assert!(again.to_string().contains("earlier"), "{kind:?}: {again}");
        assert!(p.add(3, false).is_err());
    }
    let host = Resident::Host;
    let src = PoolKernel::new(
        Rows {
            e: e.view(),
            inv: &inv,
            resident: &host,
            screen: None,
        },
        e.row(0),
        Kernel::Vmf { kappa: 2.0 },
    )
    .unwrap();
    let mu0 = vec![0.0; 77];
    let mut s = super::gp::DevStore::new(&d, &rows, &src, &mu0).unwrap();
    let w = RowWeights {
        r: 0.5,
        one: 0.5,
        prior: 0.0,
    };
    s.append(None, &[], 1.0, w).unwrap();
    super::raw::inject_launch_failure(1);
    assert!(s.append(Some(4), &[0.1], 1.0, w).is_err());
    let at = Readout {
        m: 0.0,
        s: 1.0,
        delta: 0.0,
    };
    let again = s
        .posterior(at, &mut vec![0.0; 77], &mut vec![0.0; 77])
        .unwrap_err();
    assert!(again.to_string().contains("earlier"), "{again}");
}

/// Every kernel once, on small inputs, with each block's threads as OS threads: what the
/// race check runs under ThreadSanitizer (`CTXPRUNE_EMU_TSAN=1`, with the options .ci/run
/// and the README give); without the sanitizer it still checks the OS-thread executor
/// against the CPU.
#[test]
fn race_check_every_kernel_on_os_threads() {
    use super::greedy::{argmax_masked, GreedyDev};
    use crate::backend::picker::{Picker, PickerInputs, PickerKind};
    super::emulate_with_os_threads(true);
    let before = super::emulated_launches();
    let d = dev();
    let lane = d.lane().unwrap();
    let e = random(67, 21, 9);
    // Grams: both paths (the epilogue after the emulated GEMM), half inputs, many pools,
    // row norms.
    let pool = DevPool::upload(&lane, &e).unwrap();
    let mut g = lane.zeros::<f32>(67 * 67).unwrap();
    for path in [GramPath::Tiled, GramPath::Cublas] {
        gram_into(&lane, pool.r(), Kernel::Vmf { kappa: 2.0 }, Some(path), &mut g).unwrap();
        let got = lane.download(g.v()).unwrap();
        let want = crate::similarity::gram(&e, Kernel::Vmf { kappa: 2.0 }).unwrap();
        assert!(
            crate::backend::report::max_rel_err(&got, &want) < 1e-5,
            "{path:?}"
        );
    }
    for h in [Elem::F16, Elem::Bf16] {
        let bits: Vec<u16> = e
            .as_slice()
            .iter()
            .map(|&v| {
                if h == Elem::F16 {
                    half::f16::from_f32(v).to_bits()
                } else {
                    half::bf16::from_f32(v).to_bits()
                }
            })
            .collect();
        let hp = DevPool::upload_half(&lane, &bits, 67, 21, h).unwrap();
        gram_into(&lane, hp.r(), Kernel::Cosine, Some(GramPath::Tiled), &mut g).unwrap();
    }
    let f = random(9, 21, 10);
    super::gram_batched(&d, &[&e, &f], Kernel::Rbf { l2: 0.5 }).unwrap();
    let mut inv = lane.zeros::<f32>(67).unwrap();
    let x = lane.upload(e.as_slice()).unwrap();
    super::raw::row_inv_norms_f32(&lane, super::per_row(67), x.v(), 67, 21, inv.vm()).unwrap();
    // Greedy steps of every kind, with a token budget.
    let u = e.normalized().unwrap();
    let uinv = u.inv_norms().unwrap();
    let rows = upload_rows(&d, u.view(), &uinv).unwrap();
    let rel: Vec<f64> = (0..67).map(|i| ((i * 7) % 13) as f64 / 13.0 - 0.2).collect();
    let costs: Vec<f64> = (0..67).map(|i| 1.0 + (i % 5) as f64).collect();
    let inputs = PickerInputs {
        rel: Some(&rel),
        budget_costs: Some(&costs),
        gain_costs: None,
    };
    for kind in [
        PickerKind::Mmr { lambda: 0.5 },
        PickerKind::Grn { eps: 1e-10 },
        PickerKind::Dpp { eps: 1e-10 },
        PickerKind::Centroid,
        PickerKind::Coverage,
    ] {
        let mut p = GreedyDev::new(&d, &rows, u.view(), &uinv, kind, &inputs).unwrap();
        p.add(3, true).unwrap();
        for _ in 0..3 {
            if let Some((x, _)) = p.best(Some(30.0)).unwrap() {
                p.add(x, false).unwrap();
            }
        }
    }
    let gains = lane.upload(&rel).unwrap();
    let alive = lane.filled(67, 1u8).unwrap();
    let want = (0..67).fold(0, |b, i| if rel[i] > rel[b] { i } else { b });
    assert_eq!(
        argmax_masked(&lane, &gains, &alive, None).unwrap().map(|b| b.0),
        Some(want)
    );
    super::batched::MmrBatched::new(&d, u.as_slice(), &uinv, &rel, 1, 67, 21)
        .unwrap()
        .run(0.5, 3)
        .unwrap();
    // The GP store: appends (kernel rows from the pool), a column, posterior, UCB.
    let host = Resident::Host;
    let src = PoolKernel::new(
        Rows {
            e: u.view(),
            inv: &uinv,
            resident: &host,
            screen: None,
        },
        u.row(1),
        Kernel::Matern52 { l2: 0.8 },
    )
    .unwrap();
    let mu0 = vec![0.5; 67];
    let mut s = super::gp::DevStore::new(&d, &rows, &src, &mu0).unwrap();
    let w = |r, one, prior| RowWeights { r, one, prior };
    s.append(None, &[], 1.0, w(0.3, 0.2, 0.1)).unwrap();
    let l = s.column(5).unwrap();
    s.append(Some(5), &l, 0.9, w(0.1, 0.4, 0.2)).unwrap();
    s.reweight(1, &[0.3]).unwrap();
    let (mut m, mut v) = (vec![0.0; 67], vec![0.0; 67]);
    let at = Readout {
        m: 0.1,
        s: 1.2,
        delta: 0.3,
    };
    s.posterior(at, &mut m, &mut v).unwrap();
    s.ucb_pick(at, &[false; 67], 1.0).unwrap();
    // Attention mass, small (every launch's blocks are OS threads under ThreadSanitizer,
    // and every tile is a barrier per head batch): 2 layers, 3 query heads over 1 key head
    // (a partial batch), d = 9, 3 steps over 3 key tiles, against the CPU path. The
    // emulator tests and gpu-check cover the larger shapes (two chunks of d, several blocks
    // of steps, more than 64 steps).
    let (qk, seg) = crate::attention::synthetic(96, 2, 3, 1, 9, 3, 4).unwrap();
    let piece = crate::attention::pieces(&seg, qk.n_keys());
    let np = seg.spans.len() + 1;
    let got = super::attention::attention_mass(&d, &qk, &piece, np).unwrap();
    let want = crate::backend::cpu::attention::attention_mass(&qk, &piece, np).unwrap();
    for (i, (a, b)) in got.iter().zip(&want).enumerate() {
        assert!(
            (a - b).abs() <= 1e-6 * b.abs() + 1e-15,
            "attention mass {i}: device {a}, cpu {b}"
        );
    }
    super::emulate_with_os_threads(false);
    let after = super::emulated_launches();
    let missing: Vec<&str> = after
        .iter()
        .zip(&before)
        .filter(|(a, b)| a.1 == b.1)
        .map(|(a, _)| a.0)
        .collect();
    assert!(
        missing.is_empty(),
        "kernels the race check did not launch: {missing:?}"
    );
}
