//! The fast paths of issue 24 against the paths they replace, bit for bit: the one-pass
//! unit rows against the passes they fuse (on one and several threads), a selection over
//! a borrowed matrix against one over a `Pool` of it, and `select_many` against one
//! `select` per request (errors included).

use crate::raw_problem;
use ctxprune::backend::cpu;
use ctxprune::select::{Request, SelectOptions, Selection, Selector};
use ctxprune::{Embeddings, Engine, Error, Pool};

/// Seeded odd sizes, a zero-free Gaussian matrix, and a query.
/// The last is past the rows a pass runs on one thread (2,048): read on every core.
const SIZES: [(usize, usize); 6] = [(1, 1), (63, 7), (65, 33), (130, 385), (257, 19), (2_051, 5)];

fn in_pool<T: Send>(threads: usize, f: impl FnOnce() -> T + Send) -> T {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap()
        .install(f)
}

#[test]
fn unit_rows_equal_the_passes_they_fuse_on_any_thread_count() {
    for (seed, &(n, d)) in SIZES.iter().enumerate() {
        let (e, q, _) = raw_problem(n, d, 40 + seed as u64);
        // The passes one after another: check, normalise, inverse norms, relevance.
        let mut want = Embeddings::new(n, d, e.as_slice().to_vec(), "m").unwrap();
        want.normalize().unwrap();
        let inv = want.inv_norms().unwrap();
        let inv_q = 1.0 / cpu::dot(&q, &q).sqrt();
        let mut rel = vec![0.0; n];
        cpu::matvec(want.as_slice(), d, &q, &mut rel);
        rel.iter_mut().zip(&inv).for_each(|(v, &i)| *v *= i * inv_q);
        for threads in [1, 2, 3] {
            let u = in_pool(threads, || {
                Embeddings::unit_rows(e.as_slice(), n, d, "m", Some(&q)).unwrap()
            });
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            let bits64 = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(
                bits(u.e.as_slice()),
                bits(want.as_slice()),
                "rows, {n}x{d}, {threads} threads"
            );
            assert!(u.e.is_unit());
            assert_eq!(bits64(&u.inv), bits64(&inv), "inverse norms, {n}x{d}");
            assert_eq!(
                bits64(u.rel.as_deref().unwrap()),
                bits64(&rel),
                "relevance, {n}x{d}"
            );
            let none = Embeddings::unit_rows(e.as_slice(), n, d, "m", None).unwrap();
            assert!(none.rel.is_none());
            // A query the selectors refuse gets no relevance (the selection names it).
            let bad = Embeddings::unit_rows(e.as_slice(), n, d, "m", Some(&[0.0; 3][..d.min(3)])).unwrap();
            assert!(bad.rel.is_none());
        }
    }
}

#[test]
fn unit_rows_name_what_the_checks_they_replace_name() {
    // On the calling thread (300 rows) and on every core (2,300).
    for n in [300, 2_300] {
        let (e, _, _) = raw_problem(n, 5, 9);
        let mut v = e.as_slice().to_vec();
        let (nan, zero) = (n - 100, n - 50);
        v[3 * 5..4 * 5].fill(0.0); // a zero row before ...
        v[nan * 5 + 2] = f32::NAN; // ... a NaN in a later task: the NaN is named, as before
        let err = Embeddings::unit_rows(&v, n, 5, "docs", None).unwrap_err();
        let old = Embeddings::new(n, 5, v.clone(), "docs").unwrap_err();
        assert_eq!(err.to_string(), old.to_string());
        assert!(
            matches!(err, Error::NonFinite { row, col: 2, .. } if row == nan),
            "{n} rows: {err}"
        );
        v[nan * 5 + 2] = 1.0;
        v[zero * 5..(zero + 1) * 5].fill(0.0);
        let err = Embeddings::unit_rows(&v, n, 5, "docs", None).unwrap_err();
        assert!(matches!(err, Error::ZeroNorm { row: 3, .. }), "{n} rows: {err}");
        assert!(
            Embeddings::unit_rows(&v, n - 1, 5, "docs", None).is_err(),
            "a short matrix"
        );
    }
    assert!(
        Embeddings::unit_rows(&[], 0, 0, "docs", None).is_err(),
        "dimension 0"
    );
}

