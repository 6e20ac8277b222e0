//! Budgeted top-k beyond the paper (issue 15): batches against a dense replay of the
//! kriging believer, the rank-q append and revisions against q rank-1 appends and a dense
//! refit, the adaptive prior against a dense generalised least-squares fit, token capacity
//! on hand-made pools, App. C.2's RGS against its degenerate case, and App. E.1's
//! multimodal mass and the token-normalised nCG by hand.

use crate::rerank::{bp, full_refit, overlay, pool, refit_replay, rerank, P};
use crate::slow;
use ctxprune::rerank::gp::{Gp, KernelRows};
use ctxprune::rerank::metrics::ncg_tokens;
use ctxprune::rerank::peaks::{landscape, PeakOptions};
use ctxprune::rerank::{boundary_pick_tokens, kernel_rows, Method, Precomputed, Prior, RerankConfig};
use ctxprune::rng::Rng;
use ctxprune::{Embeddings, Engine, Pool};

fn percentile(n: usize) -> Vec<f64> {
    (0..n).map(|p| (n - 1 - p) as f64 / (n - 1) as f64).collect()
}

/// `q` distinct pool items not in `seen`, with their scores.
pub(crate) fn fresh(
    rng: &mut Rng,
    n: usize,
    q: usize,
    seen: &mut Vec<usize>,
    scores: &[f64],
) -> Vec<(usize, f64)> {
    let mut out = Vec::new();
    while out.len() < q {
        let j = rng.below(n);
        if !seen.contains(&j) {
            seen.push(j);
            out.push((j, scores[j]));
        }
    }
    out
}

#[test]
fn rank_q_append_equals_q_rank_1_appends_and_a_dense_refit() {
    for &(n, d, seed, q) in &[(41usize, 7usize, 3u64, 5usize), (29, 13, 4, 3), (57, 5, 5, 8)] {
        let (p, scores) = pool(n, d, seed);
        let k = p.rows();
        let mu0 = percentile(n);
        let mut one = Gp::new(&k, mu0.clone(), 1.0).unwrap();
        let mut blk = Gp::new(&k, mu0.clone(), 1.0).unwrap();
        let mut obs = vec![(None, 0.0)];
        let (mut rng, mut seen) = (Rng::new(seed), Vec::new());
        for round in 0..3 {
            let items = fresh(&mut rng, n, q, &mut seen, &scores);
            for &(j, y) in &items {
                one.observe(j, y).unwrap();
                obs.push((Some(j), y - mu0[j]));
            }
            blk.observe_batch(&items).unwrap();
            assert_eq!(blk.observations(), obs.len());
            let (mut m1, mut v1, mut m2, mut v2) = (vec![0.0; n], vec![0.0; n], vec![0.0; n], vec![0.0; n]);
            one.posterior(&mut m1, &mut v1).unwrap();
            blk.posterior(&mut m2, &mut v2).unwrap();
            let (m3, v3) = full_refit(&k, &mu0, &obs, blk.jitter().unwrap());
            let what = format!("n={n} q={q} round {round}");
            crate::assert_close(&format!("block vs rank-1 mean {what}"), &m2, &m1, 1e-5);
            crate::assert_close(&format!("block vs rank-1 var {what}"), &v2, &v1, 1e-5);
            crate::assert_close(&format!("block vs refit mean {what}"), &m2, &m3, 1e-5);
            crate::assert_close(&format!("block vs refit var {what}"), &v2, &v3, 1e-5);
        }
    }
}

#[test]
fn revised_fantasies_equal_the_scores_observed_directly() {
    let (n, q) = (47, 6);
    let (p, scores) = pool(n, 9, 8);
    let k = p.rows();
    let mu0 = percentile(n);
    let mut direct = Gp::new(&k, mu0.clone(), 1.0).unwrap();
    let mut fant = Gp::new(&k, mu0.clone(), 1.0).unwrap();
    let mut obs = vec![(None, 0.0)];
    let (mut rng, mut seen) = (Rng::new(2), Vec::new());
    for _ in 0..3 {
        let items = fresh(&mut rng, n, q, &mut seen, &scores);
        for &(j, y) in &items {
            direct.observe(j, y).unwrap();
            fant.observe(j, 0.5).unwrap();
            obs.push((Some(j), y - mu0[j]));
        }
        fant.revise(&items).unwrap();
    }
    let (mut m1, mut v1, mut m2, mut v2) = (vec![0.0; n], vec![0.0; n], vec![0.0; n], vec![0.0; n]);
    direct.posterior(&mut m1, &mut v1).unwrap();
    fant.posterior(&mut m2, &mut v2).unwrap();
    // The same L and V; the corrections are read back from V's f32 storage where the
    // direct appends used each row before rounding (V is f32, documented): 1e-6.
    crate::assert_close("revised mean", &m2, &m1, 1e-6);
    crate::assert_close("revised var", &v2, &v1, 0.0);
    let (m3, _) = full_refit(&k, &mu0, &obs, 1e-4);
    crate::assert_close("revised mean vs refit", &m2, &m3, 1e-5);
    assert!(
        fant.revise(&[(seen.len() + n, 0.1)]).is_err(),
        "an item never observed"
    );
    assert!(fant.revise(&[(seen[0], f64::NAN)]).is_err());
}

/// A token capacity for [`dense_batch_replay`]: the documents' counts and the capacity.
type Tokens<'t> = Option<(&'t [u64], u64)>;

/// The set a run would return now, from its definition: by `mean` (with a token capacity,
/// by `mean / tokens`) descending, ties to the lower index; the first `cap`, or the greedy
/// fill of the capacity (at most `cap` documents, each taken if it still fits).
fn slow_top(mean: &[f64], cap: usize, tokens: Tokens<'_>) -> Vec<usize> {
    let key = |i: usize| tokens.map_or(mean[i], |(t, _)| mean[i] / t[i] as f64);
    let mut order: Vec<usize> = (0..mean.len()).collect();
    order.sort_by(|&a, &b| key(b).partial_cmp(&key(a)).unwrap().then(a.cmp(&b)));
    let Some((t, total)) = tokens else {
        order.truncate(cap);
        return order;
    };
    let (mut used, mut set) = (0u64, vec![]);
    for i in order {
        if set.len() < cap && used + t[i] <= total {
            used += t[i];
            set.push(i);
        }
    }
    set
}

