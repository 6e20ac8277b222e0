//! The service answered in process: the same routes, limits and JSON as `ctxprune serve`,
//! with the request handed over as bytes instead of read from a socket. This is how a host
//! that owns the HTTP side (Python's `ctxprune_rs.Service`, a Ray Serve replica) serves
//! the crate's contract without a second implementation of it.

use super::{router, ServeConfig};
use crate::{Engine, Error, Result};
use axum::body::Body;
use axum::Router;

/// One answer: the status, the headers and the body, as the server would send them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LocalResponse {
    /// The HTTP status.
    pub status: u16,
    /// Header names (lower case) and values, in order.
    pub headers: Vec<(String, String)>,
    /// The body (JSON for every route but `/metrics`).
    pub body: Vec<u8>,
}

/// The service's routes over one engine, answered without a socket. Start-up pools
/// (`cfg.pools`) are resident when [`LocalService::new`] returns. Thread-safe: calls from
/// many threads run at once, each in one of the compute slots (`max_concurrent`), as in
/// `ctxprune serve`. A connection's own limits (the head and body timeouts) belong to the
/// host that reads the socket.
///
/// ```
/// use ctxprune::serve::{LocalService, ServeConfig};
/// let svc = LocalService::new(ctxprune::Engine::cpu(), ServeConfig { log: false, ..ServeConfig::default() })?;
/// let r = svc.handle("GET", "/healthz", &[], Vec::new())?;
/// assert_eq!((r.status, r.body.as_slice()), (200, &br#"{"status":"ok"}"#[..]));
/// # Ok::<(), ctxprune::Error>(())
/// ```
pub struct LocalService {
    /// Always Some; taken by `drop` (a runtime dropped inside another's context would
    /// panic, so it is shut down in the background).
    rt: Option<tokio::runtime::Runtime>,
    router: Router,
}

impl Drop for LocalService {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

impl LocalService {
    /// Opens the service: its compute slots start and its start-up pools load (the first
    /// that fails is the error, naming the pool and its file).
    pub fn new(engine: Engine, cfg: ServeConfig) -> Result<Self> {
        if tokio::runtime::Handle::try_current().is_ok() {
            return Err(Error::invalid(
                "LocalService",
                "opened inside an async runtime, where it would block it: nest `router()` in your own axum app instead",
            ));
        }
        // One thread for the routes' async parts (reading the handed-over body, the
        // deadlines); the work runs on the compute slots' threads.
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("ctxprune-local")
            .enable_all()
            .build()
            .map_err(|e| Error::invalid("serve", format!("cannot start the runtime: {e}")))?;
        let router = rt.block_on(async { router(engine, cfg) })?;
        Ok(LocalService { rt: Some(rt), router })
    }

    /// Answers one request: `method` (`GET`, `POST`, ...), `path` (with its query, if
    /// any), the headers and the body. Errors only when the request cannot be formed
    /// (a method or path that is not HTTP, a header that is not one); everything the
    /// server would answer, its errors included, is the response.
    pub fn handle(
        &self,
        method: &str,
        path: &str,
        headers: &[(String, String)],
        body: Vec<u8>,
    ) -> Result<LocalResponse> {
        let method = axum::http::Method::from_bytes(method.as_bytes()).map_err(|_| {
            Error::invalid(
                "method",
                format!(
                    "'{}' is not an HTTP method",
                    crate::error::escape_controls(method)
                ),
            )
        })?;
        let uri: axum::http::Uri = path.parse().map_err(|e| {
            Error::invalid(
                "path",
                format!(
                    "'{}' is not a request path ({e})",
                    crate::error::escape_controls(path)
                ),
            )
        })?;
        if uri.scheme().is_some() || !path.starts_with('/') {
            return Err(Error::invalid(
                "path",
                format!(
                    "'{}' is not a request path (it starts with '/')",
                    crate::error::escape_controls(path)
                ),
            ));
        }
        let mut req = axum::http::Request::builder().method(method).uri(uri);
        for (k, v) in headers {
            let name = axum::http::HeaderName::from_bytes(k.as_bytes()).map_err(|_| {
                Error::invalid(
                    "headers",
                    format!("'{}' is not a header name", crate::error::escape_controls(k)),
                )
            })?;
            // Any byte a header value may hold (obs-text included), as hyper takes them.
            let value = axum::http::HeaderValue::from_bytes(v.as_bytes()).map_err(|_| {
                Error::invalid("headers", format!("the value of '{name}' is not a header value"))
            })?;
            req = req.header(name, value);
        }
        let req = req
            .body(Body::from(body))
            .map_err(|e| Error::invalid("request", e.to_string()))?;
        if tokio::runtime::Handle::try_current().is_ok() {
            return Err(Error::invalid(
                "handle",
                "called from inside an async runtime, where it would block it: call it from a thread of its own (tokio's spawn_blocking), or nest `router()` in your own axum app",
            ));
        }
        let Some(rt) = &self.rt else {
            return Err(Error::invalid("handle", "the service is closed"));
        };
        let mut svc = self.router.clone();
        rt.block_on(async move {
            use http_body_util::BodyExt;
            use tower_service::Service;
            let resp = match svc.call(req).await {
                Ok(r) => r,
                Err(never) => match never {},
            };
            let (parts, body) = resp.into_parts();
            let body = body
                .collect()
                .await
                .map_err(|e| Error::invalid("response", format!("the answer's body could not be read: {e}")))?
                .to_bytes()
                .to_vec();
            let headers = parts
                .headers
                .iter()
                .map(|(k, v)| {
                    (
                        k.as_str().to_string(),
                        String::from_utf8_lossy(v.as_bytes()).into_owned(),
                    )
                })
                .collect();
            Ok(LocalResponse {
                status: parts.status.as_u16(),
                headers,
                body,
            })
        })
    }
}
