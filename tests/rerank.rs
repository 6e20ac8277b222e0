//! Budgeted top-k: the incremental GP against a full dense refit at every step, the
//! boundary rule on hand-made pools, the selectors' call sequences, and bad input.

use crate::slow;
use ctxprune::rerank::gp::{Gp, KernelRows, PoolKernel};
use ctxprune::rerank::{
    boundary_pick, kernel_rows, metrics::ncg, Acquisition, KernelChoice, Method, Oracle, Precomputed, Prior,
    RerankConfig, Reranked,
};
use ctxprune::rng::Rng;
use ctxprune::similarity::{Kernel, KernelKind};
use ctxprune::{Engine, Pool};

/// A seeded pool on the CPU engine with its query, vMF kernel (median heuristic) and
/// oracle scores.
pub(crate) struct P {
    pub(crate) pool: Pool,
    pub(crate) q: Vec<f32>,
    pub(crate) kernel: Kernel,
}

impl P {
    pub(crate) fn rows(&self) -> PoolKernel<'_> {
        kernel_rows(&self.pool, &self.q, self.kernel).unwrap()
    }
}

pub(crate) fn pool(n: usize, d: usize, seed: u64) -> (P, Vec<f64>) {
    let (e, q, _) = crate::problem(n, d, seed);
    let kernel = Kernel::with_median_heuristic(KernelKind::Vmf, &e).unwrap();
    let pool = Pool::new(&Engine::cpu(), e).unwrap();
    let mut rng = Rng::new(seed + 1);
    let scores = (0..n).map(|_| rng.uniform()).collect();
    (P { pool, q, kernel }, scores)
}

/// The boundary rule on inputs of matching lengths.
pub(crate) fn bp(mean: &[f64], var: &[f64], y: &[Option<f64>], k: usize) -> Option<usize> {
    boundary_pick(mean, var, y, k).unwrap()
}

/// A dense posterior with the scored documents (and a round's fantasies) overlaid: their
/// mean is their score and their variance 0, as a run reads them.
pub(crate) fn overlay(m: &mut [f64], v: &mut [f64], y: &[Option<f64>]) {
    for (i, s) in y.iter().enumerate() {
        if let Some(s) = *s {
            m[i] = s;
            v[i] = 0.0;
        }
    }
}

/// `cfg` on the pool with its kernel.
pub(crate) fn rerank(cfg: &RerankConfig, p: &P, o: &mut dyn Oracle) -> ctxprune::Result<Reranked> {
    let mut cfg = cfg.clone();
    cfg.kernel = KernelChoice::Fixed(p.kernel);
    ctxprune::rerank::rerank(&cfg, &p.pool, &p.q, o)
}

/// The posterior from scratch: dense solve of (K_AA + jitter I) against the standardised
/// residuals and against every k_i (SPEC §3 formulas, no incremental state).
pub(crate) fn full_refit(
    k: &PoolKernel<'_>,
    mu0: &[f64],
    obs: &[(Option<usize>, f64)],
    jitter: f64,
) -> (Vec<f64>, Vec<f64>) {
    let n = k.len();
    let mut qrow = vec![0.0; n];
    k.query_row(&mut qrow);
    let kv = |a: Option<usize>, b: Option<usize>| -> f64 {
        match (a, b) {
            (None, None) => 1.0,
            (Some(i), Some(j)) => k.get(i, j).unwrap(),
            (Some(i), None) | (None, Some(i)) => qrow[i],
        }
    };
    let t = obs.len();
    let kaa: Vec<Vec<f64>> = (0..t)
        .map(|a| {
            (0..t)
                .map(|b| kv(obs[a].0, obs[b].0) + if a == b { jitter } else { 0.0 })
                .collect()
        })
        .collect();
    let r: Vec<f64> = obs.iter().map(|o| o.1).collect();
    let m = r.iter().sum::<f64>() / t as f64;
    let sd = (r.iter().map(|x| (x - m).powi(2)).sum::<f64>() / t as f64).sqrt();
    let s = if t == 1 || sd <= 1e-12 { 1.0 } else { sd };
    let z: Vec<f64> = r.iter().map(|x| (x - m) / s).collect();
    let alpha = slow::solve(&kaa, &z);
    let (mut mean, mut var) = (vec![0.0; n], vec![0.0; n]);
    for i in 0..n {
        let ki: Vec<f64> = obs.iter().map(|o| kv(o.0, Some(i))).collect();
        let w = slow::solve(&kaa, &ki);
        mean[i] = mu0[i] + m + s * ki.iter().zip(&alpha).map(|(a, b)| a * b).sum::<f64>();
        var[i] = s * s * (1.0 - ki.iter().zip(&w).map(|(a, b)| a * b).sum::<f64>()).max(0.0);
    }
    (mean, var)
}

