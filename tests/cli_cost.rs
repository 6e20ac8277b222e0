//! Hostile input to `ctxprune cost` and `ctxprune eval`: every bad input exits non-zero
//! with one line on stderr naming the flag, file or field, and nothing on stdout; never a
//! panic, a hang, a clamp or a wrong answer.

use crate::cli::run;
use std::path::Path;
use std::process::Command;

/// `args` fail: non-zero exit, empty stdout, exactly one line on stderr with every word.
fn bad(args: &[&str], words: &[&str]) {
    let (code, out, err) = run(args);
    assert_ne!(code, 0, "{args:?} succeeded: {out}");
    assert!(out.is_empty(), "{args:?} printed {out}");
    assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
    assert!(err.starts_with("error: "), "{args:?}: {err}");
    for w in words {
        assert!(err.contains(w), "{args:?}: {err} lacks {w}");
    }
}

/// `args` succeed; returns stdout parsed as JSON.
fn ok_json(args: &[&str]) -> serde_json::Value {
    let (code, out, err) = run(args);
    assert_eq!(code, 0, "{args:?}: {err}");
    serde_json::from_str(out.trim()).unwrap()
}

const SHAPE: [&str; 8] = [
    "--hidden",
    "1024",
    "--ffn",
    "3072",
    "--q-heads",
    "16",
    "--kv-heads",
    "8",
];

