//! Load test of `ctxprune serve` on loopback (issue 13): C connections for S seconds of
//! `POST /v1/select` (MMR, k = 10) over a named pool of N x d, then the same request
//! through the CLI (a process per request) and through `Selector` in-process.
//!
//! `cargo run --release --example load -- [SECONDS=60] [CONNECTIONS=64] [N=1000] [D=384]`
//!
//! Starts the server in this process on 127.0.0.1 (an ephemeral port, the CPU engine,
//! no log lines), each connection a thread with its own keep-alive client. Prints
//! throughput, p50 / p99 latency, requests sent against responses received (and any
//! non-200), the server's time per request (the selection, and request to response), the CLI's per
//! request, and `Selector::select` in-process.

use ctxprune::select::{Request, SelectOptions, Selector};
use ctxprune::serve::{serve, ServeConfig};
use ctxprune::{Embeddings, Engine, Pool};
use serde_json::json;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

fn main() {
    let arg = |i: usize, d: usize| std::env::args().nth(i).and_then(|a| a.parse().ok()).unwrap_or(d);
    let (secs, conns, n, d) = (arg(1, 60), arg(2, 64), arg(3, 1000), arg(4, 384));
    let data = ctxprune::demo::synthetic_pool(n, d, 20, 11);
    let rows: Vec<Vec<f32>> = (0..n).map(|i| data.embeddings.row(i).to_vec()).collect();
    let query = data.query.clone();

    // The server, in this process.
    let (tx, rx) = std::sync::mpsc::channel();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().expect("runtime");
        rt.block_on(async move {
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
            tx.send(l.local_addr().expect("addr")).expect("addr");
            let cfg = ServeConfig {
                log: false,
                ..ServeConfig::default()
            };
            serve(l, Engine::cpu(), cfg, async {
                let _ = stopped.await;
            })
            .await
            .expect("serve");
        });
    });
    let addr = rx.recv().expect("server address");
    let base = format!("http://{addr}");
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let up = agent
        .put(format!("{base}/v1/pools/bench"))
        .send(json!({"embeddings": rows}).to_string())
        .expect("upload");
    assert_eq!(up.status().as_u16(), 200, "pool upload failed");
    let body = json!({"method": "mmr", "k": 10, "pool": "bench", "query": query}).to_string();

    println!("load: {conns} connections x {secs} s of POST /v1/select (mmr, k = 10) over a pool of {n} x {d}, loopback, CPU engine");
    let sent = Arc::new(AtomicU64::new(0));
    let received = Arc::new(AtomicU64::new(0));
    let non200 = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let t0 = Instant::now();
    let workers: Vec<_> = (0..conns)
        .map(|_| {
            let (sent, received, non200, done) =
                (sent.clone(), received.clone(), non200.clone(), done.clone());
            let (url, body) = (format!("{base}/v1/select"), body.clone());
            std::thread::spawn(move || {
                let agent: ureq::Agent = ureq::Agent::config_builder()
                    .http_status_as_error(false)
                    .build()
                    .into();
                let (mut lat, mut compute) = (Vec::new(), Vec::new());
                while !done.load(Ordering::Relaxed) {
                    let t = Instant::now();
                    sent.fetch_add(1, Ordering::Relaxed);
                    if let Ok(r) = agent
                        .post(&url)
                        .header("content-type", "application/json")
                        .send(body.as_str())
                    {
                        let ok = r.status().as_u16() == 200;
                        let text = r.into_body().read_to_string().unwrap_or_default();
                        let v = serde_json::from_str::<serde_json::Value>(&text).ok();
                        if let Some(ms) = v.and_then(|v| v["elapsed_ms"].as_f64()) {
                            compute.push(ms);
                        }
                        received.fetch_add(1, Ordering::Relaxed);
                        if !ok {
                            non200.fetch_add(1, Ordering::Relaxed);
                        }
                        lat.push(t.elapsed().as_secs_f64() * 1e3);
                    }
                }
                (lat, compute)
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(secs as u64));
    done.store(true, Ordering::Relaxed);
    let (mut lat, mut compute) = (Vec::new(), Vec::new());
    for w in workers {
        let (l, c) = w.join().expect("worker");
        lat.extend(l);
        compute.extend(c);
    }
    let wall = t0.elapsed().as_secs_f64();
    let (s, r, bad) = (
        sent.load(Ordering::Relaxed),
        received.load(Ordering::Relaxed),
        non200.load(Ordering::Relaxed),
    );
    println!(
        "  {:.0} requests/s; latency p50 {:.2} ms, p99 {:.2} ms; sent {s}, responses {r} ({bad} not 200){}",
        r as f64 / wall,
        pct(&mut lat, 0.5),
        pct(&mut lat, 0.99),
        if s == r { "" } else { "  <- LOST" }
    );
    let metrics = agent
        .get(format!("{base}/metrics"))
        .call()
        .expect("metrics")
        .into_body()
        .read_to_string()
        .unwrap_or_default();
    let field = |name: &str| {
        metrics
            .lines()
            .find(|l| l.starts_with(name) && l.contains("route=\"/v1/select\""))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(f64::NAN)
    };
    println!(
        "  the server's time per request: the selection (answers' elapsed_ms) median {:.3} ms; \
         request in to response out (its /metrics, mean, waiting for a core among {conns} \
         connections included) {:.3} ms",
        pct(&mut compute, 0.5),
        field("ctxprune_request_seconds_sum") / field("ctxprune_request_seconds_count") * 1e3
    );
    let _ = stop.send(());
    let _ = server.join();

    // In-process: the same selection through Selector.
    let engine = Engine::cpu();
    let pool = Pool::new(
        &engine,
        Embeddings::new(n, d, rows.concat(), "bench").expect("rows"),
    )
    .expect("pool");
    let sel = Selector::new(
        &engine,
        SelectOptions {
            method: "mmr",
            k: Some(10),
            ..SelectOptions::default()
        }
        .config()
        .expect("cfg"),
    )
    .expect("selector");
    let mut t = Vec::new();
    for _ in 0..2000 {
        let s = Instant::now();
        let _ = sel
            .select(
                &pool,
                &Request {
                    query: Some(&query),
                    ..Request::default()
                },
            )
            .expect("select");
        t.push(s.elapsed().as_secs_f64() * 1e3);
    }
    println!(
        "  Selector::select in-process: median {:.3} ms (2000 calls, one thread)",
        pct(&mut t, 0.5)
    );

    // The CLI, a process per request, over the same pool as .npy.
    let exe = std::env::current_exe()
        .ok()
        .and_then(|p| Some(p.parent()?.parent()?.join("ctxprune")));
    match exe.filter(|p| p.exists()) {
        None => println!("  CLI per request: skipped (build the ctxprune binary in the same profile)"),
        Some(exe) => {
            let dir = std::env::temp_dir().join(format!("ctxprune-load-{}", std::process::id()));
            let _ = std::fs::create_dir_all(&dir);
            let st = std::process::Command::new(&exe)
                .args(["make-pool", "--n", &n.to_string(), "--d", &d.to_string(), "--out"])
                .arg(&dir)
                .output();
            if st.map(|o| o.status.success()).unwrap_or(false) {
                let mut t = Vec::new();
                for _ in 0..30 {
                    let s = Instant::now();
                    let o = std::process::Command::new(&exe)
                        .args([
                            "select",
                            "--method",
                            "mmr",
                            "--k",
                            "10",
                            "--backend",
                            "cpu",
                            "--embeddings",
                        ])
                        .arg(dir.join("emb.npy"))
                        .arg("--query")
                        .arg(dir.join("query.npy"))
                        .output()
                        .expect("cli");
                    assert!(o.status.success());
                    t.push(s.elapsed().as_secs_f64() * 1e3);
                }
                let med = pct(&mut t, 0.5);
                println!(
                    "  CLI, a process per request: median {med:.2} ms (30 runs, sequential: {:.0} requests/s)",
                    1e3 / med
                );
            }
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
}
