//! `ctxprune gpu-check`: on a machine with an NVIDIA GPU, every CUDA primitive and every
//! selector with a CUDA path against the CPU reference on fresh random inputs, then the
//! timing table of the CUDA backend issue, with the device's measured copy bandwidth and
//! GEMM rates beside it. Runs from a release binary; needs no Rust toolchain.
//!
//! Correctness rules: relative error `|gpu - cpu| / max(|cpu|, 1)` at most 1e-4 for f32
//! inputs and 1e-2 for f16/bf16 inputs (against the CPU on the f32 originals); NaN never
//! passes; device outputs are filled with NaN before each run so an element a kernel
//! fails to write is caught; selections must agree item for item.

use super::ops::{self, DevKind, DevPool, Elem, GramPath, GreedyDev};
use super::Device;
use crate::embeddings::Embeddings;
use crate::error::{Error, Result};
use crate::rng::Rng;
use crate::similarity::Kernel;
use std::sync::Arc;
use std::time::Instant;

struct Report {
    fails: Vec<String>,
}

impl Report {
    fn check(&mut self, what: &str, err: f64, tol: f64) {
        let pass = !err.is_nan() && err <= tol;
        println!(
            "  {:<58} max rel err {:>10.3e}  (<= {tol:.0e})  {}",
            what,
            err,
            if pass { "ok" } else { "FAIL" }
        );
        if !pass {
            self.fails.push(format!("{what}: {err:e} > {tol:e}"));
        }
    }

    fn same(&mut self, what: &str, ok: bool, detail: &str) {
        println!(
            "  {:<58} {}",
            what,
            if ok {
                "ok".to_string()
            } else {
                format!("FAIL ({detail})")
            }
        );
        if !ok {
            self.fails.push(format!("{what}: {detail}"));
        }
    }
}

fn random(n: usize, d: usize, rng: &mut Rng) -> Result<Embeddings> {
    let data: Vec<f32> = (0..n * d).map(|_| rng.normal() as f32).collect();
    Embeddings::new(n, d, data, "gpu-check")
}

fn half_bits(e: &Embeddings, h: Elem) -> Vec<u16> {
    e.as_slice()
        .iter()
        .map(|&v| match h {
            Elem::F16 => half::f16::from_f32(v).to_bits(),
            _ => half::bf16::from_f32(v).to_bits(),
        })
        .collect()
}

const KERNELS: [Kernel; 4] = [
    Kernel::Cosine,
    Kernel::Vmf { kappa: 4.0 },
    Kernel::Rbf { l2: 0.8 },
    Kernel::Matern52 { l2: 0.6 },
];

/// Runs the check on device `ordinal` with random inputs from `seed` (fresh from the
/// clock when `None`; printed, so a failure can be replayed); `timing` adds the timing
/// table. Errors when no usable GPU is there (the check never skips) or when any
/// comparison fails.
pub fn run(ordinal: usize, seed: Option<u64>, timing: bool) -> Result<()> {
    let dev = super::device(ordinal)?;
    let (free, total) = dev.ctx.mem_get_info().unwrap_or((0, 0));
    println!(
        "device {}: {} (sm_{}{}), {:.1} GiB ({:.1} GiB free); kernels compiled for {} by NVRTC {}.{}; cuBLAS: {}",
        dev.ordinal,
        dev.name,
        dev.cc.0,
        dev.cc.1,
        total as f64 / (1u64 << 30) as f64,
        free as f64 / (1u64 << 30) as f64,
        dev.arch,
        dev.nvrtc.0,
        dev.nvrtc.1,
        dev.blas_missing.as_deref().unwrap_or("yes")
    );
    let seed = seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    });
    println!(
        "random inputs from seed {seed} (replay with --seed {seed})\n\ncorrectness against the CPU path:"
    );
    let mut rep = Report { fails: Vec::new() };
    let mut rng = Rng::new(seed);
    primitives(&dev, &mut rng, &mut rep)?;
    selectors(&dev, &mut rng, &mut rep)?;
    rerank(&dev, &mut rng, &mut rep)?;
    if timing {
        timings(&dev, &mut rng)?;
    }
    if rep.fails.is_empty() {
        println!("\ngpu-check: every comparison passed");
        Ok(())
    } else {
        Err(Error::Backend {
            backend: "cuda".into(),
            msg: format!(
                "gpu-check failed {} comparison(s): {}",
                rep.fails.len(),
                rep.fails.join("; ")
            ),
        })
    }
}

