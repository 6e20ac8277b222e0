//! `ctxprune eval --set`: problem sets from files (src/rerank/eval_set.rs) against a direct
//! reading of the file, every malformed tensor refused by name, and the CLI's table.

use ctxprune::rerank::eval::{self, Grid};
use ctxprune::rerank::eval_set::ProblemSet;
use ctxprune::rerank::RowPrecision;
use ctxprune::rng::Rng;
use safetensors::{serialize, tensor::TensorView, Dtype};
use std::path::Path;

/// A set's tensors, as the test builds them (row-major).
#[derive(Clone)]
struct Raw {
    m: usize,
    d: usize,
    rows: Vec<f32>,
    queries: Vec<f32>,
    pools: Vec<i64>,
    labels: Vec<f32>,
    tokens: Option<Vec<i64>>,
    q: usize,
    n: usize,
}

/// `q` problems of `n` entries over `m` seeded rows in `d` dimensions (odd sizes).
fn raw(m: usize, d: usize, q: usize, n: usize, seed: u64) -> Raw {
    let mut r = Rng::new(seed);
    let rows = (0..m * d).map(|_| r.normal() as f32).collect();
    let queries = (0..q * d).map(|_| r.normal() as f32).collect();
    let mut pools = Vec::new();
    for _ in 0..q {
        // A partial Fisher–Yates shuffle: n distinct rows.
        let mut idx: Vec<i64> = (0..m as i64).collect();
        for i in 0..n {
            let j = i + r.below(m - i);
            idx.swap(i, j);
        }
        pools.extend_from_slice(&idx[..n]);
    }
    let labels = (0..q * n).map(|_| r.below(4) as f32).collect();
    let tokens = Some((0..q * n).map(|_| 1 + r.below(500) as i64).collect());
    Raw {
        m,
        d,
        rows,
        queries,
        pools,
        labels,
        tokens,
        q,
        n,
    }
}

fn bytes(r: &Raw, extra: Option<(&str, Dtype, Vec<usize>, Vec<u8>)>) -> Vec<u8> {
    let f = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let i = |v: &[i64]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let mut owned: Vec<(String, Dtype, Vec<usize>, Vec<u8>)> = vec![
        ("rows".into(), Dtype::F32, vec![r.m, r.d], f(&r.rows)),
        ("queries".into(), Dtype::F32, vec![r.q, r.d], f(&r.queries)),
        ("pools".into(), Dtype::I64, vec![r.q, r.n], i(&r.pools)),
        ("labels".into(), Dtype::F32, vec![r.q, r.n], f(&r.labels)),
    ];
    if let Some(t) = &r.tokens {
        owned.push(("tokens".into(), Dtype::I64, vec![r.q, r.n], i(t)));
    }
    if let Some((name, dt, shape, data)) = extra {
        owned.retain(|o| o.0 != name);
        owned.push((name.into(), dt, shape, data));
    }
    let views: Vec<(String, TensorView)> = owned
        .iter()
        .map(|(n, dt, s, b)| (n.clone(), TensorView::new(*dt, s.clone(), b).unwrap()))
        .collect();
    serialize(views, None).unwrap()
}

fn load(r: &Raw) -> ProblemSet {
    ProblemSet::from_bytes(&bytes(r, None), Path::new("set.safetensors")).unwrap()
}

#[test]
fn a_problem_is_the_rows_it_names_with_the_simulated_cross_encoder() {
    let r = raw(41, 7, 3, 29, 5);
    let set = load(&r);
    assert_eq!((set.len(), set.pool_size(), set.has_tokens()), (3, 29, true));
    let top = r.labels.iter().fold(0.0f64, |a, &l| a.max(f64::from(l)));
    for (i, noise) in [(0, 0.0), (1, 0.1), (2, 0.37)] {
        let p = set.problem(i, noise, 11).unwrap();
        // The pool holds the named rows in pool order (each normalised, as a Pool does).
        let want = ctxprune::Embeddings::from_rows(
            &(0..r.n)
                .map(|j| {
                    let row = r.pools[i * r.n + j] as usize;
                    r.rows[row * r.d..(row + 1) * r.d].to_vec()
                })
                .collect::<Vec<_>>(),
            "want",
        )
        .unwrap();
        let want = ctxprune::Pool::new(&ctxprune::Engine::cpu(), want).unwrap();
        for j in 0..r.n {
            assert_eq!(
                p.pool.embeddings().row(j),
                want.embeddings().row(j),
                "problem {i} row {j}"
            );
        }
        assert_eq!(p.query, r.queries[i * r.d..(i + 1) * r.d].to_vec());
        let labels: Vec<f64> = r.labels[i * r.n..(i + 1) * r.n]
            .iter()
            .map(|&l| f64::from(l))
            .collect();
        assert_eq!(p.labels, labels);
        let tokens: Vec<u64> = r.tokens.as_ref().unwrap()[i * r.n..(i + 1) * r.n]
            .iter()
            .map(|&t| t as u64)
            .collect();
        assert_eq!(p.tokens, tokens);
        // The oracle, evaluated directly: clamp(label / top + noise z, 0, 1), z from seed + i.
        let mut rng = Rng::new(11 + i as u64);
        for (j, &o) in p.oracle.iter().enumerate() {
            let want = (labels[j] / top + noise * rng.normal()).clamp(0.0, 1.0);
            assert_eq!(o, want, "problem {i} entry {j}");
        }
        if noise == 0.0 {
            assert!(p.oracle.iter().zip(&labels).all(|(&o, &l)| o == l / top));
        }
    }
    let e = set.problem(3, 0.1, 1).err().unwrap().to_string();
    assert!(e.contains("problem") && e.contains("3 is outside"), "{e}");
    for bad in [-0.1, f64::NAN, f64::INFINITY] {
        let e = set.problem(0, bad, 1).err().unwrap().to_string();
        assert!(e.contains("noise"), "{e}");
    }
}

