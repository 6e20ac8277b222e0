//! `ctxprune serve`: the engine as an HTTP service (feature `serve`; tokio + axum).
//!
//! One process opens its engine once and keeps named pools resident across requests; it
//! scales out as identical stateless replicas behind an ordinary load balancer (named
//! pools are a per-replica cache: upload to each, or send embeddings inline).
//!
//! Every endpoint's work runs on tokio's blocking pool behind a fixed number of permits
//! (`max_concurrent`, by default one per core) and a bounded queue (`max_queue`): a
//! request that finds the queue full is answered 503 with `Retry-After` at once, never
//! queued without bound. Each request has a deadline (504), a body cap (413), a
//! request id, one JSON log line on stderr, and its counts in `/metrics`.

mod api;
mod body;
mod metrics;
pub mod openapi;
mod pools;

use crate::error::{Error, ErrorKind};
use crate::tokens::TokenCounter;
use crate::Engine;
use axum::body::Bytes;
use axum::extract::{MatchedPath, Path, State};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::Router;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

pub use metrics::Metrics;
pub use pools::Pools;

/// Server settings; [`ServeConfig::default`] gives the documented defaults.
#[derive(Clone, Debug)]
pub struct ServeConfig {
    /// Largest request body, in bytes (413 above). By default 64 MiB.
    pub max_body_bytes: usize,
    /// Deadline of one request (504 after it). By default 30 s.
    pub timeout: Duration,
    /// Requests computing at once. By default the machine's threads.
    pub max_concurrent: usize,
    /// Requests waiting for one of those, first come first served, within their deadline;
    /// a request that finds the queue full is answered 503 with `Retry-After`. By
    /// default 256.
    pub max_queue: usize,
    /// Bytes of resident named pools (413 for an upload past it). By default 1 GiB.
    pub max_pool_bytes: usize,
    /// The rerank upstream when a request names none (TEI or Cohere-style).
    pub oracle_url: Option<String>,
    /// Its API: `tei` or `cohere`. By default `tei`.
    pub oracle_api: String,
    /// Whether a request may name its own oracle URL (off: the server would call any URL
    /// a client gives it).
    pub allow_oracle_urls: bool,
    /// Largest batch of texts in one upstream call (bigger calls are split). By default 32.
    pub max_batch: usize,
    /// Write one JSON line per request on stderr. By default on.
    pub log: bool,
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            max_body_bytes: 64 << 20,
            timeout: Duration::from_secs(30),
            max_concurrent: std::thread::available_parallelism().map_or(4, |n| n.get()),
            max_queue: 256,
            max_pool_bytes: 1 << 30,
            oracle_url: None,
            oracle_api: "tei".into(),
            allow_oracle_urls: false,
            max_batch: 32,
            log: true,
        }
    }
}

/// What every handler shares.
pub struct Shared {
    engine: Engine,
    cfg: ServeConfig,
    pools: Pools,
    permits: Arc<Semaphore>,
    waiting: std::sync::atomic::AtomicUsize,
    metrics: Metrics,
    counters: Mutex<HashMap<String, Arc<dyn TokenCounter>>>,
    next_id: AtomicU64,
}

impl Shared {
    /// A named token counter (`o200k_base`, `cl100k_base`, `approx`), loaded once.
    fn counter(&self, name: &str) -> crate::Result<Arc<dyn TokenCounter>> {
        if !matches!(name, "o200k_base" | "cl100k_base" | "approx") {
            return Err(Error::invalid(
                "tokenizer",
                format!("unknown tokenizer '{name}' (o200k_base, cl100k_base, approx; the server reads no tokenizer file)"),
            ));
        }
        let mut c = self.counters.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(t) = c.get(name) {
            return Ok(t.clone());
        }
        let t = crate::tokens::counter(name)?;
        c.insert(name.into(), t.clone());
        Ok(t)
    }
}

/// An error response: a status and one line, as `{"error": "..."}`.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    msg: String,
    retry_after: Option<u64>,
}

impl ApiError {
    fn new(status: StatusCode, msg: impl Into<String>) -> Self {
        ApiError {
            status,
            msg: msg.into(),
            retry_after: None,
        }
    }
}

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        let status = match e.kind() {
            // Malformed JSON is a 400; a well-formed request with bad values a 422.
            ErrorKind::InvalidInput if matches!(&e, Error::InvalidArgument { name, .. } if name == "body") => {
                StatusCode::BAD_REQUEST
            }
            ErrorKind::InvalidInput => StatusCode::UNPROCESSABLE_ENTITY,
            ErrorKind::Unsupported => StatusCode::UNPROCESSABLE_ENTITY,
            ErrorKind::Oracle => StatusCode::BAD_GATEWAY,
            ErrorKind::DeviceUnavailable | ErrorKind::DeviceFailed => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        ApiError::new(status, e.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut r = (self.status, axum::Json(json!({"error": self.msg}))).into_response();
        if let Some(s) = self.retry_after {
            r.headers_mut().insert("retry-after", HeaderValue::from(s));
        }
        r
    }
}