/// The verification rule from its definition: of [`slow_top`], the unscored member with
/// the largest variance, ties to the lower index.
fn slow_verify(
    mean: &[f64],
    var: &[f64],
    y: &[Option<f64>],
    cap: usize,
    tokens: Tokens<'_>,
) -> Option<usize> {
    let mut best: Option<usize> = None;
    for j in slow_top(mean, cap, tokens) {
        if y[j].is_none() && best.is_none_or(|b| var[j] > var[b] || (var[j] == var[b] && j < b)) {
            best = Some(j);
        }
    }
    best
}

/// The kriging believer replayed with a dense refit at every pick: within a round each
/// pick after the first sees the earlier ones observed at their posterior mean (sigma 0),
/// after the round their scores replace the fantasies. The last `verify` picks of the
/// budget (counted pick by pick, so a round can start before them and end in them) take
/// [`slow_verify`]'s pick first, the boundary rule when it has none; with `tokens`, both
/// rules on the token capacity.
fn dense_batch_replay(
    p: &P,
    scores: &[f64],
    budget: usize,
    cap: usize,
    q: usize,
    verify: usize,
    tokens: Tokens<'_>,
) -> Vec<usize> {
    let k = p.rows();
    let n = k.len();
    let mu0 = percentile(n);
    let mut obs = vec![(None, 0.0)];
    let mut y: Vec<Option<f64>> = vec![None; n];
    let mut calls = vec![];
    'run: while calls.len() < budget {
        let q_now = q.min(budget - calls.len());
        let mut picks: Vec<usize> = vec![];
        let mut yy = y.clone();
        while picks.len() < q_now {
            let verifying = budget - (calls.len() + picks.len()) <= verify;
            let (mut m, mut v) = full_refit(&k, &mu0, &obs, 1e-4);
            overlay(&mut m, &mut v, &yy);
            let checked = if verifying {
                slow_verify(&m, &v, &yy, cap, tokens)
            } else {
                None
            };
            let boundary = || match tokens {
                None => bp(&m, &v, &yy, cap),
                Some((t, total)) => boundary_pick_tokens(&m, &v, &yy, t, total, cap).unwrap(),
            };
            let Some(j) = checked.or_else(boundary) else {
                break;
            };
            picks.push(j);
            if picks.len() < q_now {
                yy[j] = Some(m[j]);
                obs.push((Some(j), m[j] - mu0[j]));
            }
        }
        if picks.is_empty() {
            break 'run;
        }
        let fantasised = if picks.len() < q_now {
            picks.len()
        } else {
            picks.len() - 1
        };
        let start = obs.len() - fantasised;
        for (t, &j) in picks.iter().enumerate() {
            if t < fantasised {
                obs[start + t] = (Some(j), scores[j] - mu0[j]);
            } else {
                obs.push((Some(j), scores[j] - mu0[j]));
            }
            y[j] = Some(scores[j]);
            calls.push(j);
        }
    }
    calls
}

#[test]
fn batches_follow_a_dense_kriging_believer_replay_and_q1_is_the_paper() {
    for &(n, d, seed, budget, cap, q) in &[
        (45usize, 7usize, 12u64, 12usize, 6usize, 1usize),
        (45, 7, 12, 12, 6, 4),
        (39, 11, 13, 13, 5, 5),
        (51, 6, 14, 16, 7, 8),
    ] {
        let (p, scores) = pool(n, d, seed);
        let mut cfg = RerankConfig::new(Method::BoundaryMorph, budget, cap);
        cfg.batch = q;
        let mut o = Precomputed::new(scores.clone(), budget).unwrap();
        let got = rerank(&cfg, &p, &mut o).unwrap();
        let want = dense_batch_replay(&p, &scores, budget, cap, q, 0, None);
        assert_eq!(got.scored, want, "n={n} q={q}");
        assert_eq!(got.rounds, want.len().div_ceil(q), "one oracle call per round");
        if q == 1 {
            let mut o = Precomputed::new(scores.clone(), budget).unwrap();
            let paper = rerank(&RerankConfig::new(Method::BoundaryMorph, budget, cap), &p, &mut o).unwrap();
            assert_eq!(got, paper, "q = 1 is BoundaryMORPH call for call");
        }
    }
    let (p, scores) = pool(30, 5, 15);
    for m in [Method::SingleStage, Method::Rgs, Method::RgsSimple] {
        let mut cfg = RerankConfig::new(m, 10, 4);
        cfg.batch = 4;
        let mut o = Precomputed::new(scores.clone(), 10).unwrap();
        let e = rerank(&cfg, &p, &mut o).unwrap_err().to_string();
        assert!(e.contains("batch"), "{e}");
    }
    // BAGEL batches too (GP-UCB on hallucinated observations), spending the same budget.
    let mut cfg = RerankConfig::new(Method::Bagel, 12, 4);
    cfg.batch = 4;
    let mut o = Precomputed::new(scores, 12).unwrap();
    let r = rerank(&cfg, &p, &mut o).unwrap();
    assert_eq!(r.scored.len(), 12);
    assert_eq!(r.rounds, 1 + 2, "the warm start, then two rounds of 3 and 3");
}

