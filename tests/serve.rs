//! `ctxprune serve` on a loopback port: every endpoint against the library's answers,
//! every error status, and the limits (body cap, pool cap, timeout, overload, shutdown
//! with requests in flight).

use ctxprune::rerank::{Precomputed, RerankOptions, Reranker};
use ctxprune::select::{Request, SelectOptions, Selector};
use ctxprune::serve::{openapi, serve, ServeConfig, Stopped};
use ctxprune::{Embeddings, Engine, Pool};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::time::{Duration, Instant};

/// The server under test, on its own runtime thread.
pub struct Server {
    pub addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<Stopped>>,
}

impl Server {
    pub fn start(cfg: ServeConfig) -> Server {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (tx, rx) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
                tx.send(l.local_addr().expect("addr")).expect("send");
                serve(l, Engine::cpu(), cfg, async {
                    let _ = stopped.await;
                })
                .await
                .expect("serve")
            })
        });
        Server {
            addr: rx.recv().expect("the server's address"),
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Stops accepting; returns once every request in flight was answered or abandoned,
    /// with how it stopped (`None` when it was already stopped).
    pub fn shutdown(&mut self) -> Option<Stopped> {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        self.thread.take().map(|t| t.join().expect("server thread"))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.shutdown();
    }
}

pub fn quiet() -> ServeConfig {
    ServeConfig {
        log: false,
        ..ServeConfig::default()
    }
}

pub fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(60)))
        .build()
        .into()
}

/// (status, JSON body, headers we check).
pub fn call(method: &str, url: &str, body: Option<&Value>) -> (u16, Value, Option<String>) {
    let body = body.map(|v| v.to_string().into_bytes());
    let (status, v, mut headers) = exchange(method, url, body.as_deref(), &["retry-after"]);
    (status, v, headers.pop().flatten())
}

/// (status, the body as JSON, or as a JSON string when it is not JSON, and the values of
/// the response headers `wanted`, in order).
pub fn exchange(
    method: &str,
    url: &str,
    body: Option<&[u8]>,
    wanted: &[&str],
) -> (u16, Value, Vec<Option<String>>) {
    let a = agent();
    let body = body.unwrap_or_default();
    let resp = match method {
        "GET" => a.get(url).call(),
        "DELETE" => a.delete(url).call(),
        "PUT" => a.put(url).send(body),
        _ => a.post(url).send(body),
    }
    .expect("a response");
    let status = resp.status().as_u16();
    let headers = wanted
        .iter()
        .map(|h| {
            resp.headers()
                .get(*h)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        })
        .collect();
    let text = resp.into_body().read_to_string().unwrap_or_default();
    let v = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, v, headers)
}

pub fn post(s: &Server, path: &str, body: Value) -> (u16, Value) {
    let (st, v, _) = call("POST", &s.url(path), Some(&body));
    (st, v)
}

pub fn pool_rows(n: usize, d: usize, seed: u64) -> Vec<Vec<f32>> {
    let mut rng = ctxprune::rng::Rng::new(seed);
    (0..n)
        .map(|_| (0..d).map(|_| rng.normal() as f32).collect())
        .collect()
}

fn embeddings(rows: &[Vec<f32>]) -> Embeddings {
    Embeddings::new(rows.len(), rows[0].len(), rows.concat(), "rows").expect("rows")
}

#[test]
fn a_batch_of_queries_answers_as_one_select_per_query() {
    let s = Server::start(quiet());
    let rows = pool_rows(83, 11, 4);
    let qs: Vec<Vec<f32>> = [3usize, 40, 77]
        .iter()
        .map(|&i| rows[i].iter().map(|x| x + 0.2).collect())
        .collect();
    let engine = Engine::cpu();
    let pool = Pool::new(&engine, embeddings(&rows)).unwrap();
    let (st, _, _) = call("PUT", &s.url("/v1/pools/b"), Some(&json!({"embeddings": rows})));
    assert_eq!(st, 200);
    for method in ["mmr", "dpp", "coverage"] {
        let opts = SelectOptions {
            method,
            k: Some(5),
            ..SelectOptions::default()
        };
        let sel = Selector::new(&engine, opts.config().unwrap()).unwrap();
        for body in [
            json!({"method": method, "k": 5, "pool": "b", "queries": qs}),
            json!({"method": method, "k": 5, "embeddings": rows, "queries": qs}),
        ] {
            let (st, v) = post(&s, "/v1/select", body);
            assert_eq!(st, 200, "{method}: {v}");
            let results = v["results"].as_array().expect("results");
            assert_eq!(results.len(), qs.len());
            for (q, r) in qs.iter().zip(results) {
                let want = sel
                    .select(
                        &pool,
                        &Request {
                            query: Some(q),
                            ..Request::default()
                        },
                    )
                    .unwrap();
                assert_eq!(r["selected"], json!(want.selected), "{method}");
                assert_eq!(r["gains"], json!(want.gains), "{method}");
            }
        }
    }
    // Bad batches name what is wrong.
    let mut bad_q = qs.clone();
    bad_q[1] = vec![0.0; 11];
    for (body, field) in [
        (
            json!({"method": "mmr", "k": 2, "pool": "b", "queries": qs, "query": qs[0]}),
            "queries",
        ),
        (
            json!({"method": "mmr", "k": 2, "pool": "b", "queries": bad_q}),
            "queries[1]",
        ),
        (
            json!({"method": "mmr", "k": 2, "pool": "b", "queries": [[1.0, 2.0]]}),
            "queries[0]",
        ),
        (
            json!({"method": "lexical", "k": 2, "queries": qs, "texts": ["a"], "query_text": "a"}),
            "queries",
        ),
        (json!({"method": "mmr", "k": 2, "queries": qs}), "pool"),
    ] {
        let (st, v) = post(&s, "/v1/select", body);
        assert_eq!(st, 422, "{field}: {v}");
        assert!(v["error"].as_str().unwrap_or("").contains(field), "{field}: {v}");
    }
}

