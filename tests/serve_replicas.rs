//! Stateless replicas: `serve` with start-up pools (`ServeConfig::pools`, `serve --pool
//! NAME=FILE`). `/readyz` is 503 while a pool loads and 200 once every one is resident; a
//! request naming a pool still loading gets 503; a pool that fails to load stops the
//! server with an error naming it; and two CLI replicas started alike, behind a
//! round-robin client, answer every request of a burst as each other does.

use crate::serve::{agent, call, pool_rows, post, quiet, Server};
use crate::serve_hostile::Cli;
use ctxprune::io::write_npy_f32;
use ctxprune::serve::{serve, ServeConfig};
use ctxprune::Engine;
use serde_json::{json, Value};
use std::path::Path;
use std::time::{Duration, Instant};

pub fn write_pool(path: &Path, rows: &[Vec<f32>]) {
    write_npy_f32(path, rows.len(), rows[0].len(), &rows.concat()).expect("write the pool");
}

/// Polls `/readyz` until 200 (at most 60 s), checking at every answer that "ready" and
/// the status agree and that a pool listed as loading is not yet served.
pub(crate) fn wait_ready(base: &str, pool: &str) -> Value {
    let t0 = Instant::now();
    loop {
        let (st, v, _) = call("GET", &format!("{base}/readyz"), None);
        assert_eq!(v["ready"], json!(st == 200), "{st} {v}");
        if st == 200 {
            assert_eq!(v["loading"], json!([]));
            return v;
        }
        assert_eq!(st, 503, "{v}");
        assert!(v["loading"].as_array().is_some_and(|l| !l.is_empty()), "{v}");
        let (pst, pv, _) = call("GET", &format!("{base}/v1/pools/{pool}"), None);
        if v["loading"].as_array().is_some_and(|l| l.contains(&json!(pool))) {
            assert!(pst == 503 || pst == 200, "{pst} {pv}"); // it may land between the two calls
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "not ready after 60 s: {v}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn startup_pools_are_resident_when_ready_and_answer_as_uploaded_ones() {
    let dir = tempfile::tempdir().expect("tmp");
    let rows = pool_rows(1201, 37, 9);
    let other = pool_rows(53, 5, 10);
    let (a, b) = (dir.path().join("docs.npy"), dir.path().join("small.npy"));
    write_pool(&a, &rows);
    write_pool(&b, &other);
    let s = Server::start(ServeConfig {
        pools: vec![
            ("docs".into(), a.display().to_string()),
            ("small".into(), b.display().to_string()),
        ],
        ..quiet()
    });
    wait_ready(&s.url(""), "docs");
    let (st, list, _) = call("GET", &s.url("/v1/pools"), None);
    assert_eq!(st, 200);
    let names: Vec<&str> = list["pools"]
        .as_array()
        .expect("pools")
        .iter()
        .map(|p| p["name"].as_str().expect("name"))
        .collect();
    assert_eq!(names, ["docs", "small"]);
    // The same answers as a pool uploaded by PUT.
    let up = Server::start(quiet());
    let (st, _, _) = call(
        "PUT",
        &up.url("/v1/pools/docs"),
        Some(&json!({"embeddings": rows})),
    );
    assert_eq!(st, 200);
    for (i, q) in pool_rows(7, 37, 11).iter().enumerate() {
        let body = json!({"pool": "docs", "query": q, "method": (["mmr", "dpp"][i % 2]), "k": 9});
        let (s1, v1) = post(&s, "/v1/select", body.clone());
        let (s2, v2) = post(&up, "/v1/select", body);
        assert_eq!((s1, s2), (200, 200), "{v1} {v2}");
        assert_eq!(v1["selected"], v2["selected"]);
        assert_eq!(v1["gains"], v2["gains"]);
    }
}

#[test]
fn a_pool_that_fails_to_load_stops_the_server_naming_it() {
    let dir = tempfile::tempdir().expect("tmp");
    let bad = dir.path().join("bad.npy");
    std::fs::write(&bad, b"not an npy file at all").expect("write");
    let good = dir.path().join("good.npy");
    write_pool(&good, &pool_rows(5, 4, 2));
    let cfg = ServeConfig {
        pools: vec![
            ("good".into(), good.display().to_string()),
            ("bad".into(), bad.display().to_string()),
        ],
        ..quiet()
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let out = rt.block_on(async move {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        tokio::time::timeout(
            Duration::from_secs(60),
            serve(l, Engine::cpu(), cfg, std::future::pending::<()>()),
        )
        .await
    });
    let Err(e) = out.expect("stopped by itself") else {
        panic!("an error")
    };
    let text = e.to_string();
    assert!(text.contains("pool 'bad'") && text.contains("bad.npy"), "{text}");
    assert_eq!(text.lines().count(), 1, "{text}");
    // The library's router loads them before it returns, with the same error.
    let cfg = ServeConfig {
        pools: vec![("bad".into(), bad.display().to_string())],
        ..quiet()
    };
    let Err(e) = ctxprune::serve::router(Engine::cpu(), cfg) else {
        panic!("an error")
    };
    assert!(e.to_string().contains("pool 'bad'"), "{e}");
}

#[test]
fn two_cli_replicas_behind_round_robin_answer_alike() {
    let dir = tempfile::tempdir().expect("tmp");
    let rows = pool_rows(2003, 48, 21);
    let file = dir.path().join("corpus.npy");
    write_pool(&file, &rows);
    let spec = format!("docs={}", file.display());
    let replicas = [Cli::start(&["--pool", &spec]), Cli::start(&["--pool", &spec])];
    let base = |r: &Cli| format!("http://{}", r.addr);
    for r in &replicas {
        let v = wait_ready(&base(r), "docs");
        assert_eq!(v["backend"], "cpu");
    }
    // A bounded burst, round robin; each request is also asked of the other replica.
    let http = agent();
    let queries = pool_rows(60, 48, 22);
    for (i, q) in queries.iter().enumerate() {
        let mut body =
            json!({"pool": "docs", "query": q, "method": (["mmr", "dpp"][i % 2]), "k": 1 + i % 17});
        if i % 2 == 0 {
            body["lambda"] = json!(0.3 + 0.01 * i as f64);
        }
        let ask = |r: &Cli| -> Value {
            let resp = http
                .post(format!("{}/v1/select", base(r)))
                .send(body.to_string())
                .expect("a response");
            assert_eq!(resp.status().as_u16(), 200);
            serde_json::from_str(&resp.into_body().read_to_string().expect("body")).expect("JSON")
        };
        let (mine, other) = (&replicas[i % 2], &replicas[1 - i % 2]);
        let (a, b) = (ask(mine), ask(other));
        assert_eq!(a["selected"], b["selected"], "request {i}");
        assert_eq!(a["gains"], b["gains"], "request {i}");
    }
    // Bad --pool flags: one line naming the flag, before anything listens.
    for args in [
        vec![
            "--pool".to_string(),
            spec.clone(),
            "--pool".to_string(),
            spec.clone(),
        ],
        vec!["--pool".to_string(), "docs=/no/such/file.npy".to_string()],
        vec!["--pool".to_string(), "bad name=x.npy".to_string()],
        vec![
            "--pool".to_string(),
            format!("{}={}", "n".repeat(65), file.display()),
        ],
        vec!["--pool".to_string(), "docs=corpus.txt".to_string()],
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_ctxprune"))
            .args(["serve", "--addr", "127.0.0.1:0", "--backend", "cpu"])
            .args(&args)
            .output()
            .expect("run");
        let e = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && e.lines().count() == 1 && e.contains("--pool"),
            "{args:?}: {e}"
        );
    }
}