/// The last `floor(verify B)` calls verify the set the run would return, counted call by
/// call in batches (a round can start before them), and under a token capacity, against
/// the dense replay; the final set is that replay's; a share outside [0, 1], on another
/// method or with UCB is refused by name.
#[test]
fn verifying_calls_follow_a_dense_replay_with_batches_and_token_capacity() {
    for &(n, d, seed, budget, cap, q, share, tokens) in &[
        (45usize, 7usize, 16u64, 13usize, 6usize, 1usize, 0.3f64, false),
        (41, 9, 17, 17, 5, 3, 0.5, false),
        (47, 6, 18, 15, 9, 4, 1.0, false),
        (43, 7, 19, 14, 7, 1, 0.4, true),
        (49, 5, 20, 19, 11, 3, 0.35, true),
    ] {
        let (p, scores) = pool(n, d, seed);
        let counts: Vec<u64> = (0..n as u64).map(|i| 20 + (i * 37) % 90).collect();
        let capacity = 350;
        let mut cfg = RerankConfig::new(Method::BoundaryMorph, budget, cap);
        cfg.batch = q;
        cfg.verify = share;
        cfg.kernel = ctxprune::rerank::KernelChoice::Fixed(p.kernel);
        if tokens {
            cfg.token_capacity = Some(capacity);
        }
        let mut o = Precomputed::new(scores.clone(), budget).unwrap();
        let got = ctxprune::rerank::rerank_tokens(&cfg, &p.pool, &p.q, tokens.then_some(&counts[..]), &mut o)
            .unwrap();
        let verify = (share * budget as f64).floor() as usize;
        assert!(verify >= 3, "each case verifies");
        let t = tokens.then_some((&counts[..], capacity));
        let want = dense_batch_replay(&p, &scores, budget, cap, q, verify, t);
        let at = format!("n = {n}, q = {q}, verify {verify}, tokens {tokens}");
        assert_eq!(got.scored, want, "{at}");
        // Without the verification the last calls go elsewhere: the rule is exercised.
        let plain = dense_batch_replay(&p, &scores, budget, cap, q, 0, t);
        assert_ne!(got.scored, plain, "{at}");
        // The final set is the posterior's after every call, from its definition.
        let k = p.rows();
        let mu0 = percentile(n);
        let obs: Vec<(Option<usize>, f64)> = std::iter::once((None, 0.0))
            .chain(want.iter().map(|&j| (Some(j), scores[j] - mu0[j])))
            .collect();
        let (mut m, mut v) = full_refit(&k, &mu0, &obs, 1e-4);
        let y: Vec<Option<f64>> = (0..n).map(|j| want.contains(&j).then_some(scores[j])).collect();
        overlay(&mut m, &mut v, &y);
        let mut set = slow_top(&m, cap, t);
        let mut sel = got.selected.clone();
        set.sort_unstable();
        sel.sort_unstable();
        assert_eq!(sel, set, "{at}");
    }
    // The share is checked by the reranker.
    let engine = Engine::cpu();
    let ucb = RerankConfig {
        acquisition: ctxprune::rerank::Acquisition::Ucb,
        verify: 0.1,
        ..RerankConfig::new(Method::BoundaryMorph, 20, 3)
    };
    let e = ctxprune::rerank::Reranker::new(&engine, ucb)
        .unwrap_err()
        .to_string();
    assert!(
        e == "invalid verify: applies to boundary-morph with the boundary acquisition, not boundary-morph with ucb",
        "{e}"
    );
    for (method, verify, want) in [
        (Method::Bagel, 0.1, "with the boundary acquisition, not bagel"),
        (Method::Rgs, 0.1, "with the boundary acquisition, not rgs"),
        (Method::BoundaryMorph, 1.5, "1.5 is outside [0, 1]"),
        (Method::BoundaryMorph, -0.1, "-0.1 is outside [0, 1]"),
        (Method::BoundaryMorph, f64::NAN, "NaN is outside [0, 1]"),
    ] {
        let cfg = RerankConfig {
            verify,
            ..RerankConfig::new(method, 20, 3)
        };
        let e = ctxprune::rerank::Reranker::new(&engine, cfg)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("invalid verify: ") && e.contains(want), "{e}");
    }
}

/// `verify_pick` and `verify_pick_tokens` against their definition on seeded problems
/// with ties in the means, the variances and the densities, and their errors.
#[test]
fn verify_pick_is_its_definition() {
    let mut rng = Rng::new(71);
    for case in 0..400 {
        let n = 1 + rng.below(23);
        // Few levels, so ties are common.
        let mean: Vec<f64> = (0..n).map(|_| rng.below(5) as f64 / 4.0).collect();
        let var: Vec<f64> = (0..n).map(|_| rng.below(3) as f64 / 8.0).collect();
        let y: Vec<Option<f64>> = (0..n).map(|j| (rng.below(3) == 0).then_some(mean[j])).collect();
        let counts: Vec<u64> = (0..n).map(|_| 1 + rng.below(4) as u64 * 10).collect();
        let cap = 1 + rng.below(n + 2);
        let total = rng.below(120) as u64;
        let at = format!("case {case}: n = {n}, k = {cap}, T = {total}");
        assert_eq!(
            ctxprune::rerank::verify_pick(&mean, &var, &y, cap).unwrap(),
            slow_verify(&mean, &var, &y, cap, None),
            "{at}"
        );
        assert_eq!(
            ctxprune::rerank::verify_pick_tokens(&mean, &var, &y, &counts, total, cap).unwrap(),
            slow_verify(&mean, &var, &y, cap, Some((&counts, total))),
            "{at}"
        );
    }
    // No capacity, or every member scored: no pick.
    assert_eq!(
        ctxprune::rerank::verify_pick(&[0.5], &[0.1], &[None], 0).unwrap(),
        None
    );
    assert_eq!(
        ctxprune::rerank::verify_pick_tokens(&[0.5], &[0.1], &[None], &[3], 10, 0).unwrap(),
        None
    );
    let (mean, var) = ([0.9, 0.5, 0.1], [0.0, 0.0, 0.3]);
    let y = [Some(0.9), Some(0.5), None];
    assert_eq!(ctxprune::rerank::verify_pick(&mean, &var, &y, 2).unwrap(), None);
    assert_eq!(
        ctxprune::rerank::verify_pick(&mean, &var, &y, 3).unwrap(),
        Some(2)
    );
    let e = ctxprune::rerank::verify_pick(&mean, &var[..2], &y, 2)
        .unwrap_err()
        .to_string();
    assert!(e.contains("3 means, 2 variances and 3 scores"), "{e}");
    let e = ctxprune::rerank::verify_pick_tokens(&mean, &var, &y, &[1, 0, 1], 10, 2)
        .unwrap_err()
        .to_string();
    assert!(e.contains("tokens[1]"), "{e}");
    let e = ctxprune::rerank::verify_pick_tokens(&mean, &var, &y, &[1, 1], 10, 2)
        .unwrap_err()
        .to_string();
    assert!(e.contains("posterior"), "{e}");
}

