//! Every scorer against the slow definitions of tests/slow.rs, in both modes, on seeded
//! random problems of odd sizes; lazy greedy against eager greedy, item for item.

use crate::slow::{self, Problem, StopRule};
use crate::{assert_close, problem};
use ctxprune::select::{lexical::Lexical, presets, select, Inputs, Method, Mode, SelectConfig, Stop};
use ctxprune::Embeddings;

const SIZES: [(usize, usize); 4] = [(7, 5), (23, 13), (45, 3), (61, 33)];
/// Inner products are accumulated in f64, so scores agree with the f64 definition to
/// ~1e-12; 1e-8 leaves room for the determinant ratios' conditioning.
const TOL: f64 = 1e-8;
/// Coverage stores its similarity `s(i, j)` as f32 (an N x N matrix from the GEMM), so
/// a gain, a sum of N such entries, carries ~N * 6e-8 relative error.
const TOL_F32_SIM: f64 = 1e-5;

fn tol(m: Method) -> f64 {
    if matches!(m, Method::Coverage | Method::Hybrid) {
        TOL_F32_SIM
    } else {
        TOL
    }
}

/// The retained set as the DPP factor sees it: an item with no conditional variance
/// left (weight 0, or in the span of the earlier ones) adds nothing and is skipped, so
/// `det(L_C)` stays positive.
fn effective_retained(m: Method, p: &Problem<'_>, retained: &[usize]) -> Vec<usize> {
    let mut c = Vec::new();
    for &r in retained {
        if m != Method::Dpp || p.dpp(r, &c) >= presets::RESIDUAL_EPS {
            c.push(r);
        }
    }
    c
}

type Value<'a> = Box<dyn Fn(usize, &[usize]) -> f64 + 'a>;

fn slow_value<'a>(m: Method, p: &'a Problem<'a>) -> Value<'a> {
    match m {
        Method::Mmr => Box::new(move |x, c| p.mmr(presets::DEFAULT_MMR_LAMBDA, x, c)),
        Method::Grn => Box::new(move |x, c| p.grn(x, c)),
        Method::Centroid => Box::new(move |x, c| p.centroid(x, c)),
        Method::Dpp => Box::new(move |x, c| p.dpp(x, c)),
        Method::Coverage => Box::new(move |x, c| p.coverage(x, c)),
        Method::Hybrid => Box::new(move |x, c| {
            let [a, b, g] = presets::HYBRID_WEIGHTS;
            a * slow::cos(p.e.row(x), p.q.unwrap()) + b * p.grn(x, c) + g * p.coverage(x, c)
        }),
        Method::Lexical => unreachable!(),
    }
}

fn floor(m: Method) -> StopRule {
    match m {
        Method::Grn | Method::Dpp => StopRule::Floor(presets::RESIDUAL_EPS),
        Method::Centroid => StopRule::Floor(presets::CENTROID_NOISE_FLOOR),
        Method::Coverage => StopRule::None,
        _ => StopRule::None,
    }
}

const EMBEDDING_METHODS: [Method; 6] = [
    Method::Mmr,
    Method::Grn,
    Method::Centroid,
    Method::Dpp,
    Method::Coverage,
    Method::Hybrid,
];

#[test]
fn greedy_matches_slow_definition_item_for_item() {
    for (s, &(n, d)) in SIZES.iter().enumerate() {
        let (e, q, costs) = problem(n, d, 100 + s as u64);
        for m in EMBEDDING_METHODS {
            for (k, budget) in [
                (Some(n / 3 + 1), None),
                (None, Some(97.0)),
                (Some(4), Some(60.0)),
                (None, None),
            ] {
                let p = Problem {
                    e: &e,
                    q: Some(&q),
                    costs: budget.map(|_| costs.as_slice()),
                };
                let value = slow_value(m, &p);
                // Coverage gain is per token; only with costs does the budget bind.
                let (want, want_g) = slow::greedy(n, &*value, &[], k, budget, p.costs, None, floor(m));
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
                    costs: p.costs,
                    ..Inputs::default()
                };
                let lazy = select(&cfg, &inp).unwrap();
                let eager = select(&cfg.clone().eager_only(true), &inp).unwrap();
                let what = format!("{} n={n} d={d} k={k:?} budget={budget:?}", m.name());
                assert_eq!(
                    lazy.selected, want,
                    "{what}: picks differ from the slow definition"
                );
                assert_close(&what, &lazy.gains, &want_g, tol(m));
                assert_eq!(lazy, eager, "{what}: lazy and eager greedy differ");
            }
        }
    }
}

