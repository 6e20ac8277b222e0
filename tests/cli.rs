//! The `ctxprune select` contract: one JSON object on stdout, a one-line error and a
//! non-zero exit for bad input, never a panic.

use crate::io::{npy_bytes, tmp};
use ctxprune::io::write_npy_f32;
use std::path::Path;
use std::process::Command;

/// Runs the CLI (no stdin, `CTXPRUNE_BACKEND` unset): (exit code, stdout, stderr); a
/// panic fails the test whatever the case expects.
pub fn run(args: &[&str]) -> (i32, String, String) {
    run_with_input(args, None)
}

/// [`run`] with `input` on stdin.
pub fn run_with_input(args: &[&str], input: Option<&[u8]>) -> (i32, String, String) {
    let (code, out, err) =
        run_limited(args, input, std::time::Duration::from_secs(600)).expect("the CLI still ran after 600 s");
    let (out, err) = (String::from_utf8(out).unwrap(), String::from_utf8(err).unwrap());
    assert!(!err.contains("panicked"), "the CLI panicked: {err}");
    (code.unwrap_or(-1), out, err)
}

/// Runs the CLI with `input` on stdin (`CTXPRUNE_BACKEND` unset), killing it after
/// `limit`: `None` when it had to be killed, else (exit code, stdout, stderr). Its output
/// is read while it runs, so a command that writes much never blocks on a full pipe.
pub fn run_limited(
    args: &[&str],
    input: Option<&[u8]>,
    limit: std::time::Duration,
) -> Option<(Option<i32>, Vec<u8>, Vec<u8>)> {
    use std::io::Write as _;
    use std::process::Stdio;
    let mut c = Command::new(env!("CARGO_BIN_EXE_ctxprune"))
        .args(args)
        .env_remove("CTXPRUNE_BACKEND")
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if let (Some(bytes), Some(mut pipe)) = (input, c.stdin.take()) {
        let bytes = bytes.to_vec();
        // The CLI may refuse its flags before reading stdin: a broken pipe is fine here.
        std::thread::spawn(move || {
            let _ = pipe.write_all(&bytes);
        });
    }
    let drain = |r: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut b = Vec::new();
            if let Some(mut r) = r {
                let _ = r.read_to_end(&mut b);
            }
            b
        })
    };
    let out = drain(
        c.stdout
            .take()
            .map(|r| Box::new(r) as Box<dyn std::io::Read + Send>),
    );
    let err = drain(
        c.stderr
            .take()
            .map(|r| Box::new(r) as Box<dyn std::io::Read + Send>),
    );
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(s) = c.try_wait().unwrap() {
            break Some(s);
        }
        if start.elapsed() > limit {
            let _ = c.kill();
            let _ = c.wait();
            break None;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    let (out, err) = (out.join().unwrap(), err.join().unwrap());
    status.map(|s| (s.code(), out, err))
}

fn fixture(dir: &Path) -> (String, String) {
    let (e, q, _) = crate::problem(25, 6, 9);
    let ep = dir.join("e.npy");
    write_npy_f32(&ep, 25, 6, e.as_slice()).unwrap();
    let qp = dir.join("q.npy");
    write_npy_f32(&qp, 1, 6, &q).unwrap();
    (ep.display().to_string(), qp.display().to_string())
}