#[test]
fn adaptive_prior_with_a_perfect_prior_is_the_papers_prior() {
    for &(n, seed, budget, cap) in &[(37usize, 21u64, 11usize, 5usize), (53, 22, 17, 8)] {
        let (p, _) = pool(n, 6, seed);
        let perfect = percentile(n);
        let run = |prior| {
            let mut cfg = RerankConfig::new(Method::BoundaryMorph, budget, cap);
            cfg.prior = prior;
            let mut o = Precomputed::new(perfect.clone(), budget).unwrap();
            rerank(&cfg, &p, &mut o).unwrap()
        };
        let (paper, adaptive) = (run(Prior::Mips), run(Prior::Adaptive));
        assert_eq!(adaptive.scored, paper.scored);
        assert_eq!(adaptive.selected, paper.selected);
        assert_eq!(adaptive.alpha, Some(1.0));
        assert_eq!(paper.alpha, None);
    }
}

#[test]
fn adaptive_prior_equals_a_dense_gls_fit_and_fades_when_contradicted() {
    let (n, lambda) = (43, 1.0);
    let (p, _) = pool(n, 8, 31);
    let k = p.rows();
    let mu0 = percentile(n);
    // The oracle reverses the prior: the MIPS tail is what matters.
    let mut rng = Rng::new(5);
    let scores: Vec<f64> = mu0
        .iter()
        .map(|&m| (1.0 - m + 0.05 * rng.normal()).clamp(0.0, 1.0))
        .collect();
    let mut gp = Gp::new(&k, mu0.clone(), 1.0).unwrap();
    gp.set_adaptive(lambda).unwrap();
    let mut qrow = vec![0.0; n];
    k.query_row(&mut qrow);
    let mut idx: Vec<Option<usize>> = vec![None];
    let mut seen = vec![];
    for step in 0..14 {
        let (j, y) = fresh(&mut rng, n, 1, &mut seen, &scores)[0];
        gp.observe(j, y).unwrap();
        idx.push(Some(j));
        // Dense: K_AA + jitter, r = y - mu0, p = mu0 (the query: y = 1, mu0 = 1).
        let t = idx.len();
        let kv = |a: Option<usize>, b: Option<usize>| match (a, b) {
            (None, None) => 1.0,
            (Some(a), Some(b)) => k.get(a, b).unwrap(),
            (Some(a), None) | (None, Some(a)) => qrow[a],
        };
        let kaa: Vec<Vec<f64>> = (0..t)
            .map(|a| {
                (0..t)
                    .map(|b| kv(idx[a], idx[b]) + if a == b { 1e-4 } else { 0.0 })
                    .collect()
            })
            .collect();
        let pv: Vec<f64> = idx.iter().map(|o| o.map_or(1.0, |j| mu0[j])).collect();
        let rv: Vec<f64> = idx
            .iter()
            .map(|o| o.map_or(0.0, |j| scores[j] - mu0[j]))
            .collect();
        // argmin over delta of (r + delta p)^T K^{-1} (r + delta p) + lambda delta².
        let kp = slow::solve(&kaa, &pv);
        let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f64>();
        let delta = (-dot(&rv, &kp) / (dot(&pv, &kp) + lambda)).clamp(0.0, 1.0);
        let alpha = 1.0 - delta;
        assert!(
            (gp.alpha() - alpha).abs() < 1e-6,
            "step {step}: {} vs {alpha}",
            gp.alpha()
        );
        // The posterior is the paper's with the prior alpha mu0.
        let prior: Vec<f64> = mu0.iter().map(|m| alpha * m).collect();
        let obs: Vec<(Option<usize>, f64)> = idx
            .iter()
            .map(|&o| (o, o.map_or(1.0 - alpha, |j| scores[j] - alpha * mu0[j])))
            .collect();
        let (m2, v2) = full_refit(&k, &prior, &obs, 1e-4);
        let (mut m1, mut v1) = (vec![0.0; n], vec![0.0; n]);
        gp.posterior(&mut m1, &mut v1).unwrap();
        crate::assert_close(&format!("adaptive mean step {step}"), &m1, &m2, 1e-5);
        crate::assert_close(&format!("adaptive var step {step}"), &v1, &v2, 1e-5);
    }
    assert!(
        gp.alpha() < 0.05,
        "a contradicted prior fades: alpha {}",
        gp.alpha()
    );
    assert!(gp.set_adaptive(0.0).is_err() && gp.set_adaptive(f64::NAN).is_err());
}