#[test]
fn select_inline_named_and_base64_equal_the_library() {
    let s = Server::start(quiet());
    let rows = pool_rows(97, 13, 3);
    let q: Vec<f32> = rows[5].iter().map(|x| x + 0.1).collect();
    let e = embeddings(&rows);
    let engine = Engine::cpu();
    let pool = Pool::new(&engine, e.clone()).unwrap();
    for (method, k) in [
        ("mmr", 9),
        ("dpp", 7),
        ("coverage", 6),
        ("grn", 5),
        ("centroid", 4),
        ("hybrid", 8),
    ] {
        let opts = SelectOptions {
            method,
            k: Some(k),
            threshold: (method == "hybrid").then_some(-10.0),
            ..SelectOptions::default()
        };
        let sel = Selector::new(&engine, opts.config().unwrap()).unwrap();
        let reads = ctxprune::select::Method::reads_query(method.parse().unwrap());
        let want = sel
            .select(
                &pool,
                &Request {
                    query: reads.then_some(&q[..]),
                    ..Request::default()
                },
            )
            .unwrap();
        let mut body = json!({"method": method, "k": k, "embeddings": rows});
        if reads {
            body["query"] = json!(q);
        }
        if method == "hybrid" {
            body["threshold"] = json!(-10.0);
        }
        let (st, v) = post(&s, "/v1/select", body.clone());
        assert_eq!(st, 200, "{method}: {v}");
        assert_eq!(v["selected"], json!(want.selected), "{method}");
        assert_eq!(v["gains"], json!(want.gains), "{method}");
        assert_eq!(v["stopped_by"], "item_budget");
        // The same through a named pool and through base64 f32.
        let (st, _, _) = call("PUT", &s.url("/v1/pools/p"), Some(&json!({"embeddings": rows})));
        assert_eq!(st, 200);
        body.as_object_mut().unwrap().remove("embeddings");
        body["pool"] = json!("p");
        let (st, v) = post(&s, "/v1/select", body.clone());
        assert_eq!((st, &v["selected"]), (200, &json!(want.selected)), "{v}");
        let bytes: Vec<u8> = rows.concat().iter().flat_map(|x| x.to_le_bytes()).collect();
        use base64::Engine as _;
        body.as_object_mut().unwrap().remove("pool");
        body["embeddings"] = json!({"base64": base64::engine::general_purpose::STANDARD.encode(&bytes), "dtype": "f32", "shape": [97, 13]});
        let (st, v) = post(&s, "/v1/select", body);
        assert_eq!((st, &v["selected"]), (200, &json!(want.selected)), "{v}");
    }
    // f16 base64: the rows rounded to f16.
    let h: Vec<u8> = rows
        .concat()
        .iter()
        .flat_map(|x| half::f16::from_f32(*x).to_le_bytes())
        .collect();
    use base64::Engine as _;
    let (st, v) = post(
        &s,
        "/v1/select",
        json!({"method": "dpp", "k": 3,
        "embeddings": {"base64": base64::engine::general_purpose::STANDARD.encode(&h), "dtype": "f16", "shape": [97, 13]}}),
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["selected"].as_array().unwrap().len(), 3);
}

