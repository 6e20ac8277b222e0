//! The HTTP oracle clients against a real server on 127.0.0.1 (Python's http.server,
//! started by the test): both APIs, splitting, retries, a stalled server, garbage, a
//! missing index, and the batching queue merging concurrent callers.

use ctxprune::rerank::http::{Api, BatchConfig, BatchQueue, HttpConfig, HttpOracle};
use ctxprune::rerank::Oracle;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const SERVER: &str = r#"
import json, sys, time, threading
from http.server import ThreadingHTTPServer, BaseHTTPRequestHandler
lock = threading.Lock()
state = {"flaky": 0, "sizes": []}
def score(t): return (len(t) % 10) / 10.0
class H(BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def reply(self, code, body):
        b = body.encode()
        self.send_response(code); self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(b))); self.end_headers(); self.wfile.write(b)
    def do_GET(self):
        with lock: self.reply(200, json.dumps(state))
    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0")); req = json.loads(self.rfile.read(n) or b"{}")
        docs = req.get("texts") or req.get("documents") or []
        with lock: state["sizes"].append(len(docs))
        p = self.path
        if p == "/stall": time.sleep(3); return self.reply(200, "[]")
        if p == "/garbage": return self.reply(200, "this is not json")
        if p == "/flaky":
            with lock:
                state["flaky"] += 1; first = state["flaky"] == 1
            if first: return self.reply(503, "busy")
        if p == "/bad": return self.reply(400, "bad request")
        if p == "/always503": return self.reply(503, "busy")
        res = [{"index": i, "score": score(t)} for i, t in enumerate(docs)]
        res.reverse()
        if p == "/missing": res = res[1:]
        if p == "/cohere": return self.reply(200, json.dumps({"results": [{"index": r["index"], "relevance_score": r["score"]} for r in res]}))
        self.reply(200, json.dumps(res))
srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
print(srv.server_address[1], flush=True)
threading.Timer(60, srv.shutdown).start()
srv.serve_forever()
"#;

struct Server {
    child: Child,
    port: u16,
}