#[test]
fn token_capacity_on_hand_made_pools() {
    // Everything scored (single-stage, B = N): the set is the greedy fill by score per
    // token. Densities: 0.009, 0.08, 0.05, 0.008, 0.1 -> order 4, 1, 2, 0, 3.
    let rows: Vec<f32> = (0..5).flat_map(|i| [1.0, 0.1 * i as f32, 0.0]).collect();
    let pool = Pool::new(&Engine::cpu(), Embeddings::new(5, 3, rows, "hand").unwrap()).unwrap();
    let scores = vec![0.9, 0.8, 0.5, 0.4, 0.1];
    let tokens = [100u64, 10, 10, 50, 1];
    let run = |t: u64, k: usize, method: Method| {
        let mut cfg = RerankConfig::new(method, 5, k);
        cfg.token_capacity = Some(t);
        let mut o = Precomputed::new(scores.clone(), 5).unwrap();
        ctxprune::rerank::rerank_tokens(&cfg, &pool, &[1.0, 0.0, 0.0], Some(&tokens), &mut o).unwrap()
    };
    // T = 70: 4, 1, 2 (21 tokens); 0 (100) and then 3 (71 in all) do not fit.
    let r = run(70, 5, Method::SingleStage);
    assert_eq!(r.selected, vec![1, 2, 4], "best value first");
    assert_eq!(r.tokens, Some(21));
    let r = run(71, 5, Method::SingleStage);
    assert_eq!(r.selected, vec![1, 2, 3, 4]);
    assert_eq!(r.tokens, Some(71));
    // The count still caps: k = 2 takes the two densest.
    assert_eq!(run(1000, 2, Method::SingleStage).selected, vec![1, 4]);
    // The GP path scores all five (B = N) and fills the same way.
    let r = run(70, 5, Method::BoundaryMorph);
    assert_eq!(r.selected, vec![1, 2, 4]);
    // The boundary rule on value per token: T = 120 takes 1, 2, 3 (30 tokens); 0 (scored,
    // 100 tokens) is the only challenger. z per token: (3, 0) 1.1 < (2, 0) 2.05 < (1, 0)
    // 2.55, so 3 is called; by count (k = 3: 0, 1, 2 in, 3 out) it would be 2.
    let mean = [0.9, 0.6, 0.5, 0.2];
    let var = [0.0, 0.04, 0.04, 0.01];
    let y = [Some(0.9), None, None, None];
    let t4 = [100u64, 10, 10, 10];
    assert_eq!(
        boundary_pick_tokens(&mean, &var, &y, &t4, 120, 10).unwrap(),
        Some(3)
    );
    assert_eq!(bp(&mean, &var, &y, 3), Some(2));
    // T = 30: 0 cannot enter alone, so no pair is left.
    assert_eq!(boundary_pick_tokens(&mean, &var, &y, &t4, 30, 10).unwrap(), None);
    assert!(boundary_pick_tokens(&mean, &var, &y, &[1, 0, 1, 1], 30, 10).is_err());
    // A token capacity without counts, or counts without one, is an error.
    let mut cfg = RerankConfig::new(Method::SingleStage, 5, 2);
    let mut o = Precomputed::new(scores.clone(), 5).unwrap();
    let e =
        ctxprune::rerank::rerank_tokens(&cfg, &pool, &[1.0, 0.0, 0.0], Some(&tokens), &mut o).unwrap_err();
    assert!(e.to_string().contains("tokens"), "{e}");
    cfg.token_capacity = Some(10);
    let e = ctxprune::rerank::rerank_tokens(&cfg, &pool, &[1.0, 0.0, 0.0], None, &mut o).unwrap_err();
    assert!(e.to_string().contains("token_capacity"), "{e}");
    let e = ctxprune::rerank::rerank_tokens(&cfg, &pool, &[1.0, 0.0, 0.0], Some(&tokens[..4]), &mut o)
        .unwrap_err();
    assert!(e.to_string().contains("4 token counts"), "{e}");
}

#[test]
fn rgs_of_app_c2_reduces_to_single_stage_and_seeds_on_the_mips_top() {
    let (n, budget, cap) = (61, 20, 7);
    let (p, scores) = pool(n, 9, 41);
    let mut o = Precomputed::new(scores.clone(), budget).unwrap();
    let ss = rerank(&RerankConfig::new(Method::SingleStage, budget, cap), &p, &mut o).unwrap();
    let mut cfg = RerankConfig::new(Method::Rgs, budget, cap);
    cfg.seed_div = 1.0;
    let mut o = Precomputed::new(scores.clone(), budget).unwrap();
    let all_seeds = rerank(&cfg, &p, &mut o).unwrap();
    assert_eq!(all_seeds.scored, ss.scored, "n_seeds = B is single-stage");
    assert_eq!(all_seeds.selected, ss.selected);
    let mut o = Precomputed::new(scores.clone(), budget).unwrap();
    let r = rerank(&RerankConfig::new(Method::Rgs, budget, cap), &p, &mut o).unwrap();
    assert_eq!(
        &r.scored[..10],
        &(0..10).collect::<Vec<_>>()[..],
        "round(B / 2) MIPS seeds"
    );
    assert!(
        (2..=11).contains(&r.rounds),
        "the seeds, then one call per expansion"
    );
    let mut dedup = r.scored.clone();
    dedup.sort_unstable();
    dedup.dedup();
    assert_eq!((r.scored.len(), dedup.len()), (budget, budget));
    // The expansions: the best-scored seed's 10 nearest unscored neighbours come next.
    let k = p.rows();
    let best = (0..10)
        .max_by(|&a, &b| scores[a].total_cmp(&scores[b]).then(b.cmp(&a)))
        .unwrap();
    let mut row = vec![0.0; n];
    k.row(best, &mut row);
    let mut near: Vec<usize> = (0..n).filter(|&i| i != best).collect();
    near.sort_by(|&a, &b| row[b].total_cmp(&row[a]).then(a.cmp(&b)));
    let want: Vec<usize> = near.into_iter().take(10).filter(|&i| i >= 10).collect();
    assert_eq!(&r.scored[10..10 + want.len()], &want[..]);
    for bad in [0.5, f64::NAN] {
        let mut cfg = RerankConfig::new(Method::Rgs, budget, cap);
        cfg.seed_div = bad;
        let mut o = Precomputed::new(scores.clone(), budget).unwrap();
        assert!(rerank(&cfg, &p, &mut o)
            .unwrap_err()
            .to_string()
            .contains("seed_div"));
    }
}