fn flops(extra: &[&str]) -> Vec<String> {
    let mut a: Vec<String> = ["cost", "flops"].iter().map(|s| s.to_string()).collect();
    a.extend(extra.iter().map(|s| s.to_string()));
    a
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

fn config(dir: &Path, name: &str, body: &[u8]) -> String {
    let p = dir.join(name);
    std::fs::write(&p, body).unwrap();
    p.display().to_string()
}

#[test]
fn flops_sizes_are_checked_before_anything_is_allocated() {
    // Before: a capacity-overflow panic; a 16 TB allocation abort; 43 s, 7.8 GB and 1.1 GB
    // of output.
    for layers in [
        "18446744073709551615",
        "1000000000000",
        "100000000",
        "100001",
        "0",
    ] {
        let mut a = flops(&["--layers", layers]);
        a.extend(SHAPE.iter().map(|s| s.to_string()));
        bad(&strs(&a), &["--layers", "1..=100000", layers]);
    }
    for (flag, v) in [
        ("--hidden", "1000001"),
        ("--ffn", "0"),
        ("--q-heads", "18446744073709551615"),
        ("--experts-active", "0"),
        ("--context", "0"),
        ("--context", "1000000001"),
    ] {
        let mut a = flops(&["--layers", "2", "--hidden", "8", "--ffn", "8", "--q-heads", "2"]);
        if let Some(i) = a.iter().position(|x| x == flag) {
            a[i + 1] = v.to_string();
        } else {
            a.extend([flag.to_string(), v.to_string()]);
        }
        bad(&strs(&a), &[flag, "must be in 1..=", v]);
    }
    let base = ["--layers", "4", "--hidden", "8", "--ffn", "8", "--q-heads", "2"];
    let with = |extra: &[&str]| {
        let mut a = flops(&base);
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    };
    bad(
        &strs(&with(&["--kv-heads", "4"])),
        &["--kv-heads", "4 exceeds the 2 query heads"],
    );
    bad(
        &strs(&with(&["--sliding-layers", "5", "--window", "8"])),
        &["--sliding-layers", "5 exceeds the 4 layers"],
    );
    bad(
        &strs(&with(&["--sliding-layers", "2", "--window", "0"])),
        &["--window", "must be in 1..="],
    );
    bad(
        &strs(&with(&["--sliding-layers", "2"])),
        &["--sliding-layers", "needs window"],
    );
    bad(
        &strs(&with(&["--window", "2"])),
        &["--window", "needs sliding-layers"],
    );
    bad(
        &strs(&with(&["--activation", "relu"])),
        &["--activation", "unknown activation 'relu'"],
    );
    bad(
        &strs(&flops(&["--hidden", "8"])),
        &["--layers", "required without a config"],
    );
    // The largest shape allowed prints finite numbers.
    let mut a = flops(&[
        "--layers",
        "100000",
        "--context",
        "1000000000",
        "--experts-active",
        "1000000",
    ]);
    a.extend(["--hidden", "1000000", "--ffn", "1000000", "--q-heads", "1000000"].map(String::from));
    let v = ok_json(&strs(&a));
    assert!(v["gflops_per_token"].as_f64().unwrap().is_finite());
    assert_eq!(v["per_layer"].as_array().unwrap().len(), 100_000);
}

#[test]
fn negative_values_reach_the_value_parser_and_name_the_flag() {
    let mut a = flops(&["--layers", "-1"]);
    a.extend(SHAPE.iter().map(|s| s.to_string()));
    bad(&strs(&a), &["'-1'", "--layers"]);
    bad(
        &["cost", "plan", "--depth", "5", "--window", "-1"],
        &["'-1'", "--window"],
    );
    bad(&["cost", "plan", "--depth", "-5"], &["'-5'", "--depth"]);
    bad(&["eval", "--budgets", "-1"], &["--budgets", "element 0 ('-1')"]);
    bad(
        &["eval", "--budgets", "25,-1"],
        &["--budgets", "element 1 ('-1')"],
    );
    bad(&["eval", "--capacities", "-10"], &["--capacities", "'-10'"]);
    bad(&["eval", "--problems", "-2"], &["'-2'", "--problems"]);
    bad(&["eval", "--seed", "-1"], &["'-1'", "--seed"]);
    bad(
        &[
            "cost",
            "etc",
            "--input-noncached",
            "-1",
            "--input-cached",
            "1",
            "--output",
            "1",
        ],
        &["--input-noncached", "must be finite and >= 0, got -1"],
    );
    bad(
        &[
            "cost",
            "etc",
            "--input-noncached",
            "1",
            "--input-cached",
            "1",
            "--output",
            "1",
            "--beta",
            "-inf",
        ],
        &["--beta", "got -inf"],
    );
}

#[test]
fn plans_are_counted_before_they_are_built() {
    // Before: grew until killed at 21.8 GB.
    bad(
        &["cost", "plan", "--depth", "18446744073709551615"],
        &[
            "--depth",
            "18446744073709551615",
            "needs 1844674407370955161 windows",
            "100000",
        ],
    );
    bad(
        &["cost", "plan", "--depth", "1000011"],
        &["--depth", "needs 100001 windows"],
    );
    bad(
        &["cost", "plan", "--depth", "0"],
        &["--depth", "must be positive"],
    );
    bad(
        &["cost", "plan", "--depth", "50", "--window", "0"],
        &["--window", "must be positive"],
    );
    bad(
        &["cost", "plan", "--depth", "50", "--stride", "0"],
        &["--stride", "must be positive"],
    );
    bad(
        &[
            "cost", "plan", "--depth", "50", "--window", "10", "--stride", "20",
        ],
        &["--stride", "20 exceeds the window 10"],
    );
    let v = ok_json(&["cost", "plan", "--depth", "1000010"]);
    assert_eq!(v["windows"].as_array().unwrap().len(), 100_000);
    let v = ok_json(&[
        "cost",
        "plan",
        "--depth",
        "18446744073709551615",
        "--window",
        "18446744073709551615",
    ]);
    assert_eq!(v["windows"], serde_json::json!([[0u64, u64::MAX]]));
    assert_eq!(v["duplication"], 1.0);
}

#[test]
fn etc_never_prints_null_or_inf() {
    fn etc<'a>(a: &[&'a str]) -> Vec<&'a str> {
        let mut v = vec!["cost", "etc"];
        v.extend_from_slice(a);
        v
    }
    bad(
        &etc(&[
            "--input-noncached",
            "1e308",
            "--input-cached",
            "1e308",
            "--output",
            "1e308",
            "--beta",
            "1e308",
        ]),
        &[
            "invalid etc",
            "not a finite number",
            "input_noncached = 1e308",
            "beta = 1e308",
        ],
    );
    for v in ["nan", "NaN", "inf", "-inf", "infinity", "1e999"] {
        bad(
            &etc(&[
                "--input-noncached",
                "1",
                "--input-cached",
                "1",
                "--output",
                "1",
                "--alpha",
                v,
            ]),
            &["--alpha", "must be finite and >= 0"],
        );
    }
    bad(
        &etc(&["--input-noncached", "x", "--input-cached", "1", "--output", "1"]),
        &["--input-noncached"],
    );
    let v = ok_json(&etc(&[
        "--input-noncached",
        "1e300",
        "--input-cached",
        "0",
        "--output",
        "1e300",
    ]));
    assert_eq!(v["etc"], 6e300);
}

