//! `ctxprune serve`: the engine as an HTTP service (feature `serve`; tokio + hyper + axum).
//!
//! One process opens its engine once and keeps named pools resident across requests; it
//! scales out as identical stateless replicas behind an ordinary load balancer (named
//! pools are a per-replica cache: upload to each, or send embeddings inline).
//!
//! What a client cannot do to it:
//! - **hold a connection**: a request head must arrive within `header_timeout`, its body
//!   within `body_timeout` (408), or the connection is closed (`conn.rs`);
//! - **hold the compute**: each request's work runs in one of `max_concurrent` slots, each
//!   with its share of the threads (`slots.rs`), behind a bounded queue (503 with
//!   `Retry-After` when full); a request past its deadline (504) is cancelled and stops
//!   within one greedy step or oracle call, freeing its slot;
//! - **ask for more than the server gives**: bodies over `max_body_bytes` (413); work and
//!   memory estimated from the request's sizes before it runs ([`crate::estimate`]),
//!   refused over `max_work` (422) or `max_request_memory` (413), naming the limit;
//! - **keep it from stopping**: on SIGTERM the listener closes, requests in flight get
//!   `grace` to finish, and then the server returns whatever is left ([`Stopped`]);
//! - **get an answer in another shape**: every error, the HTTP layer's own included, is
//!   `{"error": "..."}` with one status per class on every route: 400 a body that is not
//!   JSON (or repeats a key, or nests too deep), 422 a well-formed body with a bad value.
//!
//! Each request also has a request id, one JSON log line on stderr, and its counts in
//! `/metrics`.

mod api;
mod attention;
mod conn;
mod local;
mod metrics;
pub mod openapi;
mod options;
mod pools;
mod slots;
mod text;

use crate::cancel::Cancel;
use crate::error::{Error, ErrorKind};
use crate::tokens::TokenCounter;
use crate::Engine;
use axum::body::{Body, Bytes};
use axum::extract::{MatchedPath, Path, State};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::Router;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub use conn::Stopped;
pub use local::{LocalResponse, LocalService};
pub use metrics::Metrics;
pub use options::{Named, ServeOptions};
pub use pools::Pools;

/// Server settings; [`ServeConfig::default`] gives the documented defaults.
#[derive(Clone, Debug)]
pub struct ServeConfig {
    /// Largest request body, in bytes (413 above). By default 64 MiB.
    pub max_body_bytes: usize,
    /// Deadline of one request's work, from the end of its body to its answer, waiting
    /// for a slot included (504 after it; the work is cancelled). By default 30 s.
    pub timeout: Duration,
    /// Time a request's head may take to arrive; the connection is closed after it. By
    /// default 10 s.
    pub header_timeout: Duration,
    /// Time a request's body may take to arrive once its head is in (408 after it, and
    /// the connection closes). By default 30 s.
    pub body_timeout: Duration,
    /// After a shutdown signal, how long requests in flight may take to finish before
    /// they are abandoned (cancelled, their connections closed). By default 10 s.
    pub grace: Duration,
    /// Requests computing at once (compute slots). By default the machine's threads.
    pub max_concurrent: usize,
    /// Compute threads in all, shared evenly by the slots (each gets
    /// `threads / max_concurrent`, at least one), so one request never takes another
    /// slot's threads. By default the machine's threads.
    pub threads: usize,
    /// Requests waiting for a slot, first come first served, within their deadline; a
    /// request that finds the queue full is answered 503 with `Retry-After`. By default
    /// 256.
    pub max_queue: usize,
    /// Largest estimated work of one request, in arithmetic operations
    /// ([`crate::estimate`]); more is refused with 422 before it starts. By default 3e11
    /// (tens of seconds of one core).
    pub max_work: f64,
    /// Largest estimated memory of one request in bytes (its parsed body and its work's
    /// state, [`crate::estimate`]); more is refused with 413 before it starts. By default
    /// 2 GiB.
    pub max_request_memory: usize,
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
    /// The sentence encoders requests may name (`"model"`), loaded once at start: texts
    /// in `/v1/embed`, and `"texts"` / `"query_text"` in place of embeddings in
    /// `/v1/select`, `/v1/rerank` and `/v1/mask` (semantic masking). With one, requests
    /// need not name it. By default none.
    pub models: Vec<(String, crate::embed::SentenceEncoder)>,
    /// Most tokens one request may embed (its texts tokenised by the model, special
    /// tokens included; 422 above): an encoder's work is its tokens, so this is its
    /// limit instead of `max_work`. By default 262,144 (about 2,000 passages of 128
    /// tokens; all-MiniLM-L6-v2 embeds some 2,000 tokens a second per core).
    pub max_embed_tokens: usize,
    /// HuggingFace tokenizer.json files requests may name (`"tokenizer"`), loaded once at
    /// start: they count texts for a token budget beside the built-in o200k_base,
    /// cl100k_base and approx, and segment prompts (`POST /v1/attention/segment`, which
    /// needs the attended model's own tokenizer). The server reads no file a request
    /// names. By default none.
    pub tokenizers: Vec<(String, Arc<crate::tokens::HfTokenizer>)>,
    /// Named pools to make resident at start, as (name, file): a `.npy`, a
    /// `.safetensors` (`FILE.safetensors:TENSOR` picks a tensor) or JSON lines, as
    /// [`crate::io::load_embeddings`] reads them. [`serve`] listens at once and loads them
    /// in the background: `/readyz` answers 503 (`"ready": false`, the names still
    /// loading) until every one is resident, and a request naming one still loading gets
    /// 503. A pool that fails to load stops the server with the error. So replicas
    /// started with the same pools are identical and stateless behind a load balancer.
    /// [`router`] loads them before it returns. By default none.
    pub pools: Vec<(String, String)>,
}