fn primitives(dev: &Arc<Device>, rng: &mut Rng, rep: &mut Report) -> Result<()> {
    // Gram blocks, f32 inputs, both paths, every kernel; odd sizes.
    let e = random(333, 77, rng)?;
    let pool = DevPool::upload(dev, &e)?;
    let mut g = dev.zeros::<f32>(e.rows() * e.rows())?;
    for k in KERNELS {
        let want = crate::similarity::gram(&e, k)?;
        for path in [GramPath::Tiled, GramPath::Cublas] {
            if path == GramPath::Cublas && dev.blas.is_none() {
                continue;
            }
            dev.fill(&mut g, f32::NAN)?;
            ops::gram_into(dev, &pool, k, Some(path), &mut g)?;
            let got = dev.download(&g)?;
            rep.check(
                &format!("Gram f32 {path:?} {k:?} n=333 d=77"),
                ops::max_rel_err(&got, &want),
                1e-4,
            );
        }
    }
    // Half inputs against the CPU on the f32 originals.
    let e = random(301, 129, rng)?;
    let mut g = dev.zeros::<f32>(e.rows() * e.rows())?;
    for h in [Elem::Bf16, Elem::F16] {
        let hp = DevPool::upload_half(dev, &half_bits(&e, h), e.rows(), e.dim(), h)?;
        for k in [Kernel::Cosine, Kernel::Vmf { kappa: 4.0 }] {
            let want = crate::similarity::gram(&e, k)?;
            for path in [GramPath::Tiled, GramPath::Cublas] {
                if path == GramPath::Cublas && dev.blas.is_none() {
                    continue;
                }
                dev.fill(&mut g, f32::NAN)?;
                ops::gram_into(dev, &hp, k, Some(path), &mut g)?;
                let got = dev.download(&g)?;
                rep.check(
                    &format!("Gram {h:?} inputs {path:?} {k:?} n=301 d=129"),
                    ops::max_rel_err(&got, &want),
                    1e-2,
                );
            }
        }
    }
    // Many pools in one launch.
    let sizes = [1usize, 17, 64, 65, 100, 129, 3, 250, 31];
    let pools: Vec<Embeddings> = sizes.iter().map(|&n| random(n, 45, rng)).collect::<Result<_>>()?;
    let refs: Vec<&Embeddings> = pools.iter().collect();
    for k in [Kernel::Cosine, Kernel::Rbf { l2: 0.9 }] {
        let got = ops::gram_batched(dev, &refs, k)?;
        let want = crate::similarity::gram_batched(&refs, k)?;
        let err = got
            .iter()
            .zip(&want)
            .map(|(a, b)| ops::max_rel_err(a, b))
            .fold(0.0f64, |m, e| {
                if e.is_nan() || m.is_nan() {
                    f64::NAN
                } else {
                    m.max(e)
                }
            });
        rep.check(
            &format!("Gram batched, {} pools of 1..250, {k:?}", sizes.len()),
            err,
            1e-4,
        );
    }
    // A kernel row equals the Gram's row.
    let e = random(517, 33, rng)?;
    let pool = DevPool::upload(dev, &e)?;
    let inv = e.inv_norms()?;
    let k = Kernel::Matern52 { l2: 0.5 };
    let want = crate::similarity::gram(&e, k)?;
    let j = rng.below(e.rows());
    let y = dev.upload(e.row(j))?;
    let mut out = dev.zeros::<f32>(e.rows())?;
    dev.fill(&mut out, f32::NAN)?;
    ops::kernel_row(dev, &pool, &y, inv[j] as f32, k, &mut out)?;
    let got = dev.download(&out)?;
    // Masked argmax with ties, a mask and a budget, against a direct scan.
    let n = 70_001;
    let g: Vec<f64> = (0..n).map(|_| (rng.below(50) as f64) / 7.0).collect();
    let alive: Vec<u8> = (0..n).map(|_| u8::from(rng.below(5) != 0)).collect();
    let cost: Vec<f64> = (0..n).map(|_| 1.0 + rng.below(10) as f64).collect();
    let (gd, ad, cd) = (dev.upload(&g)?, dev.upload(&alive)?, dev.upload(&cost)?);
    for budget in [None, Some(4.0)] {
        let want = (0..n)
            .filter(|&i| alive[i] == 1 && budget.is_none_or(|b| cost[i] <= b))
            .fold(None::<usize>, |b, i| match b {
                Some(j) if g[j] >= g[i] => Some(j),
                _ => Some(i),
            });
        let got = ops::argmax_masked(dev, &gd, &ad, budget.map(|b| (&cd, b)))?.map(|p| p.0);
        rep.same(
            &format!("masked argmax n={n}, ties, budget {budget:?}"),
            got == want,
            &format!("got {got:?}, want {want:?}"),
        );
    }
    // GP posterior moments and the UCB pick, against their host definitions.
    {
        let n = 9_973;
        let v = |rng: &mut Rng| -> Vec<f64> { (0..n).map(|_| rng.normal()).collect() };
        let (mu0, a, b) = (v(rng), v(rng), v(rng));
        let colsq: Vec<f64> = (0..n).map(|_| 1.2 * rng.uniform()).collect();
        let (m, sd) = (0.3, 1.7);
        let (mean, var) = ops::gp_posterior(dev, &mu0, &a, &b, &colsq, m, sd)?;
        let err = (0..n)
            .map(|i| {
                let wm = (mu0[i] + m) + (a[i] - m * b[i]);
                let wv = sd * sd * (1.0 - colsq[i]).max(0.0);
                ops::rel_err(mean[i], wm).max(ops::rel_err(var[i], wv))
            })
            .fold(0.0f64, |acc, e| {
                if e.is_nan() || acc.is_nan() {
                    f64::NAN
                } else {
                    acc.max(e)
                }
            });
        rep.check("GP posterior moments n=9973", err, 1e-12);
        let scored: Vec<bool> = (0..n).map(|_| rng.below(3) == 0).collect();
        let y: Vec<Option<f64>> = scored.iter().map(|&s| s.then_some(0.0)).collect();
        let got = ops::ucb_argmax(dev, &mean, &var, &scored, 0.7)?;
        let want = crate::rerank::ucb_pick(&mean, &var, &y, 0.7);
        rep.same(
            "UCB pick n=9973",
            got == want,
            &format!("got {got:?}, want {want:?}"),
        );
    }
    rep.check(
        "kernel row (Matern-5/2) n=517 d=33",
        ops::max_rel_err(&got, &want[j * e.rows()..(j + 1) * e.rows()]),
        1e-4,
    );
    Ok(())
}

