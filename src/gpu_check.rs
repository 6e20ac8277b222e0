//! `ctxprune gpu-check`: on a machine with an NVIDIA GPU, every device primitive (the
//! backend's device checks) and every selector and rerank with a CUDA path, through the
//! public API on a CUDA engine against a CPU engine, on fresh random inputs; then the
//! timing table. Runs from a release binary; needs no Rust toolchain. Selections must
//! agree item for item and in their stopping rule, gains within 1e-4 relative; reranks
//! must make the same oracle calls and return the same top-k.

use crate::backend::report::{random, rel_err, worst, CheckReport};
use crate::backend::{device_checks, device_timings, Engine, EngineOptions};
use crate::embeddings::Embeddings;
use crate::error::Result;
use crate::pool::Pool;
use crate::rerank::{KernelChoice, Method as R, Precomputed, RerankConfig, Reranker};
use crate::rng::Rng;
use crate::select::{Method, Request, SelectConfig, Selector};
use crate::similarity::Kernel;
use std::time::Instant;

/// Runs the check on device `ordinal` with random inputs from `seed` (fresh from the
/// clock when `None`; in the report, so a failure can be replayed); `timing` adds the
/// timing table. An error when no usable GPU is there (the check never skips); failed
/// comparisons are in the report.
pub fn run(ordinal: usize, seed: Option<u64>, timing: bool, opts: &EngineOptions) -> Result<CheckReport> {
    let gpu = Engine::cuda_with(ordinal, opts)?;
    let cpu = Engine::cpu();
    let seed = seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    });
    let mut rep = CheckReport {
        seed,
        ..CheckReport::default()
    };
    let mut rng = Rng::new(seed);
    device_checks(&gpu, &mut rng, &mut rep)?;
    selectors(&gpu, &cpu, &mut rng, &mut rep)?;
    reranks(&gpu, &cpu, &mut rng, &mut rep)?;
    attention(&gpu, &cpu, &mut rng, &mut rep)?;
    if timing {
        device_timings(&gpu, &mut rng, &mut rep)?;
        timings(&gpu, &cpu, &mut rng, &mut rep)?;
    }
    Ok(rep)
}

/// Every selector with a CUDA path, three budget setups, on a pool with duplicate rows.
fn selectors(gpu: &Engine, cpu: &Engine, rng: &mut Rng, rep: &mut CheckReport) -> Result<()> {
    let (n, d) = (513, 67);
    let e = random(n, d, rng)?;
    // Exact duplicates: ties must go to the lower index on both backends.
    let mut data = e.as_slice().to_vec();
    for (dst, src) in [(400usize, 7usize), (401, 8), (402, 7)] {
        let row: Vec<f32> = data[src * d..(src + 1) * d].to_vec();
        data[dst * d..(dst + 1) * d].copy_from_slice(&row);
    }
    let e = Embeddings::new(n, d, data, "gpu-check")?;
    let q: Vec<f32> = (0..d).map(|i| e.row(3)[i] + 0.5 * rng.normal() as f32).collect();
    let costs: Vec<f64> = (0..n).map(|_| 1.0 + rng.below(40) as f64).collect();
    let retained = [5usize, 400, 77];
    let (pc, pg) = (Pool::from_embeddings(cpu, &e)?, Pool::from_embeddings(gpu, &e)?);
    for m in [
        Method::Mmr,
        Method::Grn,
        Method::Dpp,
        Method::Centroid,
        Method::Coverage,
    ] {
        for (label, k, budget, ret) in [
            ("k=40", Some(40), None, false),
            ("token budget 300", None, Some(300.0), false),
            ("retained 3, k=25", Some(25), None, true),
        ] {
            let mut cfg = SelectConfig::new(m);
            if let Some(k) = k {
                cfg = cfg.k(k);
            }
            if let Some(b) = budget {
                cfg = cfg.token_budget(b);
            }
            let req = Request {
                query: Some(&q),
                costs: Some(&costs),
                retained: if ret { &retained } else { &[] },
                ..Request::default()
            };
            let c = Selector::new(cpu, cfg.clone())?.select(&pc, &req)?;
            let g = Selector::new(gpu, cfg)?.select(&pg, &req)?;
            let what = format!("select {} greedy, {label}, n={n} d={d}", m.name());
            let same = c.selected == g.selected && c.stop == g.stop;
            rep.same(
                &format!("{what}: same picks"),
                same && g.backend == gpu.kind(),
                &format!(
                    "cpu {:?} ({:?}) vs cuda {:?} ({:?}) on {}",
                    c.selected,
                    c.stop,
                    g.selected,
                    g.stop,
                    g.backend.name()
                ),
            );
            if same {
                rep.check(
                    &format!("{what}: gains"),
                    worst(c.gains.iter().zip(&g.gains).map(|(&a, &b)| rel_err(b, a))),
                    1e-4,
                );
            }
        }
    }
    Ok(())
}