impl Default for ServeConfig {
    fn default() -> Self {
        let threads = std::thread::available_parallelism().map_or(4, |n| n.get());
        ServeConfig {
            max_body_bytes: 64 << 20,
            timeout: Duration::from_secs(30),
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            grace: Duration::from_secs(10),
            max_concurrent: threads,
            threads,
            max_queue: 256,
            max_work: 3e11,
            max_request_memory: 2 << 30,
            max_pool_bytes: 1 << 30,
            oracle_url: None,
            oracle_api: "tei".into(),
            allow_oracle_urls: false,
            max_batch: 32,
            log: true,
            models: Vec::new(),
            max_embed_tokens: 1 << 18,
            tokenizers: Vec::new(),
            pools: Vec::new(),
        }
    }
}

/// What every handler shares.
pub struct Shared {
    engine: Engine,
    cfg: ServeConfig,
    pools: Pools,
    slots: Arc<slots::Slots>,
    metrics: Metrics,
    counters: Mutex<HashMap<String, Arc<dyn TokenCounter>>>,
    next_id: AtomicU64,
    /// Requests received and not yet answered (the shutdown's drain waits for 0).
    in_flight: AtomicUsize,
    /// Woken when `in_flight` drops.
    idle: tokio::sync::Notify,
}

impl Shared {
    /// A named token counter (`o200k_base`, `cl100k_base`, `approx`), loaded once.
    fn counter(&self, name: &str) -> crate::Result<Arc<dyn TokenCounter>> {
        if let Some((_, t)) = self.cfg.tokenizers.iter().find(|(n, _)| n == name) {
            return Ok(t.clone());
        }
        if !matches!(name, "o200k_base" | "cl100k_base" | "approx") {
            let loaded: Vec<&str> = self.cfg.tokenizers.iter().map(|(n, _)| n.as_str()).collect();
            let loaded = if loaded.is_empty() {
                String::new()
            } else {
                format!(", and the loaded {}", loaded.join(", "))
            };
            return Err(Error::invalid(
                "tokenizer",
                format!(
                    "unknown tokenizer '{name}' (o200k_base, cl100k_base, approx{loaded}; the server reads no file a request names: load one with --tokenizer NAME=FILE)"
                ),
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

    /// A request body's fields, once the memory of reading them is admitted.
    fn fields<'b>(&self, body: &'b [u8]) -> Result<crate::io::fields::Fields<'b>, ApiError> {
        let f = crate::io::fields::Fields::parse(body)?;
        self.admit("reading this body", crate::estimate::typed(f.body_scan()))?;
        Ok(f)
    }

    /// Refuses a request whose estimate passes `max_work` (422) or `max_request_memory`
    /// (413), naming the limit and the flag that sets it.
    fn admit(&self, what: &str, e: crate::estimate::Estimate) -> Result<(), ApiError> {
        let cfg = &self.cfg;
        if e.bytes > cfg.max_request_memory as f64 {
            return Err(ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "{what} would need about {} of memory, over the server's limit of {} per request (--max-request-memory)",
                    crate::estimate::bytes_text(e.bytes),
                    crate::estimate::bytes_text(cfg.max_request_memory as f64)
                ),
            ));
        }
        if e.ops > cfg.max_work {
            return Err(ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                format!(
                    "{what} would take about {:.2e} operations, over the server's limit of {:.2e} per request (--max-work)",
                    e.ops, cfg.max_work
                ),
            ));
        }
        Ok(())
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

