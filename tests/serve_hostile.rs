//! `ctxprune serve` against clients that do not play along (issue 23): half-sent heads
//! and bodies, SIGTERM with such clients connected, requests that ask for quadratic work
//! or gigabytes, bodies built to blow up a parser, and every kind of malformed request.
//! Each test fails on the server before issue 23 (no header or body timeout, work that
//! ran on after its 504 on the whole thread pool, shutdowns that waited for it, empty
//! and text/plain error bodies, repeated keys taken as the last value).

use super::serve::{call, post, quiet, Server};
use base64::Engine as _;
use ctxprune::serve::ServeConfig;
use serde_json::{json, Value};
use std::io::{BufRead, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Sends `bytes` on a new connection (then half-closes it when `close_write`) and reads
/// what comes back until the server closes or `wait` passes: (the bytes, closed by the
/// server within `wait`).
fn exchange(addr: SocketAddr, bytes: &[u8], close_write: bool, wait: Duration) -> (Vec<u8>, bool) {
    let mut c = TcpStream::connect(addr).expect("connect");
    c.write_all(bytes).expect("send");
    if close_write {
        c.shutdown(std::net::Shutdown::Write).expect("half-close");
    }
    read_until_closed(&mut c, wait)
}

fn read_until_closed(c: &mut TcpStream, wait: Duration) -> (Vec<u8>, bool) {
    let end = Instant::now() + wait;
    let mut out = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return (out, false);
        }
        c.set_read_timeout(Some(left)).expect("timeout");
        match c.read(&mut buf) {
            Ok(0) => return (out, true),
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return (out, false)
            }
            // A reset is a close too.
            Err(_) => return (out, true),
        }
    }
}

/// The status and JSON body of the first answer in `raw`; fails the test when the body
/// is not `{"error": "..."}` JSON.
fn json_error(raw: &[u8], what: &str) -> (u16, String) {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("{what}: no answer: {text:?}"));
    let status: u16 = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{what}: {head}"));
    let lower = head.to_ascii_lowercase();
    assert!(
        lower.contains("content-type: application/json"),
        "{what}: not JSON: {head}"
    );
    let len: usize = lower
        .lines()
        .find_map(|l| l.strip_prefix("content-length: "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("{what}: no length: {head}"));
    let v: Value = serde_json::from_str(&body[..len.min(body.len())])
        .unwrap_or_else(|e| panic!("{what}: {e}: {body:?}"));
    let msg = v["error"]
        .as_str()
        .unwrap_or_else(|| panic!("{what}: no error field: {v}"))
        .to_string();
    assert!(!msg.is_empty() && !msg.contains('\n'), "{what}: {msg:?}");
    (status, msg)
}

/// A POST of `body` as bytes on its own connection.
fn post_raw(addr: SocketAddr, method: &str, path: &str, body: &[u8]) -> (u16, String) {
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    req.extend_from_slice(body);
    let (out, _) = exchange(addr, &req, false, Duration::from_secs(30));
    json_error(&out, &format!("{method} {path}"))
}

/// A POST of `body` on its own connection: the status and the JSON answer, whatever it is.
fn post_status(addr: SocketAddr, path: &str, body: &[u8]) -> (u16, Value) {
    let r = super::serve::agent()
        .post(format!("http://{addr}{path}"))
        .send(body)
        .expect("an answer");
    let st = r.status().as_u16();
    let text = r.into_body().read_to_string().expect("a body");
    (st, serde_json::from_str(&text).expect("JSON"))
}

/// Sends `bytes` from another thread (the server may answer and close before reading
/// them all) while reading the answer here.
fn exchange_while_sending(addr: SocketAddr, bytes: Vec<u8>, wait: Duration) -> Vec<u8> {
    let mut c = TcpStream::connect(addr).expect("connect");
    let mut w = c.try_clone().expect("clone");
    let sender = std::thread::spawn(move || {
        let _ = w.write_all(&bytes);
    });
    let (out, _) = read_until_closed(&mut c, wait);
    let _ = sender.join();
    out
}

/// `ctxprune serve` as a process on an ephemeral loopback port (killed when dropped).
pub struct Cli {
    child: Child,
    pub addr: SocketAddr,
}

