//! `ctxprune serve`: the engine as an HTTP service; see the library's `serve` module.

use super::open_engine;
use ctxprune::serve::{serve, shutdown_signal, ServeConfig};
use ctxprune::{Error, Result};
use std::time::Duration;

/// Every limit has a flag; the defaults are `ServeConfig::default()`'s.
#[derive(clap::Args)]
pub struct ServeArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub addr: String,
    /// auto, cpu or cuda.
    #[arg(long, default_value = "auto")]
    pub backend: String,
    /// Largest request body in bytes (413 above) [default: 67108864].
    #[arg(long, allow_hyphen_values = true)]
    pub max_body_bytes: Option<usize>,
    /// Seconds a request may take (504 after) [default: 30].
    #[arg(long, allow_hyphen_values = true)]
    pub timeout: Option<f64>,
    /// Requests computing at once [default: the CPU's threads].
    #[arg(long, allow_hyphen_values = true)]
    pub max_concurrent: Option<usize>,
    /// Requests waiting for a compute slot; when full, 503 with Retry-After [default: 256].
    #[arg(long, allow_hyphen_values = true)]
    pub max_queue: Option<usize>,
    /// Bytes of resident named pools (413 for an upload past it) [default: 1073741824].
    #[arg(long, allow_hyphen_values = true)]
    pub max_pool_bytes: Option<usize>,
    /// The rerank upstream (TEI or Cohere-style) when a request names none.
    #[arg(long)]
    pub oracle_url: Option<String>,
    /// Its API: tei or cohere [default: tei].
    #[arg(long)]
    pub oracle_api: Option<String>,
    /// Let requests name their own oracle URL (the server then calls URLs clients give).
    #[arg(long)]
    pub allow_oracle_urls: bool,
    /// No per-request log lines on stderr.
    #[arg(long)]
    pub quiet: bool,
}

fn positive(v: Option<usize>, flag: &str) -> Result<Option<usize>> {
    match v {
        Some(0) => Err(Error::invalid(flag, "must be at least 1")),
        v => Ok(v),
    }
}

/// Runs `ctxprune serve` until SIGTERM or Ctrl-C, then finishes the requests in flight.
pub fn run(a: ServeArgs) -> Result<()> {
    let mut cfg = ServeConfig::default();
    if let Some(b) = positive(a.max_body_bytes, "--max-body-bytes")? {
        cfg.max_body_bytes = b;
    }
    if let Some(t) = a.timeout {
        if !(t.is_finite() && t > 0.0 && t <= 86_400.0) {
            return Err(Error::invalid(
                "--timeout",
                format!("must be in (0, 86400] seconds, got {t}"),
            ));
        }
        cfg.timeout = Duration::from_secs_f64(t);
    }
    if let Some(c) = positive(a.max_concurrent, "--max-concurrent")? {
        cfg.max_concurrent = c;
    }
    if let Some(q) = a.max_queue {
        cfg.max_queue = q;
    }
    if let Some(b) = a.max_pool_bytes {
        cfg.max_pool_bytes = b;
    }
    if let Some(api) = &a.oracle_api {
        if a.oracle_url.is_none() {
            return Err(Error::invalid("--oracle-api", "applies to --oracle-url"));
        }
        super::cost::flags(
            api.parse::<ctxprune::rerank::http::Api>().map(|_| ()),
            &["oracle-api"],
        )?;
        cfg.oracle_api = api.clone();
    }
    cfg.oracle_url = a.oracle_url;
    cfg.allow_oracle_urls = a.allow_oracle_urls;
    cfg.log = !a.quiet;
    let addr: std::net::SocketAddr = a
        .addr
        .parse()
        .map_err(|e| Error::invalid("--addr", format!("'{}' is not HOST:PORT ({e})", a.addr)))?;
    let opened = open_engine(&a.backend)?;
    opened.print_note();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::invalid("serve", format!("cannot start the runtime: {e}")))?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| Error::invalid("--addr", format!("cannot listen on {addr}: {e}")))?;
        let bound = listener.local_addr().map_or(addr, |a| a);
        eprintln!(
            "{}",
            serde_json::json!({"listening": bound.to_string(), "engine": opened.engine.describe()})
        );
        serve(listener, opened.engine, cfg, shutdown_signal()).await
    })
}