/// Points on an arc of the unit circle, `0.1 i` radians: each one's two nearest are its
/// neighbours on the arc.
fn arc(scores: &[f64]) -> (Pool, Vec<f64>) {
    let rows: Vec<f32> = (0..scores.len())
        .flat_map(|i| {
            let a = 0.1 * i as f64;
            [a.cos() as f32, a.sin() as f32]
        })
        .collect();
    let e = Embeddings::new(scores.len(), 2, rows, "arc").unwrap();
    (Pool::new(&Engine::cpu(), e).unwrap(), scores.to_vec())
}

#[test]
fn multimodal_mass_by_hand() {
    // Two peaks on the arc, 0.9 at 2 and 0.8 at 6, meeting at 4 (0.3): the lower dies with
    // prominence 0.5. Members: {0..3} (2.1) and {4..8} (2.5; 4 joins its higher neighbour
    // 5), of 4.6 in all.
    let (pool, s) = arc(&[0.2, 0.5, 0.9, 0.5, 0.3, 0.6, 0.8, 0.6, 0.2]);
    let o = PeakOptions {
        top_m: 1000,
        knn: 2,
        tau: 0.2,
    };
    let l = landscape(&pool, &s, o).unwrap();
    assert_eq!(l.peaks.len(), 2, "{l:?}");
    assert_eq!((l.peaks[0].top, l.peaks[1].top), (2, 6));
    assert!(
        (l.peaks[0].prominence - 0.7).abs() < 1e-12,
        "never dies: 0.9 - 0.2"
    );
    assert!((l.peaks[1].prominence - 0.5).abs() < 1e-12);
    assert_eq!((l.peaks[0].members, l.peaks[1].members), (4, 5));
    assert!(
        (l.multimodal_mass - 0.5 * 2.5 / 4.6).abs() < 1e-12,
        "{}",
        l.multimodal_mass
    );
    // Simplified at tau = 0.6 the second peak merges: unimodal.
    let l = landscape(&pool, &s, PeakOptions { tau: 0.6, ..o }).unwrap();
    assert_eq!(l.peaks.len(), 1);
    assert_eq!(l.multimodal_mass, 0.0);
    // Top-M: the graph is over the 5 best documents (2, 6, 5, 7, 1) alone, so 5's two
    // nearest among them are 6 and 7, and 1's are 2 and 5. Sweep: 5 (0.6) joins its highest
    // neighbour, 2 (through 1's edge), where 6's peak meets 2's: prominence 0.8 - 0.6 = 0.2,
    // not below tau, so it stays; 7 joins 6, 1 joins 2. The floor is 0.5.
    let l = landscape(&pool, &s, PeakOptions { top_m: 5, ..o }).unwrap();
    assert_eq!(l.peaks.len(), 2);
    assert!((l.peaks[0].prominence - 0.4).abs() < 1e-12, "{l:?}");
    assert!((l.peaks[1].prominence - 0.2).abs() < 1e-12, "{l:?}");
    assert_eq!((l.peaks[0].members, l.peaks[1].members), (3, 2));
    assert!((l.multimodal_mass - 0.2 * 1.4 / 3.4).abs() < 1e-12);
    assert!(landscape(&pool, &s[..3], o).is_err());
}

#[test]
fn token_normalised_ncg_by_hand() {
    // Densities 0.1, 0.1, 0.05: the optimum within 50 tokens takes 0 (30), 1 (10) and a
    // quarter of 2 (10 of 40): 3 + 1 + 0.5 = 4.5.
    let (g, t) = ([3.0, 1.0, 2.0], [30u64, 10, 40]);
    assert!((ncg_tokens(&[0, 1], &g, &t, 50) - 4.0 / 4.5).abs() < 1e-12);
    assert!((ncg_tokens(&[2], &g, &t, 50) - 2.0 / 4.5).abs() < 1e-12);
    assert_eq!(ncg_tokens(&[0], &[0.0, 0.0, 0.0], &t, 50), 1.0);
}

#[test]
fn eval_runs_both_modes_with_token_capacity_and_peaks() {
    use ctxprune::rerank::eval::{self, Mode, Spec};
    let spec = Spec {
        problems: 2,
        seed: 3,
        n: 300,
        budgets: vec![10],
        capacities: vec![300],
        modes: vec![Mode::Diffuse, Mode::Trap],
        token_capacity: Some(3000),
    };
    let out = eval::run_spec(&spec, true, &mut |_| {}).unwrap();
    let v = eval::variants().len();
    assert_eq!(out.cells.len(), 2 * v);
    assert_eq!(out.multimodal_mass.len(), 2);
    assert!(out
        .multimodal_mass
        .iter()
        .all(|m| m.len() == 2 && m.iter().all(|x| *x >= 0.0)));
    for c in &out.cells {
        assert_eq!(c.per_problem.len(), 2);
        assert!((0.0..=1.0 + 1e-12).contains(&c.ce_ncg), "{c:?}");
        assert_eq!(c.alpha.is_some(), c.method.contains("adaptive"), "{}", c.method);
        // Only auto switches, and not at B = 10 (it looks after 10 calls, with calls left).
        let want = (c.method == "auto").then_some(0);
        assert_eq!(c.switched, want, "{}", c.method);
    }
    // The trap's relevance is away from the MIPS top: the top decile scores lower than in
    // the diffuse problem of the same seed.
    let (d, t) = (
        eval::generate_mode(300, 16, 3, Mode::Diffuse).unwrap(),
        eval::generate_mode(300, 16, 3, Mode::Trap).unwrap(),
    );
    let top = |o: &[f64]| o[..30].iter().sum::<f64>();
    assert!(top(&t.oracle) < top(&d.oracle));
    assert_eq!(d.tokens, t.tokens, "token counts come from their own stream");
    assert!(d.tokens.iter().all(|&x| (20..=2000).contains(&x)));
    let mut bad = spec.clone();
    bad.modes.clear();
    assert!(eval::run_spec(&bad, false, &mut |_| {}).is_err());
}