/// BoundaryMORPH's calls replayed with the full refit at every step: the boundary rule
/// over the dense posterior with prior `mu0` (the query observed at its residual 0).
pub(crate) fn refit_replay(
    k: &PoolKernel<'_>,
    mu0: &[f64],
    scores: &[f64],
    budget: usize,
    cap: usize,
) -> Vec<usize> {
    let n = k.len();
    let mut obs = vec![(None, 0.0)];
    let mut y = vec![None; n];
    let mut calls = vec![];
    for _ in 0..budget {
        let (mut m, mut v) = full_refit(k, mu0, &obs, 1e-4);
        overlay(&mut m, &mut v, &y);
        let Some(j) = bp(&m, &v, &y, cap) else {
            break;
        };
        calls.push(j);
        y[j] = Some(scores[j]);
        obs.push((Some(j), scores[j] - mu0[j]));
    }
    calls
}

#[test]
fn incremental_gp_equals_a_full_refit_at_every_step() {
    for &(n, d, seed) in &[(37usize, 9usize, 1u64), (64, 5, 2), (23, 17, 3)] {
        let (p, scores) = pool(n, d, seed);
        let k = p.rows();
        let mu0: Vec<f64> = (0..n).map(|p| (n - 1 - p) as f64 / (n - 1) as f64).collect();
        let mut gp = Gp::new(&k, mu0.clone(), 1.0).unwrap();
        let mut obs = vec![(None, 0.0)];
        let mut rng = Rng::new(seed);
        let (mut mean, mut var) = (vec![0.0; n], vec![0.0; n]);
        for step in 0..15 {
            let j = rng.below(n);
            gp.observe(j, scores[j]).unwrap();
            obs.push((Some(j), scores[j] - mu0[j]));
            gp.posterior(&mut mean, &mut var).unwrap();
            let (m2, v2) = full_refit(&k, &mu0, &obs, gp.jitter().unwrap());
            // V is stored in f32 (documented): 1e-5 against the f64 refit.
            crate::assert_close(&format!("mean n={n} step {step}"), &mean, &m2, 1e-5);
            crate::assert_close(&format!("var n={n} step {step}"), &var, &v2, 1e-5);
        }
    }
}

/// Not a valid kernel (K(0,1) = K(0,2) = 1, K(1,2) = -1): every rung of the jitter ladder
/// fails, and the pseudo-inverse still gives a finite posterior.
struct Broken;
impl KernelRows for Broken {
    fn len(&self) -> usize {
        3
    }
    fn row(&self, j: usize, out: &mut [f64]) {
        let k = [[1.0, 1.0, 1.0], [1.0, 1.0, -1.0], [1.0, -1.0, 1.0]];
        out.copy_from_slice(&k[j]);
    }
    fn query_row(&self, out: &mut [f64]) {
        out.copy_from_slice(&[0.0, 0.0, 0.0]);
    }
}

#[test]
fn jitter_ladder_and_pseudo_inverse_never_panic() {
    let mut gp = Gp::new(&Broken, vec![0.5; 3], 1.0).unwrap();
    for (j, y) in [(0, 0.9), (1, 0.1), (2, 0.4)] {
        gp.observe(j, y).unwrap();
    }
    assert!(gp.jitter().is_none_or(|j| j > 1e-4), "the ladder was climbed");
    let (mut m, mut v) = (vec![0.0; 3], vec![0.0; 3]);
    gp.posterior(&mut m, &mut v).unwrap();
    assert!(m.iter().chain(&v).all(|x| x.is_finite()), "{m:?} {v:?}");
    assert!(gp.observe(5, 0.5).is_err());
    assert!(gp.observe(0, f64::NAN).is_err());
}