#[test]
fn every_malformed_set_is_refused_naming_the_tensor() {
    let r = raw(13, 5, 2, 9, 3);
    let f = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let i = |v: &[i64]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let err = |b: Vec<u8>| {
        ProblemSet::from_bytes(&b, Path::new("bad.safetensors"))
            .err()
            .unwrap()
            .to_string()
    };
    let has = |e: String, words: &[&str]| {
        assert!(e.contains("bad.safetensors"), "{e}");
        for w in words {
            assert!(e.contains(w), "{e} lacks {w}");
        }
    };
    let mut p = r.pools.clone();
    p[r.n + 4] = 13;
    has(
        err(bytes(&r, Some(("pools", Dtype::I64, vec![2, 9], i(&p))))),
        &["'pools' [1, 4] = 13", "13 rows"],
    );
    p[r.n + 4] = -1;
    has(
        err(bytes(&r, Some(("pools", Dtype::I64, vec![2, 9], i(&p))))),
        &["'pools' [1, 4] = -1"],
    );
    p[r.n + 4] = p[r.n + 2];
    has(
        err(bytes(&r, Some(("pools", Dtype::I64, vec![2, 9], i(&p))))),
        &["'pools' row 1 names row", "twice"],
    );
    let mut l = r.labels.clone();
    l[3] = -1.0;
    has(
        err(bytes(&r, Some(("labels", Dtype::F32, vec![2, 9], f(&l))))),
        &["'labels' element 3 is negative"],
    );
    l[3] = f32::NAN;
    has(
        err(bytes(&r, Some(("labels", Dtype::F32, vec![2, 9], f(&l))))),
        &["'labels' element 3 is not finite"],
    );
    has(
        err(bytes(&r, Some(("labels", Dtype::F32, vec![2, 9], f(&[0.0; 18]))))),
        &["'labels' is all 0"],
    );
    has(
        err(bytes(&r, Some(("labels", Dtype::F32, vec![3, 6], f(&r.labels))))),
        &["'labels' has shape [3, 6]", "[2, 9]"],
    );
    has(
        err(bytes(&r, Some(("labels", Dtype::F64, vec![2, 9], vec![0; 144])))),
        &["'labels' is F64, expected F32"],
    );
    let mut t = r.tokens.clone().unwrap();
    t[5] = 0;
    has(
        err(bytes(&r, Some(("tokens", Dtype::I64, vec![2, 9], i(&t))))),
        &["'tokens' element 5 is below 1"],
    );
    has(
        err(bytes(
            &r,
            Some(("queries", Dtype::F32, vec![2, 4], f(&r.queries[..8]))),
        )),
        &["'queries' has 4 columns", "'rows' has 5"],
    );
    has(
        err(bytes(&r, Some(("pools", Dtype::I64, vec![1, 18], i(&r.pools))))),
        &["'pools' has 1 rows", "(2)"],
    );
    has(
        err(bytes(&r, Some(("extra", Dtype::F32, vec![1, 1], f(&[1.0]))))),
        &["unknown tensor 'extra'"],
    );
    let mut no_tokens = r.clone();
    no_tokens.tokens = None;
    let rows = f(&r.rows);
    let views = vec![("rows", TensorView::new(Dtype::F32, vec![13, 5], &rows).unwrap())];
    let b = serialize(views, None).unwrap();
    has(err(b), &["missing tensor 'queries'"]);
    // Without token counts the set loads, and a token capacity is refused by name.
    let set = ProblemSet::from_bytes(&bytes(&no_tokens, None), Path::new("x.safetensors")).unwrap();
    assert!(!set.has_tokens());
    let grid = Grid {
        budgets: vec![3],
        capacities: vec![2],
        token_capacity: Some(100),
        row_precision: RowPrecision::F32,
        peaks: false,
    };
    let e = eval::check_set(&set, &[0.1], 1, 1, &grid)
        .unwrap_err()
        .to_string();
    assert!(e.contains("token_capacity") && e.contains("no 'tokens'"), "{e}");
    let grid = Grid {
        token_capacity: None,
        ..grid
    };
    for (noises, words) in [
        (vec![], vec!["noise", "is empty"]),
        (vec![0.1, 0.1], vec!["noise", "element 1 (0.1) repeats element 0"]),
        (vec![-0.5], vec!["noise", "element 0 (-0.5)"]),
    ] {
        let e = eval::check_set(&set, &noises, 1, 1, &grid)
            .unwrap_err()
            .to_string();
        for w in words {
            assert!(e.contains(w), "{e} lacks {w}");
        }
    }
    let big = Grid {
        budgets: vec![10],
        ..grid.clone()
    };
    let e = eval::check_set(&set, &[0.1], 1, 1, &big).unwrap_err().to_string();
    assert!(e.contains("budgets") && e.contains("0..=9"), "{e}");
    // Draws: at least 1, at most the problems' limit in runs, and their last seed in range.
    let max = ctxprune::limits::MAX_EVAL_PROBLEMS;
    // Two draws of q problems take seeds seed..=seed + 2q - 1.
    let (q, last) = (set.len() as u64, u64::MAX);
    for (seed, draws, words) in [
        (1, 0, vec!["draws", "at least 1"]),
        (1, max, vec!["draws", "exceed"]),
        (1, usize::MAX, vec!["draws", "exceed"]),
        (last - 2 * q + 2, 2, vec!["seed", "exceeds the largest seed"]),
    ] {
        let e = eval::check_set(&set, &[0.1], seed, draws, &grid)
            .unwrap_err()
            .to_string();
        for w in words {
            assert!(e.contains(w), "{e} lacks {w}");
        }
    }
    let e = eval::check_set(&set, &[0.1], last - 2 * q + 2, 2, &grid)
        .unwrap_err()
        .to_string();
    assert!(e.contains(&format!("{q} problems x 2 draws")), "{e}");
    assert!(eval::check_set(&set, &[0.1], last - 2 * q + 1, 2, &grid).is_ok());
}