#[test]
fn spearman_by_hand() {
    use ctxprune::rerank::eval::spearman;
    assert_eq!(spearman(&[1.0, 2.0, 3.0], &[10.0, 20.0, 30.0]), Some(1.0));
    assert_eq!(spearman(&[1.0, 2.0, 3.0], &[3.0, 2.0, 1.0]), Some(-1.0));
    // Ties get average ranks: x ranks 1, 2.5, 2.5, 4; y ranks 1, 2, 3, 4.
    let r = spearman(&[1.0, 2.0, 2.0, 5.0], &[1.0, 2.0, 3.0, 4.0]).unwrap();
    let want = 4.5 / (4.5f64 * 5.0).sqrt();
    assert!((r - want).abs() < 1e-12, "{r} vs {want}");
    assert_eq!(spearman(&[1.0, 1.0, 1.0], &[1.0, 2.0, 3.0]), None);
    assert_eq!(spearman(&[1.0, 2.0], &[1.0, 2.0]), None);
}

#[test]
fn probes_are_spread_over_the_mips_ranks_and_scored_first() {
    use ctxprune::rerank::probe_ranks;
    assert_eq!(probe_ranks(4, 101), vec![25, 50, 75, 100]);
    assert_eq!(probe_ranks(0, 50), Vec::<usize>::new());
    assert_eq!(probe_ranks(3, 2), vec![0, 1]);
    let (p, scores) = pool(61, 7, 51);
    let mut cfg = RerankConfig::new(Method::BoundaryMorph, 15, 5);
    cfg.prior = Prior::Adaptive;
    cfg.prior_probes = 3;
    let mut o = Precomputed::new(scores.clone(), 15).unwrap();
    let r = rerank(&cfg, &p, &mut o).unwrap();
    assert_eq!(&r.scored[..3], &[20, 40, 60]);
    assert_eq!(r.scored.len(), 15);
    cfg.prior = Prior::Mips;
    let mut o = Precomputed::new(scores, 15).unwrap();
    let e = rerank(&cfg, &p, &mut o).unwrap_err().to_string();
    assert!(e.contains("prior_probes"), "{e}");
}

/// The score prior against its definition, evaluated directly: each raw row's cosine with
/// the raw query in f64, min-max scaled over the pool, square root. The pool reads unit f32
/// copies, so the squares agree to f32's precision over the cosines' span.
#[test]
fn score_prior_is_the_shape_of_the_query_cosines() {
    use ctxprune::rerank::{kernel_rows_in, prior_mean, RowPrecision};
    for &(n, d, seed) in &[(37usize, 9usize, 31u64), (64, 5, 32), (203, 17, 33), (2, 3, 34)] {
        let (raw, q, _) = crate::raw_problem(n, d, seed);
        let norm = |v: &[f32]| v.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>().sqrt();
        let want_cos: Vec<f64> = (0..n)
            .map(|i| {
                let x = raw.row(i);
                let dot: f64 = x.iter().zip(&q).map(|(&a, &b)| f64::from(a) * f64::from(b)).sum();
                dot / (norm(x) * norm(&q))
            })
            .collect();
        let lo = want_cos.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = want_cos.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        assert!(hi - lo > 0.1, "n={n}: a spread-out pool");
        let want: Vec<f64> = want_cos.iter().map(|c| (c - lo) / (hi - lo)).collect();
        let pool = Pool::new(&Engine::cpu(), raw).unwrap();
        let kernel = ctxprune::similarity::Kernel::Cosine;
        let f32_mean = prior_mean(Prior::Score, &kernel_rows(&pool, &q, kernel).unwrap());
        let squares: Vec<f64> = f32_mean.iter().map(|m| m * m).collect();
        crate::assert_close(&format!("mu0^2 n={n}"), &squares, &want, 1e-6 / (hi - lo));
        let top = (0..n)
            .max_by(|&a, &b| want_cos[a].total_cmp(&want_cos[b]))
            .unwrap();
        let bottom = (0..n)
            .min_by(|&a, &b| want_cos[a].total_cmp(&want_cos[b]))
            .unwrap();
        assert_eq!((f32_mean[top], f32_mean[bottom]), (1.0, 0.0), "n={n}");
        // The shape reads the f32 rows whatever the kernel rows' precision.
        for prec in [RowPrecision::Bf16, RowPrecision::F16] {
            let half = kernel_rows_in(&pool, &q, kernel, prec).unwrap();
            assert_eq!(prior_mean(Prior::Score, &half), f32_mean, "n={n} {prec:?}");
        }
        // The other priors: the percentile (the adaptive prior starts from it) and zero.
        let rows = kernel_rows(&pool, &q, kernel).unwrap();
        assert_eq!(prior_mean(Prior::Mips, &rows), percentile(n));
        assert_eq!(prior_mean(Prior::Adaptive, &rows), percentile(n));
        assert_eq!(prior_mean(Prior::Zero, &rows), vec![0.0; n]);
    }
    // Every cosine equal (copies of one row), and a pool of one: no shape, 1 everywhere.
    let e = Embeddings::new(5, 3, [0.3f32, -1.0, 2.0].repeat(5), "copies").unwrap();
    let pool = Pool::new(&Engine::cpu(), e).unwrap();
    let rows = kernel_rows(&pool, &[1.0, 0.5, 0.25], ctxprune::similarity::Kernel::Cosine).unwrap();
    assert_eq!(prior_mean(Prior::Score, &rows), vec![1.0; 5]);
    let e = Embeddings::new(1, 3, vec![0.3f32, -1.0, 2.0], "one").unwrap();
    let pool = Pool::new(&Engine::cpu(), e).unwrap();
    let rows = kernel_rows(&pool, &[1.0, 0.5, 0.25], ctxprune::similarity::Kernel::Cosine).unwrap();
    assert_eq!(prior_mean(Prior::Score, &rows), vec![1.0]);
    assert_eq!(prior_mean(Prior::Mips, &rows), vec![1.0]);
}