#[test]
fn shape_flags_beside_a_config_are_errors_and_overrides_apply() {
    let d = tempfile::tempdir().unwrap();
    let c = config(
        d.path(),
        "ok.json",
        br#"{"hidden_act": "silu", "hidden_size": 8, "intermediate_size": 16,
            "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 3}"#,
    );
    for (flag, v) in [
        ("--layers", "5"),
        ("--hidden", "8"),
        ("--ffn", "8"),
        ("--q-heads", "4"),
        ("--kv-heads", "2"),
    ] {
        bad(
            &["cost", "flops", "--config", &c, flag, v],
            &["--config", flag, "cannot be used with"],
        );
    }
    // Documented overrides: experts, activation, sliding layers with window, context.
    let plain = ok_json(&["cost", "flops", "--config", &c, "--context", "100"]);
    let over = ok_json(&[
        "cost",
        "flops",
        "--config",
        &c,
        "--context",
        "100",
        "--experts-active",
        "2",
        "--activation",
        "gelu",
        "--sliding-layers",
        "1",
        "--window",
        "10",
    ]);
    let (d_, f_, t) = (8.0, 16.0, 100.0);
    let proj = 4.0 * d_ * d_ * 1.5;
    let want = |mlp: f64, t: f64| (proj + 2.0 * d_ * t + mlp) / 1e9;
    assert_eq!(
        plain["per_layer"],
        serde_json::json!(vec![want(6.0 * d_ * f_, t); 3])
    );
    let g = want(2.0 * 2.0 * 2.0 * d_ * f_, t);
    assert_eq!(
        over["per_layer"],
        serde_json::json!([g, g, want(8.0 * d_ * f_, 10.0)])
    );
    bad(
        &["cost", "flops", "--config", &c, "--experts-active", "0"],
        &["--experts-active"],
    );
}

