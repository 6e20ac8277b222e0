//! The CLI on a directory of bad inputs (tests/bad_inputs/, made by its make.py): for each
//! case of cases.tsv, a non-zero exit, exactly one line on stderr naming what is wrong,
//! and nothing on stdout. Never a panic, never a hang (each run is bounded in time).

use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// One row of cases.tsv.
struct Case {
    name: String,
    env: Option<(String, String)>,
    stdin: Option<String>,
    expect: String,
    args: Vec<String>,
}

fn cases(dir: &Path) -> Vec<Case> {
    let text = std::fs::read_to_string(dir.join("cases.tsv")).unwrap();
    text.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| {
            let cols: Vec<&str> = l.split('\t').collect();
            assert_eq!(cols.len(), 5, "cases.tsv: {l:?} has {} columns", cols.len());
            let opt = |s: &str| (s != "-").then(|| s.to_string());
            Case {
                name: cols[0].into(),
                env: opt(cols[1]).map(|kv| {
                    let (k, v) = kv.split_once('=').expect("ENV is K=V");
                    (k.to_string(), v.to_string())
                }),
                stdin: opt(cols[2]),
                expect: cols[3].into(),
                args: cols[4]
                    .split_whitespace()
                    .map(|a| a.replace("{dir}", &dir.display().to_string()))
                    .collect(),
            }
        })
        .collect()
}

/// Runs the binary with a deadline; `(exit code, stdout, stderr)`.
fn run(c: &Case, dir: &Path) -> (Option<i32>, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ctxprune"));
    cmd.args(&c.args)
        .env_remove("CTXPRUNE_BACKEND")
        .stdin(if c.stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some((k, v)) = &c.env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    if let Some(f) = &c.stdin {
        let body = std::fs::read(dir.join(f)).unwrap();
        let mut pipe = child.stdin.take().unwrap();
        // A command that fails before reading its input closes the pipe: not an error here.
        let _ = pipe.write_all(&body);
    }
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            panic!("{}: still running after 120 s (a hang)", c.name);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let o = child.wait_with_output().unwrap();
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn every_bad_input_fails_with_one_line_and_no_output() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/bad_inputs");
    let cases = cases(&dir);
    assert!(cases.len() >= 30, "cases.tsv has only {} cases", cases.len());
    let mut failures = Vec::new();
    for c in &cases {
        let (code, out, err) = run(c, &dir);
        let mut why = Vec::new();
        if code == Some(0) || code.is_none() {
            why.push(format!("exit {code:?}"));
        }
        if err.contains("panicked") {
            why.push("panicked".into());
        }
        if !out.is_empty() {
            why.push(format!("stdout {out:?}"));
        }
        if err.lines().count() != 1 || !err.ends_with('\n') {
            why.push(format!("{} stderr lines", err.lines().count()));
        }
        if !err.contains(&c.expect) {
            why.push(format!("stderr lacks {:?}", c.expect));
        }
        if !why.is_empty() {
            failures.push(format!("{}: {} (stderr: {err:?})", c.name, why.join(", ")));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

/// `mask` reading a device on stdin stops at once: invalid UTF-8 at its first bad byte
/// (`/dev/urandom`), or a first character that cannot start a JSON document (`/dev/zero`).
#[test]
fn mask_refuses_endless_stdin_at_once() {
    for (dev, want) in [
        ("/dev/urandom", "not UTF-8"),
        ("/dev/zero", "cannot begin a JSON document"),
    ] {
        let Ok(f) = std::fs::File::open(dev) else { continue };
        let t = Instant::now();
        let o = Command::new(env!("CARGO_BIN_EXE_ctxprune"))
            .args(["mask", "--format", "auto"])
            .stdin(Stdio::from(f))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && o.stdout.is_empty(), "{dev}: {err}");
        assert!(err.contains(want) && err.lines().count() == 1, "{dev}: {err}");
        assert!(t.elapsed() < Duration::from_secs(20), "{dev}: {:?}", t.elapsed());
    }
}