#[test]
fn boundary_rule_on_hand_made_pools() {
    // k = 2. Incumbents 0 (0.9, certain) and 1 (0.6, uncertain); challengers 2 (0.55,
    // uncertain) and 3 (0.1). The closest call is 1 vs 2; 2's sigma is larger.
    let mean = [0.9, 0.6, 0.55, 0.1];
    let var = [0.0001, 0.04, 0.09, 0.01];
    let none = [None; 4];
    assert_eq!(bp(&mean, &var, &none, 2), Some(2));
    // With 2 scored (sigma 0), the pair's unscored member is the incumbent 1.
    let mut y = none;
    y[2] = Some(0.55);
    let var2 = [0.0001, 0.04, 0.0, 0.01];
    assert_eq!(bp(&mean, &var2, &y, 2), Some(1));
    // Equal sigma, both unscored: the incumbent.
    assert_eq!(bp(&[0.8, 0.5, 0.5], &[0.01, 0.04, 0.04], &[None; 3], 2), Some(1));
    // Equal z for two pairs: the first incumbent in rank order wins (0 before 1).
    assert_eq!(
        bp(&[0.7, 0.7, 0.5], &[0.04, 0.04, 0.0], &[None, None, Some(0.5)], 2),
        Some(0)
    );
    // Every pair fully scored, or N <= k: no call.
    assert_eq!(bp(&[0.7, 0.5], &[0.0, 0.0], &[Some(0.7), Some(0.5)], 1), None);
    assert_eq!(bp(&[0.7, 0.5], &[0.1, 0.1], &[None, None], 2), None);
}

#[test]
fn boundary_morph_follows_the_full_refit_call_for_call() {
    let (n, budget, cap) = (40, 12, 5);
    let (p, scores) = pool(n, 7, 11);
    let mut o = Precomputed::new(scores.clone(), budget).unwrap();
    let got = rerank(&RerankConfig::new(Method::BoundaryMorph, budget, cap), &p, &mut o).unwrap();
    let mu0: Vec<f64> = (0..n).map(|p| (n - 1 - p) as f64 / (n - 1) as f64).collect();
    assert_eq!(got.scored, refit_replay(&p.rows(), &mu0, &scores, budget, cap));
    assert_eq!(got.selected.len(), cap);
    assert!(o.calls() <= budget);
}

#[test]
fn baselines_call_what_their_definitions_say() {
    let (n, budget, cap) = (30, 10, 4);
    let (k, scores) = pool(n, 6, 21);
    let mut o = Precomputed::new(scores.clone(), budget).unwrap();
    let ss = rerank(&RerankConfig::new(Method::SingleStage, budget, cap), &k, &mut o).unwrap();
    assert_eq!(ss.scored, (0..budget).collect::<Vec<_>>());
    let mut top: Vec<usize> = (0..budget).collect();
    top.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));
    assert_eq!(ss.selected, top[..cap]);
    let mut o = Precomputed::new(scores.clone(), budget).unwrap();
    let bagel = rerank(&RerankConfig::new(Method::Bagel, budget, cap), &k, &mut o).unwrap();
    assert_eq!(
        &bagel.scored[..budget / 2],
        &(0..budget / 2).collect::<Vec<_>>()[..],
        "warm start on the MIPS top-B/2"
    );
    assert_eq!(bagel.scored.len(), budget);
    let mut o = Precomputed::new(scores.clone(), budget).unwrap();
    let rgs = rerank(&RerankConfig::new(Method::Rgs, budget, cap), &k, &mut o).unwrap();
    assert_eq!(rgs.scored[0], 0, "RGS seeds with the MIPS top-1");
    assert_eq!(rgs.scored.len(), budget);
    let mut dedup = rgs.scored.clone();
    dedup.sort_unstable();
    dedup.dedup();
    assert_eq!(dedup.len(), budget, "no document scored twice");
    for m in [Acquisition::Ucb, Acquisition::Boundary] {
        let mut cfg = RerankConfig::new(Method::BoundaryMorph, budget, cap);
        cfg.acquisition = m;
        cfg.prior = Prior::Zero;
        let mut o = Precomputed::new(scores.clone(), budget).unwrap();
        let r = rerank(&cfg, &k, &mut o).unwrap();
        assert!(r.scored.len() <= budget && r.selected.len() == cap);
    }
}