/// BoundaryMORPH, BAGEL and the UCB ablation with the GP store and kernel rows on the
/// device, and RGS with its neighbours' kernel rows there: the same calls and top-k as on
/// the CPU.
fn reranks(gpu: &Engine, cpu: &Engine, rng: &mut Rng, rep: &mut CheckReport) -> Result<()> {
    let e = random(701, 41, rng)?;
    let q: Vec<f32> = (0..41).map(|_| rng.normal() as f32).collect();
    let scores: Vec<f64> = (0..701).map(|_| rng.uniform()).collect();
    let (pc, pg) = (Pool::from_embeddings(cpu, &e)?, Pool::from_embeddings(gpu, &e)?);
    use crate::rerank::{Acquisition as A, Prior};
    for (name, m, acq, prior) in [
        ("boundary-morph", R::BoundaryMorph, A::Boundary, Prior::Mips),
        // The prior re-shaped every 10 calls on the device's store (`GpStore::reprior`).
        (
            "boundary-morph --prior feedback",
            R::BoundaryMorph,
            A::Boundary,
            Prior::Feedback,
        ),
        ("bagel", R::Bagel, A::Ucb, Prior::Mips),
        ("ablation:ucb", R::BoundaryMorph, A::Ucb, Prior::Mips),
        ("rgs", R::Rgs, A::Boundary, Prior::Mips),
    ] {
        let mut cfg = RerankConfig::new(m, 60, 20);
        cfg.acquisition = acq;
        cfg.prior = prior;
        cfg.kernel = KernelChoice::Fixed(Kernel::Vmf { kappa: 5.0 });
        let c =
            Reranker::new(cpu, cfg.clone())?.rerank(&pc, &q, &mut Precomputed::new(scores.clone(), 60)?)?;
        let g = Reranker::new(gpu, cfg)?.rerank(&pg, &q, &mut Precomputed::new(scores.clone(), 60)?)?;
        rep.same(
            &format!("rerank {name} B=60 k=20 n=701: same calls and top-k on cuda"),
            c.scored == g.scored && c.selected == g.selected && g.backend == gpu.kind(),
            &format!("calls {:?} vs {:?}", c.scored, g.scored),
        );
    }
    Ok(())
}

/// Median wall time in ms of `reps` runs of `f` after a warm-up (each run returns its
/// results to the host, so the device is done when the clock stops).
fn median_ms(reps: usize, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    f()?;
    let mut v = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t = Instant::now();
        f()?;
        v.push(t.elapsed().as_secs_f64() * 1e3);
    }
    v.sort_by(f64::total_cmp);
    Ok(v[v.len() / 2])
}