#[test]
fn non_default_parameters_match_slow_definition() {
    // Hybrid with the paper's printed sign (-beta: not monotone, so greedy runs eagerly)
    // and MMR with a lambda other than the preset.
    for (s, &(n, d)) in SIZES.iter().enumerate() {
        let (e, q, costs) = problem(n, d, 400 + s as u64);
        let p = Problem {
            e: &e,
            q: Some(&q),
            costs: Some(&costs),
        };
        let w = [0.4, -0.3, 0.3];
        let hybrid = |x: usize, c: &[usize]| {
            w[0] * slow::cos(e.row(x), &q) + w[1] * p.grn(x, c) + w[2] * p.coverage(x, c)
        };
        let mmr = |x: usize, c: &[usize]| p.mmr(0.7, x, c);
        let inp = Inputs {
            embeddings: Some(&e),
            query: Some(&q),
            costs: Some(&costs),
            ..Inputs::default()
        };
        for (m, cfg, value, tol) in [
            (
                Method::Hybrid,
                SelectConfig::new(Method::Hybrid).weights(w),
                &hybrid as &dyn Fn(usize, &[usize]) -> f64,
                TOL_F32_SIM,
            ),
            (Method::Mmr, SelectConfig::new(Method::Mmr).lambda(0.7), &mmr, TOL),
        ] {
            let (want, want_g) = slow::greedy(
                n,
                value,
                &[],
                Some(n / 2 + 1),
                Some(120.0),
                Some(&costs),
                None,
                StopRule::None,
            );
            let got = select(&cfg.k(n / 2 + 1).token_budget(120.0), &inp).unwrap();
            assert_eq!(got.selected, want, "{} n={n}", m.name());
            assert_close(&format!("{} n={n}", m.name()), &got.gains, &want_g, tol);
        }
    }
}

#[test]
fn greedy_with_retained_set_and_threshold_matches_slow_definition() {
    for (s, &(n, d)) in SIZES.iter().enumerate() {
        let (e, q, _) = problem(n, d, 200 + s as u64);
        let retained = [n - 1, 2];
        for m in EMBEDDING_METHODS {
            let p = Problem {
                e: &e,
                q: Some(&q),
                costs: None,
            };
            let value = slow_value(m, &p);
            let eff = effective_retained(m, &p, &retained);
            let value = |x: usize, c: &[usize]| {
                if retained.contains(&x) {
                    f64::NEG_INFINITY
                } else {
                    value(x, c)
                }
            };
            // A threshold that binds somewhere inside the run.
            let first = slow::greedy(n, &value, &eff, Some(n), None, None, None, floor(m)).1;
            let tau = first.get(first.len() / 2).copied().unwrap_or(0.0) - 1e-7;
            let (want, want_g) = slow::greedy(n, &value, &eff, None, None, None, Some(tau), floor(m));
            let cfg = SelectConfig::new(m).threshold(tau);
            let inp = Inputs {
                embeddings: Some(&e),
                query: Some(&q),
                retained: &retained,
                ..Inputs::default()
            };
            let got = select(&cfg, &inp).unwrap();
            let what = format!("{} n={n} d={d} retained, tau={tau}", m.name());
            assert_eq!(got.selected, want, "{what}");
            assert_close(&what, &got.gains, &want_g, tol(m));
            if want.len() < n - retained.len() {
                assert!(
                    matches!(got.stop, Some(Stop::Threshold | Stop::NoGain)),
                    "{what}: {:?}",
                    got.stop
                );
            }
        }
    }
}

