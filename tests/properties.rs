//! Properties of selection on random pools (proptest): selections are distinct, within
//! their budgets and the same whatever the thread count; the gains of the monotone
//! scorers never increase along a greedy run; MMR runs to `k`. Every available backend.

use ctxprune::select::{Method, Request, SelectConfig, Selector, Stop};
use ctxprune::{Embeddings, Engine, Pool};
use proptest::prelude::*;

/// A random problem: rows with duplicates and near-duplicates (the ties that test the
/// tie rule), a query, integer costs.
fn pool(n: usize, d: usize, seed: u64, dups: usize) -> (Embeddings, Vec<f32>, Vec<f64>) {
    let (e, q, costs) = crate::raw_problem(n, d, seed);
    let mut data = e.as_slice().to_vec();
    for j in 0..dups.min(n / 2) {
        let (src, dst) = (j, n - 1 - j);
        let row: Vec<f32> = data[src * d..(src + 1) * d].to_vec();
        data[dst * d..(dst + 1) * d].copy_from_slice(&row);
    }
    (Embeddings::new(n, d, data, "prop").unwrap(), q, costs)
}

/// The available engines, opened once (each open prints why CUDA is skipped).
fn available() -> &'static [Engine] {
    static ENGINES: std::sync::OnceLock<Vec<Engine>> = std::sync::OnceLock::new();
    ENGINES.get_or_init(crate::backend::available)
}

const METHODS: [Method; 6] = [
    Method::Mmr,
    Method::Grn,
    Method::Centroid,
    Method::Dpp,
    Method::Coverage,
    Method::Hybrid,
];

fn config(m: Method, k: Option<usize>, budget: Option<f64>) -> SelectConfig {
    let mut cfg = SelectConfig::new(m);
    if let Some(k) = k {
        cfg = cfg.k(k);
    }
    if let Some(b) = budget {
        cfg = cfg.token_budget(b);
    }
    cfg
}

fn run(
    engine: &Engine,
    e: &Embeddings,
    q: &[f32],
    costs: &[f64],
    m: Method,
    cfg: SelectConfig,
    retained: &[usize],
) -> ctxprune::select::Selection {
    let pool = Pool::from_embeddings(engine, e).unwrap();
    let query = m.reads_query().then_some(q);
    Selector::new(engine, cfg)
        .unwrap()
        .select(
            &pool,
            &Request {
                query,
                costs: Some(costs),
                retained,
                ..Request::default()
            },
        )
        .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() })]

    /// Distinct picks outside the retained set, within k and the token budget, with the
    /// tokens reported equal to the picks' costs; the stop names the budget that bound.
    #[test]
    fn selections_are_distinct_and_within_budget(
        n in 3usize..48, d in 2usize..12, seed in 0u64..1_000_000, dups in 0usize..4,
        k in proptest::option::of(1usize..20), budget in proptest::option::of(1.0f64..300.0),
        nret in 0usize..3,
    ) {
        let (e, q, costs) = pool(n, d, seed, dups);
        let retained: Vec<usize> = (0..nret.min(n - 1)).map(|i| (i * 7 + 1) % n).collect::<std::collections::BTreeSet<_>>().into_iter().collect();
        for engine in available() {
            for m in METHODS {
                let s = run(engine, &e, &q, &costs, m, config(m, k, budget), &retained);
                let what = format!("{} n={n} d={d} seed={seed} k={k:?} budget={budget:?} on {}", m.name(), engine.name());
                let mut seen = std::collections::HashSet::new();
                prop_assert!(s.selected.iter().all(|&x| x < n && seen.insert(x) && !retained.contains(&x)), "{what}: {:?}", s.selected);
                prop_assert_eq!(s.selected.len(), s.gains.len());
                if let Some(k) = k {
                    prop_assert!(s.selected.len() <= k, "{}: {} picks", what, s.selected.len());
                }
                let tokens: f64 = s.selected.iter().map(|&x| costs[x]).sum();
                prop_assert_eq!(tokens, s.tokens_selected);
                if let Some(b) = budget {
                    prop_assert!(tokens <= b, "{what}: {tokens} tokens");
                }
                prop_assert!(s.gains.iter().all(|g| g.is_finite()), "{what}: {:?}", s.gains);
                // Ranking methods (MMR, hybrid) run to k, the budget or the pool.
                if matches!(m, Method::Mmr | Method::Hybrid) {
                    let stop = s.stop.unwrap();
                    prop_assert!(matches!(stop, Stop::ItemBudget | Stop::TokenBudget | Stop::Exhausted), "{what}: stopped by {stop:?}");
                    if budget.is_none() {
                        prop_assert_eq!(s.selected.len(), k.unwrap_or(n).min(n - retained.len()), "{}", what);
                    }
                }
            }
        }
    }

    /// The gains of the monotone submodular scorers never increase along a greedy run
    /// (a candidate's residual, its d_x^2 or its coverage gain only shrinks as the set
    /// grows, so the best of them does too).
    #[test]
    fn gains_of_the_monotone_scorers_never_increase(
        n in 3usize..48, d in 2usize..12, seed in 0u64..1_000_000, dups in 0usize..4,
        budget in proptest::option::of(5.0f64..300.0),
    ) {
        let (e, q, costs) = pool(n, d, seed, dups);
        for engine in available() {
            for m in [Method::Grn, Method::Dpp, Method::Coverage] {
                let s = run(engine, &e, &q, &costs, m, config(m, None, budget), &[]);
                for w in s.gains.windows(2) {
                    prop_assert!(w[1] <= w[0] * (1.0 + 1e-12) + 1e-15, "{} seed={seed} on {}: gains {:?}", m.name(), engine.name(), s.gains);
                }
            }
        }
    }

    /// Same input, same output, whatever the number of threads: picks, stop and every
    /// gain's bits, on 1, 2 and 5 threads.
    #[test]
    fn selections_do_not_depend_on_the_thread_count(
        n in 3usize..200, d in 2usize..12, seed in 0u64..1_000_000, dups in 0usize..6,
        k in 1usize..30,
    ) {
        let (e, q, costs) = pool(n, d, seed, dups);
        let engine = Engine::cpu();
        for m in METHODS {
            let at = |threads: usize| {
                let tp = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
                tp.install(|| run(&engine, &e, &q, &costs, m, config(m, Some(k), None), &[]))
            };
            let one = at(1);
            for t in [2, 5] {
                let other = at(t);
                prop_assert_eq!(&one.selected, &other.selected, "{} on {} threads", m.name(), t);
                prop_assert_eq!(one.stop, other.stop);
                let bits = |g: &[f64]| g.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                prop_assert_eq!(bits(&one.gains), bits(&other.gains), "{} on {} threads", m.name(), t);
            }
        }
    }
}