/// Three problems of 47 rows and the one-cell grid B = 6, k = 4 the run tests use.
fn small_run() -> (ProblemSet, Grid) {
    let grid = Grid {
        budgets: vec![6],
        capacities: vec![4],
        token_capacity: None,
        row_precision: RowPrecision::F32,
        peaks: false,
    };
    (load(&raw(60, 9, 3, 47, 8)), grid)
}

/// Draws: draw d of problem i is the one-draw run of problem i with seed `seed + d·Q`
/// (Q problems), run for run; a cell's mean is over every run.
#[test]
fn draws_are_the_set_run_again_with_the_next_seeds() {
    let (set, grid) = small_run();
    let q = set.len() as u64;
    let three = eval::run_set(&set, &[0.2], 5, 3, &grid, &mut |_| {}).unwrap();
    let each: Vec<_> = (0..3)
        .map(|d| eval::run_set(&set, &[0.2], 5 + q * d, 1, &grid, &mut |_| {}).unwrap())
        .collect();
    assert_eq!(three.cells.len(), each[0].cells.len());
    for (c, cell) in three.cells.iter().enumerate() {
        let joined: Vec<f64> = each.iter().flat_map(|o| o.cells[c].per_problem.clone()).collect();
        assert_eq!(cell.per_problem, joined, "{}", cell.method);
        let mean = joined.iter().sum::<f64>() / joined.len() as f64;
        assert!(
            (cell.ce_ncg - mean).abs() < 1e-12,
            "{} {} {mean}",
            cell.method,
            cell.ce_ncg
        );
    }
    // The draws differ: a noisy oracle scores otherwise under the next seeds.
    assert_ne!(each[0].cells, each[1].cells);
}

#[test]
fn run_set_gives_a_cell_per_noise_and_variant_reproducibly() {
    let (set, grid) = small_run();
    let out = eval::run_set(&set, &[0.0, 0.2], 3, 1, &grid, &mut |_| {}).unwrap();
    let v = eval::variants().len();
    assert_eq!(out.cells.len(), 2 * v);
    assert_eq!(out.groups, ["set@0", "set@0.2"]);
    assert!(out.cells[..v].iter().all(|c| c.set == "set@0"));
    assert!(out.cells[v..].iter().all(|c| c.set == "set@0.2"));
    assert!(out.cells.iter().all(|c| c.per_problem.len() == 3));
    assert!(out.cells.iter().all(|c| (0.0..=1.0 + 1e-12).contains(&c.ce_ncg)));
    // The same seed gives the same table bit for bit; another seed other scores.
    let again = eval::run_set(&set, &[0.0, 0.2], 3, 1, &grid, &mut |_| {}).unwrap();
    assert_eq!(out, again);
    let other = eval::run_set(&set, &[0.2], 4, 1, &grid, &mut |_| {}).unwrap();
    assert_ne!(other.cells, out.cells[v..].to_vec());
}