    /// A request past its deadline.
    fn late(timeout: Duration) -> Self {
        ApiError::new(
            StatusCode::GATEWAY_TIMEOUT,
            format!(
                "no answer within the request timeout of {} s (--timeout); the work was stopped",
                timeout.as_secs_f64()
            ),
        )
    }
}

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        let status = match e.kind() {
            // A body that is not one JSON object is a 400; a well-formed request with bad
            // values a 422.
            ErrorKind::InvalidInput if matches!(&e, Error::InvalidArgument { name, .. } if name == "body") => {
                StatusCode::BAD_REQUEST
            }
            ErrorKind::InvalidInput => StatusCode::UNPROCESSABLE_ENTITY,
            ErrorKind::Unsupported => StatusCode::UNPROCESSABLE_ENTITY,
            ErrorKind::Oracle => StatusCode::BAD_GATEWAY,
            ErrorKind::DeviceUnavailable | ErrorKind::DeviceFailed => StatusCode::SERVICE_UNAVAILABLE,
            ErrorKind::Cancelled => StatusCode::GATEWAY_TIMEOUT,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        ApiError::new(status, e.render(crate::error::Surface::Http))
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

/// Runs `work` in a compute slot with the request's deadline ([`slots`]): 503 when the
/// queue is full, 504 past the deadline (the work is cancelled and stops within a step).
async fn compute<R: Into<Reply> + Send + 'static>(
    s: Arc<Shared>,
    work: impl FnOnce(&Shared, &Cancel) -> Result<R, ApiError> + Send + 'static,
) -> Answer {
    let timeout = s.cfg.timeout;
    let deadline = Instant::now() + timeout;
    let shared = s.clone();
    let ran = s
        .slots
        .run(deadline, move |c| work(&shared, c).map(Into::into))
        .await;
    match ran {
        Ok(slots::Ended::Done(r)) => r,
        Ok(slots::Ended::Panicked) => Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal error (a bug: please report the request)",
        )),
        Ok(slots::Ended::Late) | Err(slots::Refused::Late) => Err(ApiError::late(timeout)),
        Err(slots::Refused::Full) => {
            let mut e = ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "overloaded: {} requests computing and {} waiting (--max-concurrent, --max-queue); retry shortly",
                    s.slots.running(),
                    s.slots.waiting()
                ),
            );
            e.retry_after = Some(1);
            Err(e)
        }
    }
}

async fn select(State(s): State<Arc<Shared>>, body: Bytes) -> Answer {
    compute(s, move |s, c| api::select(s, &body, c)).await
}

async fn rerank(State(s): State<Arc<Shared>>, body: Bytes) -> Answer {
    compute(s, move |s, c| api::rerank(s, &body, c)).await
}

async fn mask(State(s): State<Arc<Shared>>, body: Bytes) -> Answer {
    compute(s, move |s, c| api::mask(s, &body, c)).await
}

async fn embed(State(s): State<Arc<Shared>>, body: Bytes) -> Answer {
    compute(s, move |s, c| text::embed(s, &body, c)).await
}

async fn attention_segment(State(s): State<Arc<Shared>>, body: Bytes) -> Answer {
    compute(s, move |s, _| attention::segment(s, &body)).await
}

async fn attention_decay(State(s): State<Arc<Shared>>, body: Bytes) -> Answer {
    compute(s, move |s, _| attention::decay(s, &body)).await
}

async fn probe(State(s): State<Arc<Shared>>, body: Bytes) -> Answer {
    compute(s, move |s, _| attention::probe(s, &body)).await
}

async fn models(State(s): State<Arc<Shared>>) -> axum::Json<Value> {
    axum::Json(text::models(&s))
}

async fn flops(State(s): State<Arc<Shared>>, body: Bytes) -> Answer {
    compute(s, move |s, _| api::flops(s, &body)).await
}

async fn etc(State(s): State<Arc<Shared>>, body: Bytes) -> Answer {
    compute(s, move |s, _| api::etc(s, &body)).await
}

async fn plan(State(s): State<Arc<Shared>>, body: Bytes) -> Answer {
    compute(s, move |s, _| api::plan(s, &body)).await
}