#[test]
fn rerank_mask_and_cost_answer_as_the_library() {
    let s = Server::start(quiet());
    let rows = pool_rows(60, 8, 9);
    let q = rows[3].clone();
    let scores: Vec<f64> = (0..60).map(|i| ((i * 37) % 60) as f64 / 60.0).collect();
    let engine = Engine::cpu();
    let pool = Pool::new(&engine, embeddings(&rows)).unwrap();
    // The library's run with these options.
    let library = |opts: RerankOptions| {
        Reranker::new(&engine, opts.config().unwrap())
            .unwrap()
            .rerank(&pool, &q, &mut Precomputed::new(scores.clone(), 17).unwrap())
            .unwrap()
    };
    let want = library(RerankOptions::new("boundary-morph", 17, 5));
    let (st, v) = post(
        &s,
        "/v1/rerank",
        json!({"embeddings": rows, "query": q, "budget": 17, "capacity": 5, "oracle_scores": scores}),
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["selected"], json!(want.selected));
    assert_eq!(v["scored"], json!(want.scored));
    assert_eq!(v["hyperparameters"], json!(null));
    // Hyperparameters by the evidence, as the library fits them.
    let want = library(RerankOptions {
        hyperparameters: Some("evidence"),
        ..RerankOptions::new("boundary-morph", 17, 5)
    });
    let (st, v) = post(
        &s,
        "/v1/rerank",
        json!({"embeddings": rows, "query": q, "budget": 17, "capacity": 5, "oracle_scores": scores,
               "hyperparameters": "evidence"}),
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["scored"], json!(want.scored));
    let h = want.hyperparameters.unwrap();
    assert_eq!(v["hyperparameters"]["scale"], json!(h.scale));
    assert_eq!(v["hyperparameters"]["noise"], json!(h.log_noise.exp()));
    let (st, v) = post(
        &s,
        "/v1/rerank",
        json!({"embeddings": rows, "query": q, "budget": 17, "capacity": 5, "oracle_scores": scores,
               "hyperparameters": "evidence", "method": "bagel"}),
    );
    assert_eq!(st, 422, "{v}");
    assert!(v["error"].to_string().contains("hyperparameters"), "{v}");
    // The feedback prior's neighbour share, as the library runs it; out of range, named.
    let want = library(RerankOptions {
        prior: Some("feedback"),
        feedback_neighbours: Some(0.3),
        ..RerankOptions::new("boundary-morph", 17, 5)
    });
    let (st, v) = post(
        &s,
        "/v1/rerank",
        json!({"embeddings": rows, "query": q, "budget": 17, "capacity": 5, "oracle_scores": scores,
               "prior": "feedback", "feedback_neighbours": 0.3}),
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(
        (&v["scored"], &v["selected"]),
        (&json!(want.scored), &json!(want.selected))
    );
    let (st, v) = post(
        &s,
        "/v1/rerank",
        json!({"embeddings": rows, "query": q, "budget": 17, "capacity": 5, "oracle_scores": scores,
               "prior": "feedback", "feedback_neighbours": 2}),
    );
    assert_eq!(st, 422, "{v}");
    assert!(
        v["error"]
            .to_string()
            .contains("feedback_neighbours: 2 is outside [0, 1]"),
        "{v}"
    );
    // method auto: the library's run (BoundaryMORPH with the switch), with the rule among
    // the notes; an option it sets is refused by name.
    let want = library(RerankOptions::new("auto", 17, 5));
    let (st, v) = post(
        &s,
        "/v1/rerank",
        json!({"embeddings": rows, "query": q, "budget": 17, "capacity": 5, "oracle_scores": scores,
               "method": "auto"}),
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["scored"], json!(want.scored));
    assert_eq!(v["method"], "boundary-morph");
    assert!(
        v["notes"]
            .to_string()
            .contains("auto: boundary-morph with the feedback prior"),
        "{v}"
    );
    let (st, v) = post(
        &s,
        "/v1/rerank",
        json!({"embeddings": rows, "query": q, "budget": 17, "capacity": 5, "oracle_scores": scores,
               "method": "auto", "prior": "zero"}),
    );
    assert_eq!(st, 422, "{v}");
    assert!(
        v["error"].to_string().contains("prior") && v["error"].to_string().contains("auto"),
        "{v}"
    );

    let msgs = json!([
        {"role": "user", "content": "go"},
        {"role": "assistant", "tool_calls": [{"id": "a", "type": "function", "function": {"name": "search", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "a", "content": "long result ".repeat(50)},
        {"role": "assistant", "tool_calls": [{"id": "b", "type": "function", "function": {"name": "open", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "b", "content": "page"}
    ]);
    let (st, v) = post(
        &s,
        "/v1/mask",
        json!({"messages": msgs, "window": 1, "format": "openai"}),
    );
    assert_eq!(st, 200, "{v}");
    assert!(v["messages"][2]["content"]
        .as_str()
        .unwrap()
        .starts_with("[observation omitted: search"));
    assert_eq!(v["messages"][4]["content"], "page");
    assert_eq!(v["stats"]["observations_masked"], 1);
    // Anthropic's edit as its API takes it, with its report in the stats.
    let edit = json!({"type": "clear_tool_uses_20250919", "trigger": {"type": "input_tokens", "value": 10},
        "keep": {"type": "tool_uses", "value": 1}, "clear_tool_inputs": true});
    let (st, v) = post(
        &s,
        "/v1/mask",
        json!({"messages": msgs, "edit": edit, "format": "openai"}),
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["stats"]["cleared_tool_uses"], 1);
    assert!(v["stats"]["cleared_input_tokens"].as_u64().unwrap() > 0);
    assert_eq!(v["messages"][1]["tool_calls"][0]["function"]["arguments"], "{}");

    let (st, v) = post(
        &s,
        "/v1/cost/flops",
        json!({"layers": 4, "hidden": 64, "ffn": 256, "q_heads": 4, "context": 100}),
    );
    let want = ctxprune::cost::FlopsOptions {
        layers: Some(4),
        hidden: Some(64),
        ffn: Some(256),
        q_heads: Some(4),
        ..Default::default()
    }
    .gflops_json(100)
    .unwrap();
    assert_eq!((st, v), (200, want));
    let (st, v) = post(
        &s,
        "/v1/cost/etc",
        json!({"input_noncached": 100, "input_cached": 50, "output": 10}),
    );
    assert_eq!((st, v), (200, json!({"etc": 165.0})));
    let (st, v) = post(&s, "/v1/cost/plan", json!({"depth": 40}));
    assert_eq!(
        (st, &v["windows"]),
        (200, &json!([[20, 40], [10, 30], [0, 20]])),
        "{v}"
    );
    for p in ["/healthz", "/readyz", "/v1/pools", "/openapi.json"] {
        assert_eq!(call("GET", &s.url(p), None).0, 200, "{p}");
    }
    // A named pool's life: upload, describe, list, drop.
    let (st, v, _) = call(
        "PUT",
        &s.url("/v1/pools/docs"),
        Some(&json!({"embeddings": rows})),
    );
    assert_eq!(
        (st, &v["rows"], &v["dim"], &v["bytes"]),
        (200, &json!(60), &json!(8), &json!(60 * 8 * 4)),
        "{v}"
    );
    let (st, v, _) = call("GET", &s.url("/v1/pools/docs"), None);
    assert_eq!((st, &v["name"]), (200, &json!("docs")), "{v}");
    let (st, v, _) = call("GET", &s.url("/v1/pools"), None);
    assert_eq!((st, &v["bytes"]), (200, &json!(1920)), "{v}");
    let (st, v, _) = call("DELETE", &s.url("/v1/pools/docs"), None);
    assert_eq!((st, &v["removed"]), (200, &json!("docs")), "{v}");
    assert_eq!(call("GET", &s.url("/v1/pools/docs"), None).0, 404);
    let (st, v, _) = call("GET", &s.url("/readyz"), None);
    assert_eq!(
        (st, &v["ready"], &v["backend"]),
        (200, &json!(true), &json!("cpu"))
    );
    let (st, m, _) = call("GET", &s.url("/metrics"), None);
    let m = m.as_str().unwrap().to_string();
    assert_eq!(st, 200);
    assert!(
        // The paper's, the evidence's, the refused bagel, the neighbour share, the refused
        // share, auto and the refused auto.
        m.contains("ctxprune_requests_total{method=\"POST\",route=\"/v1/rerank\"} 7"),
        "{m}"
    );
    assert!(
        m.contains("ctxprune_request_seconds_bucket{method=\"POST\",route=\"/v1/mask\",le=\"+Inf\"} 2"),
        "{m}"
    );
    assert!(m.contains("ctxprune_backend_info{backend=\"cpu\"} 1"));
}

#[test]
fn every_error_status_with_one_line() {
    let cfg = ServeConfig {
        max_body_bytes: 4096,
        max_pool_bytes: 1000,
        ..quiet()
    };
    let s = Server::start(cfg);
    let cases: Vec<(&str, &str, Value, u16, &str)> = vec![
        (
            "POST",
            "/v1/select",
            Value::String("{\"method\":".into()),
            400,
            "not JSON",
        ),
        ("POST", "/v1/select", json!([1, 2]), 400, "must be a JSON object"),
        (
            "POST",
            "/v1/select",
            json!({"k": 2}),
            422,
            "invalid method: required",
        ),
        (
            "POST",
            "/v1/select",
            json!({"method": "mmr", "k": -1, "embeddings": [[1, 0]]}),
            422,
            "invalid k",
        ),
        (
            "POST",
            "/v1/select",
            json!({"method": "mmr", "k": 1, "embeddings": [[1, 0]], "query": [1, 0], "bogus": 1}),
            422,
            "invalid bogus: unknown field",
        ),
        (
            "POST",
            "/v1/select",
            json!({"method": "grn", "k": 1, "embeddings": [[1, 0]], "query": [1, 0]}),
            422,
            "invalid query: does not apply to grn",
        ),
        (
            "POST",
            "/v1/select",
            json!({"method": "mmr", "k": 1, "embeddings": [[1, 0], [0]], "query": [1, 0]}),
            422,
            "embeddings[1]",
        ),
        (
            "POST",
            "/v1/select",
            json!({"method": "mmr", "k": 1, "embeddings": [[0, 0]], "query": [1, 0]}),
            422,
            "row 0",
        ),
        (
            "POST",
            "/v1/select",
            json!({"method": "mmr", "k": 1, "embeddings": [[1e39, 0]], "query": [1, 0]}),
            422,
            "does not fit in f32",
        ),
        (
            "POST",
            "/v1/select",
            json!({"method": "mmr", "k": 1, "pool": "nope", "query": [1, 0]}),
            404,
            "no pool named 'nope'",
        ),
        (
            "POST",
            "/v1/select",
            json!({"method": "dpp", "embeddings": {"base64": "AAAA", "shape": [2, 2]}}),
            422,
            "needs 16",
        ),
        (
            "POST",
            "/v1/rerank",
            json!({"embeddings": [[1, 0]], "query": [1, 0], "budget": 1, "capacity": 1}),
            422,
            "oracle_scores",
        ),
        (
            "POST",
            "/v1/rerank",
            json!({"embeddings": [[1, 0]], "query": [1, 0], "budget": 1, "capacity": 1, "oracle_url": "http://127.0.0.1:9/x", "texts": ["a"], "query_text": "q"}),
            422,
            "no oracle URL from requests",
        ),
        (
            "POST",
            "/v1/mask",
            json!({"messages": [{"role": "tool", "tool_call_id": "x", "content": "r"}], "format": "openai"}),
            422,
            "message",
        ),
        (
            "POST",
            "/v1/mask",
            json!({"messages": [], "tokenizer": "/etc/passwd"}),
            422,
            "reads no file a request names",
        ),
        (
            "POST",
            "/v1/mask",
            json!({"messages": [], "edit": {"type": "clear_tool_uses_20250919", "keep": {"type": "tool_uses", "value": -1}}}),
            422,
            "edit.keep.value",
        ),
        (
            "POST",
            "/v1/mask",
            json!({"messages": [], "edit": {"type": "clear_tool_uses_20250919"}, "window": 2}),
            422,
            "edit decides it",
        ),
        ("POST", "/v1/cost/plan", json!({"depth": 0}), 422, "depth"),
        (
            "POST",
            "/v1/cost/etc",
            json!({"input_noncached": 1e308, "input_cached": 1e308, "output": 1e308, "beta": 1e308}),
            422,
            "etc",
        ),
        (
            "PUT",
            "/v1/pools/bad%20name",
            json!({"embeddings": [[1, 0]]}),
            422,
            "pool name",
        ),
        (
            "PUT",
            "/v1/pools/big",
            json!({"embeddings": vec![vec![1.0f32; 100]; 3]}),
            413,
            "over --max-pool-bytes 1000",
        ),
        (
            "POST",
            "/v1/select",
            json!({"method": "mmr", "embeddings": vec![vec![1.0f32; 100]; 30]}),
            413,
            "over 4096 bytes",
        ),
        ("GET", "/v1/pools/none", Value::Null, 404, "no pool named"),
        ("GET", "/v2/anything", Value::Null, 404, "no such endpoint"),
    ];
    for (m, p, body, want, words) in cases {
        let b = match &body {
            Value::Null => None,
            Value::String(raw) => {
                let r = agent().post(&s.url(p)).send(raw.clone()).unwrap();
                let st = r.status().as_u16();
                let v: Value = serde_json::from_str(&r.into_body().read_to_string().unwrap()).unwrap();
                assert_eq!(st, want, "{p} {raw}: {v}");
                assert!(v["error"].as_str().unwrap().contains(words), "{v}");
                continue;
            }
            b => Some(b),
        };
        let (st, v, _) = call(m, &s.url(p), b);
        assert_eq!(st, want, "{m} {p} {body}: {v}");
        let e = v["error"]
            .as_str()
            .unwrap_or_else(|| panic!("{m} {p}: no error field: {v}"));
        assert!(e.contains(words) && !e.contains('\n'), "{m} {p}: {e}");
    }
}

/// A rerank upstream on loopback that answers TEI after `delay`, or 500 on /fail.
fn upstream(delay: Duration) -> (String, std::thread::JoinHandle<()>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    let h = std::thread::spawn(move || {
        l.set_nonblocking(false).unwrap();
        let started = Instant::now();
        for stream in l.incoming() {
            if started.elapsed() > Duration::from_secs(30) {
                return;
            }
            let Ok(mut c) = stream else { continue };
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                let (head_end, len) = loop {
                    let n = c.read(&mut chunk).unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&buf[..i]).to_lowercase();
                        let len = head
                            .lines()
                            .find_map(|l| {
                                l.strip_prefix("content-length:")
                                    .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                            })
                            .unwrap_or(0);
                        break (i + 4, len);
                    }
                };
                while buf.len() < head_end + len {
                    let n = c.read(&mut chunk).unwrap_or(0);
                    if n == 0 {
                        break;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                }
                let fail = buf.starts_with(b"POST /fail");
                let req: Value = serde_json::from_slice(&buf[head_end..]).unwrap_or(Value::Null);
                if !fail {
                    std::thread::sleep(delay);
                }
                let n = req["texts"].as_array().map_or(0, Vec::len);
                let body = json!((0..n)
                    .map(|i| json!({"index": i, "score": 0.5}))
                    .collect::<Vec<_>>())
                .to_string();
                let status = if fail {
                    "500 Internal Server Error"
                } else {
                    "200 OK"
                };
                let _ = write!(c, "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}", body.len());
            });
        }
    });
    (url, h)
}

fn slow_rerank(upstream_url: &str) -> Value {
    let rows = pool_rows(20, 4, 1);
    json!({"embeddings": rows, "query": rows[0], "budget": 3, "capacity": 2, "method": "single-stage",
           "oracle_url": format!("{upstream_url}/rerank"), "texts": (0..20).map(|i| format!("doc {i}")).collect::<Vec<_>>(), "query_text": "q"})
}

#[test]
fn timeout_overload_upstream_failure_and_shutdown_in_flight() {
    let (up, _h) = upstream(Duration::from_millis(1500));
    let mut s = Server::start(ServeConfig {
        timeout: Duration::from_millis(600),
        max_concurrent: 1,
        max_queue: 0,
        allow_oracle_urls: true,
        ..quiet()
    });
    // Past the deadline: 504, and the work stops with it (its oracle call waits no longer
    // than the deadline), so the only slot is free again at once, not when the upstream
    // would have answered.
    let t = Instant::now();
    let (st, v) = post(&s, "/v1/rerank", slow_rerank(&up));
    assert_eq!(st, 504, "{v}");
    assert!(t.elapsed() < Duration::from_millis(1400), "{:?}", t.elapsed());
    let etc = json!({"input_noncached": 1, "input_cached": 1, "output": 1});
    let freed = Instant::now();
    loop {
        let (st, v, retry) = call("POST", &s.url("/v1/cost/etc"), Some(&etc));
        if st == 200 {
            break;
        }
        // While it is held: 503 with Retry-After (no queue here).
        assert_eq!((st, retry.as_deref()), (503, Some("1")), "{v}");
        assert!(
            freed.elapsed() < Duration::from_millis(400),
            "the slot stayed taken"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // An upstream that fails: 502. (The slot of the request just answered is released
    // after its answer is written, so on a loaded machine this one may briefly find it
    // taken: 503, retried for at most 400 ms.)
    let mut body = slow_rerank(&up);
    body["oracle_url"] = json!(format!("{up}/fail"));
    let retried = Instant::now();
    let (st, v) = loop {
        let (st, v) = post(&s, "/v1/rerank", body.clone());
        if st != 503 || retried.elapsed() > Duration::from_millis(400) {
            break (st, v);
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert_eq!(st, 502, "{v}");
    s.shutdown();

    // Shutdown while a request is in flight: it is answered, then the server stops.
    let mut s = Server::start(ServeConfig {
        allow_oracle_urls: true,
        ..quiet()
    });
    let url = s.url("/v1/rerank");
    let body = slow_rerank(&up);
    let inflight = std::thread::spawn(move || call("POST", &url, Some(&body)));
    std::thread::sleep(Duration::from_millis(300));
    let t = Instant::now();
    let stopped = s.shutdown().expect("it was running");
    assert_eq!(stopped.abandoned, 0, "{stopped:?}");
    let (st, v, _) = inflight.join().unwrap();
    assert_eq!(st, 200, "{v}");
    assert!(
        t.elapsed() >= Duration::from_millis(500),
        "shutdown did not wait: {:?}",
        t.elapsed()
    );
    // Nothing listens any more.
    assert!(std::net::TcpStream::connect(s.addr).is_err());

    // With a queue, a request that finds every permit taken waits its turn (within its
    // deadline) instead of being refused.
    let s = Server::start(ServeConfig {
        max_concurrent: 1,
        max_queue: 4,
        allow_oracle_urls: true,
        ..quiet()
    });
    let url = s.url("/v1/rerank");
    let body = slow_rerank(&up);
    let slow = std::thread::spawn(move || call("POST", &url, Some(&body)));
    std::thread::sleep(Duration::from_millis(300));
    let t = Instant::now();
    let (st, v, _) = call(
        "POST",
        &s.url("/v1/cost/etc"),
        Some(&json!({"input_noncached": 1, "input_cached": 1, "output": 1})),
    );
    assert_eq!(st, 200, "{v}");
    assert!(
        t.elapsed() >= Duration::from_millis(700),
        "did not wait: {:?}",
        t.elapsed()
    );
    assert_eq!(slow.join().unwrap().0, 200);
}

#[test]
fn the_openapi_document_lists_exactly_the_routes() {
    let s = Server::start(quiet());
    let ops = openapi::operations();
    assert_eq!(ops.len(), 19, "{ops:?}");
    for (m, p) in ops {
        let path = p.replace("{name}", "some-pool");
        let body = (m == "POST" || m == "PUT").then(|| json!({}));
        let (st, v, _) = call(&m, &s.url(&path), body.as_ref());
        let unmatched = st == 405
            || (st == 404
                && v["error"]
                    .as_str()
                    .is_some_and(|e| e.contains("no such endpoint")));
        assert!(!unmatched, "{m} {p} is documented but not served: {st} {v}");
    }
    // And a route that is not documented is not served.
    assert_eq!(call("POST", &s.url("/v1/pools"), Some(&json!({}))).0, 405);
}

/// The CLI: `ctxprune serve --addr 127.0.0.1:0` says where it listens, logs one JSON line
/// per request with the id it sends back as `x-request-id`, and exits 0 on SIGTERM.
#[test]
fn the_cli_logs_each_request_and_stops_on_sigterm() {
    use std::io::BufRead;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_ctxprune"))
        .args(["serve", "--addr", "127.0.0.1:0", "--backend", "cpu"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("ctxprune serve");
    let mut err = std::io::BufReader::new(child.stderr.take().expect("stderr"));
    let mut line = String::new();
    err.read_line(&mut line).expect("the listening line");
    let v: Value = serde_json::from_str(&line).expect("JSON");
    let addr = v["listening"].as_str().expect("listening").to_string();
    let resp = agent()
        .get(format!("http://{addr}/healthz"))
        .call()
        .expect("healthz");
    let id = resp
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    line.clear();
    err.read_line(&mut line).expect("the log line");
    let log: Value = serde_json::from_str(&line).expect("one JSON log line");
    assert_eq!(log["path"], "/healthz");
    assert_eq!(log["status"], 200);
    assert_eq!(log["id"].to_string(), id.expect("x-request-id"));
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    assert!(killed.is_ok_and(|s| s.success()));
    let status = child.wait().expect("exit");
    assert_eq!(status.code(), Some(0), "{status:?}");
    // Bad flags are one line, exit 2 or 1, before anything listens.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ctxprune"))
        .args(["serve", "--addr", "nowhere", "--backend", "cpu"])
        .output()
        .expect("run");
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && e.lines().count() == 1 && e.contains("--addr"),
        "{e}"
    );
}

/// The masked messages come back byte for byte outside the masked contents (a 30-digit
/// integer stays as written), and a config with a repeated key is refused.
#[test]
fn mask_keeps_bytes_and_flops_refuses_repeated_keys() {
    let s = Server::start(quiet());
    let body = r#"{"window": 1, "messages": [{"role":"user","content":"go","n": 123456789012345678901234567890},
 {"role":"assistant","tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"{}"}}]},
 {"role":"tool","tool_call_id":"a","content":"old result"},
 {"role":"assistant","tool_calls":[{"id":"b","type":"function","function":{"name":"f","arguments":"{}"}}]},
 {"role":"tool","tool_call_id":"b","content":"new"}]}"#;
    let r = agent().post(&s.url("/v1/mask")).send(body).expect("mask");
    assert_eq!(r.status().as_u16(), 200);
    let text = r.into_body().read_to_string().expect("body");
    assert!(text.contains(r#""n": 123456789012345678901234567890}"#), "{text}");
    assert!(
        text.contains(r#""content":"new""#) && !text.contains("old result"),
        "{text}"
    );
    let v: Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(v["stats"]["observations_masked"], 1);
    let r = agent()
        .post(&s.url("/v1/cost/flops"))
        .send(r#"{"config": {"num_hidden_layers": 2, "num_hidden_layers": 3, "hidden_size": 8, "intermediate_size": 16, "num_attention_heads": 2}}"#)
        .expect("flops");
    // A repeated key anywhere in a body is a malformed body: 400 on every route.
    assert_eq!(r.status().as_u16(), 400);
    let e = r.into_body().read_to_string().expect("body");
    assert!(e.contains("duplicate key \\\"num_hidden_layers\\\""), "{e}");
}

/// The server's own upstream (`--oracle-url`) serves requests that name none; a request's
/// `oracle_scores` still take precedence.
#[test]
fn the_configured_upstream_answers_requests_without_a_url() {
    let (up, _h) = upstream(Duration::from_millis(0));
    let s = Server::start(ServeConfig {
        oracle_url: Some(format!("{up}/rerank")),
        ..quiet()
    });
    let rows = pool_rows(20, 4, 5);
    let texts: Vec<String> = (0..20).map(|i| format!("doc {i}")).collect();
    let (st, v) = post(
        &s,
        "/v1/rerank",
        json!({"embeddings": rows, "query": rows[0], "budget": 4, "capacity": 2, "method": "single-stage",
               "texts": texts, "query_text": "q"}),
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["oracle_calls"], 4);
    assert!(v["scores"].as_array().unwrap().iter().all(|x| x == 0.5), "{v}");
    let scores: Vec<f64> = (0..20).map(|i| f64::from(i) / 20.0).collect();
    let (st, v) = post(
        &s,
        "/v1/rerank",
        json!({"embeddings": rows, "query": rows[0], "budget": 4, "capacity": 2, "method": "single-stage",
               "oracle_scores": scores}),
    );
    assert_eq!(st, 200, "{v}");
    assert!(v["scores"].as_array().unwrap().iter().any(|x| x != 0.5), "{v}");
    // A URL oracle without the pool's texts is refused, naming them.
    let (st, v) = post(
        &s,
        "/v1/rerank",
        json!({"embeddings": rows, "query": rows[0], "budget": 4, "capacity": 2}),
    );
    assert_eq!(st, 422, "{v}");
    assert!(v["error"].as_str().unwrap().contains("texts"), "{v}");
}

/// Text in: `/v1/embed` is the library's encoder bit for bit (base64) and to the f32 (JSON
/// numbers); `/v1/select` embeds `texts` and `query_text` as the library would and counts
/// their tokens for a budget; the limits and the fields that do not apply are errors
/// naming them; a server without a model says how to start one.
#[test]
fn text_in_embeds_counts_and_refuses_by_name() {
    use base64::Engine as _;
    use ctxprune::embed::{EncodeOptions, SentenceEncoder};
    // Without a model.
    let bare = Server::start(quiet());
    let (st, v, _) = call("GET", &bare.url("/v1/models"), None);
    assert_eq!((st, v), (200, json!({"models": []})));
    let (st, v) = post(&bare, "/v1/embed", json!({"texts": ["a"]}));
    assert_eq!(st, 422);
    assert!(
        v["error"].as_str().unwrap().contains("start it with --model DIR"),
        "{v}"
    );
    let (st, v) = post(
        &bare,
        "/v1/select",
        json!({"method": "grn", "texts": ["a", "b"], "k": 1}),
    );
    assert_eq!(st, 422, "{v}");
    let Some(dir) = crate::embed::minilm_dir() else {
        return;
    };
    let enc = SentenceEncoder::load(&dir).unwrap();
    let s = Server::start(ServeConfig {
        models: vec![("minilm".into(), enc.clone())],
        max_embed_tokens: 64,
        ..quiet()
    });
    let texts = [
        "Parse dates with chrono.",
        "A cat sat on the mat.",
        "Time zones and offsets in Rust.",
        "chrono formats dates and times",
        "Serde serializes structs to JSON.",
    ];
    let lib = enc.encode(&texts, &EncodeOptions::default()).unwrap();
    let (st, v) = post(&s, "/v1/embed", json!({"texts": texts, "encoding": "base64"}));
    assert_eq!(st, 200, "{v}");
    assert_eq!(
        (v["model"].as_str(), v["dim"].as_u64(), v["rows"].as_u64()),
        (Some("minilm"), Some(384), Some(5))
    );
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(v["embeddings"]["base64"].as_str().unwrap())
        .unwrap();
    let lib_bytes: Vec<u8> = lib.as_slice().iter().flat_map(|x| x.to_le_bytes()).collect();
    assert_eq!(bytes, lib_bytes, "base64 is the library's bits");
    let (_, v) = post(&s, "/v1/embed", json!({"texts": texts}));
    let rows: Vec<f32> = v["embeddings"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| r.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32))
        .collect();
    assert_eq!(rows, lib.as_slice(), "JSON numbers read back as the same f32");
    // Select: the texts embedded, the query text embedded, tokens counted (o200k_base).
    let q = enc
        .encode(&["how do I parse dates"], &EncodeOptions::default())
        .unwrap();
    let counter = ctxprune::tokens::counter("o200k_base").unwrap();
    let costs = ctxprune::tokens::costs(counter.as_ref(), &texts);
    let cfg = SelectOptions {
        method: "mmr",
        k: Some(3),
        token_budget: Some(16.0),
        ..SelectOptions::default()
    }
    .config()
    .unwrap();
    let want = Selector::new(&Engine::cpu(), cfg)
        .unwrap()
        .select(
            &Pool::new(&Engine::cpu(), lib.clone()).unwrap(),
            &Request {
                query: Some(q.row(0)),
                costs: Some(&costs),
                ..Request::default()
            },
        )
        .unwrap();
    let (st, v) = post(
        &s,
        "/v1/select",
        json!({"method": "mmr", "texts": texts, "query_text": "how do I parse dates", "k": 3, "token_budget": 16}),
    );
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["selected"], json!(want.selected));
    assert_eq!(v["tokens"].as_f64(), Some(want.tokens_selected));
    // What does not apply, and the limits, by name.
    for (body, needle) in [
        (
            json!({"method": "mmr", "texts": texts, "query": [1.0], "query_text": "x"}),
            "invalid query: the texts are embedded",
        ),
        (
            json!({"method": "mmr", "texts": texts, "query_text": "x", "model": "other"}),
            "unknown model 'other' (this server has: minilm)",
        ),
        (
            json!({"method": "grn", "texts": texts, "query_text": "x"}),
            "invalid query_text: does not apply to grn",
        ),
        (
            json!({"method": "mmr", "texts": texts, "query_text": "x", "tokenizer": "approx"}),
            "invalid tokenizer: applies where",
        ),
        (
            json!({"method": "mmr", "embeddings": [[1.0, 0.0]], "query": [1.0, 0.0], "model": "minilm"}),
            "invalid model: applies where",
        ),
        (
            json!({"method": "mmr", "texts": texts}),
            "invalid query_text: mmr needs the query",
        ),
    ] {
        let (st, v) = post(&s, "/v1/select", body.clone());
        assert_eq!(st, 422, "{body} -> {v}");
        assert!(v["error"].as_str().unwrap().contains(needle), "{body} -> {v}");
    }
    let long = vec!["word ".repeat(40); 2];
    let (st, v) = post(&s, "/v1/embed", json!({"texts": long}));
    assert_eq!(st, 422);
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("over the server's limit of 64 per request (--max-embed-tokens)"),
        "{v}"
    );
    let (st, v) = post(&s, "/v1/embed", json!({"texts": texts, "encoding": "hex"}));
    assert_eq!(st, 422);
    assert_eq!(
        v["error"],
        json!("invalid encoding: unknown encoding 'hex' (float, base64)")
    );
}