#[test]
fn select_prints_the_documented_json_and_matches_the_library() {
    let d = tmp();
    let (e, q) = fixture(d.path());
    let (code, out, err) = run(&[
        "select",
        "--method",
        "mmr",
        "--embeddings",
        &e,
        "--query",
        &q,
        "--k",
        "5",
        "--backend",
        "auto",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    for key in ["method", "mode", "selected", "gains", "backend", "elapsed_ms"] {
        assert!(v.get(key).is_some(), "missing {key} in {out}");
    }
    assert_eq!(v["method"], "mmr");
    assert_eq!(v["mode"], "greedy");
    let (pe, pq, _) = crate::problem(25, 6, 9);
    let lib = ctxprune::select::select(
        &ctxprune::select::SelectConfig::new(ctxprune::select::Method::Mmr).k(5),
        &ctxprune::select::Inputs {
            embeddings: Some(&pe),
            query: Some(&pq),
            ..Default::default()
        },
    )
    .unwrap();
    let sel: Vec<usize> = v["selected"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as usize)
        .collect();
    assert_eq!(sel, lib.selected);
    if v["backend"] == "cpu" {
        assert!(
            err.contains("running on the CPU"),
            "auto must say it fell back: {err}"
        );
    }
    // Gate with retained rows and every other method runs.
    for m in ["grn", "centroid", "dpp", "coverage", "hybrid"] {
        // GRN and centroid drift do not read a query, and refuse one.
        let query: &[&str] = if matches!(m, "grn" | "centroid") {
            &[]
        } else {
            &["--query", &q]
        };
        let mut args = vec!["select", "--method", m, "--embeddings", &e];
        args.extend(query);
        args.extend(["--mode", "gate", "--retained", "0,3", "--threshold", "0.1"]);
        let (code, out, err) = run(&args);
        assert_eq!(code, 0, "{m}: {err}");
        let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
        assert_eq!(v["mode"], "gate");
        assert!(!v["selected"].as_array().unwrap().iter().any(|x| x == 0 || x == 3));
    }
}

#[test]
fn k_larger_than_the_pool_selects_what_there_is_and_says_so() {
    let d = tmp();
    let (e, q) = fixture(d.path());
    // Coverage keeps adding (zero-gain) items while they fit: the whole pool.
    let (code, out, err) = run(&[
        "select",
        "--method",
        "coverage",
        "--embeddings",
        &e,
        "--query",
        &q,
        "--k",
        "1000",
        "--backend",
        "cpu",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["selected"].as_array().unwrap().len(), 25);
    assert!(err.contains("k = 1000 is larger than the 25 candidates"), "{err}");
}

#[test]
fn lexical_and_jsonl_with_tokens() {
    let d = tmp();
    let p = d.path().join("docs.jsonl");
    let rows: Vec<String> = (0..9)
        .map(|i| {
            format!(
                "{{\"embedding\": [{}, 1.0], \"tokens\": {}, \"text\": \"word{} shared text {}\"}}",
                i,
                10 + i,
                i % 3,
                i
            )
        })
        .collect();
    std::fs::write(&p, rows.join("\n")).unwrap();
    let ps = p.display().to_string();
    let (code, out, err) = run(&[
        "select",
        "--method",
        "lexical",
        "--embeddings",
        &ps,
        "--query-text",
        "word1 shared",
        "--token-budget",
        "40",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert!(v["tokens"].as_f64().unwrap() <= 40.0, "{out}");
    let (code, _, err) = run(&[
        "select",
        "--method",
        "coverage",
        "--embeddings",
        &ps,
        "--token-budget",
        "30",
        "--backend",
        "cpu",
    ]);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn bad_inputs_exit_non_zero_with_one_line() {
    let d = tmp();
    let (e, q) = fixture(d.path());
    let nan: Vec<u8> = [1.0f32, f32::NAN, 0.0, 1.0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let nanp = d.path().join("nan.npy");
    std::fs::write(&nanp, npy_bytes("<f4", false, &[2, 2], &nan)).unwrap();
    let zerop = d.path().join("zero.npy");
    write_npy_f32(&zerop, 2, 2, &[1.0, 0.0, 0.0, 0.0]).unwrap();
    let ragged = d.path().join("ragged.jsonl");
    std::fs::write(&ragged, "{\"embedding\": [1, 2]}\n{\"embedding\": [1, 2, 3]}\n").unwrap();
    let empty = d.path().join("empty.npy");
    std::fs::write(&empty, b"").unwrap();
    let q3 = d.path().join("q3.npy");
    write_npy_f32(&q3, 1, 3, &[1.0, 0.0, 0.0]).unwrap();
    let s = |p: &Path| p.display().to_string();
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec!["--method".into(), "grn".into(), "--embeddings".into(), s(&nanp)],
            "row 0, column 1",
        ),
        (
            vec!["--method".into(), "grn".into(), "--embeddings".into(), s(&zerop)],
            "row 1 has zero norm",
        ),
        (
            vec!["--method".into(), "grn".into(), "--embeddings".into(), s(&ragged)],
            "line 2",
        ),
        (
            vec!["--method".into(), "grn".into(), "--embeddings".into(), s(&empty)],
            "empty",
        ),
        (
            vec!["--method".into(), "mmr".into(), "--embeddings".into(), e.clone()],
            "--query",
        ),
        (
            vec![
                "--method".into(),
                "mmr".into(),
                "--embeddings".into(),
                e.clone(),
                "--query".into(),
                s(&q3),
            ],
            "q3.npy has 3 values, but the rows of",
        ),
        (
            vec!["--method".into(), "nope".into(), "--embeddings".into(), e.clone()],
            "unknown method",
        ),
        (
            vec![
                "--method".into(),
                "mmr".into(),
                "--embeddings".into(),
                e.clone(),
                "--query".into(),
                q.clone(),
                "--retained".into(),
                "1,x".into(),
            ],
            "--retained",
        ),
        (
            vec![
                "--method".into(),
                "mmr".into(),
                "--embeddings".into(),
                e.clone(),
                "--query".into(),
                q.clone(),
                "--lambda".into(),
                "2".into(),
            ],
            "lambda",
        ),
        (
            vec![
                "--method".into(),
                "grn".into(),
                "--embeddings".into(),
                "/nonexistent.npy".into(),
            ],
            "/nonexistent.npy",
        ),
        (
            vec![
                "--method".into(),
                "grn".into(),
                "--embeddings".into(),
                e.clone(),
                "--backend".into(),
                "cuda".into(),
            ],
            "cuda",
        ),
    ];
    for (args, want) in cases {
        let mut full = vec!["select"];
        full.extend(args.iter().map(String::as_str));
        let (code, out, err) = run(&full);
        if want == "cuda" && code == 0 {
            continue; // a machine with a usable GPU
        }
        assert_ne!(code, 0, "{full:?} succeeded");
        assert!(out.is_empty(), "{full:?} wrote to stdout: {out}");
        assert!(
            err.contains(want),
            "{full:?}: stderr {err:?} does not mention {want:?}"
        );
        assert_eq!(err.trim().lines().count(), 1, "{full:?}: not one line: {err}");
    }
}

#[test]
fn demo_runs_every_scorer_in_both_modes() {
    let (code, out, err) = run(&["demo"]);
    assert_eq!(code, 0, "{err}");
    for m in ["mmr", "grn", "centroid", "dpp", "coverage", "hybrid", "lexical"] {
        assert_eq!(
            out.lines().filter(|l| l.starts_with(&format!("{m} "))).count(),
            2,
            "{m} in\n{out}"
        );
    }
    // A row that keeps nothing is explained under the table.
    for l in out.lines().filter(|l| l.split_whitespace().nth(2) == Some("0")) {
        let name = l.split_whitespace().take(2).collect::<Vec<_>>().join(" ");
        assert!(
            out.contains(&format!("note: {name}: nothing")),
            "{name} keeps nothing without a word why:\n{out}"
        );
    }
    // The budgeted top-k table shows what the methods exist for: on eval's diffuse
    // problems the MIPS top-B misses the far topic that the others find.
    let ncg = |name: &str| -> f64 {
        let l = out
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("{name} in\n{out}"));
        l[name.len()..]
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    let single = ncg("single-stage (MIPS top-B)");
    for m in ["rgs ", "boundary-morph ", "boundary-morph q=8 "] {
        assert!(ncg(m) > single + 0.05, "{m}: {} vs single-stage {single}", ncg(m));
    }
    // The attention section: steps 3, 7, 11 with shares that, with the own turn and the
    // unassigned tokens, leave room for the system and user spans of turn 0 (below 1).
    let at = out.find("attention mass (App. E.3)").expect("attention section");
    let rows: Vec<Vec<f64>> = out[at..]
        .lines()
        .skip(2)
        .take_while(|l| l.chars().next().is_some_and(|c| c.is_ascii_digit()))
        .map(|l| l.split_whitespace().map(|x| x.parse().unwrap()).collect())
        .collect();
    assert_eq!(rows.len(), 3, "{}", &out[at..]);
    for r in &rows {
        let sum: f64 = r[2..].iter().sum();
        assert!(sum > 0.9 && sum <= 1.0 + 1e-3, "{r:?}");
    }
}

#[test]
fn argument_errors_are_one_line_too() {
    let d = tmp();
    let (e, q) = fixture(d.path());
    for (args, want) in [
        (vec!["select", "--bogus"], "--bogus"),
        (
            vec!["select", "--method", "mmr", "--embeddings", &e, "--k", "-3"],
            "--k",
        ),
        (
            vec![
                "select",
                "--method",
                "mmr",
                "--embeddings",
                &e,
                "--query",
                &q,
                "--lambda",
                "-0.5",
            ],
            "lambda",
        ),
        (
            vec!["select", "--method", "grn", "--embeddings", &e, "--lambda", "0.5"],
            "applies to mmr and lexical",
        ),
        (
            vec![
                "select",
                "--method",
                "grn",
                "--embeddings",
                &e,
                "--mode",
                "gate",
                "--k",
                "3",
            ],
            "greedy mode",
        ),
    ] {
        let (code, out, err) = run(&args);
        assert_ne!(code, 0, "{args:?}");
        assert!(out.is_empty(), "{args:?}: {out}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
    }
}

#[test]
fn rerank_prints_the_documented_json_and_refuses_bad_input() {
    let d = tmp();
    let (e, q) = fixture(d.path());
    let mut rng = ctxprune::rng::Rng::new(4);
    let scores: Vec<f64> = (0..25).map(|_| rng.uniform()).collect();
    let sp = d.path().join("scores.npy");
    let bytes: Vec<u8> = scores.iter().flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(&sp, npy_bytes("<f8", false, &[25], &bytes)).unwrap();
    let s = sp.display().to_string();
    for m in ["boundary-morph", "bagel", "single-stage", "rgs", "rgs-simple"] {
        let (code, out, err) = run(&[
            "rerank",
            "--method",
            m,
            "--embeddings",
            &e,
            "--query",
            &q,
            "--oracle-scores",
            &s,
            "--budget",
            "8",
            "--capacity",
            "5",
        ]);
        assert_eq!(code, 0, "{m}: {err}");
        let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
        for key in [
            "method",
            "selected",
            "scored",
            "oracle_calls",
            "oracle_rounds",
            "prior_alpha",
            "tokens",
            "kappa",
            "backend",
            "elapsed_ms",
            "oracle_ms",
        ] {
            assert!(v.get(key).is_some(), "{m}: missing {key} in {out}");
        }
        assert_eq!(v["selected"].as_array().unwrap().len(), 5);
        assert!(v["oracle_calls"].as_u64().unwrap() <= 8);
    }
    // Budget above the pool: capped and said.
    let (code, _, err) = run(&[
        "rerank",
        "--method",
        "single-stage",
        "--embeddings",
        &e,
        "--query",
        &q,
        "--oracle-scores",
        &s,
        "--budget",
        "99",
        "--capacity",
        "3",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("capped at 25"), "{err}");
    // Bad input: capacity > pool, scores outside [0, 1] or of the wrong length, an URL oracle.
    let bad = d.path().join("bad.npy");
    let mut b2 = scores.clone();
    b2[3] = 1.5;
    std::fs::write(
        &bad,
        npy_bytes(
            "<f8",
            false,
            &[25],
            &b2.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>(),
        ),
    )
    .unwrap();
    let short = d.path().join("short.npy");
    std::fs::write(&short, npy_bytes("<f8", false, &[2], &bytes[..16])).unwrap();
    let (bs, ss) = (bad.display().to_string(), short.display().to_string());
    for (extra, want) in [
        (
            vec!["--oracle-scores", s.as_str(), "--budget", "5", "--capacity", "26"],
            "capacity",
        ),
        (
            vec!["--oracle-scores", bs.as_str(), "--budget", "5", "--capacity", "3"],
            "oracle-scores[3]",
        ),
        (
            vec!["--oracle-scores", ss.as_str(), "--budget", "5", "--capacity", "3"],
            "2 scores for a pool of 25",
        ),
        (
            vec![
                "--oracle-url",
                "http://127.0.0.1:9",
                "--budget",
                "5",
                "--capacity",
                "3",
            ],
            "--oracle-url",
        ),
        (
            vec![
                "--oracle-scores",
                s.as_str(),
                "--budget",
                "5",
                "--capacity",
                "3",
                "--batch",
                "0",
            ],
            "--batch",
        ),
        (
            vec![
                "--oracle-scores",
                s.as_str(),
                "--budget",
                "5",
                "--capacity",
                "3",
                "--token-capacity",
                "50",
            ],
            "--token-capacity",
        ),
        (
            vec![
                "--oracle-scores",
                s.as_str(),
                "--budget",
                "5",
                "--capacity",
                "3",
                "--tokens",
                s.as_str(),
            ],
            "--tokens",
        ),
        (
            vec![
                "--oracle-scores",
                s.as_str(),
                "--budget",
                "5",
                "--capacity",
                "3",
                "--token-capacity",
                "50",
                "--tokens",
                s.as_str(),
            ],
            "not a whole number",
        ),
        (
            vec![
                "--oracle-scores",
                s.as_str(),
                "--budget",
                "5",
                "--capacity",
                "3",
                "--seed-div",
                "2",
            ],
            "--seed-div",
        ),
        (
            vec![
                "--oracle-scores",
                s.as_str(),
                "--budget",
                "5",
                "--capacity",
                "3",
                "--prior",
                "flat",
            ],
            "adaptive",
        ),
    ] {
        let mut args = vec![
            "rerank",
            "--method",
            "boundary-morph",
            "--embeddings",
            &e,
            "--query",
            &q,
        ];
        args.extend(extra);
        let (code, out, err) = run(&args);
        assert_ne!(code, 0, "{args:?}");
        assert!(out.is_empty());
        assert!(err.contains(want), "{args:?}: {err}");
    }
    // --batch on a method without a GP is refused by name.
    let (code, _, err) = run(&[
        "rerank",
        "--method",
        "single-stage",
        "--embeddings",
        &e,
        "--query",
        &q,
        "--oracle-scores",
        &s,
        "--budget",
        "5",
        "--capacity",
        "3",
        "--batch",
        "2",
    ]);
    assert_ne!(code, 0);
    assert!(err.contains("--batch") && err.contains("single-stage"), "{err}");
}

#[test]
fn kernels_and_gpu_check_refuse_cleanly() {
    // A malformed architecture is named before any library is looked for.
    for bad in ["sm_xx", "90", ","] {
        let (code, out, err) = run(&["kernels", "--arch", bad]);
        assert_ne!(code, 0, "--arch {bad}");
        assert!(out.is_empty(), "--arch {bad}: {out}");
        assert!(
            err.contains("--arch") && err.trim().lines().count() == 1,
            "--arch {bad}: {err}"
        );
    }
    // Without a usable GPU the check fails (it never skips), saying why in one line.
    if ctxprune::Engine::cuda(0).is_err() {
        let (code, _, err) = run(&["gpu-check", "--no-timing"]);
        assert_ne!(code, 0);
        assert!(err.contains("cuda") && err.trim().lines().count() == 1, "{err}");
    }
}

/// SPEC §1 as users expect it: `select --method mmr --k 100` returns 100 items on the
/// demo pool (it used to stop at the first non-positive score, after 6 to 79), and DPP
/// runs without a query (diversity alone).
#[test]
fn mmr_runs_to_k_and_dpp_needs_no_query() {
    let d = tmp();
    let out_dir = d.path().join("pool");
    let od = out_dir.display().to_string();
    let (code, _, err) = run(&["make-pool", "--n", "2000", "--d", "64", "--out", &od]);
    assert_eq!(code, 0, "{err}");
    let e = out_dir.join("emb.npy").display().to_string();
    let q = out_dir.join("query.npy").display().to_string();
    // At the paper's lambda (0.35), where most MMR scores on this pool are negative.
    let (code, out, err) = run(&[
        "select",
        "--method",
        "mmr",
        "--lambda",
        "0.35",
        "--k",
        "100",
        "--embeddings",
        &e,
        "--query",
        &q,
        "--backend",
        "cpu",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let gains = v["gains"].as_array().unwrap();
    assert_eq!(v["selected"].as_array().unwrap().len(), 100, "{out}");
    assert_eq!(v["stopped_by"], "item_budget");
    // The reason it matters: most of those scores are negative.
    assert!(
        gains.iter().filter(|g| g.as_f64().unwrap() < 0.0).count() > 50,
        "{out}"
    );
    let (code, out, err) = run(&[
        "select",
        "--method",
        "dpp",
        "--k",
        "20",
        "--embeddings",
        &e,
        "--backend",
        "cpu",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["selected"].as_array().unwrap().len(), 20, "{out}");
}

/// An empty answer says why, on stderr and in the JSON's notes.
#[test]
fn select_that_keeps_nothing_says_why() {
    let d = tmp();
    let (e, q) = fixture(d.path());
    let (code, out, err) = run(&[
        "select",
        "--method",
        "grn",
        "--mode",
        "gate",
        "--threshold",
        "2",
        "--retained",
        "0",
        "--embeddings",
        &e,
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["selected"], serde_json::json!([]));
    // On a device build a note that grn runs on the CPU comes first.
    let note = v["notes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|n| n.as_str())
        .find(|n| n.starts_with("nothing kept: "))
        .unwrap_or_default();
    assert!(
        note.starts_with("nothing kept: the threshold 2 is above every candidate's value"),
        "{out}"
    );
    assert!(err.contains(&format!("note: {note}")), "{err}");
    let _ = q;
}