async fn put_pool(State(s): State<Arc<Shared>>, Path(name): Path<String>, body: Bytes) -> Answer {
    s.pools.check_upload(&name)?;
    compute(s, move |s, _| api::put_pool(s, &name, &body)).await
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

async fn readyz(State(s): State<Arc<Shared>>) -> Response {
    // The engine was opened (and, on a device, self-tested) before the server listened;
    // the start-up pools load after (503 until every one is resident).
    let loading = s.pools.loading();
    let failed = s.pools.failure();
    let ready = loading.is_empty() && failed.is_none();
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let mut body = json!({
        "ready": ready, "loading": loading, "backend": s.engine.name(),
        "engine": s.engine.describe(), "slots": s.cfg.max_concurrent.max(1),
        "threads_per_slot": s.slots.threads_per_slot(),
    });
    if let Some(why) = failed {
        body["failed"] = json!(why);
    }
    (status, axum::Json(body)).into_response()
}

async fn metrics_text(State(s): State<Arc<Shared>>) -> Response {
    let text = s
        .metrics
        .render(&s.engine, &s.pools, s.slots.running(), s.slots.waiting());
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

async fn method_not_allowed(req: axum::extract::Request) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        format!(
            "{} is not a method of {} (GET /openapi.json lists each route's methods)",
            req.method(),
            req.uri().path()
        ),
    )
}

/// Counts a request in flight while it lives.
struct InFlight(Arc<Shared>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
        self.0.idle.notify_waiters();
    }
}

/// Reads the whole body within `body_timeout` and the body cap, before any handler: a
/// slow, short or oversized body gets its JSON error here (408, 400, 413).
async fn read_body(s: &Shared, req: axum::extract::Request) -> Result<axum::extract::Request, Response> {
    use http_body_util::BodyExt;
    let cap = s.cfg.max_body_bytes;
    let declared = req
        .headers()
        .get("content-length")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > cap as u64) {
        return Err(body_too_large(s));
    }
    let (parts, body) = req.into_parts();
    let limited = http_body_util::Limited::new(body, cap);
    match tokio::time::timeout(s.cfg.body_timeout, limited.collect()).await {
        Ok(Ok(c)) => Ok(axum::extract::Request::from_parts(
            parts,
            Body::from(c.to_bytes()),
        )),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => Err(body_too_large(s)),
        Ok(Err(e)) => {
            let mut r = ApiError::new(
                StatusCode::BAD_REQUEST,
                format!("the request body could not be read: {e}"),
            )
            .into_response();
            r.headers_mut()
                .insert("connection", HeaderValue::from_static("close"));
            Err(r)
        }
        Err(_) => {
            let mut r = ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                format!(
                    "the request body did not arrive within {} s (--body-timeout)",
                    s.cfg.body_timeout.as_secs_f64()
                ),
            )
            .into_response();
            r.headers_mut()
                .insert("connection", HeaderValue::from_static("close"));
            Err(r)
        }
    }
}

/// An error response of the HTTP layer in another form (an extractor's text/plain, an
/// empty body) as `{"error": ...}` with the same status.
async fn as_json_error(r: Response) -> Response {
    use http_body_util::BodyExt;
    let is_json = r
        .headers()
        .get("content-type")
        .is_some_and(|c| c.as_bytes().starts_with(b"application/json"));
    if r.status().as_u16() < 400 || is_json {
        return r;
    }
    let (mut parts, body) = r.into_parts();
    let text = match http_body_util::Limited::new(body, 4096).collect().await {
        Ok(c) => String::from_utf8_lossy(&c.to_bytes()).trim().to_string(),
        Err(_) => String::new(),
    };
    let msg = if text.is_empty() {
        parts
            .status
            .canonical_reason()
            .unwrap_or("error")
            .to_ascii_lowercase()
    } else {
        crate::error::escape_controls(&text)
    };
    let body = json!({"error": msg}).to_string();
    parts
        .headers
        .insert("content-type", HeaderValue::from_static("application/json"));
    parts.headers.remove("content-length");
    Response::from_parts(parts, Body::from(body))
}

/// The request id, the log line and the metrics of every request; the body read; the
/// JSON form of every error.
async fn around(
    State(s): State<Arc<Shared>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    s.in_flight.fetch_add(1, Ordering::AcqRel);
    let _in_flight = InFlight(s.clone());
    let id = s.next_id.fetch_add(1, Ordering::Relaxed);
    let t = Instant::now();
    let method = req.method().clone();
    let path = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |p| p.as_str().to_string());
    let uri = req.uri().path().to_string();
    let resp = match read_body(&s, req).await {
        Ok(req) => next.run(req).await,
        Err(r) => r,
    };
    let mut resp = as_json_error(resp).await;
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
    let mut r = ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!(
            "request body over {} bytes (--max-body-bytes)",
            s.cfg.max_body_bytes
        ),
    )
    .into_response();
    // The rest of the body is not read: the connection cannot carry another request.
    r.headers_mut()
        .insert("connection", HeaderValue::from_static("close"));
    r
}