/// A pool (and so a selection from the matrix) names the same bad value or zero row
/// whether its rows are kept as given (unit already) or normalised into a copy (a row far
/// from unit length before the bad one, in another task of the pass).
#[test]
fn pools_of_unit_rows_name_what_the_copy_names() {
    // On the calling thread (700 rows) and on every core (2,700).
    for n in [700, 2_700] {
        pools_of_n_unit_rows_name_what_the_copy_names(n);
    }
}

fn pools_of_n_unit_rows_name_what_the_copy_names(n: usize) {
    let (e, _, _) = raw_problem(n, 5, 19);
    let unit: Vec<f32> = e
        .as_slice()
        .chunks_exact(5)
        .flat_map(|r| {
            let n = cpu::dot(r, r).sqrt() as f32;
            r.iter().map(move |&v| v / n)
        })
        .collect();
    let engine = Engine::cpu();
    let pool = |v: &[f32]| Pool::from_slice(&engine, v, n, 5, "docs", ctxprune::Storage::F32).map(|_| ());
    assert!(pool(&unit).is_ok());
    let (nan, zero) = (n - 100, n - 300);
    for far in [None, Some(2usize)] {
        let mut v = unit.clone();
        if let Some(r) = far {
            v[r * 5..(r + 1) * 5].iter_mut().for_each(|x| *x *= 3.0);
        }
        v[nan * 5 + 2] = f32::NAN;
        v[zero * 5..(zero + 1) * 5].fill(0.0);
        let err = pool(&v).unwrap_err();
        assert!(
            matches!(err, Error::NonFinite { row, col: 2, .. } if row == nan),
            "{n} rows, far row {far:?}: {err}"
        );
        v[nan * 5 + 2] = 0.5;
        let err = pool(&v).unwrap_err();
        assert!(
            matches!(err, Error::ZeroNorm { row, .. } if row == zero),
            "{n} rows, far row {far:?}: {err}"
        );
    }
}

fn selector(method: &str, mode: &str, k: usize, budget: Option<f64>) -> Selector {
    let opts = SelectOptions {
        method,
        mode: Some(mode),
        k: (mode == "greedy").then_some(k),
        token_budget: budget,
        threshold: (mode == "gate" || method == "hybrid").then_some(-10.0),
        ..SelectOptions::default()
    };
    Selector::new(&Engine::cpu(), opts.config().unwrap()).unwrap()
}

const METHODS: [&str; 6] = ["mmr", "grn", "centroid", "dpp", "coverage", "hybrid"];

fn same(a: &ctxprune::Result<Selection>, b: &ctxprune::Result<Selection>, what: &str) {
    match (a, b) {
        (Ok(a), Ok(b)) => {
            assert_eq!(a.selected, b.selected, "{what}");
            let bits = |s: &Selection| s.gains.iter().map(|g| g.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(a), bits(b), "{what}: gains");
            assert_eq!(a, b, "{what}");
        }
        (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "{what}"),
        _ => panic!("{what}: {a:?} vs {b:?}"),
    }
}

/// A matrix of `raw_problem`'s rows: "drawn" as drawn (norms far from 1: a pool
/// unit-normalises a copy, and so does a selection from the matrix); "unit" normalised in
/// `f32`, then each row scaled by up to 3e-3 (norms within 2^-8 of 1: a pool keeps them as
/// given, and a selection borrows them); "mixed" those with one row at twice its length
/// (a copy again).
fn scaled(e: &Embeddings, how: &str) -> Embeddings {
    let (n, d) = (e.rows(), e.dim());
    if how == "drawn" {
        return e.clone();
    }
    let mut data = Vec::with_capacity(n * d);
    for i in 0..n {
        let row = e.row(i);
        let norm = row
            .iter()
            .map(|&v| f64::from(v) * f64::from(v))
            .sum::<f64>()
            .sqrt() as f32;
        let s = 1.0 + 1e-3 * (i % 7) as f32 - 3e-3 + if how == "mixed" && i == n / 2 { 1.0 } else { 0.0 };
        data.extend(row.iter().map(|&v| v / norm * s));
    }
    Embeddings::new(n, d, data, "m").unwrap()
}