impl Cli {
    /// Starts `ctxprune serve` on the CPU, quiet, with `flags`; returns once it listens.
    pub fn start(flags: &[&str]) -> Cli {
        let mut child = Command::new(env!("CARGO_BIN_EXE_ctxprune"))
            .args(["serve", "--addr", "127.0.0.1:0", "--backend", "cpu", "--quiet"])
            .args(flags)
            .stderr(Stdio::piped())
            .spawn()
            .expect("ctxprune serve");
        let mut err = std::io::BufReader::new(child.stderr.take().expect("stderr"));
        let mut line = String::new();
        err.read_line(&mut line).expect("the listening line");
        let v: Value = serde_json::from_str(&line).expect("JSON");
        let addr = v["listening"]
            .as_str()
            .expect("listening")
            .parse()
            .expect("an address");
        // Keep reading stderr so the server never blocks on a full pipe.
        std::thread::spawn(move || for _ in err.lines() {});
        Cli { child, addr }
    }

    fn sigterm(&self) {
        let ok = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill -TERM");
    }

    /// Waits at most `limit` for the process to exit: its exit code and how long it took.
    fn wait_exit(&mut self, limit: Duration) -> (Option<i32>, Duration) {
        let t = Instant::now();
        loop {
            if let Some(s) = self.child.try_wait().expect("wait") {
                return (s.code(), t.elapsed());
            }
            if t.elapsed() > limit {
                let _ = self.child.kill();
                panic!("the server was still running {limit:?} after SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The process's peak resident memory, in bytes (Linux).
    fn peak_rss(&self) -> Option<u64> {
        let s = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).ok()?;
        let kb: u64 = s
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))?
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()?;
        Some(kb * 1024)
    }
}

impl Drop for Cli {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A connection that sent a head and one byte of its 50-byte body, then nothing.
fn half_body(addr: SocketAddr) -> TcpStream {
    let mut c = TcpStream::connect(addr).unwrap();
    c.write_all(b"POST /v1/mask HTTP/1.1\r\nhost: x\r\ncontent-length: 50\r\n\r\n{")
        .unwrap();
    c
}

/// Class 1: a half-sent head is timed out; a half-sent body gets 408; SIGTERM with such
/// clients connected exits within the grace period (exit 0 when nothing was in flight,
/// 3 when a request had to be abandoned, its client seeing the connection close).
#[test]
fn half_sent_requests_time_out_and_sigterm_ends_within_the_grace() {
    let mut s = Cli::start(&["--header-timeout", "1", "--body-timeout", "1", "--grace", "2"]);
    // Half a request line, then nothing: closed after the header timeout, no answer.
    let t = Instant::now();
    let (out, closed) = exchange(s.addr, b"POST /v1/sel", false, Duration::from_secs(5));
    assert!(closed && out.is_empty(), "{:?}", String::from_utf8_lossy(&out));
    assert!(t.elapsed() < Duration::from_millis(2500), "{:?}", t.elapsed());
    // A head, then part of the body: 408 as JSON after the body timeout, then closed.
    let t = Instant::now();
    let (out, closed) = exchange(
        s.addr,
        b"POST /v1/select HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n{\"met",
        false,
        Duration::from_secs(5),
    );
    assert_eq!(json_error(&out, "slow body").0, 408);
    assert!(
        closed && t.elapsed() < Duration::from_millis(2500),
        "{:?}",
        t.elapsed()
    );
    // SIGTERM while one client holds half a head and another is mid-body: the body times
    // out within the grace period, so nothing is abandoned.
    let mut head = TcpStream::connect(s.addr).unwrap();
    head.write_all(b"GET /heal").unwrap();
    let mut body = half_body(s.addr);
    std::thread::sleep(Duration::from_millis(200));
    s.sigterm();
    let (code, took) = s.wait_exit(Duration::from_secs(6));
    assert_eq!(code, Some(0), "after {took:?}");
    assert!(took < Duration::from_millis(3500), "{took:?}");
    assert_eq!(
        json_error(
            &read_until_closed(&mut body, Duration::from_secs(2)).0,
            "mid-body"
        )
        .0,
        408
    );
    assert!(
        read_until_closed(&mut head, Duration::from_secs(2)).1,
        "the half head stayed open"
    );

    // A body that would take longer than the grace: abandoned at its end, exit 3.
    let mut s = Cli::start(&["--body-timeout", "60", "--grace", "1"]);
    let mut body = half_body(s.addr);
    std::thread::sleep(Duration::from_millis(200));
    s.sigterm();
    let (code, took) = s.wait_exit(Duration::from_secs(6));
    assert_eq!(code, Some(3), "after {took:?}");
    assert!(took < Duration::from_millis(2500), "{took:?}");
    let (out, closed) = read_until_closed(&mut body, Duration::from_secs(2));
    assert!(closed && out.is_empty(), "{:?}", String::from_utf8_lossy(&out));
}

/// `n` rows of `d` seeded values as the base64 f32 form.
fn base64_rows(n: usize, d: usize) -> Value {
    let mut rng = ctxprune::rng::Rng::new(3);
    let bytes: Vec<u8> = (0..n * d)
        .flat_map(|_| (rng.normal() as f32).to_le_bytes())
        .collect();
    json!({"base64": base64::engine::general_purpose::STANDARD.encode(bytes), "dtype": "f32", "shape": [n, d]})
}

fn metric(s: &Server, name: &str) -> f64 {
    let text = ureq::get(s.url("/metrics"))
        .call()
        .expect("metrics")
        .into_body()
        .read_to_string()
        .expect("text");
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {text}"))
}

/// Class 2: work and memory are admitted by their estimate before anything runs; work
/// that is admitted but passes its deadline is stopped, freeing its slot; and a request
/// computing never slows the other slot's cheap requests (each slot has its own thread).
#[test]
fn expensive_requests_are_refused_or_stopped_and_cheap_ones_keep_their_slot() {
    let s = Server::start(ServeConfig {
        max_concurrent: 2,
        threads: 2,
        timeout: Duration::from_millis(1500),
        ..quiet()
    });
    // Coverage over 200,000 short rows: O(n²) work, refused at once, naming the limit.
    let t = Instant::now();
    let (st, v) = post(
        &s,
        "/v1/select",
        json!({"method": "coverage", "k": 5, "embeddings": base64_rows(200_000, 2)}),
    );
    let e = v["error"].as_str().unwrap_or_default();
    assert_eq!(st, 422, "{v}");
    assert!(e.contains("--max-work") && e.contains("200000 items"), "{e}");
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    // BoundaryMORPH with a budget the size of a 60,000-row pool keeps 60,000 x 60,000
    // f32: refused for its memory.
    let (st, v) = post(
        &s,
        "/v1/rerank",
        json!({"embeddings": base64_rows(60_000, 2), "query": [1.0, 0.5], "budget": 60_000, "capacity": 5,
               "oracle_scores": vec![0.5; 60_000]}),
    );
    let e = v["error"].as_str().unwrap_or_default();
    assert_eq!(st, 413, "{v}");
    assert!(e.contains("--max-request-memory"), "{e}");

    // Coverage over 40,000 rows is admitted and takes far longer than the 1.5 s deadline
    // here; while it runs, cheap requests on the other slot answer at their usual speed.
    let url = s.url("/v1/select");
    let body = json!({"method": "coverage", "k": 5, "embeddings": base64_rows(40_000, 2)});
    let started = Instant::now();
    let slow = std::thread::spawn(move || {
        let r = call("POST", &url, Some(&body));
        (r, started.elapsed())
    });
    std::thread::sleep(Duration::from_millis(300));
    let rows = super::serve::pool_rows(50, 8, 2);
    let small = json!({"method": "mmr", "k": 5, "embeddings": rows, "query": rows[0]});
    let mut worst = Duration::ZERO;
    let mut cheap = 0;
    while started.elapsed() < Duration::from_millis(1300) {
        let t = Instant::now();
        let (st, v) = post(&s, "/v1/select", small.clone());
        assert_eq!(st, 200, "{v}");
        worst = worst.max(t.elapsed());
        cheap += 1;
    }
    let ((st, v, _), took) = slow.join().unwrap();
    assert_eq!(st, 504, "{v}");
    assert!(v["error"].as_str().unwrap().contains("stopped"), "{v}");
    assert!(took < Duration::from_millis(2500), "{took:?}");
    assert!(
        cheap >= 3 && worst < Duration::from_millis(500),
        "{cheap} cheap requests, the slowest {worst:?}"
    );
    // The stopped work gives its slot back within a step (one block of 64 rows).
    let t = Instant::now();
    while metric(&s, "ctxprune_work_running") > 0.0 {
        assert!(
            t.elapsed() < Duration::from_secs(2),
            "the work ran on after its 504"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Class 2: a body built to blow up a parser costs a few bytes a number: 32 MB of
/// one-number rows, and 32 MB of one-letter texts, stay far below the 4.7 GB the old
/// parse reached.
#[test]
fn hostile_bodies_parse_in_bounded_memory() {
    let s = Cli::start(&["--max-concurrent", "1"]);
    let rows = 8_000_000usize;
    let mut body = String::with_capacity(4 * rows + 100);
    body.push_str(r#"{"method": "centroid", "k": 1, "embeddings": ["#);
    for i in 0..rows {
        body.push_str(if i == 0 { "[1]" } else { ",[1]" });
    }
    body.push_str("]}");
    assert!(body.len() > 32_000_000);
    let (st, v) = post_status(s.addr, "/v1/select", body.as_bytes());
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["selected"], json!([0]), "{v}");
    let mut body = String::with_capacity(4 * rows + 100);
    body.push_str(r#"{"method": "lexical", "k": 1, "query_text": "a", "texts": ["#);
    for i in 0..rows {
        body.push_str(if i == 0 { "\"a\"" } else { ",\"a\"" });
    }
    body.push_str("]}");
    let (st, e) = post_raw(s.addr, "POST", "/v1/select", body.as_bytes());
    assert_eq!(st, 413, "{e}");
    assert!(e.contains("--max-request-memory"), "{e}");
    let peak = s.peak_rss().expect("VmHWM");
    eprintln!("hostile bodies: peak RSS of the server {} MiB", peak >> 20);
    assert!(peak < 1 << 30, "peak RSS {} MiB", peak >> 20);
}

/// Class 3: every error is `{"error": ...}` JSON, the HTTP layer's own included, with one
/// status per class on every route.
#[test]
fn every_error_is_json_with_one_status_per_class() {
    let s = Server::start(ServeConfig {
        max_body_bytes: 1 << 20,
        body_timeout: Duration::from_secs(1),
        ..quiet()
    });
    let a = s.addr;
    let w = Duration::from_secs(5);
    // hyper's own answers: a malformed request line or header, a long target, big headers.
    let long_target = format!("GET /{} HTTP/1.1\r\nhost: x\r\n\r\n", "a".repeat(70_000));
    // hyper's head buffer is about 400 KiB, checked between reads, so a head must pass it
    // by more than one read to be refused every time: 2 MB, sent while the answer is read
    // (the server answers, and closes, before it has read it all).
    let big_header = format!("GET / HTTP/1.1\r\nx: {}\r\n\r\n", "a".repeat(2_000_000));
    for (req, want) in [
        (&b"GARBAGE\r\n\r\n"[..], 400),
        (b"GET / HTTP/1.1\r\nno colon here\r\n\r\n", 400),
        (long_target.as_bytes(), 414),
        (big_header.as_bytes(), 431),
    ] {
        let out = exchange_while_sending(a, req.to_vec(), w);
        assert_eq!(json_error(&out, &format!("http layer, {want}")).0, want);
    }
    // A method a route does not have: 405, with Allow.
    let (out, _) = exchange(
        a,
        b"DELETE /v1/select HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
        false,
        w,
    );
    assert_eq!(json_error(&out, "405").0, 405);
    assert!(String::from_utf8_lossy(&out)
        .to_ascii_lowercase()
        .contains("allow: post"));
    // A body shorter than its length, the client then done: 400; one that stalls: 408.
    let short = b"POST /v1/select HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n{\"a\"";
    let (out, _) = exchange(a, short, true, w);
    assert_eq!(json_error(&out, "short body").0, 400);
    let (out, _) = exchange(a, short, false, w);
    assert_eq!(json_error(&out, "stalled body").0, 408);
    // Over the body cap, declared or chunked: 413.
    let declared = format!(
        "POST /v1/select HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\n\r\n",
        (1 << 20) + 1
    );
    let (out, _) = exchange(a, declared.as_bytes(), false, w);
    let (st, e) = json_error(&out, "declared");
    assert!(st == 413 && e.contains("--max-body-bytes"), "{st} {e}");
    let chunk = vec![b'x'; 600_000];
    let mut req = b"POST /v1/select HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
    for _ in 0..2 {
        req.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
        req.extend_from_slice(&chunk);
        req.extend_from_slice(b"\r\n");
    }
    req.extend_from_slice(b"0\r\n\r\n");
    let out = exchange_while_sending(a, req, w);
    assert_eq!(json_error(&out, "chunked").0, 413);
    // Unknown routes and unreadable path parameters.
    let (out, _) = exchange(
        a,
        b"GET /v9 HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
        false,
        w,
    );
    assert_eq!(json_error(&out, "404").0, 404);
    let (out, _) = exchange(
        a,
        b"GET /v1/pools/%ff HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
        false,
        w,
    );
    assert_eq!(json_error(&out, "bad path").0, 400);

    // The same malformed body is the same 400 on every route that reads one.
    let deep = format!("{{\"a\": {}1{}}}", "[".repeat(600), "]".repeat(600));
    let routes = [
        ("POST", "/v1/select"),
        ("POST", "/v1/rerank"),
        ("POST", "/v1/mask"),
        ("POST", "/v1/cost/flops"),
        ("POST", "/v1/cost/etc"),
        ("POST", "/v1/cost/plan"),
        ("PUT", "/v1/pools/p"),
    ];
    for (m, p) in routes {
        for (body, words) in [
            (deep.as_str(), "recursion limit"),
            (r#"{"k": 1, "k": 2}"#, "duplicate key \"k\""),
            (
                r#"{"config": {"messages": [{"role": "user", "role": "tool"}]}}"#,
                "duplicate key \"role\"",
            ),
            ("{\"a\": ", "not JSON"),
            ("[1]", "must be a JSON object"),
            ("\"text\"", "must be a JSON object"),
        ] {
            let (st, e) = post_raw(a, m, p, body.as_bytes());
            assert_eq!(st, 400, "{m} {p} {body:.40}: {e}");
            assert!(e.contains(words), "{m} {p}: {e}");
        }
        // A well-formed body with an unknown field: 422 everywhere.
        let (st, e) = post_raw(a, m, p, br#"{"surely_not_a_field": 1}"#);
        assert_eq!(st, 422, "{m} {p}: {e}");
    }
}

/// Class 2: neither work in flight nor a silent oracle upstream holds the process past
/// its grace period after SIGTERM: both requests are abandoned (cancelled, their
/// connections closed) and the exit status says so.
#[test]
fn sigterm_does_not_wait_for_long_work_or_a_silent_upstream() {
    // An upstream that accepts and never answers.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let up = format!("http://{}/rerank", silent.local_addr().unwrap());
    let held = std::thread::spawn(move || {
        let mut conns = Vec::new();
        silent.set_nonblocking(true).unwrap();
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(20) {
            if let Ok((c, _)) = silent.accept() {
                conns.push(c);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    });
    let mut s = Cli::start(&["--timeout", "60", "--grace", "1", "--allow-oracle-urls"]);
    let addr = s.addr;
    let rows = super::serve::pool_rows(20, 4, 1);
    let rerank = json!({"embeddings": rows, "query": rows[0], "budget": 3, "capacity": 2, "method": "single-stage",
        "oracle_url": up, "oracle_timeout": 600, "texts": (0..20).map(|i| format!("doc {i}")).collect::<Vec<_>>(), "query_text": "q"});
    let work = json!({"method": "coverage", "k": 5, "embeddings": base64_rows(40_000, 2)});
    let clients: Vec<_> = [("/v1/rerank", rerank), ("/v1/select", work)]
        .into_iter()
        .map(|(path, body)| {
            std::thread::spawn(move || {
                let mut c = TcpStream::connect(addr).unwrap();
                let b = body.to_string();
                write!(
                    c,
                    "POST {path} HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\n\r\n{b}",
                    b.len()
                )
                .unwrap();
                read_until_closed(&mut c, Duration::from_secs(10))
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(700));
    s.sigterm();
    let (code, took) = s.wait_exit(Duration::from_secs(8));
    assert_eq!(code, Some(3), "after {took:?}");
    assert!(took < Duration::from_millis(2500), "{took:?}");
    for c in clients {
        let (out, closed) = c.join().unwrap();
        assert!(closed && out.is_empty(), "{:?}", String::from_utf8_lossy(&out));
    }
    drop(held);
}
