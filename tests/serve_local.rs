//! `serve::LocalService`, the routes answered in process (what Python's `Service` and the
//! Ray Serve deployment run): every answer, errors included, equals the HTTP server's on
//! the same request, but for the request id and the timings. And `ServeOptions`, the one
//! check of the settings that both start from, names a bad one.

use crate::serve::{exchange, pool_rows, quiet, Server};
use crate::serve_replicas::{wait_ready, write_pool};
use ctxprune::serve::{LocalService, Named, ServeConfig, ServeOptions};
use ctxprune::{Engine, Surface};
use serde_json::{json, Value};

/// `v` without its timings (every `*_ms` field, at any depth): they differ from call
/// to call.
fn untimed(v: Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.into_iter()
                .filter(|(k, _)| !k.ends_with("_ms"))
                .map(|(k, v)| (k, untimed(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.into_iter().map(untimed).collect()),
        v => v,
    }
}

/// (status, body as JSON or as a string, content type) over HTTP.
fn over_http(s: &Server, method: &str, path: &str, body: &[u8]) -> (u16, Value, String) {
    let (status, v, mut ct) = exchange(method, &s.url(path), Some(body), &["content-type"]);
    (status, v, ct.pop().flatten().unwrap_or_default())
}

fn parsed(b: &[u8]) -> Value {
    serde_json::from_slice(b).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(b).into_owned()))
}