#[test]
fn a_borrowed_matrix_selects_as_a_pool_of_it_bit_for_bit() {
    let engine = Engine::cpu();
    for ((seed, &(n, d)), how) in SIZES
        .iter()
        .enumerate()
        .skip(1)
        .zip(["drawn", "unit", "mixed", "unit"])
    {
        let (e, q, costs) = raw_problem(n, d, 70 + seed as u64);
        let e = scaled(&e, how);
        let pool = Pool::new(&engine, e.clone()).unwrap();
        // The pool keeps the rows as given when they are unit already.
        assert_eq!(
            pool.embeddings().as_slice() == e.as_slice(),
            how == "unit",
            "{how}"
        );
        for method in METHODS {
            for (mode, budget) in [("greedy", None), ("greedy", Some(60.0)), ("gate", None)] {
                let s = selector(method, mode, 7, budget);
                let retained = [n / 2];
                let req = Request {
                    query: Some(&q),
                    costs: Some(&costs),
                    retained: if mode == "gate" { &retained } else { &[] },
                    ..Request::default()
                };
                let what = format!("{method} {mode} budget={budget:?} {n}x{d} {how}");
                let want = s.select(&pool, &req);
                for threads in [1, 3] {
                    let got = in_pool(threads, || s.select_rows(e.as_slice(), n, d, "m", &req));
                    same(&got, &want, &format!("{what}, {threads} threads"));
                }
                let inputs = ctxprune::select::Inputs {
                    embeddings: Some(&e),
                    query: Some(&q),
                    texts: None,
                    query_text: None,
                    costs: Some(&costs),
                    retained: req.retained,
                    cancel: None,
                };
                same(&s.select_inputs(&inputs), &want, &format!("{what} (inputs)"));
            }
        }
        // A bad query is named after the rows are checked, as over a pool.
        let s = selector("mmr", "greedy", 3, None);
        let short = Request {
            query: Some(&q[..d - 1]),
            ..Request::default()
        };
        if d > 1 {
            same(
                &s.select_rows(e.as_slice(), n, d, "m", &short),
                &s.select(&pool, &short),
                "short query",
            );
        }
    }
}

#[test]
fn select_many_answers_as_one_select_per_request() {
    let engine = Engine::cpu();
    let (n, d) = (211, 23);
    let (e, _, costs) = raw_problem(n, d, 5);
    let pool = Pool::new(&engine, e.clone()).unwrap();
    let qs: Vec<Vec<f32>> = (0..9).map(|i| raw_problem(3, d, 100 + i).1).collect();
    let zero = vec![0.0f32; d];
    let short = vec![1.0f32; d - 2];
    for method in METHODS {
        for (mode, budget) in [("greedy", None), ("greedy", Some(45.0)), ("gate", None)] {
            let s = selector(method, mode, 6, budget);
            let retained = [4usize, 17];
            let mut reqs: Vec<Request<'_>> = qs
                .iter()
                .map(|q| Request {
                    query: Some(q),
                    costs: Some(&costs),
                    retained: &retained,
                    ..Request::default()
                })
                .collect();
            // Requests the selection refuses answer as they would alone.
            reqs.insert(
                2,
                Request {
                    query: Some(&zero),
                    ..reqs[0]
                },
            );
            reqs.insert(
                5,
                Request {
                    query: Some(&short),
                    ..reqs[0]
                },
            );
            reqs.push(Request {
                query: None,
                ..reqs[0]
            });
            for threads in [1, 2] {
                let got = in_pool(threads, || s.select_many(&pool, &reqs));
                assert_eq!(got.len(), reqs.len());
                for (i, (g, r)) in got.iter().zip(&reqs).enumerate() {
                    let what = format!("{method} {mode} budget={budget:?} request {i}, {threads} threads");
                    same(g, &s.select(&pool, r), &what);
                }
            }
        }
    }
    // A pool on another engine is refused for every request, as by select.
    let s = selector("mmr", "greedy", 3, None);
    assert!(s.select_many(&pool, &[]).is_empty());
}