#[test]
fn gate_scores_every_candidate_as_the_definition_does() {
    for (s, &(n, d)) in SIZES.iter().enumerate() {
        let (e, q, costs) = problem(n, d, 300 + s as u64);
        let retained = [1, n / 2, 0];
        for m in EMBEDDING_METHODS {
            let p = Problem {
                e: &e,
                q: Some(&q),
                costs: Some(&costs),
            };
            let value = slow_value(m, &p);
            // tau = -inf keeps everything, so every candidate's score is reported.
            let cfg = SelectConfig::new(m).mode(Mode::Gate).threshold(-1e300);
            let inp = Inputs {
                embeddings: Some(&e),
                query: Some(&q),
                costs: Some(&costs),
                retained: &retained,
                ..Inputs::default()
            };
            let got = select(&cfg, &inp).unwrap();
            let cands: Vec<usize> = (0..n).filter(|x| !retained.contains(x)).collect();
            let eff = effective_retained(m, &p, &retained);
            let want: Vec<f64> = cands.iter().map(|&x| value(x, &eff)).collect();
            assert_eq!(got.selected, cands);
            assert_close(
                &format!("gate {} n={n} d={d}", m.name()),
                &got.gains,
                &want,
                tol(m),
            );
            // With a threshold halfway between two slow values (far from both), exactly
            // the candidates the definition puts above it are kept.
            let mut sorted = want.clone();
            sorted.sort_by(f64::total_cmp);
            let Some(w2) = sorted
                .windows(2)
                .skip(sorted.len() / 3)
                .find(|w| w[1] - w[0] > 1e-4)
            else {
                continue;
            };
            let tau = (w2[0] + w2[1]) / 2.0;
            let kept = select(&cfg.clone().threshold(tau), &inp).unwrap();
            let want_kept: Vec<usize> = cands
                .iter()
                .zip(&want)
                .filter(|(_, &v)| v >= tau)
                .map(|(&x, _)| x)
                .collect();
            assert_eq!(kept.selected, want_kept, "gate {} tau={tau}", m.name());
        }
    }
}