#[test]
fn config_errors_name_the_file_and_field() {
    let d = tempfile::tempdir().unwrap();
    let body = |layers: &str| {
        format!(
            r#"{{"hidden_act": "silu", "hidden_size": 8, "intermediate_size": 16,
                "num_attention_heads": 16, "num_hidden_layers": {layers}}}"#
        )
    };
    for (v, words) in [
        (
            "\"24\"",
            &["\"num_hidden_layers\" is not a positive integer: \"24\""][..],
        ),
        ("-1", &["\"num_hidden_layers\" is not a positive integer: -1"][..]),
        (
            "2.5",
            &["\"num_hidden_layers\" is not a positive integer: 2.5"][..],
        ),
        (
            "18446744073709551615",
            &["\"num_hidden_layers\" must be in 1..=100000, got 18446744073709551615"][..],
        ),
        ("1000000000000", &["\"num_hidden_layers\"", "1..=100000"][..]),
    ] {
        let c = config(d.path(), "c.json", body(v).as_bytes());
        let mut w = vec![c.as_str()];
        w.extend_from_slice(words);
        bad(&["cost", "flops", "--config", &c], &w);
    }
    let c = config(
        d.path(),
        "kv.json",
        body("2")
            .replace(
                "\"num_hidden_layers\"",
                "\"num_key_value_heads\": 32, \"num_hidden_layers\"",
            )
            .as_bytes(),
    );
    bad(
        &["cost", "flops", "--config", &c],
        &[&format!(
            "{c}: \"num_key_value_heads\" = 32 exceeds \"num_attention_heads\" = 16"
        )],
    );
    let c = config(
        d.path(),
        "sw.json",
        body("2").replace("}", ", \"sliding_window\": 4096}").as_bytes(),
    );
    bad(
        &["cost", "flops", "--config", &c],
        &[&c, "\"sliding_window\" = 4096 but no \"layer_types\""],
    );
    let c = config(
        d.path(),
        "dup.json",
        body("2").replace('{', "{\"num_hidden_layers\": 200, ").as_bytes(),
    );
    bad(
        &["cost", "flops", "--config", &c],
        &[&c, "duplicate key \"num_hidden_layers\""],
    );
    let c = config(d.path(), "bad.json", b"{\"hidden_size\": ");
    bad(&["cost", "flops", "--config", &c], &[&c, "invalid JSON"]);
    let c = config(d.path(), "bin.json", &[0xff, 0xfe, 0x00, 0x7b]);
    bad(&["cost", "flops", "--config", &c], &[&c]);
    bad(
        &[
            "cost",
            "flops",
            "--config",
            &d.path().join("none.json").display().to_string(),
        ],
        &["none.json"],
    );
    // A UTF-8 byte-order mark is skipped.
    let mut bom = b"\xef\xbb\xbf".to_vec();
    bom.extend_from_slice(body("2").as_bytes());
    let c = config(d.path(), "bom.json", &bom);
    assert_eq!(
        ok_json(&["cost", "flops", "--config", &c])["per_layer"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
}

#[test]
fn eval_refuses_instead_of_clamping_or_wrapping() {
    // Before: hung (the budget was capped at the pool, 10,000: O(B² N) GP work).
    bad(
        &[
            "eval",
            "--problems",
            "1",
            "--budgets",
            "1000000000",
            "--capacities",
            "10",
        ],
        &["--budgets", "element 0 (1000000000)", "0..=10000"],
    );
    bad(
        &["eval", "--budgets", "25,10001", "--capacities", "10"],
        &["--budgets", "element 1 (10001)"],
    );
    bad(
        &["eval", "--budgets", "25,25", "--capacities", "10"],
        &["--budgets", "element 1 (25) repeats element 0"],
    );
    bad(
        &["eval", "--capacities", "0"],
        &["--capacities", "element 0 (0)", "1..=10000"],
    );
    bad(
        &["eval", "--capacities", "10,10001"],
        &["--capacities", "element 1 (10001)"],
    );
    bad(&["eval", "--capacities", ""], &["--capacities", "element 0"]);
    bad(&["eval", "--problems", "0"], &["--problems", "at least 1"]);
    // Before: wrapped to seed 0 (and an overflow panic printing the header in debug).
    bad(
        &["eval", "--seed", "18446744073709551615", "--problems", "2"],
        &["--seed", "exceeds the largest seed"],
    );
    bad(&["eval", "--seed", "18446744073709551616"], &["--seed"]);
    // A bad --plot path fails before any work and any output.
    bad(
        &["eval", "--problems", "1", "--plot", "/nonexistent/dir/q.png"],
        &["/nonexistent/dir/q.png"],
    );
    let d = tempfile::tempdir().unwrap();
    bad(
        &[
            "eval",
            "--problems",
            "1",
            "--plot",
            &d.path().display().to_string(),
        ],
        &[&d.path().display().to_string()],
    );
}

#[test]
fn eval_writes_the_plot_before_the_table_and_reports_write_errors() {
    let args = [
        "eval",
        "--problems",
        "1",
        "--budgets",
        "0,5",
        "--capacities",
        "4",
        "--modes",
        "diffuse",
        "--no-peaks",
    ];
    let (code, table, _) = run(&args);
    assert_eq!(code, 0);
    assert!(
        table.starts_with("1 problems per mode, N = 10,000, seeds 1..1\n"),
        "{table}"
    );
    // Two budgets, each every variant and the best BAGEL.
    let rows = ctxprune::rerank::eval::variants().len() + 1;
    assert_eq!(table.lines().count(), 2 + 2 * rows, "{table}");
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("q.png").display().to_string();
    let mut with = args.to_vec();
    with.extend(["--plot", &p]);
    let (code, out, err) = run(&with);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, table, "same input, same output");
    assert!(
        err.lines().last().unwrap().ends_with(&format!("wrote {p}")),
        "{err}"
    );
    let png = std::fs::read(&p).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    assert_eq!(&png[png.len() - 8..png.len() - 4], b"IEND");
    // Before: "wrote /dev/full" and exit 0. Progress lines (one per 5 s of work) may
    // precede the error; stdout stays empty.
    if Path::new("/dev/full").exists() {
        let mut full = args.to_vec();
        full.extend(["--plot", "/dev/full"]);
        let (code, out, err) = run(&full);
        assert_ne!(code, 0);
        assert!(out.is_empty(), "{out}");
        let lines: Vec<&str> = err.lines().collect();
        assert!(lines.last().unwrap().starts_with("error: /dev/full: "), "{err}");
        assert!(
            lines[..lines.len() - 1].iter().all(|l| l.starts_with("problem ")),
            "{err}"
        );
    }
}