/// The `f32` screens of MMR's lazy refresh and lazy relevance (`cpu::dot_f32`, the eight
/// products of `cpu::dot_f32_x8` and the pair of `cpu::dot_f32_pair`) are each within their
/// bound (`dot_f32_bound`, `dot_f32_x8_bound`, `dot_f32_pair_bound`) of
/// the exact inner product, relative to `‖a‖ ‖b‖`, on seeded vectors of odd lengths:
/// Gaussian, sharing a common direction as real text does, nearly cancelling (a second
/// vector almost orthogonal to the first), and of wide dynamic range. The reference sums
/// the exact `f64` products of the `f32` entries one by one in `f64` (an error some 1e-16
/// of `Σ|a_i b_i|`, covered by the slack).
#[test]
fn the_f32_screen_is_within_its_bound() {
    let mut rng = ctxprune::rng::Rng::new(77);
    // The worst error over its bound, per screen.
    let mut worst = std::collections::BTreeMap::<&str, f64>::new();
    for len in [1usize, 7, 63, 64, 65, 127, 383, 384, 385, 1027, 4099] {
        for kind in 0..4 {
            for _ in 0..40 {
                let c: Vec<f64> = (0..len).map(|_| rng.normal()).collect();
                let draw = |rng: &mut ctxprune::rng::Rng| -> Vec<f32> {
                    (0..len)
                        .map(|i| match kind {
                            1 => (2.0 * c[i] + rng.normal()) as f32,
                            3 => (rng.normal() * 10f64.powf(4.0 * rng.uniform() - 2.0)) as f32,
                            _ => rng.normal() as f32,
                        })
                        .collect()
                };
                let a = draw(&mut rng);
                let mut b = draw(&mut rng);
                if kind == 2 && len > 1 {
                    // b minus its projection on a: <a, b> is tiny next to ‖a‖ ‖b‖.
                    let ab: f64 = a.iter().zip(&b).map(|(&x, &y)| f64::from(x) * f64::from(y)).sum();
                    let aa: f64 = a.iter().map(|&x| f64::from(x) * f64::from(x)).sum();
                    for (y, &x) in b.iter_mut().zip(&a) {
                        *y = (f64::from(*y) - ab / aa * f64::from(x)) as f32;
                    }
                }
                let exact: f64 = a.iter().zip(&b).map(|(&x, &y)| f64::from(x) * f64::from(y)).sum();
                let abs: f64 = a
                    .iter()
                    .zip(&b)
                    .map(|(&x, &y)| (f64::from(x) * f64::from(y)).abs())
                    .sum();
                let na = a.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>().sqrt();
                let nb = b.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>().sqrt();
                // Each screen's product of a and b: one call, the eight-row product (b
                // among copies of a at a varying place) and the pair (b first, then second).
                let j = (len + kind) % cpu::X8;
                let rows: [&[f32]; cpu::X8] = std::array::from_fn(|i| if i == j { &b[..] } else { &a[..] });
                for (screen, got, unit) in [
                    ("dot_f32", cpu::dot_f32(&a, &b), cpu::dot_f32_bound(len)),
                    (
                        "dot_f32_x8",
                        cpu::dot_f32_x8(&a, rows)[j],
                        cpu::dot_f32_x8_bound(len),
                    ),
                    (
                        "dot_f32_pair",
                        cpu::dot_f32_pair(&a, &b, &a).0,
                        cpu::dot_f32_pair_bound(len),
                    ),
                    (
                        "dot_f32_pair",
                        cpu::dot_f32_pair(&a, &a, &b).1,
                        cpu::dot_f32_pair_bound(len),
                    ),
                ] {
                    let err = (f64::from(got) - exact).abs();
                    let bound = unit * na * nb + 1e-15 * abs;
                    assert!(
                        err <= bound,
                        "{screen}, len {len} kind {kind}: error {err:e} above the bound {bound:e}"
                    );
                    if na * nb > 0.0 {
                        let w = worst.entry(screen).or_insert(0.0);
                        *w = w.max(err / (unit * na * nb));
                    }
                }
            }
        }
    }
    // No bound is vacuous either: each screen's worst case uses a visible share of it.
    assert_eq!(worst.len(), 3);
    for (screen, w) in worst {
        assert!(w > 1e-3, "{screen}: worst error / bound {w}");
    }
}

