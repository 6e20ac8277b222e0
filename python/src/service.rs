//! `Service`: `ctxprune serve`'s routes answered in process (`ctxprune::serve::LocalService`),
//! for a host that owns the HTTP side (a Ray Serve replica, an ASGI app).

use crate::engine::Engine;
use crate::errors::to_py;
use ctxprune::serve::{LocalService, Named, ServeOptions};
use ctxprune::Error;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// The service over one engine: the same routes, limits and JSON answers as `ctxprune
/// serve`, each request handed over as bytes. Start-up pools are resident when the
/// constructor returns. Thread-safe: calls from many threads compute at once, each in one
/// of `max_concurrent` slots, with the GIL released.
#[pyclass(frozen, module = "ctxprune_rs._native")]
pub struct Service {
    inner: LocalService,
}

/// One answer as Python receives it: the status, the headers, the body.
type Answer<'py> = (u16, Vec<(String, String)>, Bound<'py, PyBytes>);

/// The settings the Python signature spells in the plural.
const PLURAL: [&str; 3] = ["pool", "model", "tokenizer"];

/// `r` with the settings the Python signature spells in the plural (`pool` -> `pools`)
/// renamed to it, as the error's name and where its message points to one.
fn plural<T>(r: ctxprune::Result<T>) -> ctxprune::Result<T> {
    r.map_err(|e| match e {
        Error::InvalidArgument { name, mut msg } => {
            for p in PLURAL {
                msg = msg.replace(&format!("`{p}`"), &format!("`{p}s`"));
            }
            let name = if PLURAL.contains(&name.as_str()) {
                format!("{name}s")
            } else {
                name
            };
            Error::invalid(name, msg)
        }
        e => e,
    })
}

#[pymethods]
impl Service {
    #[new]
    #[pyo3(signature = (
        engine, *, pools = Vec::new(), models = Vec::new(), tokenizers = Vec::new(),
        max_body_bytes = None, timeout = None, max_concurrent = None, threads = None,
        max_work = None, max_request_memory = None, max_queue = None, max_pool_bytes = None,
        oracle_url = None, oracle_api = None, allow_oracle_urls = false, log = false,
        max_embed_tokens = None,
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        engine: &Engine,
        pools: Vec<(String, String)>,
        models: Vec<(String, String)>,
        tokenizers: Vec<(String, String)>,
        max_body_bytes: Option<usize>,
        timeout: Option<f64>,
        max_concurrent: Option<usize>,
        threads: Option<usize>,
        max_work: Option<f64>,
        max_request_memory: Option<usize>,
        max_queue: Option<usize>,
        max_pool_bytes: Option<usize>,
        oracle_url: Option<String>,
        oracle_api: Option<String>,
        allow_oracle_urls: bool,
        log: bool,
        max_embed_tokens: Option<usize>,
    ) -> PyResult<Self> {
        let named = |pairs: Vec<(String, String)>| {
            pairs
                .into_iter()
                .map(|(name, path)| Named {
                    name: Some(name),
                    path,
                })
                .collect::<Vec<_>>()
        };
        let opts = ServeOptions {
            max_body_bytes,
            timeout,
            max_concurrent,
            threads,
            max_work,
            max_request_memory,
            max_queue,
            max_pool_bytes,
            oracle_url,
            oracle_api,
            allow_oracle_urls,
            quiet: !log,
            model: named(models),
            tokenizer: named(tokenizers),
            pool: named(pools),
            max_embed_tokens,
            ..ServeOptions::default()
        };
        let engine = engine.inner.clone();
        let inner = py
            .detach(|| plural(opts.config().and_then(|cfg| LocalService::new(engine, cfg))))
            .map_err(|e| to_py(py, &e))?;
        Ok(Service { inner })
    }

    /// Answers one request: `(status, headers, body)`, as `ctxprune serve` would send them
    /// (its errors included, as `{"error": ...}` with their status).
    #[pyo3(signature = (method, path, body = None, headers = Vec::new()))]
    fn handle<'py>(
        &self,
        py: Python<'py>,
        method: &str,
        path: &str,
        body: Option<&[u8]>,
        headers: Vec<(String, String)>,
    ) -> PyResult<Answer<'py>> {
        let body = body.unwrap_or_default().to_vec();
        let r = py
            .detach(|| self.inner.handle(method, path, &headers, body))
            .map_err(|e| to_py(py, &e))?;
        Ok((r.status, r.headers, PyBytes::new(py, &r.body)))
    }

    fn __repr__(&self) -> String {
        "Service(...)".to_string()
    }
}