#[test]
fn bad_input_and_caps() {
    let (k, scores) = pool(12, 4, 31);
    let mut o = Precomputed::new(scores.clone(), 100).unwrap();
    assert!(
        rerank(&RerankConfig::new(Method::BoundaryMorph, 5, 13), &k, &mut o)
            .unwrap_err()
            .to_string()
            .contains("capacity")
    );
    let r = rerank(&RerankConfig::new(Method::SingleStage, 50, 3), &k, &mut o).unwrap();
    assert_eq!(r.scored.len(), 12);
    assert!(r.notes.iter().any(|n| n.contains("capped at 12")));
    assert!(Precomputed::new(vec![0.5, 1.5], 2)
        .unwrap_err()
        .to_string()
        .contains("oracle-scores[1]"));
    let mut small = Precomputed::new(scores, 2).unwrap();
    assert!(small.score(&[0, 1, 2]).is_err(), "more calls than the budget");
    struct Garbage;
    impl Oracle for Garbage {
        fn score(&mut self, items: &[usize]) -> ctxprune::Result<Vec<f64>> {
            Ok(vec![2.0; items.len()])
        }
    }
    let e = rerank(&RerankConfig::new(Method::BoundaryMorph, 3, 2), &k, &mut Garbage).unwrap_err();
    assert!(e.to_string().contains("outside [0, 1]"), "{e}");
}

#[test]
fn ncg_by_hand() {
    let g = [3.0, 0.0, 2.0, 1.0];
    assert_eq!(ncg(&[0, 2], &g), 1.0);
    assert!((ncg(&[1, 3], &g) - 1.0 / 5.0).abs() < 1e-12);
    assert_eq!(ncg(&[1], &[0.0, 0.0]), 1.0);
}

#[test]
fn eval_runs_every_variant_and_plots() {
    use ctxprune::rerank::eval;
    let a = eval::generate(300, 8, 5).unwrap();
    let b = eval::generate(300, 8, 5).unwrap();
    assert_eq!(a.oracle, b.oracle, "the generator is seeded");
    assert!(a.oracle.iter().all(|s| (0.0..=1.0).contains(s)));
    assert!(a.labels.iter().any(|&l| l > 0.0));
    let mut seen = vec![];
    let cells = eval::run(2, 9, 300, &[5, 10], &[3], &mut |p, n| seen.push((p, n))).unwrap();
    assert_eq!(seen, vec![(1, 2), (2, 2)]);
    assert_eq!(cells.len(), 2 * eval::variants().len());
    assert!(cells
        .iter()
        .all(|c| (0.0..=1.0 + 1e-12).contains(&c.ce_ncg) && (0.0..=1.0 + 1e-12).contains(&c.ncg)));
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("q.png");
    ctxprune::rerank::plot::plot(&cells, &p).unwrap();
    let bytes = std::fs::read(&p).unwrap();
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
}

#[test]
fn equal_posterior_means_tie_by_mips_position() {
    // Zero prior, nothing scored: every mean is exactly the query's residual mean, so the
    // ranking is the MIPS order and BAGEL with beta0 = 0 calls the MIPS top-1 first.
    let (k, scores) = pool(25, 6, 41);
    let rows = k.rows();
    let mut gp = Gp::new(&rows, vec![0.0; 25], 0.0).unwrap();
    let (mut m, mut v) = (vec![0.0; 25], vec![0.0; 25]);
    gp.posterior(&mut m, &mut v).unwrap();
    assert!(m.iter().all(|&x| x == m[0]), "{m:?}");
    let mut cfg = RerankConfig::new(Method::Bagel, 1, 3);
    cfg.beta0 = 0.0;
    let mut o = Precomputed::new(scores.clone(), 1).unwrap();
    assert_eq!(rerank(&cfg, &k, &mut o).unwrap().scored, vec![0]);
    let mut o = Precomputed::new(scores, 0).unwrap();
    assert_eq!(
        rerank(&RerankConfig::new(Method::Bagel, 0, 3), &k, &mut o)
            .unwrap()
            .selected,
        vec![0, 1, 2]
    );
}