/// MMR's lazy picker screens stale candidates with `f32` lower bounds before any exact
/// similarity: on pools of MiniLM-like shape (a shared direction, up to d = 384) the
/// picks and gains equal the eager picker's (which never screens) bit for bit, and on a
/// small one the slow definition's picks.
#[test]
fn screened_mmr_picks_are_the_eager_picks() {
    use ctxprune::select::{select, Inputs, Method, SelectConfig};
    for (seed, n, d, k) in [
        (81u64, 900usize, 384usize, 60usize),
        (82, 517, 101, 90),
        (83, 150, 33, 25),
    ] {
        let mut rng = ctxprune::rng::Rng::new(seed);
        let c0: Vec<f64> = (0..d).map(|_| rng.normal()).collect();
        let data: Vec<f32> = (0..n * d)
            .map(|i| (1.6 * c0[i % d] + rng.normal()) as f32)
            .collect();
        let q: Vec<f32> = (0..d)
            .map(|j| (1.6 * c0[j] + 0.4 * rng.normal()) as f32)
            .collect();
        let e = Embeddings::new(n, d, data, "m").unwrap();
        let inp = Inputs {
            embeddings: Some(&e),
            query: Some(&q),
            ..Inputs::default()
        };
        for lam in [0.3, 0.5, 0.8] {
            let cfg = SelectConfig::new(Method::Mmr).k(k).lambda(lam);
            let lazy = select(&cfg, &inp).unwrap();
            let eager = select(&cfg.clone().eager_only(true), &inp).unwrap();
            assert_eq!(lazy.selected, eager.selected, "seed {seed} λ {lam}");
            let bits = |g: &[f64]| g.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&lazy.gains), bits(&eager.gains), "seed {seed} λ {lam}");
            if n <= 150 {
                let p = crate::slow::Problem {
                    e: &e,
                    q: Some(&q),
                    costs: None,
                };
                let value = |x: usize, c: &[usize]| p.mmr(lam, x, c);
                let (want, _) = crate::slow::greedy(
                    n,
                    &value,
                    &[],
                    Some(k),
                    None,
                    None,
                    None,
                    crate::slow::StopRule::None,
                );
                assert_eq!(lazy.selected, want, "seed {seed} λ {lam}: the slow definition");
            }
        }
    }
}

/// MMR on the CPU takes relevance lazily (an `f32` bound for every row, the exact value
/// only for rows that reach the top of its heap) and starts its heap from the screen's
/// bounds: on pools built to tie (duplicate rows, scaled copies, rows one `f32` step
/// apart) with retained rows and token budgets, and at λ = 0 and 1, the picks, gains and
/// stop equal the eager picker's (every relevance exact, every gain refreshed) bit for
/// bit. (The slow definition breaks near-ties by its own roundings; it is checked on a
/// pool without them above.)
#[test]
fn lazy_relevance_gives_the_eager_picks_on_ties() {
    use ctxprune::select::{select, Inputs, Method, SelectConfig};
    for (seed, n, d) in [(91u64, 613usize, 96usize), (92, 2301, 40), (93, 61, 7)] {
        let mut rng = ctxprune::rng::Rng::new(seed);
        let c0: Vec<f64> = (0..d).map(|_| rng.normal()).collect();
        let mut data: Vec<f32> = (0..n * d)
            .map(|i| (1.6 * c0[i % d] + rng.normal()) as f32)
            .collect();
        // Every fifth row a copy of an earlier one, scaled (by 2 or 0.5 the same unit
        // row: exact ties); every seventh the row before with one value a step away.
        for r in 1..n {
            let src = rng.below(r);
            if r % 5 == 0 {
                let s = [1.0f32, 2.0, 0.5, 3.0][r % 4];
                for j in 0..d {
                    data[r * d + j] = data[src * d + j] * s;
                }
            } else if r % 7 == 0 {
                for j in 0..d {
                    data[r * d + j] = data[(r - 1) * d + j];
                }
                let j = rng.below(d);
                data[r * d + j] = f32::from_bits(data[r * d + j].to_bits() + 1);
            }
        }
        let q: Vec<f32> = (0..d)
            .map(|j| (1.6 * c0[j] + 0.4 * rng.normal()) as f32)
            .collect();
        // The most relevant rows: copies of the query, each with values a step or two
        // away, so their relevances differ by less than the `f32` bounds resolve.
        for t in 0..12 {
            let r = (t * 53 + 11) % n;
            data[r * d..(r + 1) * d].copy_from_slice(&q);
            for _ in 0..1 + t % 3 {
                let j = rng.below(d);
                let v = &mut data[r * d + j];
                *v = f32::from_bits(if t % 2 == 0 {
                    v.to_bits() + 1
                } else {
                    v.to_bits() - 1
                });
            }
        }
        let costs: Vec<f64> = (0..n).map(|_| 1.0 + rng.below(9) as f64).collect();
        let e = Embeddings::new(n, d, data, "m").unwrap();
        let retained = [n / 3, n - 1];
        for lam in [0.0, 0.35, 0.7, 1.0] {
            for (k, budget, kept) in [
                (40, None, &[][..]),
                (25, Some(60.0), &retained[..]),
                (n, None, &[][..]),
            ] {
                let mut cfg = SelectConfig::new(Method::Mmr).k(k.min(n)).lambda(lam);
                if let Some(b) = budget {
                    cfg = cfg.token_budget(b);
                }
                let inp = Inputs {
                    embeddings: Some(&e),
                    query: Some(&q),
                    costs: Some(&costs),
                    retained: kept,
                    ..Inputs::default()
                };
                let lazy = select(&cfg, &inp).unwrap();
                let eager = select(&cfg.clone().eager_only(true), &inp).unwrap();
                let what = format!("seed {seed} λ {lam} k {k} budget {budget:?} retained {kept:?}");
                assert_eq!(lazy.selected, eager.selected, "{what}");
                let bits = |g: &[f64]| g.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&lazy.gains), bits(&eager.gains), "{what}");
                assert_eq!(lazy.stop, eager.stop, "{what}");
            }
        }
    }
}