#[test]
fn lexical_mmr_matches_recomputation_from_scratch() {
    let mut rng = ctxprune::rng::Rng::new(5);
    let words = [
        "Alpha", "beta,", "GAMMA", "délta", "eps!", "zeta-eta", "x2", "θήτα",
    ];
    let texts: Vec<String> = (0..29)
        .map(|_| {
            (0..3 + rng.below(9))
                .map(|_| words[rng.below(words.len())])
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    let query = "alpha Beta gamma délta";
    // LexSim recomputed independently of the crate's lexical module (slow::LexSim).
    let lex = slow::LexSim::new(&texts, query);
    let lam = presets::LEXICAL_LAMBDA;
    let value = |x: usize, c: &[usize]| {
        let red = c.iter().map(|&j| lex.sim(x, j)).fold(f64::NEG_INFINITY, f64::max);
        lam * lex.sim(x, texts.len()) - (1.0 - lam) * if c.is_empty() { 0.0 } else { red }
    };
    // The crate's own similarity agrees with the independent one on every pair.
    let crate_lex = Lexical::new(&texts, query, presets::LEXICAL_WEIGHTS);
    for x in 0..=texts.len() {
        for y in 0..=texts.len() {
            assert!(
                (crate_lex.lexsim(x, y) - lex.sim(x, y)).abs() < 1e-12,
                "lexsim({x}, {y})"
            );
        }
    }
    let (want, want_g) = slow::greedy(
        texts.len(),
        &value,
        &[3],
        Some(12),
        None,
        None,
        None,
        StopRule::None,
    );
    let cfg = SelectConfig::new(Method::Lexical).k(12);
    let inp = Inputs {
        texts: Some(&texts),
        query_text: Some(query),
        retained: &[3],
        ..Inputs::default()
    };
    let got = select(&cfg, &inp).unwrap();
    assert_eq!(got.selected, want);
    assert_close("lexical", &got.gains, &want_g, 1e-12);
    assert_eq!(got, select(&cfg.eager_only(true), &inp).unwrap());
}

#[test]
fn empty_set_values_follow_the_spec() {
    let (e, q, _) = problem(9, 4, 7);
    let inp = Inputs {
        embeddings: Some(&e),
        query: Some(&q),
        ..Inputs::default()
    };
    let gate = |m| {
        select(&SelectConfig::new(m).mode(Mode::Gate).threshold(-1e300), &inp)
            .unwrap()
            .gains
    };
    assert!(
        gate(Method::Grn).iter().all(|&v| v == 1.0),
        "GRN with empty C is exactly 1"
    );
    assert!(
        gate(Method::Centroid).iter().all(|&v| v == 1.0),
        "CD with empty C is exactly 1"
    );
    let p = Problem {
        e: &e,
        q: Some(&q),
        costs: None,
    };
    let dpp = gate(Method::Dpp);
    for (x, &v) in dpp.iter().enumerate() {
        let w = slow::cos(e.row(x), &q).max(0.0);
        assert!((v - w * w).abs() < 1e-12, "DPP with empty C is w(x)^2");
        assert!((v - p.dpp(x, &[])).abs() < 1e-12);
    }
    // GRN and CD ignore the query: the first greedy pick is the lowest index.
    for m in [Method::Grn, Method::Centroid] {
        assert_eq!(
            select(&SelectConfig::new(m).k(1), &inp).unwrap().selected,
            vec![0]
        );
    }
}

#[test]
fn ties_break_by_lower_index_and_duplicates_stop_dpp_and_grn() {
    // Rows 0, 2 and 4 are identical; 1 and 3 are identical; d = 3.
    let rows = [
        [1.0f32, 0.0, 0.0],
        [0.0, 1.0, 0.0],
        [1.0, 0.0, 0.0],
        [0.0, 1.0, 0.0],
        [1.0, 0.0, 0.0],
    ];
    let e = Embeddings::from_rows(&rows, "dups").unwrap();
    let q = [1.0f32, 1.0, 0.0];
    let inp = Inputs {
        embeddings: Some(&e),
        query: Some(&q),
        ..Inputs::default()
    };
    for m in [Method::Mmr, Method::Dpp, Method::Grn, Method::Coverage] {
        let got = select(&SelectConfig::new(m).k(2), &inp).unwrap();
        assert_eq!(got.selected, vec![0, 1], "{}", m.name());
    }
    // Nothing new after the two directions: DPP and GRN stop on their floor.
    for m in [Method::Dpp, Method::Grn] {
        let got = select(&SelectConfig::new(m), &inp).unwrap();
        assert_eq!(got.selected, vec![0, 1], "{}", m.name());
        assert_eq!(got.stop, Some(Stop::NoGain), "{}", m.name());
        assert!(got.gains.iter().all(|&g| g >= 0.0));
    }
    // Coverage keeps adding zero-gain items while they fit.
    let all = select(&SelectConfig::new(Method::Coverage), &inp).unwrap();
    assert_eq!(all.selected, vec![0, 1, 2, 3, 4]);
    assert_eq!(&all.gains[2..], &[0.0, 0.0, 0.0]);
}

#[test]
fn budgets_and_paper_preset() {
    let (e, q, costs) = problem(31, 8, 11);
    let inp = Inputs {
        embeddings: Some(&e),
        query: Some(&q),
        costs: Some(&costs),
        ..Inputs::default()
    };
    // MMR scores can be negative: a threshold of -1 lets greedy run to the end.
    let s = select(&SelectConfig::new(Method::Mmr).k(100).threshold(-1.0), &inp).unwrap();
    assert_eq!(s.selected.len(), 31);
    assert!(
        s.notes
            .iter()
            .any(|n| n.contains("larger than the 31 candidates")),
        "{:?}",
        s.notes
    );
    assert_eq!(s.stop, Some(Stop::Exhausted));
    let s = select(
        &SelectConfig::new(Method::Mmr).token_budget(40.0).threshold(-1.0),
        &inp,
    )
    .unwrap();
    assert!(s.tokens_selected <= 40.0);
    assert_eq!(s.stop, Some(Stop::TokenBudget));
    let used: f64 = s.selected.iter().map(|&i| costs[i]).sum();
    assert_eq!(used, s.tokens_selected);
    assert!(
        (0..31)
            .filter(|x| !s.selected.contains(x))
            .all(|x| costs[x] > 40.0 - used),
        "an item that fits was left"
    );
    let p = select(&SelectConfig::new(Method::Dpp).paper_preset(true), &inp).unwrap();
    assert!(p.selected.len() <= presets::DPP_MAX_ITEMS);
    assert_eq!(p.threshold, Some(presets::DPP_TAU));
    assert!(p.gains.iter().all(|&g| g >= presets::DPP_TAU));
}

#[test]
fn sparse_coverage_equals_dense_when_it_keeps_every_neighbour_and_matches_its_definition() {
    let (e, q, costs) = problem(53, 9, 21);
    let inp = Inputs {
        embeddings: Some(&e),
        query: Some(&q),
        costs: Some(&costs),
        ..Inputs::default()
    };
    let cfg = SelectConfig::new(Method::Coverage).token_budget(300.0);
    let dense = select(&cfg, &inp).unwrap();
    let sparse_all = select(&cfg.clone().coverage_dense_max(10).coverage_knn(53), &inp).unwrap();
    assert_eq!(dense.selected, sparse_all.selected);
    assert_close("sparse(all) vs dense", &sparse_all.gains, &dense.gains, 1e-5);
    assert!(sparse_all.notes.iter().any(|n| n.contains("sparse")));
    // With 5 neighbours, greedy equals the slow greedy on the explicitly sparsified F.
    let r = 5;
    let s = |i: usize, j: usize| {
        let w = slow::cos(e.row(i), &q).max(0.0);
        if i == j {
            w
        } else {
            (w * slow::cos(e.row(i), e.row(j))).max(0.0)
        }
    };
    let keep: Vec<Vec<usize>> = (0..53)
        .map(|i| {
            let mut o: Vec<usize> = (0..53).collect();
            o.sort_by(|&a, &b| s(i, b).total_cmp(&s(i, a)).then(a.cmp(&b)));
            o.truncate(r);
            o
        })
        .collect();
    let f = |c: &[usize]| -> f64 {
        (0..53)
            .map(|j| {
                c.iter()
                    .filter(|&&i| keep[i].contains(&j))
                    .map(|&i| s(i, j))
                    .fold(0.0, f64::max)
            })
            .sum()
    };
    let value = |x: usize, c: &[usize]| {
        let mut cx = c.to_vec();
        cx.push(x);
        (f(&cx) - f(c)) / costs[x]
    };
    let (want, want_g) = slow::greedy(
        53,
        &value,
        &[],
        None,
        Some(300.0),
        Some(&costs),
        None,
        StopRule::None,
    );
    let got = select(&cfg.coverage_dense_max(10).coverage_knn(r), &inp).unwrap();
    assert_eq!(got.selected, want);
    assert_close("sparse coverage", &got.gains, &want_g, 1e-5);
}

#[test]
fn bad_inputs_are_errors_that_name_the_problem() {
    let (e, q, costs) = problem(10, 4, 3);
    let ok = Inputs {
        embeddings: Some(&e),
        query: Some(&q),
        costs: Some(&costs),
        ..Inputs::default()
    };
    let err = |cfg: SelectConfig, inp: Inputs| select(&cfg, &inp).unwrap_err().to_string();
    assert!(err(SelectConfig::new(Method::Mmr), Inputs { query: None, ..ok }).contains("query"));
    let short = [1.0f32, 2.0];
    assert!(err(
        SelectConfig::new(Method::Mmr),
        Inputs {
            query: Some(&short),
            ..ok
        }
    )
    .contains("dimension mismatch"));
    assert!(err(
        SelectConfig::new(Method::Mmr),
        Inputs {
            retained: &[10],
            ..ok
        }
    )
    .contains("retained[0]"));
    assert!(err(
        SelectConfig::new(Method::Mmr),
        Inputs {
            retained: &[1, 1],
            ..ok
        }
    )
    .contains("twice"));
    let mut bad = costs.clone();
    bad[4] = 0.0;
    assert!(err(
        SelectConfig::new(Method::Coverage),
        Inputs {
            costs: Some(&bad),
            ..ok
        }
    )
    .contains("costs[4]"));
    assert!(err(SelectConfig::new(Method::Mmr).lambda(1.5), ok).contains("lambda"));
    assert!(err(SelectConfig::new(Method::Hybrid).mode(Mode::Gate), ok).contains("threshold"));
    assert!(err(
        SelectConfig::new(Method::Grn).token_budget(5.0),
        Inputs { costs: None, ..ok }
    )
    .contains("token"));
    let zero = Embeddings::new(2, 2, vec![1.0, 0.0, 0.0, 0.0], "z.npy").unwrap();
    let e2 = err(
        SelectConfig::new(Method::Grn),
        Inputs {
            embeddings: Some(&zero),
            query: None,
            costs: None,
            ..ok
        },
    );
    assert!(e2.contains("z.npy") && e2.contains("row 1"), "{e2}");
}

#[test]
fn duplicates_and_rescaled_rows_tie_exactly() {
    // The reviewer's cases: bit-identical unit rows with costs, and rows equal up to scale.
    let v = [0.536_475_3f32, 0.843_916];
    let e = Embeddings::from_rows(&[v, v, v, v, v], "dups").unwrap();
    let costs = [2.0, 3.0, 3.0, 2.0, 1.0];
    let inp = Inputs {
        embeddings: Some(&e),
        costs: Some(&costs),
        ..Inputs::default()
    };
    let s = select(&SelectConfig::new(Method::Coverage).token_budget(6.0), &inp).unwrap();
    assert_eq!(
        s.selected,
        vec![4, 0, 1],
        "after the first pick every gain is exactly 0"
    );
    assert_eq!(&s.gains[1..], &[0.0, 0.0]);
    let e = Embeddings::from_rows(&[[1.0f32, 1.0], [1.0, 1.0], [5.0, 5.0]], "scaled").unwrap();
    let inp = Inputs {
        embeddings: Some(&e),
        ..Inputs::default()
    };
    assert_eq!(
        select(&SelectConfig::new(Method::Coverage).k(2), &inp)
            .unwrap()
            .selected,
        vec![0, 1]
    );
    let e = Embeddings::from_rows(&[[1.0f32, 1.0], [3.0, 3.0], [1.0, -1.0]], "scaled").unwrap();
    let q = [1.0f32, 1.0];
    let inp = Inputs {
        embeddings: Some(&e),
        query: Some(&q),
        ..Inputs::default()
    };
    for m in [Method::Mmr, Method::Dpp] {
        assert_eq!(
            select(&SelectConfig::new(m).k(1), &inp).unwrap().selected,
            vec![0],
            "{}",
            m.name()
        );
    }
    // Rows near f32's range limits are normalised in f64 first: no overflow.
    let big = Embeddings::from_rows(&[[1e20f32, 0.0], [1e20, 1e20], [0.0, 1e20]], "big").unwrap();
    let inp = Inputs {
        embeddings: Some(&big),
        ..Inputs::default()
    };
    let g = select(
        &SelectConfig::new(Method::Coverage)
            .mode(Mode::Gate)
            .threshold(-1.0),
        &inp,
    )
    .unwrap();
    let h = std::f64::consts::FRAC_1_SQRT_2;
    assert_close(
        "coverage on 1e20 rows",
        &g.gains,
        &[1.0 + h, 1.0 + 2.0 * h, 1.0 + h],
        1e-6,
    );
}

#[test]
fn duplicates_in_a_large_pool_add_exactly_nothing_to_coverage() {
    // N above the Gram's leaf size so duplicate pairs land in different GEMM calls.
    let (e, q, _) = problem(700, 1024, 77);
    let mut rows: Vec<Vec<f32>> = (0..700).map(|i| e.row(i).to_vec()).collect();
    for (dst, src) in [(650, 3), (699, 20), (400, 399), (10, 690)] {
        rows[dst] = rows[src].clone();
    }
    let e = Embeddings::from_rows(&rows, "dups").unwrap();
    let inp = Inputs {
        embeddings: Some(&e),
        query: Some(&q),
        ..Inputs::default()
    };
    let all = select(&SelectConfig::new(Method::Coverage), &inp).unwrap();
    for (a, b) in [(650, 3), (699, 20), (400, 399), (10, 690)] {
        let (pa, pb) = (
            all.selected.iter().position(|&x| x == a).unwrap(),
            all.selected.iter().position(|&x| x == b).unwrap(),
        );
        assert_eq!(
            all.gains[pa.max(pb)],
            0.0,
            "the later of duplicates {a}, {b} has gain {}",
            all.gains[pa.max(pb)]
        );
    }
}

#[test]
fn centroid_stops_at_f64_noise_and_grn_honours_residual_eps() {
    // The reviewer's case: the true drift of the last candidate is exactly 0.
    let e = Embeddings::new(
        4,
        1,
        vec![-0.432_245_02, -0.439_474_43, 1.583_648_7, -0.840_161_3],
        "1d",
    )
    .unwrap();
    let inp = Inputs {
        embeddings: Some(&e),
        retained: &[0, 1, 2],
        ..Inputs::default()
    };
    let s = select(&SelectConfig::new(Method::Centroid), &inp).unwrap();
    assert!(s.selected.is_empty(), "{:?} {:?}", s.selected, s.gains);
    assert_eq!(s.stop, Some(Stop::NoGain));
    // C = {e1, e1 + 1e-6 e2}: the second adds a residual of 1e-12, below the default eps,
    // so it is taken to lie in span(e1) and e2 keeps residual 1; with eps = 1e-14 the
    // direction counts and e2 lies in the span.
    let rows = [[1.0f32, 0.0], [1.0, 1e-6], [0.0, 1.0]];
    let e = Embeddings::from_rows(&rows, "eps").unwrap();
    let inp = Inputs {
        embeddings: Some(&e),
        retained: &[0, 1],
        ..Inputs::default()
    };
    let gate = |eps: f64| {
        select(
            &SelectConfig::new(Method::Grn)
                .mode(Mode::Gate)
                .threshold(-1.0)
                .residual_eps(eps),
            &inp,
        )
        .unwrap()
        .gains
    };
    assert!((gate(presets::RESIDUAL_EPS)[0] - 1.0).abs() < 1e-9);
    assert!(gate(1e-14)[0] < 1e-6);
}

#[test]
fn options_that_would_be_ignored_are_errors() {
    let (e, q, costs) = problem(9, 4, 3);
    let inp = Inputs {
        embeddings: Some(&e),
        query: Some(&q),
        costs: Some(&costs),
        ..Inputs::default()
    };
    let err = |cfg: SelectConfig| select(&cfg, &inp).unwrap_err().to_string();
    assert!(err(SelectConfig::new(Method::Grn).mode(Mode::Gate).k(3)).contains("greedy mode"));
    assert!(err(SelectConfig::new(Method::Grn).mode(Mode::Gate).token_budget(3.0)).contains("greedy mode"));
    assert!(err(SelectConfig::new(Method::Grn).lambda(0.5)).contains("applies to mmr and lexical"));
    assert!(err(SelectConfig::new(Method::Mmr).weights([1.0, 0.0, 0.0])).contains("hybrid"));
    assert!(err(SelectConfig::new(Method::Mmr).lexical_weights([1.0, 0.0])).contains("lexical"));
    // A gain that overflows is an error naming the item, never a null in the output.
    let mut tiny = costs.clone();
    tiny[2] = 1e-320;
    let e2 = select(
        &SelectConfig::new(Method::Coverage).k(1),
        &Inputs {
            costs: Some(&tiny),
            ..inp
        },
    )
    .unwrap_err();
    assert!(e2.to_string().contains("item 2"), "{e2}");
}

/// A threshold that keeps nothing says so in the notes, with the best value a gate saw;
/// one that keeps something adds no such note.
#[test]
fn a_threshold_that_keeps_nothing_says_so() {
    let (e, q, _) = problem(37, 9, 71);
    for m in [Method::Grn, Method::Centroid, Method::Dpp, Method::Mmr] {
        let inp = Inputs {
            embeddings: Some(&e),
            query: Some(&q),
            retained: &[0, 1],
            ..Inputs::default()
        };
        let all = select(&SelectConfig::new(m).mode(Mode::Gate).threshold(-1e300), &inp).unwrap();
        let best = all.gains.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        assert_eq!(all.selected.len(), 35, "{m:?}");
        assert!(
            !all.notes.iter().any(|n| n.contains("nothing kept")),
            "{:?}",
            all.notes
        );
        let none = select(&SelectConfig::new(m).mode(Mode::Gate).threshold(best + 0.5), &inp).unwrap();
        assert!(none.selected.is_empty());
        let note = none
            .notes
            .iter()
            .find(|n| n.starts_with("nothing kept"))
            .expect("a note");
        assert!(note.contains(&format!("the best is {best:.6}")), "{m:?}: {note}");
        // Greedy: the first pick is below the threshold.
        let g = select(&SelectConfig::new(m).k(5).threshold(best + 0.5), &inp).unwrap();
        assert!(g.selected.is_empty(), "{m:?}");
        assert_eq!(g.stop, Some(Stop::Threshold));
        assert!(
            g.notes.iter().any(|n| n.starts_with("nothing selected")),
            "{:?}",
            g.notes
        );
    }
}