/// The state every route shares, over `engine`.
fn shared(engine: Engine, cfg: ServeConfig) -> crate::Result<Arc<Shared>> {
    let slots = slots::Slots::new(cfg.max_concurrent, cfg.threads, cfg.max_queue)
        .map_err(|e| Error::invalid("serve", format!("cannot start the compute threads: {e}")))?;
    Ok(Arc::new(Shared {
        pools: Pools::new(cfg.max_pool_bytes, cfg.pools.iter().map(|(n, _)| n.clone())),
        slots,
        metrics: Metrics::default(),
        counters: Mutex::new(HashMap::new()),
        next_id: AtomicU64::new(1),
        in_flight: AtomicUsize::new(0),
        idle: tokio::sync::Notify::new(),
        engine,
        cfg,
    }))
}

fn routes(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/v1/select", post(select))
        .route("/v1/rerank", post(rerank))
        .route("/v1/mask", post(mask))
        .route("/v1/embed", post(embed))
        .route("/v1/models", get(models))
        .route("/v1/attention/segment", post(attention_segment))
        .route("/v1/attention/decay", post(attention_decay))
        .route("/v1/probe", post(probe))
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
        .method_not_allowed_fallback(method_not_allowed)
        // The body is read (and capped) by `around`; this cap is the extractor's own.
        .layer(axum::extract::DefaultBodyLimit::max(shared.cfg.max_body_bytes))
        .layer(axum::middleware::from_fn_with_state(shared.clone(), around))
        .with_state(shared)
}

/// The service's routes over `engine` (for embedding in another axum application; its
/// compute slots start here).
///
/// ```
/// use ctxprune::serve::{router, ServeConfig};
/// let app: axum::Router = router(ctxprune::Engine::cpu(), ServeConfig::default())?;
/// // Serve it with axum (`axum::serve(listener, app)`), or nest it in your own router;
/// // `ctxprune serve` runs the same routes with graceful shutdown ([`serve`]).
/// # drop(app);
/// # Ok::<(), ctxprune::Error>(())
/// ```
pub fn router(engine: Engine, cfg: ServeConfig) -> crate::Result<Router> {
    let shared = shared(engine, cfg)?;
    load_pools(&shared)?;
    Ok(routes(shared))
}

/// Loads the start-up pools (`cfg.pools`) in order, each made resident as it is read;
/// the first that fails is the error, naming the pool and its file.
fn load_pools(s: &Shared) -> crate::Result<()> {
    for (name, file) in &s.cfg.pools {
        let fail = |why: String| {
            let why = format!("pool '{name}' ({file}): {why}");
            s.pools.fail(why.clone());
            Error::invalid("pool", why)
        };
        let loaded = crate::io::load_embeddings(file).map_err(|e| fail(e.to_string()))?;
        s.pools
            .put(&s.engine, name, loaded.embeddings)
            .map_err(|e| fail(e.msg))?;
    }
    Ok(())
}

/// Serves on `listener` until `shutdown` resolves, then drains: the listener closes,
/// requests in flight get `cfg.grace` to finish, and what is left is abandoned (cancelled,
/// connections closed). Returns how it stopped. The caller opens the engine (and so its
/// self-test) first.
pub async fn serve(
    listener: tokio::net::TcpListener,
    engine: Engine,
    cfg: ServeConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> crate::Result<Stopped> {
    let shared = shared(engine, cfg)?;
    let app = routes(shared.clone());
    if shared.cfg.pools.is_empty() {
        return Ok(conn::serve(listener, app, shared, shutdown).await);
    }
    // The start-up pools load on a thread of their own while the server answers
    // (/healthz ok, /readyz 503); a failure stops the server and is the error.
    let (fail_tx, fail_rx) = tokio::sync::oneshot::channel::<Error>();
    let loader = shared.clone();
    std::thread::Builder::new()
        .name("ctxprune-pools".into())
        .spawn(move || {
            if let Err(e) = load_pools(&loader) {
                let _ = fail_tx.send(e);
            }
        })
        .map_err(|e| Error::invalid("serve", format!("cannot start the pool loader: {e}")))?;
    let failed = Arc::new(Mutex::new(None));
    let failed_w = failed.clone();
    let stop = async move {
        tokio::select! {
            () = shutdown => {},
            Ok(e) = fail_rx => {
                *failed_w.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
            }
        }
    };
    let stopped = conn::serve(listener, app, shared, stop).await;
    let failure = failed.lock().unwrap_or_else(|p| p.into_inner()).take();
    match failure {
        Some(e) => Err(e),
        None => Ok(stopped),
    }
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