#[cfg(feature = "cli")]
#[test]
fn the_cli_runs_a_set_beside_no_modes_with_win_counts() {
    use crate::cli::run;
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("tiny.safetensors");
    std::fs::write(&p, bytes(&raw(50, 6, 2, 37, 2), None)).unwrap();
    let ps = p.display().to_string();
    // `eval` on the tiny set at B = 5, k = 3, with `extra` flags.
    let args = |extra: &[&'static str]| -> Vec<String> {
        let base = [
            "eval",
            "--set",
            &ps,
            "--budgets",
            "5",
            "--capacities",
            "3",
            "--no-peaks",
        ];
        base.iter().chain(extra).map(|a| a.to_string()).collect()
    };
    let tiny = |extra: &[&'static str]| {
        let a = args(extra);
        run(&a.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let (code, out, err) = tiny(&["--noise", "0.05,0.3"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with("set tiny: 2 problems, N = 37, simulated cross-encoder noise 0.05,0.3"),
        "{out}"
    );
    let header = out.lines().nth(1).unwrap();
    assert!(header.ends_with("vs bm  switched"), "{header}");
    let rows: Vec<&str> = out.lines().skip(2).collect();
    // Each noise: every variant plus the best BAGEL row; no generated mode ran.
    assert_eq!(rows.len(), 2 * (eval::variants().len() + 1), "{out}");
    assert!(rows
        .iter()
        .all(|l| l.starts_with("tiny@0.05 ") || l.starts_with("tiny@0.3 ")));
    // Win counts sum to at most the problems; BoundaryMORPH's own row has none. Auto's
    // row ends with the problems it switched on (none: B = 5 ends before its check).
    for l in &rows {
        let mut f: Vec<&str> = l.split_whitespace().collect();
        if f[1] == "boundary-morph" {
            assert!(!l.contains(" +"), "{l}");
            continue;
        }
        if f[1] == "auto" {
            assert_eq!(f.pop(), Some("0/2"), "{l}");
        }
        let (w, lo) = (f[f.len() - 2], f[f.len() - 1]);
        let (w, lo): (u32, u32) = (w[1..].parse().unwrap(), lo[1..].parse().unwrap());
        assert!(w + lo <= 2, "{l}");
    }
    let bad = |args: &[&str], words: &[&str]| {
        let (code, out, err) = run(args);
        assert_ne!(code, 0, "{args:?}");
        assert!(out.is_empty() && err.lines().count() == 1, "{err}");
        for w in words {
            assert!(err.contains(w), "{err} lacks {w}");
        }
    };
    for (extra, words) in [
        (["--noise", "0.1,0.1"], &["--noise", "repeats"][..]),
        (["--noise", "x"], &["--noise"][..]),
        (["--draws", "0"], &["--draws", "at least 1"][..]),
    ] {
        let a = args(&extra);
        bad(&a.iter().map(String::as_str).collect::<Vec<_>>(), words);
    }
    bad(
        &["eval", "--set", &ps, "--budgets", "38", "--capacities", "3"],
        &["--budgets", "0..=37"],
    );
    // A flag the run would not read is refused, not ignored.
    bad(
        &["eval", "--set", &ps, "--problems", "3"],
        &["--problems", "--modes"],
    );
    bad(
        &["eval", "--noise", "0.2", "--problems", "1"],
        &["--noise", "--set"],
    );
    bad(
        &["eval", "--draws", "2", "--problems", "1"],
        &["--draws", "--set"],
    );
    // A seed near the largest is checked against the set's seeds only (no mode runs).
    let (code, out, err) = tiny(&["--seed", "18446744073709551610"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("seeds 18446744073709551610..18446744073709551611"),
        "{out}"
    );
    let (code, out, err) = tiny(&["--draws", "3"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with("set tiny: 2 problems x 3 draws of the noise, N = 37, simulated cross-encoder noise 0.1, seeds 1..6"),
        "{out}"
    );
    let auto = out
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some("auto"))
        .unwrap();
    assert!(auto.ends_with(" 0/6"), "{auto}");
    bad(
        &["eval", "--set", &ps, "--modes", "diffuse,"],
        &["--modes", "unknown mode ''"],
    );
    bad(
        &["eval", "--set", "/nonexistent/s.safetensors"],
        &["/nonexistent/s.safetensors"],
    );
}