fn selectors(dev: &Arc<Device>, rng: &mut Rng, rep: &mut Report) -> Result<()> {
    use crate::select::{select, Inputs, Method, SelectConfig};
    let ord = dev.ordinal;
    let (n, d) = (513, 67);
    let mut e = random(n, d, rng)?;
    // Exact duplicates: ties must go to the lower index on both backends.
    let mut data = e.as_slice().to_vec();
    for (dst, src) in [(400usize, 7usize), (401, 8), (402, 7)] {
        let row: Vec<f32> = data[src * d..(src + 1) * d].to_vec();
        data[dst * d..(dst + 1) * d].copy_from_slice(&row);
    }
    e = Embeddings::new(n, d, data, "gpu-check")?;
    let q: Vec<f32> = (0..d).map(|i| e.row(3)[i] + 0.5 * rng.normal() as f32).collect();
    let costs: Vec<f64> = (0..n).map(|_| 1.0 + rng.below(40) as f64).collect();
    let retained = [5usize, 400, 77];
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
            let inp = Inputs {
                embeddings: Some(&e),
                query: Some(&q),
                costs: Some(&costs),
                retained: if ret { &retained } else { &[] },
                ..Inputs::default()
            };
            let cpu = select(&cfg.clone().backend(crate::Backend::Cpu), &inp)?;
            let gpu = select(&cfg.backend(crate::Backend::Cuda(ord)), &inp)?;
            let what = format!("select {} greedy, {label}, n={n} d={d}", m.name());
            let same = cpu.selected == gpu.selected && cpu.stop == gpu.stop;
            rep.same(
                &format!("{what}: same picks"),
                same && gpu.backend == crate::Backend::Cuda(ord),
                &format!(
                    "cpu {:?} ({:?}) vs cuda {:?} ({:?}) on {}",
                    cpu.selected,
                    cpu.stop,
                    gpu.selected,
                    gpu.stop,
                    gpu.backend.name()
                ),
            );
            if same {
                let err = cpu
                    .gains
                    .iter()
                    .zip(&gpu.gains)
                    .map(|(&c, &g)| ops::rel_err(g, c))
                    .fold(0.0f64, |m, e| {
                        if e.is_nan() || m.is_nan() {
                            f64::NAN
                        } else {
                            m.max(e)
                        }
                    });
                rep.check(&format!("{what}: gains"), err, 1e-4);
            }
        }
    }
    // Batched MMR against select on each pool.
    let (pools, pn, pd, k) = (33, 101, 29, 9);
    let (rows, inv, rel, refs) = batched_problem(pools, pn, pd, rng)?;
    let got = ops::MmrBatched::new(dev.clone(), &rows, &inv, &rel, pools, pn, pd)?.run(0.5, k)?;
    // Its argmax compares gains rounded to f32: a divergence is accepted only where the
    // two picks' gains are equal at that resolution (a near-tie), and reported.
    let (mut bad, mut near) = (Vec::new(), 0);
    for (b, (e, q)) in refs.iter().enumerate() {
        let cfg = SelectConfig::new(Method::Mmr).lambda(0.5).k(k);
        let inp = Inputs {
            embeddings: Some(e),
            query: Some(q),
            ..Inputs::default()
        };
        let want = select(&cfg, &inp)?;
        let have: Vec<usize> = got[b].iter().map(|p| p.0).collect();
        if want.selected == have {
            continue;
        }
        let s = want
            .selected
            .iter()
            .zip(&have)
            .take_while(|(a, b)| a == b)
            .count();
        let tie = s < want.gains.len() && s < got[b].len() && (want.gains[s] as f32) == (got[b][s].1 as f32);
        if tie {
            near += 1;
        } else {
            bad.push(format!("pool {b}: {:?} vs {have:?}", want.selected));
        }
    }
    rep.same(
        &format!("MMR batched, {pools} pools of {pn}, k={k}: same picks as select ({near} f32 near-ties)"),
        bad.is_empty(),
        &bad.join("; "),
    );
    Ok(())
}