impl Server {
    fn start() -> Option<Server> {
        let mut child = match Command::new("python3")
            .args(["-c", SERVER])
            .stdout(Stdio::piped())
            .spawn()
        {
            Ok(c) => c,
            Err(e) => {
                eprintln!("skipped: python3 not available ({e})");
                return None;
            }
        };
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        Some(Server {
            port: line.trim().parse().unwrap(),
            child,
        })
    }
    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }
    fn sizes(&self) -> Vec<usize> {
        let agent = ureq::Agent::new_with_defaults();
        let body = agent
            .get(&self.url("/stats"))
            .call()
            .unwrap()
            .into_body()
            .read_to_string()
            .unwrap();
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        v["sizes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as usize)
            .collect()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn texts() -> Vec<String> {
    (0..7).map(|i| "x".repeat(i + 1)).collect()
}

#[test]
fn both_apis_score_by_index_and_oversize_batches_split() {
    let Some(s) = Server::start() else { return };
    for (path, api) in [("/tei", Api::Tei), ("/cohere", Api::Cohere)] {
        let mut cfg = HttpConfig::new(&s.url(path), api);
        cfg.max_batch = 3;
        let mut o = HttpOracle::new(cfg, "q", texts(), 7).unwrap();
        let got = o.score(&[6, 0, 3, 2, 5]).unwrap();
        assert_eq!(got, vec![0.7, 0.1, 0.4, 0.3, 0.6], "{path}");
        assert!(o.score(&[1, 4, 4]).is_err(), "budget of 7 exceeded");
    }
    assert_eq!(s.sizes(), vec![3, 2, 3, 2], "5 items in batches of at most 3");
}

#[test]
fn failures_are_clear_errors_and_transient_ones_are_retried() {
    let Some(s) = Server::start() else { return };
    let mut cfg = HttpConfig::new(&s.url("/flaky"), Api::Tei);
    cfg.retries = 1;
    let mut o = HttpOracle::new(cfg, "q", texts(), 10).unwrap();
    assert_eq!(o.score(&[1]).unwrap(), vec![0.2], "the 503 is retried");
    for (path, want) in [
        ("/garbage", "not JSON"),
        ("/missing", "no score for index"),
        ("/bad", "HTTP 400"),
    ] {
        let mut o = HttpOracle::new(HttpConfig::new(&s.url(path), Api::Tei), "q", texts(), 10).unwrap();
        let err = o.score(&[0, 1, 2]).unwrap_err();
        // A service branches on the kind, and on the HTTP status when there was one.
        assert_eq!(err.kind(), ctxprune::ErrorKind::Oracle, "{path}: {err}");
        if let ctxprune::Error::Oracle { status, .. } = &err {
            assert_eq!(*status, (path == "/bad").then_some(400), "{path}: {err}");
        }
        let e = err.to_string();
        assert!(e.contains(want), "{path}: {e}");
    }
    // A server that keeps failing with 5xx: the last status is kept.
    let mut cfg = HttpConfig::new(&s.url("/always503"), Api::Tei);
    cfg.retries = 1;
    let err = HttpOracle::new(cfg, "q", texts(), 10)
        .unwrap()
        .score(&[0])
        .unwrap_err();
    assert!(
        matches!(
            err,
            ctxprune::Error::Oracle {
                status: Some(503),
                ..
            }
        ),
        "{err}"
    );
    let mut cfg = HttpConfig::new(&s.url("/stall"), Api::Tei);
    cfg.timeout = Duration::from_millis(300);
    cfg.retries = 0;
    let t = std::time::Instant::now();
    let e = HttpOracle::new(cfg, "q", texts(), 10)
        .unwrap()
        .score(&[0])
        .unwrap_err()
        .to_string();
    assert!(t.elapsed() < Duration::from_secs(2), "the timeout did not fire");
    assert!(e.contains("request failed"), "{e}");
    let mut dead = HttpOracle::new(
        HttpConfig::new("http://127.0.0.1:9/rerank", Api::Tei),
        "q",
        texts(),
        10,
    )
    .unwrap();
    assert!(dead.score(&[0]).is_err(), "an unreachable server is an error");
}

#[test]
fn the_batching_queue_merges_concurrent_callers() {
    let Some(s) = Server::start() else { return };
    let inner = HttpOracle::new(HttpConfig::new(&s.url("/tei"), Api::Tei), "q", texts(), 100).unwrap();
    // Generous windows: the four callers must only arrive within 1.5 s of each other, even
    // on a loaded CI machine.
    let cfg = BatchConfig {
        max_batch: 16,
        max_wait: Duration::from_millis(5000),
        idle: Duration::from_millis(1500),
    };
    let q = BatchQueue::new(Box::new(inner), cfg);
    let threads: Vec<_> = (0..4)
        .map(|i| {
            let mut h = q.handle();
            std::thread::spawn(move || h.score(&[i, i + 1]).unwrap())
        })
        .collect();
    let got: Vec<Vec<f64>> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    for (i, g) in got.iter().enumerate() {
        assert_eq!(g, &vec![(i + 1) as f64 / 10.0, (i + 2) as f64 / 10.0]);
    }
    assert_eq!(s.sizes(), vec![8], "four callers, one request");
}

/// A 7-row pool, its query and the texts of [`texts`] as the files `ctxprune rerank`
/// reads: (embeddings, query, texts).
fn rerank_files(dir: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf, std::path::PathBuf) {
    let (e, q, _) = crate::problem(7, 4, 2);
    let ep = dir.join("e.npy");
    ctxprune::io::write_npy_f32(&ep, 7, 4, e.as_slice()).unwrap();
    let qp = dir.join("q.npy");
    ctxprune::io::write_npy_f32(&qp, 1, 4, &q).unwrap();
    let tp = dir.join("t.jsonl");
    let lines: Vec<String> = texts().iter().map(|t| format!("{{\"text\": \"{t}\"}}")).collect();
    std::fs::write(&tp, lines.join("\n")).unwrap();
    (ep, qp, tp)
}

#[test]
fn rerank_cli_with_an_http_oracle() {
    let Some(s) = Server::start() else { return };
    let d = tempfile::tempdir().unwrap();
    let (ep, qp, tp) = rerank_files(d.path());
    let url = s.url("/tei");
    let o = Command::new(env!("CARGO_BIN_EXE_ctxprune"))
        .args([
            "rerank",
            "--method",
            "single-stage",
            "--embeddings",
            ep.to_str().unwrap(),
            "--query",
            qp.to_str().unwrap(),
        ])
        .args([
            "--oracle-url",
            &url,
            "--texts",
            tp.to_str().unwrap(),
            "--query-text",
            "q",
            "--budget",
            "7",
            "--capacity",
            "3",
        ])
        .output()
        .unwrap();
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert!(o.status.success(), "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    // Texts of length 7, 6, 5 score highest (0.7, 0.6, 0.5): rows 6, 5, 4.
    assert_eq!(v["selected"], serde_json::json!([6, 5, 4]), "{out}");
    assert_eq!(v["oracle_calls"], 7);
}

/// An oracle that accepts and never answers fails after `--oracle-timeout` per attempt and
/// `--oracle-retries` retries, in one line naming the oracle (it used to take 92 s: 30 s
/// times three, with no flag to change it).
#[test]
fn an_unresponsive_oracle_fails_within_its_timeout() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/rerank", listener.local_addr().unwrap());
    // Accepts and holds every connection without reading or replying.
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in listener.incoming().take(8) {
            held.push(s);
        }
        std::thread::sleep(Duration::from_secs(60));
    });
    let d = tempfile::tempdir().unwrap();
    let (ep, qp, tp) = rerank_files(d.path());
    let run = |timeout: &str| {
        let t = std::time::Instant::now();
        let o = Command::new(env!("CARGO_BIN_EXE_ctxprune"))
            .args([
                "rerank",
                "--method",
                "single-stage",
                "--embeddings",
                ep.to_str().unwrap(),
            ])
            .args(["--query", qp.to_str().unwrap(), "--oracle-url", &url])
            .args(["--texts", tp.to_str().unwrap(), "--query-text", "q"])
            .args(["--budget", "7", "--capacity", "3", "--backend", "cpu"])
            .args(["--oracle-timeout", timeout, "--oracle-retries", "1"])
            .output()
            .unwrap();
        (o, t.elapsed())
    };
    let (o, took) = run("0.3");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && o.stdout.is_empty(), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains(&format!("oracle {url}")) && err.contains("after 2 attempts"),
        "{err}"
    );
    // Two attempts of 0.3 s and a 0.1 s pause; far below the 92 s of the defaults.
    assert!(took < Duration::from_secs(10), "took {took:?}");
    let (o, _) = run("0");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("invalid --oracle-timeout: must be in (0, 86400] seconds, got 0"),
        "{err}"
    );
}