/// Kernel rows read on demand equal the kernel of the cosine (f64 definition) to f32
/// rounding, are exactly symmetric, have a diagonal of exactly K(1), and equal the Gram's
/// values; the query's row is K(cos(q, x)).
#[test]
fn kernel_rows_on_demand_match_the_definition_and_the_gram() {
    for kernel in [Kernel::Vmf { kappa: 3.0 }, Kernel::Matern52 { l2: 0.8 }] {
        let (e, q, _) = crate::problem(43, 11, 7);
        let pool = Pool::new(&Engine::cpu(), e.clone()).unwrap();
        let k = kernel_rows(&pool, &q, kernel).unwrap();
        let g = pool.gram(kernel).unwrap();
        let n = 43;
        let mut rows = vec![vec![0.0; n]; n];
        for (j, r) in rows.iter_mut().enumerate() {
            k.row(j, r);
        }
        let slow = |c: f64| match kernel {
            Kernel::Vmf { kappa } => (f64::from(kappa) * (c - 1.0)).exp(),
            Kernel::Matern52 { l2 } => {
                let t = (5.0 * 2.0 * (1.0 - c) / f64::from(l2)).sqrt();
                (1.0 + t + t * t / 3.0) * (-t).exp()
            }
            _ => unreachable!(),
        };
        for i in 0..n {
            assert_eq!(rows[i][i], f64::from(kernel.apply(1.0)), "diagonal {i}");
            for j in 0..n {
                assert_eq!(
                    rows[i][j].to_bits(),
                    rows[j][i].to_bits(),
                    "not symmetric at ({i},{j})"
                );
                assert_eq!(rows[i][j], k.get(i, j).unwrap(), "get({i},{j})");
                let want = if i == j {
                    1.0
                } else {
                    slow(crate::slow::cos(e.row(i), e.row(j)).clamp(-1.0, 1.0))
                };
                assert!(
                    (rows[i][j] - want).abs() < 2e-6,
                    "({i},{j}): {} vs {want}",
                    rows[i][j]
                );
                assert!(
                    (rows[i][j] - f64::from(g[i * n + j])).abs() < 2e-6,
                    "({i},{j}) vs Gram"
                );
            }
        }
        let mut qrow = vec![0.0; n];
        k.query_row(&mut qrow);
        for (i, &v) in qrow.iter().enumerate() {
            let want = slow(crate::slow::cos(e.row(i), &q).clamp(-1.0, 1.0));
            assert!((v - want).abs() < 2e-6, "query row {i}: {v} vs {want}");
        }
    }
}

/// The public acquisition rules check their inputs' lengths instead of indexing out of
/// bounds.
#[test]
fn acquisition_rules_check_lengths() {
    use ctxprune::rerank::ucb_pick;
    assert!(boundary_pick(&[0.5, 0.4, 0.3], &[0.1, 0.1], &[None; 3], 1).is_err());
    assert!(boundary_pick(&[0.5, 0.4], &[0.1, 0.1], &[None; 3], 1).is_err());
    assert!(ucb_pick(&[0.5, 0.4], &[0.1], &[None, None], 1.0).is_err());
    assert!(ucb_pick(&[0.5], &[0.1], &[None, None], 1.0).is_err());
    assert_eq!(
        ucb_pick(&[0.5, 0.4], &[0.0, 0.09], &[None, None], 1.0).unwrap(),
        Some(1)
    );
    assert_eq!(
        ucb_pick(&[0.5, 0.4], &[0.0, 0.09], &[None, Some(0.2)], 1.0).unwrap(),
        Some(0)
    );
}