#[test]
fn every_answer_in_process_equals_the_servers() {
    let dir = tempfile::tempdir().expect("tmp");
    let rows = pool_rows(301, 13, 21);
    let file = dir.path().join("docs.npy");
    write_pool(&file, &rows);
    let cfg = || ServeConfig {
        pools: vec![("docs".into(), file.display().to_string())],
        max_body_bytes: 60_000,
        ..quiet()
    };
    let local = LocalService::new(Engine::cpu(), cfg()).expect("local service");
    let s = Server::start(cfg());
    // The server listens before its start-up pools are resident (`/readyz` says when);
    // `LocalService::new` returns once they are. Compare from the same state.
    wait_ready(&s.url(""), "docs");
    let q = |i: usize| -> Vec<f32> { rows[i].iter().map(|x| x * 0.5 + 0.1).collect() };
    let scores: Vec<f64> = (0..301).map(|i| ((i * 37) % 301) as f64 / 301.0).collect();
    let small: Vec<Vec<f32>> = rows[..40].to_vec();
    let msgs = json!([
        {"role": "user", "content": "go"},
        {"role": "assistant", "tool_calls": [{"id": "a", "type": "function", "function": {"name": "search", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "a", "content": "long result ".repeat(50)},
        {"role": "assistant", "tool_calls": [{"id": "b", "type": "function", "function": {"name": "open", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "b", "content": "page"}
    ]);
    let json_body = |v: Value| v.to_string().into_bytes();
    let requests: Vec<(&str, String, Vec<u8>)> = vec![
        ("GET", "/healthz".into(), vec![]),
        ("GET", "/v1/pools".into(), vec![]),
        ("GET", "/v1/pools/docs".into(), vec![]),
        (
            "POST",
            "/v1/select".into(),
            json_body(json!({"pool": "docs", "query": q(5), "method": "mmr", "k": 7})),
        ),
        (
            "POST",
            "/v1/select".into(),
            json_body(json!({"pool": "docs", "query": q(9), "method": "dpp", "k": 12})),
        ),
        (
            "POST",
            "/v1/select".into(),
            json_body(json!({"pool": "docs", "queries": [q(1), q(2), q(250)], "method": "mmr", "k": 4})),
        ),
        (
            "POST",
            "/v1/select".into(),
            json_body(json!({"embeddings": small, "query": q(3), "method": "coverage", "k": 5})),
        ),
        (
            "POST",
            "/v1/rerank".into(),
            json_body(
                json!({"pool": "docs", "query": q(7), "budget": 31, "capacity": 6, "oracle_scores": scores}),
            ),
        ),
        (
            "POST",
            "/v1/mask".into(),
            json_body(json!({"messages": msgs, "window": 1})),
        ),
        (
            "PUT",
            "/v1/pools/small".into(),
            json_body(json!({"embeddings": small})),
        ),
        (
            "POST",
            "/v1/select".into(),
            json_body(json!({"pool": "small", "query": q(0), "method": "grn", "k": 3})),
        ),
        ("DELETE", "/v1/pools/small".into(), vec![]),
        // Errors, each with its status and line.
        ("POST", "/v1/select".into(), b"{not json".to_vec()),
        (
            "POST",
            "/v1/select".into(),
            br#"{"method": "mmr", "method": "dpp"}"#.to_vec(),
        ),
        (
            "POST",
            "/v1/select".into(),
            json_body(json!({"pool": "docs", "query": [1.0, 2.0], "method": "mmr", "k": 3})),
        ),
        (
            "POST",
            "/v1/select".into(),
            json_body(json!({"pool": "nope", "query": q(1), "method": "mmr", "k": 3})),
        ),
        (
            "POST",
            "/v1/select".into(),
            json_body(json!({"pool": "docs", "query": q(1), "method": "mmr", "k": 3, "extra": 1})),
        ),
        ("POST", "/v1/select".into(), vec![b' '; 60_001]),
        ("GET", "/v1/select".into(), vec![]),
        ("GET", "/v1/nowhere".into(), vec![]),
        ("DELETE", "/v1/pools/small".into(), vec![]),
        ("GET", "/openapi.json".into(), vec![]),
    ];
    for (method, path, body) in &requests {
        let r = local.handle(method, path, &[], body.clone()).expect("an answer");
        let (st, want, ct) = over_http(&s, method, path, body);
        let what = format!(
            "{method} {path} {}",
            String::from_utf8_lossy(&body[..body.len().min(80)])
        );
        assert_eq!(r.status, st, "{what}: {}", String::from_utf8_lossy(&r.body));
        assert_eq!(untimed(parsed(&r.body)), untimed(want), "{what}");
        let local_ct = r
            .headers
            .iter()
            .find(|(k, _)| k == "content-type")
            .map(|(_, v)| v.as_str());
        assert_eq!(local_ct, Some(ct.as_str()), "{what}");
        assert!(r.headers.iter().any(|(k, _)| k == "x-request-id"), "{what}");
        if st >= 400 {
            let line = parsed(&r.body)["error"]
                .as_str()
                .map(str::to_string)
                .unwrap_or_default();
            assert!(!line.is_empty() && !line.contains('\n'), "{what}: {line}");
        }
    }
    // Headers given are read as the server reads them: a declared length over the cap is
    // refused before the body.
    let r = local
        .handle(
            "POST",
            "/v1/select",
            &[("content-length".into(), "999999999".into())],
            vec![],
        )
        .expect("an answer");
    assert_eq!(r.status, 413);
    // The metrics count the requests it answered.
    let m = local.handle("GET", "/metrics", &[], vec![]).expect("metrics");
    assert_eq!(m.status, 200);
    assert!(String::from_utf8_lossy(&m.body).contains("route=\"/v1/select\""));
}

#[test]
fn requests_that_are_not_http_and_calls_from_async_code_are_errors() {
    let local = LocalService::new(Engine::cpu(), quiet()).expect("local service");
    for (method, path, headers, field) in [
        ("GE T", "/healthz", vec![], "method"),
        ("GET", "healthz", vec![], "path"),
        ("GET", "http://example.com/healthz", vec![], "path"),
        ("GET", "/health z", vec![], "path"),
        (
            "GET",
            "/healthz",
            vec![("bad name".to_string(), "x".to_string())],
            "headers",
        ),
        (
            "GET",
            "/healthz",
            vec![("x-a".to_string(), "line\nbreak".to_string())],
            "headers",
        ),
    ] {
        let e = local.handle(method, path, &headers, vec![]).expect_err(field);
        let line = e.render(Surface::Python);
        assert!(line.starts_with(&format!("invalid {field}:")), "{line}");
        assert!(!line.contains('\n'), "{line}");
    }
    // From inside a runtime it would block that runtime's thread: refused, not a panic.
    let rt = tokio::runtime::Builder::new_current_thread().build().expect("rt");
    let e = rt.block_on(async { local.handle("GET", "/healthz", &[], vec![]) });
    assert!(e.expect_err("async").to_string().contains("async runtime"));
    let e = rt.block_on(async { LocalService::new(Engine::cpu(), quiet()).map(|_| ()) });
    assert!(e.expect_err("async").to_string().contains("async runtime"));
    drop(local);
}

#[test]
fn the_settings_are_checked_once_for_every_surface() {
    let dir = tempfile::tempdir().expect("tmp");
    let file = dir.path().join("docs.npy");
    write_pool(&file, &pool_rows(5, 3, 1));
    let f = file.display().to_string();
    let named = |name: Option<&str>, path: &str| Named {
        name: name.map(str::to_string),
        path: path.to_string(),
    };
    let cases: Vec<(ServeOptions, &str)> = vec![
        (
            ServeOptions {
                threads: Some(0),
                ..Default::default()
            },
            "invalid threads: must be at least 1",
        ),
        (
            ServeOptions {
                max_concurrent: Some(0),
                ..Default::default()
            },
            "invalid max_concurrent: must be at least 1",
        ),
        (
            ServeOptions {
                timeout: Some(f64::NAN),
                ..Default::default()
            },
            "invalid timeout: must be in (0, 86400] seconds, got NaN",
        ),
        (
            ServeOptions {
                grace: Some(0.0),
                ..Default::default()
            },
            "invalid grace: must be in (0, 86400] seconds, got 0",
        ),
        (
            ServeOptions {
                max_work: Some(0.5),
                ..Default::default()
            },
            "invalid max_work: must be a finite number of operations >= 1, got 0.5",
        ),
        (
            ServeOptions {
                oracle_api: Some("tei".into()),
                ..Default::default()
            },
            "invalid oracle_api: applies to oracle_url=",
        ),
        (
            ServeOptions {
                oracle_url: Some("http://127.0.0.1:1".into()),
                oracle_api: Some("x".into()),
                ..Default::default()
            },
            "invalid oracle_api: unknown API 'x' (tei, cohere)",
        ),
        (
            ServeOptions {
                max_embed_tokens: Some(10),
                ..Default::default()
            },
            "invalid max_embed_tokens: applies to model=",
        ),
        (
            ServeOptions {
                pool: vec![named(Some("a b"), &f)],
                ..Default::default()
            },
            "invalid pool: 'a b=",
        ),
        (
            ServeOptions {
                pool: vec![named(Some("a"), &f), named(Some("a"), &f)],
                ..Default::default()
            },
            "the name 'a' is given twice",
        ),
        (
            ServeOptions {
                pool: vec![named(None, "/nowhere/x.npy")],
                ..Default::default()
            },
            "no such file '/nowhere/x.npy'",
        ),
        (
            ServeOptions {
                pool: vec![named(None, "x.csv")],
                ..Default::default()
            },
            "unknown embeddings format '.csv'",
        ),
        (
            ServeOptions {
                tokenizer: vec![named(Some("o200k_base"), &f)],
                ..Default::default()
            },
            "is a built-in tokenizer's name",
        ),
        (
            ServeOptions {
                model: vec![named(Some("m"), "/nowhere")],
                ..Default::default()
            },
            "/nowhere",
        ),
    ];
    for (opts, want) in cases {
        let line = opts.config().map(|_| ()).expect_err(want).render(Surface::Python);
        assert!(line.contains(want), "{want}: {line}");
        assert!(!line.contains('\n'), "{line}");
    }
    // Good settings are the config's fields; a pool without a name takes its file's.
    let cfg = ServeOptions {
        threads: Some(3),
        max_concurrent: Some(2),
        timeout: Some(1.5),
        quiet: true,
        pool: vec![named(None, &f), Named::parse(&format!("other={f}"))],
        ..Default::default()
    }
    .config()
    .expect("good settings");
    assert_eq!((cfg.threads, cfg.max_concurrent, cfg.log), (3, 2, false));
    assert_eq!(cfg.timeout, std::time::Duration::from_millis(1500));
    assert_eq!(
        cfg.pools,
        vec![("docs".to_string(), f.clone()), ("other".to_string(), f)]
    );
}
