//! `ctxprune serve`: the engine as an HTTP service; see the library's `serve` module.

use super::open_engine;
use ctxprune::serve::{serve, shutdown_signal, Named, ServeOptions};
use ctxprune::{Error, Result};

/// Every limit has a flag; the defaults are `ServeConfig::default()`'s.
#[derive(clap::Args)]
pub struct ServeArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub addr: String,
    /// auto, cpu or cuda (the CTXPRUNE_BACKEND variable, cpu, cuda or auto, overrides auto).
    #[arg(long, default_value = "auto")]
    pub backend: String,
    /// Largest request body in bytes (413 above) [default: 67108864].
    #[arg(long, allow_hyphen_values = true)]
    pub max_body_bytes: Option<usize>,
    /// Seconds a request's work may take once its body is in, waiting for a slot included
    /// (504 after; the work is stopped) [default: 30].
    #[arg(long, allow_hyphen_values = true)]
    pub timeout: Option<f64>,
    /// Seconds a request's head may take to arrive (the connection is closed after) [default: 10].
    #[arg(long, allow_hyphen_values = true)]
    pub header_timeout: Option<f64>,
    /// Seconds a request's body may take to arrive (408 after) [default: 30].
    #[arg(long, allow_hyphen_values = true)]
    pub body_timeout: Option<f64>,
    /// Seconds requests in flight get to finish after SIGTERM; what is left is abandoned and
    /// the exit status is 3 [default: 10].
    #[arg(long, allow_hyphen_values = true)]
    pub grace: Option<f64>,
    /// Requests computing at once (compute slots) [default: the CPU's threads].
    #[arg(long, allow_hyphen_values = true)]
    pub max_concurrent: Option<usize>,
    /// Compute threads, shared evenly by the slots [default: the CPU's threads].
    #[arg(long, allow_hyphen_values = true)]
    pub threads: Option<usize>,
    /// Largest estimated work of one request in operations (422 above) [default: 3e11].
    #[arg(long, allow_hyphen_values = true)]
    pub max_work: Option<f64>,
    /// Largest estimated memory of one request in bytes (413 above) [default: 2147483648].
    #[arg(long, allow_hyphen_values = true)]
    pub max_request_memory: Option<usize>,
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
    /// A sentence-transformers directory to load at start, as NAME=DIR or DIR (named by
    /// the directory's last component); repeat for several. Requests then send "texts"
    /// and "query_text" in place of embeddings (/v1/select, /v1/rerank, semantic
    /// /v1/mask), and POST /v1/embed embeds texts; "model" names one (needed only when
    /// several are loaded).
    #[arg(long, value_name = "[NAME=]DIR")]
    pub model: Vec<String>,
    /// A HuggingFace tokenizer.json to load at start, as NAME=FILE or FILE (named by the
    /// file name without .json); repeat for several. Requests name it in "tokenizer": to
    /// count texts for a token budget, and to segment prompts (POST
    /// /v1/attention/segment, which needs the attended model's tokenizer).
    #[arg(long, value_name = "[NAME=]FILE")]
    pub tokenizer: Vec<String>,
    /// A pool to make resident at start, as NAME=FILE or FILE (named by the file name
    /// without its extension): a .npy, a .safetensors (FILE.safetensors:TENSOR picks a
    /// tensor) or JSON lines; repeat for several. The server listens at once and loads
    /// them in order: GET /readyz answers 503 until all are resident, so replicas
    /// started alike are identical behind a load balancer. One that fails to load stops
    /// the server.
    #[arg(long, value_name = "[NAME=]FILE")]
    pub pool: Vec<String>,
    /// Most tokens one request may embed, special tokens included (422 above) [default: 262144].
    #[arg(long, allow_hyphen_values = true)]
    pub max_embed_tokens: Option<usize>,
}

/// The flags whose values [`ServeOptions::config`] checks (named there in snake case).
const FLAGS: &[&str] = &[
    "max-body-bytes",
    "timeout",
    "header-timeout",
    "body-timeout",
    "grace",
    "max-concurrent",
    "threads",
    "max-work",
    "max-request-memory",
    "max-queue",
    "max-pool-bytes",
    "oracle-url",
    "oracle-api",
    "model",
    "tokenizer",
    "pool",
    "max-embed-tokens",
];

/// The exit status when the grace period ended with requests unanswered.
pub const EXIT_ABANDONED: u8 = 3;

/// Runs `ctxprune serve` until SIGTERM or Ctrl-C, then gives the requests in flight the
/// grace period: `Ok(true)` when every one was answered, `Ok(false)` when some were
/// abandoned (the caller exits with [`EXIT_ABANDONED`]).
pub fn run(a: ServeArgs) -> Result<bool> {
    let named = |specs: &[String]| specs.iter().map(|s| Named::parse(s)).collect::<Vec<_>>();
    let opts = ServeOptions {
        max_body_bytes: a.max_body_bytes,
        timeout: a.timeout,
        header_timeout: a.header_timeout,
        body_timeout: a.body_timeout,
        grace: a.grace,
        max_concurrent: a.max_concurrent,
        threads: a.threads,
        max_work: a.max_work,
        max_request_memory: a.max_request_memory,
        max_queue: a.max_queue,
        max_pool_bytes: a.max_pool_bytes,
        oracle_url: a.oracle_url.clone(),
        oracle_api: a.oracle_api.clone(),
        allow_oracle_urls: a.allow_oracle_urls,
        quiet: a.quiet,
        model: named(&a.model),
        tokenizer: named(&a.tokenizer),
        pool: named(&a.pool),
        max_embed_tokens: a.max_embed_tokens,
    };
    // The settings' errors name them as this command's flags (`--max-body-bytes`).
    let cfg = super::cost::flags(opts.config(), FLAGS)?;
    let addr: std::net::SocketAddr = a
        .addr
        .parse()
        .map_err(|e| Error::invalid("--addr", format!("'{}' is not HOST:PORT ({e})", a.addr)))?;
    let opened = open_engine(&a.backend)?;
    opened.print_note();
    let cfg_models: Vec<String> = cfg.models.iter().map(|(n, _)| n.clone()).collect();
    let cfg_tokenizers: Vec<String> = cfg.tokenizers.iter().map(|(n, _)| n.clone()).collect();
    let cfg_pools: Vec<String> = cfg.pools.iter().map(|(n, _)| n.clone()).collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::invalid("serve", format!("cannot start the runtime: {e}")))?;
    let stopped = rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| Error::invalid("--addr", format!("cannot listen on {addr}: {e}")))?;
        let bound = listener.local_addr().map_or(addr, |a| a);
        eprintln!(
            "{}",
            serde_json::json!({
                "listening": bound.to_string(),
                "engine": opened.engine.describe(),
                "models": cfg_models,
                "tokenizers": cfg_tokenizers,
                "pools": cfg_pools,
            })
        );
        serve(listener, opened.engine, cfg, shutdown_signal()).await
    })?;
    // Nothing of the runtime is waited for: abandoned work was cancelled and runs on the
    // compute slots' threads, which end with the process.
    rt.shutdown_background();
    eprintln!(
        "{}",
        serde_json::json!({
            "stopped": true, "abandoned": stopped.abandoned,
            "connections_closed": stopped.closed, "drain_ms": stopped.took.as_secs_f64() * 1e3,
        })
    );
    Ok(stopped.abandoned == 0)
}