/// MMR on the CPU guesses row 0 as its first pick when a pool comes in a retriever's order
/// (its first rows in decreasing relevance), and takes every row's bound on its cosine to
/// row 0 in the read that bounds the row's relevance. On unit rows in decreasing
/// relevance (the guess right), the same with the most relevant row moved down (the guess
/// wrong), with row 0 copied to row 1 and to the last row (exact ties at the top), and
/// with a retained row, a token budget and λ at 0 and 1, the picks, gains and stop over a
/// `Pool`, a borrowed array (1 and 3 threads) and the inputs equal the eager picker's
/// (which guesses nothing) bit for bit.
#[test]
fn a_guessed_first_pick_changes_no_pick() {
    use ctxprune::select::{Method, SelectConfig};
    let engine = Engine::cpu();
    for (seed, n, d) in [(61u64, 613usize, 96usize), (62, 2311, 40), (63, 29, 7)] {
        let (e, q, costs) = raw_problem(n, d, seed);
        let unit = scaled(&e, "unit");
        let rel = |r: &[f32]| {
            let dot: f64 = r.iter().zip(&q).map(|(&a, &b)| f64::from(a) * f64::from(b)).sum();
            dot / r.iter().map(|&v| f64::from(v).powi(2)).sum::<f64>().sqrt()
        };
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by(|&a, &b| rel(unit.row(b)).total_cmp(&rel(unit.row(a))));
        for how in ["sorted", "top moved down", "top copied"] {
            let mut rows: Vec<&[f32]> = order.iter().map(|&i| unit.row(i)).collect();
            match how {
                "top moved down" => {
                    let top = rows.remove(0);
                    rows.insert(n / 2, top);
                }
                "top copied" => {
                    rows[1] = rows[0];
                    rows[n - 1] = rows[0];
                }
                _ => {}
            }
            let data: Vec<f32> = rows.concat();
            let x = Embeddings::new(n, d, data.clone(), "m").unwrap();
            let pool = Pool::new(&engine, x.clone()).unwrap();
            assert_eq!(
                pool.embeddings().as_slice(),
                &data[..],
                "{how}: rows kept as given"
            );
            for lam in [0.0, 0.5, 1.0] {
                for (k, budget, retained) in [
                    (1, None, &[][..]),
                    (9, None, &[][..]),
                    (40, Some(70.0), &[n / 3][..]),
                ] {
                    let mut cfg = SelectConfig::new(Method::Mmr).k(k.min(n)).lambda(lam);
                    if let Some(b) = budget {
                        cfg = cfg.token_budget(b);
                    }
                    let lazy = Selector::new(&engine, cfg.clone()).unwrap();
                    let eager = Selector::new(&engine, cfg.eager_only(true)).unwrap();
                    let req = Request {
                        query: Some(&q),
                        costs: Some(&costs),
                        retained,
                        ..Request::default()
                    };
                    let what = format!("{n}x{d} {how} λ {lam} k {k} budget {budget:?}");
                    let want = eager.select(&pool, &req);
                    same(&lazy.select(&pool, &req), &want, &format!("{what}: pool"));
                    for threads in [1, 3] {
                        let got = in_pool(threads, || lazy.select_rows(&data, n, d, "m", &req));
                        same(&got, &want, &format!("{what}: array, {threads} threads"));
                    }
                    let inputs = ctxprune::select::Inputs {
                        embeddings: Some(&x),
                        query: Some(&q),
                        costs: Some(&costs),
                        retained,
                        ..ctxprune::select::Inputs::default()
                    };
                    same(&lazy.select_inputs(&inputs), &want, &format!("{what}: inputs"));
                }
            }
        }
    }
}