/// Attention mass (App. E.3) through the public API on both engines: odd sizes, a partial
/// batch of query heads per key head, two staged chunks of the head dimension, steps over
/// two blocks; every span's mass within 1e-6 relative.
fn attention(gpu: &Engine, cpu: &Engine, rng: &mut Rng, rep: &mut CheckReport) -> Result<()> {
    for (n, layers, h, g, d, turns) in [
        (1531usize, 3usize, 6usize, 2usize, 70usize, 11usize),
        (977, 2, 5, 5, 129, 3),
    ] {
        let (qk, seg) = crate::attention::synthetic(n, layers, h, g, d, turns, rng.next_u64())?;
        let (mg, mc) = (
            crate::attention::mass(gpu, &qk, &seg)?,
            crate::attention::mass(cpu, &qk, &seg)?,
        );
        let flat = |m: &crate::attention::Mass| -> Vec<f64> {
            m.steps
                .iter()
                .flat_map(|s| s.spans.iter().copied().chain([s.unassigned]))
                .collect()
        };
        // Relative to each mass itself (all are sums of positive weights), not max(|b|, 1).
        let (a, b) = (flat(&mg), flat(&mc));
        let err = if a.len() == b.len() {
            worst(
                a.iter()
                    .zip(&b)
                    .map(|(&x, &y)| if x == y { 0.0 } else { (x - y).abs() / y.abs() }),
            )
        } else {
            f64::NAN
        };
        rep.check(
            &format!("attention mass N={n} L={layers} H={h} G={g} d={d}, {turns} steps"),
            err,
            1e-6,
        );
    }
    Ok(())
}

/// End-to-end rows through the public API on resident pools, with the CPU beside them.
fn timings(gpu: &Engine, cpu: &Engine, rng: &mut Rng, rep: &mut CheckReport) -> Result<()> {
    // Attention mass at the size, end to end through the public API (the upload
    // of 1.1 GB of keys included; the device-resident time is in the device table).
    let (qk, seg) = crate::attention::synthetic(32_768, 8, 16, 4, 256, 50, rng.next_u64())?;
    let g = median_ms(3, || crate::attention::mass(gpu, &qk, &seg).map(|_| ()))?;
    rep.time(
        "attention mass N=32k L=8 H=16 G=4 d=256, 50 steps",
        g,
        "",
        None,
        "Q/K upload included",
    );
    let c = median_ms(1, || crate::attention::mass(cpu, &qk, &seg).map(|_| ()))?;
    rep.time("  (CPU, same input, this host)", c, "", None, "");
    drop((qk, seg));
    let (n, d) = (10_000, 1024);
    let e = random(n, d, rng)?;
    let q: Vec<f32> = (0..d).map(|_| rng.normal() as f32).collect();
    let (pc, pg) = (Pool::from_embeddings(cpu, &e)?, Pool::from_embeddings(gpu, &e)?);
    let req = Request {
        query: Some(&q),
        ..Request::default()
    };
    for (m, target) in [(Method::Mmr, 2.0), (Method::Dpp, 3.0)] {
        let cfg = SelectConfig::new(m).k(100).threshold(-1.0);
        let sg = Selector::new(gpu, cfg.clone())?;
        let sc = Selector::new(cpu, cfg)?;
        let g = median_ms(5, || sg.select(&pg, &req).map(|_| ()))?;
        rep.time(
            &format!("Selector {} k=100, resident pool N=10k d=1024", m.name()),
            g,
            &format!("<= {target} ms"),
            Some(g <= target),
            "relevance and per-request state included",
        );
        let c = median_ms(1, || sc.select(&pc, &req).map(|_| ()))?;
        rep.time("  (CPU, same request, this host)", c, "", None, "");
    }
    let scores: Vec<f64> = (0..n).map(|_| rng.uniform()).collect();
    for (b, target) in [(100usize, None), (500, Some(25.0))] {
        let cfg = RerankConfig::new(R::BoundaryMorph, b, 100);
        let rg = Reranker::new(gpu, cfg.clone())?;
        let rc = Reranker::new(cpu, cfg)?;
        let g = median_ms(3, || {
            rg.rerank(&pg, &q, &mut Precomputed::new(scores.clone(), b)?)
                .map(|_| ())
        })?;
        rep.time(
            &format!("BoundaryMORPH N=10k d=1024 k=100 B={b}, resident pool"),
            g,
            &target.map_or(String::new(), |t| format!("<= {t} ms")),
            target.map(|t| g <= t),
            "kernel rows on demand; oracle precomputed",
        );
        let c = median_ms(1, || {
            rc.rerank(&pc, &q, &mut Precomputed::new(scores.clone(), b)?)
                .map(|_| ())
        })?;
        rep.time("  (CPU, same problem, this host)", c, "", None, "");
    }
    Ok(())
}