type Batched = (Vec<f32>, Vec<f64>, Vec<f64>, Vec<(Embeddings, Vec<f32>)>);

/// `pools` random pools with queries: unit rows back to back, their exact inverse norms,
/// relevances, and each pool with its query for the CPU reference.
fn batched_problem(pools: usize, n: usize, d: usize, rng: &mut Rng) -> Result<Batched> {
    let (mut rows, mut inv, mut rel, mut refs) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..pools {
        let e = random(n, d, rng)?.normalized()?;
        let q: Vec<f32> = (0..d).map(|_| rng.normal() as f32).collect();
        let iv = e.inv_norms()?;
        let qn = crate::backend::cpu::dot(&q, &q).sqrt();
        for (i, &v) in iv.iter().enumerate() {
            rel.push(crate::backend::cpu::dot(e.row(i), &q) * v / qn);
        }
        rows.extend_from_slice(e.as_slice());
        inv.extend(iv);
        refs.push((e, q));
    }
    Ok((rows, inv, rel, refs))
}

fn rerank(dev: &Arc<Device>, rng: &mut Rng, rep: &mut Report) -> Result<()> {
    use crate::rerank::{rerank, DenseKernel, Method, Precomputed, RerankConfig};
    let e = random(701, 41, rng)?.normalized()?;
    let q: Vec<f32> = (0..41).map(|_| rng.normal() as f32).collect();
    let scores: Vec<f64> = (0..701).map(|_| rng.uniform()).collect();
    let k = Kernel::Vmf { kappa: 5.0 };
    // One kernel for both runs, so a difference is the GP's (the device Gram is checked
    // on its own above).
    let cpu_k = DenseKernel::build(&e, &q, k)?;
    let gpu_k = &cpu_k;
    for m in [Method::BoundaryMorph, Method::Bagel] {
        let run = |kernel: &DenseKernel, b: crate::Backend| -> Result<crate::rerank::Reranked> {
            let mut cfg = RerankConfig::new(m, 60, 20);
            cfg.backend = b;
            rerank(&cfg, kernel, &mut Precomputed::new(scores.clone(), 60)?)
        };
        let c = run(&cpu_k, crate::Backend::Cpu)?;
        let g = run(gpu_k, crate::Backend::Cuda(dev.ordinal))?;
        rep.same(
            &format!("rerank {} B=60 k=20 n=701: same calls and top-k", m.name()),
            c.scored == g.scored && c.selected == g.selected,
            &format!("calls {:?} vs {:?}", c.scored, g.scored),
        );
    }
    Ok(())
}

