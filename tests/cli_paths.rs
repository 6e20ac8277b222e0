//! Every path flag of every subcommand through the one file-open contract (the cases of
//! tests/cli_paths.tsv, which `src/bin/ctxprune/paths.rs`'s tests hold to the clap
//! command tree): an input pointed at a FIFO or at `/dev/zero` ends at once with one line
//! naming the path and what it is (a read of either would block or never end); an output
//! that cannot be written fails with one line naming it and nothing on stdout.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// One row of cli_paths.tsv.
struct Case {
    cmd: String,
    id: String,
    kind: String,
    stdin: Option<PathBuf>,
    args: String,
}

fn cases(data: &Path) -> Vec<Case> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let text = std::fs::read_to_string(dir.join("cli_paths.tsv")).unwrap();
    text.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| {
            let c: Vec<&str> = l.split('\t').collect();
            assert_eq!(c.len(), 5, "cli_paths.tsv: {l:?} has {} columns", c.len());
            Case {
                cmd: c[0].into(),
                id: c[1].into(),
                kind: c[2].into(),
                stdin: (c[3] != "-")
                    .then(|| PathBuf::from(c[3].replace("{data}", &data.display().to_string()))),
                args: c[4].into(),
            }
        })
        .collect()
}

/// The good inputs the cases read besides the one under test.
fn fixtures(dir: &Path) {
    use ctxprune::attention;
    ctxprune::demo::data::write_pool(dir, 24, 8, 7).unwrap();
    let words = [
        "anode",
        "cathode",
        "electrolyte",
        "dendrite",
        "coating",
        "sulfide",
    ];
    let texts: String = (0..24)
        .map(|i| format!("{{\"text\": \"{} {i}\", \"tokens\": {}}}\n", words[i % 6], 5 + i))
        .collect();
    std::fs::write(dir.join("texts.jsonl"), texts).unwrap();
    // The same texts without "tokens": counted by --tokenizer.
    let plain: String = (0..24)
        .map(|i| format!("{{\"text\": \"{} {i}\"}}\n", words[i % 6]))
        .collect();
    std::fs::write(dir.join("notokens.jsonl"), plain).unwrap();
    std::fs::write(
        dir.join("stages.toml"),
        "[post_retrieval]\npolicy = \"scorer\"\nmethod = \"grn\"\nmode = \"gate\"\nthreshold = 0.5\n",
    )
    .unwrap();
    std::fs::write(dir.join("run.jsonl"), crate::pipeline_replay::RUN).unwrap();
    let decisions: String = (0..12)
        .map(|i| {
            format!(
                "{{\"run\":\"r{}\",\"depth\":{},\"order\":{},\"retained\":{},\"state_embedding\":[0.{i}1,0.5],\"candidate_embedding\":[0.3,0.{i}2],\"keep\":{},\"utility\":0.{i}}}\n",
                i % 4,
                i % 3,
                i % 2,
                i % 5,
                i % 2 == 0
            )
        })
        .collect();
    std::fs::write(dir.join("decisions.jsonl"), decisions).unwrap();
    std::fs::write(dir.join("prompt.txt"), crate::attention_segment::PROMPT).unwrap();
    let n = 300;
    let (_, seg) = attention::synthetic(n, 1, 2, 1, 4, 7, 5).unwrap();
    std::fs::write(dir.join("seg.json"), serde_json::to_string(&seg).unwrap()).unwrap();
    crate::attention::write_tensors(
        &dir.join("qk.safetensors"),
        n,
        &[0, 1],
        (2, 1, 4),
        safetensors::Dtype::F32,
        true,
        3,
    );
    let qk = attention::tensors::TensorFile::open(&dir.join("qk.safetensors"), None)
        .unwrap()
        .read(&seg.steps)
        .unwrap();
    let mass = attention::mass(&ctxprune::Engine::cpu(), &qk, &seg).unwrap();
    std::fs::write(dir.join("mass.json"), serde_json::to_string(&mass).unwrap()).unwrap();
}

/// Runs the binary with `args` (and the file `stdin` on stdin), killing it after 60 s;
/// `None` when it had to be killed, else (exit code, stdout, stderr).
fn run(args: &[String], stdin: Option<&Path>) -> Option<(Option<i32>, String, String)> {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let input = stdin.map(|p| std::fs::read(p).unwrap());
    let (code, out, err) = super::cli::run_limited(&args, input.as_deref(), Duration::from_secs(60))?;
    Some((
        code,
        String::from_utf8_lossy(&out).into_owned(),
        String::from_utf8_lossy(&err).into_owned(),
    ))
}

/// An output's file name by what the command writes there.
fn out_name(c: &Case) -> String {
    let ext = match (c.cmd.as_str(), c.id.as_str()) {
        (_, "plot" | "heatmap" | "png") => "png",
        (_, "json" | "stats") | ("attention segment", _) => "json",
        ("pipeline train", _) => "safetensors",
        _ => "npy",
    };
    format!("out-{}.{ext}", c.id)
}

#[test]
fn every_path_flag_refuses_a_fifo_a_device_and_an_unwritable_output_by_name() {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("fixtures");
    std::fs::create_dir(&dir).unwrap();
    fixtures(&dir);
    // A FIFO nobody writes to (a read blocks for ever), and links named like the files a
    // flag expects (a tokenizer is taken as a file by its .json name).
    let fifo = t.path().join("fifo.json");
    let made = Command::new("mkfifo").arg(&fifo).status();
    assert!(made.is_ok_and(|s| s.success()), "mkfifo failed");
    let zero = t.path().join("zero.json");
    std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
    let missing = t.path().join("no-such-dir");

    let cases = cases(&data);
    assert!(cases.len() >= 40, "only {} cases", cases.len());
    let mut failures = Vec::new();
    for c in &cases {
        let targets: Vec<(PathBuf, &str)> = match c.kind.as_str() {
            "file" | "embeddings" | "tokenizer" => vec![
                (fifo.clone(), "is a named pipe, not a regular file"),
                (zero.clone(), "is a character device, not a regular file"),
            ],
            "dir" => vec![
                (fifo.clone(), "is a named pipe, not a directory"),
                (zero.clone(), "is a character device, not a directory"),
            ],
            "out" => vec![(missing.join(out_name(c)), "cannot be written")],
            "outdir" => vec![(dir.join("emb.npy"), "is a regular file, not a directory")],
            k => panic!("cli_paths.tsv: unknown kind {k}"),
        };
        for (path, want) in targets {
            let p = path.display().to_string();
            let args: Vec<String> = c
                .args
                .split_whitespace()
                .map(|a| {
                    a.replace("{path}", &p)
                        .replace("{dir}", &dir.display().to_string())
                        .replace("{data}", &data.display().to_string())
                })
                .collect();
            let name = format!("{} {} = {p}", c.cmd, c.id);
            let Some((code, out, err)) = run(&args, c.stdin.as_deref()) else {
                failures.push(format!("{name}: still running after 60 s (a hang)"));
                continue;
            };
            let mut why = Vec::new();
            if code == Some(0) || code.is_none() {
                why.push(format!("exit {code:?}"));
            }
            if !out.is_empty() {
                why.push(format!("stdout {:?}", out.chars().take(80).collect::<String>()));
            }
            if err.lines().count() != 1 {
                why.push(format!("{} stderr lines", err.lines().count()));
            }
            if !(err.contains(&format!("{p}: {want}"))) {
                why.push(format!("stderr lacks {:?}", format!("{p}: {want}")));
            }
            if !why.is_empty() {
                failures.push(format!("{name}: {} (stderr: {err:?})", why.join(", ")));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