/// A successful answer: a JSON value, or JSON text already written (the masked messages,
/// kept byte for byte).
pub enum Reply {
    /// A value to serialise.
    Value(Value),
    /// JSON text as it is.
    Raw(String),
}

impl From<Value> for Reply {
    fn from(v: Value) -> Self {
        Reply::Value(v)
    }
}

impl IntoResponse for Reply {
    fn into_response(self) -> Response {
        match self {
            Reply::Value(v) => axum::Json(v).into_response(),
            Reply::Raw(t) => ([("content-type", "application/json")], t).into_response(),
        }
    }
}

type Answer = Result<Reply, ApiError>;

/// Runs `work` on the blocking pool under a permit and the deadline: 503 when every
/// permit is taken, 504 past the deadline (the work finishes in the background and then
/// frees its permit, so the count of running work stays true).
async fn compute<R: Into<Reply> + Send + 'static>(
    s: Arc<Shared>,
    work: impl FnOnce(&Shared) -> Result<R, ApiError> + Send + 'static,
) -> Answer {
    let start = Instant::now();
    let deadline = s.cfg.timeout;
    let overloaded = |s: &Shared| {
        let mut e = ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "overloaded: {} requests computing and {} waiting (--max-concurrent, --max-queue); retry shortly",
                s.cfg.max_concurrent, s.cfg.max_queue
            ),
        );
        e.retry_after = Some(1);
        e
    };
    let timed_out = || {
        ApiError::new(
            StatusCode::GATEWAY_TIMEOUT,
            format!("no answer within the request timeout of {deadline:?} (--timeout)"),
        )
    };
    let permit = match s.permits.clone().try_acquire_owned() {
        Ok(p) => p,
        Err(_) => {
            // Wait in the bounded queue, or be refused at once when it is full.
            let queued = s.waiting.fetch_add(1, Ordering::AcqRel);
            if queued >= s.cfg.max_queue {
                s.waiting.fetch_sub(1, Ordering::AcqRel);
                return Err(overloaded(&s));
            }
            let got = tokio::time::timeout(deadline, s.permits.clone().acquire_owned()).await;
            s.waiting.fetch_sub(1, Ordering::AcqRel);
            match got {
                Ok(Ok(p)) => p,
                Ok(Err(_)) => return Err(overloaded(&s)),
                Err(_) => return Err(timed_out()),
            }
        }
    };
    let deadline = deadline.saturating_sub(start.elapsed());
    let shared = s.clone();
    let task = tokio::task::spawn_blocking(move || {
        let _permit = permit;
        // A panic in the work is caught here and answered as a 500, never taking the
        // process or other requests down.
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| work(&shared).map(Into::into)))
            .unwrap_or_else(|_| {
                Err(ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal error (a bug: please report the request)",
                ))
            })
    });
    match tokio::time::timeout(deadline, task).await {
        Ok(Ok(r)) => r,
        Ok(Err(_)) => Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal error (the task ended)",
        )),
        Err(_) => Err(timed_out()),
    }
}

async fn select(State(s): State<Arc<Shared>>, body: Bytes) -> Answer {
    compute(s, move |s| api::select(s, &body)).await
}

async fn rerank(State(s): State<Arc<Shared>>, body: Bytes) -> Answer {
    compute(s, move |s| api::rerank(s, &body)).await
}

async fn mask(State(s): State<Arc<Shared>>, body: Bytes) -> Answer {
    compute(s, move |s| api::mask(s, &body)).await
}

async fn flops(State(s): State<Arc<Shared>>, body: Bytes) -> Answer {
    compute(s, move |_| api::flops(&body)).await
}

async fn etc(State(s): State<Arc<Shared>>, body: Bytes) -> Answer {
    compute(s, move |_| api::etc(&body)).await
}

async fn plan(State(s): State<Arc<Shared>>, body: Bytes) -> Answer {
    compute(s, move |_| api::plan(&body)).await
}

async fn put_pool(State(s): State<Arc<Shared>>, Path(name): Path<String>, body: Bytes) -> Answer {
    compute(s, move |s| api::put_pool(s, &name, &body)).await
}

async fn get_pool(State(s): State<Arc<Shared>>, Path(name): Path<String>) -> Answer {
    s.pools.describe(&name).map(Reply::Value)
}