/// BoundaryMORPH with the score prior is the dense refit's boundary rule over that prior,
/// call for call (the query observed at `mu0 = 1`).
#[test]
fn score_prior_follows_the_full_refit_call_for_call() {
    use ctxprune::rerank::prior_mean;
    for &(n, d, seed, budget, cap) in &[(40usize, 7usize, 41u64, 12usize, 5usize), (53, 11, 42, 15, 7)] {
        let (p, scores) = pool(n, d, seed);
        let mut cfg = RerankConfig::new(Method::BoundaryMorph, budget, cap);
        cfg.prior = Prior::Score;
        let mut o = Precomputed::new(scores.clone(), budget).unwrap();
        let got = rerank(&cfg, &p, &mut o).unwrap();
        let k = p.rows();
        let mu0 = prior_mean(Prior::Score, &k);
        assert_ne!(mu0, percentile(n), "a different prior from the paper's");
        assert_eq!(got.scored, refit_replay(&k, &mu0, &scores, budget, cap), "n={n}");
        let paper = rerank(
            &RerankConfig::new(Method::BoundaryMorph, budget, cap),
            &p,
            &mut Precomputed::new(scores.clone(), budget).unwrap(),
        )
        .unwrap();
        assert_ne!(paper.scored, got.scored, "n={n}: the prior changes the calls");
    }
}

/// The kernel's concentration: a run with it is the run with the concentrated kernel
/// given outright (vMF's kappa times it, RBF's and Matérn's l² divided by it), and a
/// factor that is not a positive finite number, or one single-stage cannot read, is an
/// error naming it.
#[test]
fn concentration_is_the_concentrated_kernel_and_bad_factors_are_named() {
    use ctxprune::rerank::KernelChoice;
    use ctxprune::similarity::{Kernel, KernelKind};
    let (p, scores) = pool(47, 6, 51);
    let m = p.pool.median_one_minus_cos().unwrap();
    for (kind, c) in [
        (KernelKind::Vmf, 2.0f32),
        (KernelKind::Rbf, 2.0),
        (KernelKind::Matern52, 0.5),
        (KernelKind::Vmf, 3.0),
    ] {
        let run = |kernel: KernelChoice, c: f32| {
            let cfg = RerankConfig {
                kernel,
                concentration: c,
                prior: Prior::Score,
                ..RerankConfig::new(Method::BoundaryMorph, 14, 5)
            };
            let mut o = Precomputed::new(scores.clone(), 14).unwrap();
            ctxprune::rerank::rerank(&cfg, &p.pool, &p.q, &mut o).unwrap()
        };
        let by_factor = run(KernelChoice::Median(kind), c);
        let given = Kernel::from_median(kind, m);
        let want = match given {
            Kernel::Vmf { kappa } => Kernel::Vmf { kappa: kappa * c },
            Kernel::Rbf { l2 } => Kernel::Rbf { l2: l2 / c },
            Kernel::Matern52 { l2 } => Kernel::Matern52 { l2: l2 / c },
            Kernel::Cosine => unreachable!(),
        };
        let outright = run(KernelChoice::Fixed(want), 1.0);
        assert_eq!(by_factor.kernel, want, "{kind:?}");
        assert_eq!(
            (&by_factor.scored, &by_factor.selected),
            (&outright.scored, &outright.selected),
            "{kind:?}"
        );
        assert_ne!(
            by_factor.scored,
            run(KernelChoice::Median(kind), 1.0).scored,
            "{kind:?}: the factor changes the run"
        );
    }
    assert_eq!(Kernel::Cosine.concentrated(2.0), Kernel::Cosine);
    let engine = Engine::cpu();
    for (cfg, want) in [
        (
            RerankConfig {
                concentration: 0.0,
                ..RerankConfig::new(Method::BoundaryMorph, 9, 3)
            },
            "must be finite and > 0, got 0",
        ),
        (
            RerankConfig {
                concentration: f32::NAN,
                ..RerankConfig::new(Method::Bagel, 9, 3)
            },
            "must be finite and > 0, got NaN",
        ),
        (
            RerankConfig {
                concentration: -2.0,
                ..RerankConfig::new(Method::Rgs, 9, 3)
            },
            "got -2",
        ),
        (
            RerankConfig {
                concentration: 2.0,
                ..RerankConfig::new(Method::SingleStage, 9, 3)
            },
            "applies to boundary-morph and bagel (single-stage",
        ),
        (
            RerankConfig {
                concentration: 2.0,
                ..RerankConfig::new(Method::RgsSimple, 9, 3)
            },
            "applies to boundary-morph and bagel (rgs-simple",
        ),
        (
            RerankConfig {
                concentration: 2.0,
                kernel: KernelChoice::Median(KernelKind::Cosine),
                ..RerankConfig::new(Method::BoundaryMorph, 9, 3)
            },
            "the cosine kernel has no concentration",
        ),
        (
            RerankConfig {
                concentration: 0.5,
                kernel: KernelChoice::Fixed(Kernel::Cosine),
                ..RerankConfig::new(Method::Bagel, 9, 3)
            },
            "the cosine kernel has no concentration",
        ),
    ] {
        let e = ctxprune::rerank::Reranker::new(&engine, cfg)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("invalid concentration: ") && e.contains(want),
            "{e}"
        );
    }
    // A factor that overflows the kernel's concentration is named with the kernel.
    let cfg = RerankConfig {
        kernel: KernelChoice::Fixed(Kernel::Vmf { kappa: f32::MAX }),
        concentration: 4.0,
        ..RerankConfig::new(Method::BoundaryMorph, 9, 3)
    };
    let mut o = Precomputed::new(scores.clone(), 9).unwrap();
    let e = ctxprune::rerank::rerank(&cfg, &p.pool, &p.q, &mut o)
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("invalid concentration: 4 times the kernel Vmf") && e.contains("kappa"),
        "{e}"
    );
}