#[test]
fn a_failed_stdout_write_is_an_error_not_a_panic() {
    let Ok(full) = std::fs::File::options().write(true).open("/dev/full") else {
        return;
    };
    for args in [
        &["cost", "plan", "--depth", "50"][..],
        &[
            "cost",
            "etc",
            "--input-noncached",
            "1",
            "--input-cached",
            "1",
            "--output",
            "1",
        ][..],
        &["eval", "--problems", "1", "--budgets", "0", "--capacities", "4"][..],
    ] {
        let o = Command::new(env!("CARGO_BIN_EXE_ctxprune"))
            .args(args)
            .stdout(full.try_clone().unwrap())
            .output()
            .unwrap();
        let err = String::from_utf8(o.stderr).unwrap();
        assert!(!o.status.success(), "{args:?}");
        assert!(!err.contains("panicked"), "{err}");
        assert!(
            err.lines().last().unwrap().starts_with("error: stdout: "),
            "{err}"
        );
    }
}

#[test]
fn cost_cli_prints_one_json_object() {
    let run = |args: &[&str]| {
        let o = Command::new(env!("CARGO_BIN_EXE_ctxprune"))
            .args(args)
            .output()
            .unwrap();
        (
            o.status.success(),
            String::from_utf8_lossy(&o.stdout).to_string(),
            String::from_utf8_lossy(&o.stderr).to_string(),
        )
    };
    let (ok, out, _) = run(&["cost", "plan", "--depth", "50"]);
    assert!(ok);
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(
        v["windows"],
        serde_json::json!([[30, 50], [20, 40], [10, 30], [0, 20]])
    );
    assert_eq!(v["duplication"], 1.6);
    let d = tempfile::tempdir().unwrap();
    let p = config(d.path(), "g.json", crate::cost::gpt_oss_20b().as_bytes());
    let (ok, out, err) = run(&["cost", "flops", "--config", &p]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert!((v["gflops_per_token"].as_f64().unwrap() - 7.947).abs() < 0.001);
    assert_eq!(v["per_layer"].as_array().unwrap().len(), 24);
    let (ok, out, _) = run(&[
        "cost",
        "etc",
        "--input-noncached",
        "100",
        "--input-cached",
        "50",
        "--output",
        "10",
    ]);
    assert!(ok);
    assert_eq!(out.trim(), r#"{"etc":165.0}"#);
    let (ok, out, err) = run(&["cost", "flops", "--hidden", "8"]);
    assert!(!ok && out.is_empty() && err.contains("--layers"), "{err}");
}