async fn delete_pool(State(s): State<Arc<Shared>>, Path(name): Path<String>) -> Answer {
    s.pools.remove(&name).map(Reply::Value)
}

async fn list_pools(State(s): State<Arc<Shared>>) -> axum::Json<Value> {
    axum::Json(s.pools.list())
}

async fn healthz() -> axum::Json<Value> {
    axum::Json(json!({"status": "ok"}))
}

async fn readyz(State(s): State<Arc<Shared>>) -> axum::Json<Value> {
    // The engine was opened (and, on a device, self-tested) before the server listened.
    axum::Json(json!({"ready": true, "backend": s.engine.name(), "engine": s.engine.describe()}))
}

async fn metrics_text(State(s): State<Arc<Shared>>) -> Response {
    let text = s.metrics.render(&s.engine, &s.pools);
    ([("content-type", "text/plain; version=0.0.4")], text).into_response()
}

async fn openapi_doc() -> axum::Json<Value> {
    axum::Json(openapi::document())
}

async fn not_found() -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "no such endpoint (GET /openapi.json lists them)",
    )
}

/// The request id, the log line and the metrics of every request; the body cap.
async fn around(
    State(s): State<Arc<Shared>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let id = s.next_id.fetch_add(1, Ordering::Relaxed);
    let t = Instant::now();
    let method = req.method().clone();
    let path = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |p| p.as_str().to_string());
    let uri = req.uri().path().to_string();
    let too_big = req
        .headers()
        .get("content-length")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .is_some_and(|n| n > s.cfg.max_body_bytes as u64);
    let mut resp = if too_big {
        body_too_large(&s)
    } else {
        let r = next.run(req).await;
        // A body that streamed past the cap without a length is refused by the extractor
        // (axum's own 413, text): answer it in the JSON form too.
        if r.status() == StatusCode::PAYLOAD_TOO_LARGE
            && r.headers()
                .get("content-type")
                .is_some_and(|c| c != "application/json")
        {
            body_too_large(&s)
        } else {
            r
        }
    };
    let ms = t.elapsed().as_secs_f64() * 1e3;
    let status = resp.status().as_u16();
    resp.headers_mut().insert("x-request-id", HeaderValue::from(id));
    s.metrics.record(method.as_str(), &path, status, ms);
    if s.cfg.log {
        let line = json!({
            "ts": std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64()),
            "id": id, "method": method.as_str(), "path": uri, "route": path, "status": status, "ms": ms,
        });
        eprintln!("{line}");
    }
    resp
}

fn body_too_large(s: &Shared) -> Response {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!(
            "request body over {} bytes (--max-body-bytes)",
            s.cfg.max_body_bytes
        ),
    )
    .into_response()
}

/// The service's routes over `engine`.
pub fn router(engine: Engine, cfg: ServeConfig) -> Router {
    let shared = Arc::new(Shared {
        pools: Pools::new(cfg.max_pool_bytes),
        permits: Arc::new(Semaphore::new(cfg.max_concurrent.max(1))),
        waiting: std::sync::atomic::AtomicUsize::new(0),
        metrics: Metrics::default(),
        counters: Mutex::new(HashMap::new()),
        next_id: AtomicU64::new(1),
        engine,
        cfg,
    });
    Router::new()
        .route("/v1/select", post(select))
        .route("/v1/rerank", post(rerank))
        .route("/v1/mask", post(mask))
        .route("/v1/cost/flops", post(flops))
        .route("/v1/cost/etc", post(etc))
        .route("/v1/cost/plan", post(plan))
        .route("/v1/pools", get(list_pools))
        .route(
            "/v1/pools/{name}",
            put(put_pool).get(get_pool).delete(delete_pool),
        )
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .route("/openapi.json", get(openapi_doc))
        .fallback(not_found)
        .layer(axum::extract::DefaultBodyLimit::max(shared.cfg.max_body_bytes))
        .layer(axum::middleware::from_fn_with_state(shared.clone(), around))
        .with_state(shared)
}

/// Serves on `listener` until `shutdown` resolves, then stops accepting and finishes the
/// requests in flight. The caller opens the engine (and so its self-test) first.
pub async fn serve(
    listener: tokio::net::TcpListener,
    engine: Engine,
    cfg: ServeConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> crate::Result<()> {
    let addr: Option<SocketAddr> = listener.local_addr().ok();
    let app = router(engine, cfg);
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
        .map_err(|e| Error::invalid("serve", format!("the server on {addr:?} failed: {e}")))
}

/// Resolves on SIGTERM or Ctrl-C (SIGINT).
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
}