/// Median wall time in ms of `reps` runs of `f`, each ended by a device sync.
fn median_ms(dev: &Device, reps: usize, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    f()?; // warm-up
    dev.sync()?;
    let mut v = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t = Instant::now();
        f()?;
        dev.sync()?;
        v.push(t.elapsed().as_secs_f64() * 1e3);
    }
    v.sort_by(f64::total_cmp);
    Ok(v[v.len() / 2])
}

fn row(what: &str, gpu_ms: f64, target: &str, met: Option<bool>, note: &str) {
    let m = match met {
        Some(true) => "met",
        Some(false) => "MISSED",
        None => "",
    };
    println!("{what:<44} {gpu_ms:>10.3} {target:>12} {m:>7}  {note}");
}

fn timings(dev: &Arc<Device>, rng: &mut Rng) -> Result<()> {
    println!("\ntimings (median of 5 after a warm-up; device synchronised before the clock stops):");
    // Copy bandwidth.
    let mb = 256usize;
    let host = vec![1.0f32; mb << 18];
    let mut d1 = dev.zeros::<f32>(host.len())?;
    let mut d2 = dev.zeros::<f32>(host.len())?;
    let mut back = vec![0.0f32; host.len()];
    let h2d = median_ms(dev, 5, || {
        dev.stream
            .memcpy_htod(&host, &mut d1)
            .map_err(|e| super::err(format!("copy: {e}")))
    })?;
    let d2h = median_ms(dev, 5, || {
        dev.stream
            .memcpy_dtoh(&d1, &mut back)
            .map_err(|e| super::err(format!("copy: {e}")))
    })?;
    let d2d = median_ms(dev, 5, || {
        dev.stream
            .memcpy_dtod(&d1, &mut d2)
            .map_err(|e| super::err(format!("copy: {e}")))
    })?;
    let gb = (mb as f64) / 1024.0;
    println!(
        "copy bandwidth, {mb} MiB: host->device {:.1} GB/s (pageable), device->host {:.1} GB/s, device->device {:.0} GB/s (read + write)",
        gb * 1.073_741_824 / (h2d / 1e3),
        gb * 1.073_741_824 / (d2h / 1e3),
        2.0 * gb * 1.073_741_824 / (d2d / 1e3)
    );
    drop((d1, d2, host, back));

    println!(
        "\n{:<44} {:>10} {:>12} {:>7}  note",
        "workload", "GPU ms", "target", ""
    );
    // Gram N = 10,000, d = 1,024.
    let (n, d) = (10_000, 1024);
    let e = random(n, d, rng)?;
    let pool = DevPool::upload(dev, &e)?;
    let mut g = dev.zeros::<f32>(n * n)?;
    let flops = 2.0 * (n as f64) * (n as f64) * (d as f64);
    let vmf = Kernel::Vmf { kappa: 4.0 };
    let mut sgemm = f64::NAN;
    if dev.blas.is_some() {
        sgemm = median_ms(dev, 5, || ops::gemm_raw(dev, &pool, &mut g))?;
        row(
            "cuBLAS SGEMM X X^T, 10k x 10k x 1024",
            sgemm,
            "",
            None,
            &format!("{:.1} TFLOP/s", flops / sgemm / 1e9),
        );
    }
    let gram_blas = if dev.blas.is_some() {
        median_ms(dev, 5, || {
            ops::gram_into(dev, &pool, vmf, Some(GramPath::Cublas), &mut g)
        })?
    } else {
        f64::NAN
    };
    row(
        "Gram cos+vMF f32, N=10k d=1024 (cuBLAS+epi)",
        gram_blas,
        "<= 2x SGEMM",
        Some(gram_blas <= 2.0 * sgemm),
        &format!("{:.2}x SGEMM", gram_blas / sgemm),
    );
    let gram_tiled = median_ms(dev, 3, || {
        ops::gram_into(dev, &pool, vmf, Some(GramPath::Tiled), &mut g)
    })?;
    row(
        "Gram cos+vMF f32, tiled kernel (fused epi)",
        gram_tiled,
        "",
        None,
        &format!("{:.1} TFLOP/s", flops / gram_tiled / 1e9),
    );
    let hp = DevPool::upload_half(dev, &half_bits(&e, Elem::Bf16), n, d, Elem::Bf16)?;
    if dev.blas.is_some() {
        let bgemm = median_ms(dev, 5, || ops::gemm_raw(dev, &hp, &mut g))?;
        row(
            "cuBLAS GemmEx bf16 -> f32, same shape",
            bgemm,
            "",
            None,
            &format!("{:.1} TFLOP/s", flops / bgemm / 1e9),
        );
        let gb16 = median_ms(dev, 5, || {
            ops::gram_into(dev, &hp, vmf, Some(GramPath::Cublas), &mut g)
        })?;
        row(
            "Gram cos+vMF, bf16 inputs",
            gb16,
            "<= 1 ms",
            Some(gb16 <= 1.0),
            "f32 accumulation and output",
        );
    }
    let t = Instant::now();
    let _cpu = crate::similarity::gram(&e, vmf)?;
    row(
        "  (CPU Gram, same shape, this host)",
        t.elapsed().as_secs_f64() * 1e3,
        "",
        None,
        "one run",
    );
    drop((g, hp, pool));

    // Greedy MMR and DPP, N = 10,000, k = 100 (state built once, outside the clock).
    let en = e.normalized()?;
    let inv = en.inv_norms()?;
    let q: Vec<f32> = (0..d).map(|_| rng.normal() as f32).collect();
    let qn = crate::backend::cpu::dot(&q, &q).sqrt();
    let rel: Vec<f64> = (0..n)
        .map(|i| crate::backend::cpu::dot(en.row(i), &q) * inv[i] / qn)
        .collect();
    for (kind, name, target) in [
        (DevKind::Mmr { lambda: 0.5 }, "greedy MMR N=10k k=100", 2.0),
        (DevKind::Dpp { eps: 1e-10 }, "greedy DPP N=10k k=100", 3.0),
    ] {
        let mut times = Vec::new();
        for _ in 0..6 {
            let mut s = GreedyDev::new(dev.clone(), kind, en.as_slice(), d, &inv, Some(&rel), None, None)?;
            dev.sync()?;
            let t = Instant::now();
            for _ in 0..100 {
                match s.best(None)? {
                    Some((x, _)) => s.add(x, false)?,
                    None => break,
                }
            }
            dev.sync()?;
            times.push(t.elapsed().as_secs_f64() * 1e3);
        }
        let times = &mut times[1..];
        times.sort_by(f64::total_cmp);
        let ms = times[times.len() / 2];
        row(
            name,
            ms,
            &format!("<= {target} ms"),
            Some(ms <= target),
            "one 16-byte read back per step",
        );
    }
    let cpu_mmr = {
        use crate::select::{select, Inputs, Method, SelectConfig};
        let t = Instant::now();
        let inp = Inputs {
            embeddings: Some(&en),
            query: Some(&q),
            ..Inputs::default()
        };
        select(&SelectConfig::new(Method::Mmr).lambda(0.5).k(100), &inp)?;
        t.elapsed().as_secs_f64() * 1e3
    };
    row(
        "  (CPU greedy MMR, same problem, this host)",
        cpu_mmr,
        "",
        None,
        "one run",
    );

    // BoundaryMORPH, N = 10,000, k = 100, B = 500 (oracle precomputed; kernel build excluded).
    {
        use crate::rerank::{rerank, DenseKernel, Method, Precomputed, RerankConfig};
        let kern = Kernel::Vmf { kappa: 4.0 };
        let dk = DenseKernel::build_on(&en, &q, kern, &crate::Backend::Cuda(dev.ordinal))?;
        let scores: Vec<f64> = (0..n).map(|i| (0.5 + 0.5 * rel[i]).clamp(0.0, 1.0)).collect();
        for (b, label) in [
            (
                crate::Backend::Cuda(dev.ordinal),
                "BoundaryMORPH N=10k k=100 B=500",
            ),
            (crate::Backend::Cpu, "  (CPU BoundaryMORPH, same problem)"),
        ] {
            let mut cfg = RerankConfig::new(Method::BoundaryMorph, 500, 100);
            cfg.backend = b.clone();
            let reps = if b == crate::Backend::Cpu { 1 } else { 3 };
            let ms = median_ms(dev, reps, || {
                rerank(&cfg, &dk, &mut Precomputed::new(scores.clone(), 500)?).map(|_| ())
            })?;
            if b == crate::Backend::Cpu {
                row(label, ms, "", None, "");
            } else {
                row(label, ms, "<= 25 ms", Some(ms <= 25.0), "oracle excluded");
            }
        }
    }

    // 512 pools of N = 1,000 with MMR k = 20 (d = 384).
    let (pools, pn, pd) = (512, 1000, 384);
    let (rows, pinv, prel, _) = batched_problem(pools, pn, pd, rng)?;
    let mb = ops::MmrBatched::new(dev.clone(), &rows, &pinv, &prel, pools, pn, pd)?;
    let ms = median_ms(dev, 5, || mb.run(0.5, 20).map(|_| ()))?;
    row(
        "512 pools N=1000 d=384, MMR k=20",
        ms,
        "<= 50 ms",
        Some(ms <= 50.0),
        "pools uploaded once, outside the clock",
    );
    Ok(())
}
