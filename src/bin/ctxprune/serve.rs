//! `ctxprune serve`: the engine as an HTTP service; see the library's `serve` module.

use super::open_engine;
use ctxprune::serve::{serve, shutdown_signal, ServeConfig};
use ctxprune::{Error, Result};
use std::sync::Arc;
use std::time::Duration;

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

/// `[NAME=]PATH` values of `flag`, named (by the path's last component, without the
/// `.json` of a file, when no NAME is given); names unique, of letters, digits, `.`,
/// `_`, `-`.
fn named(specs: &[String], flag: &str) -> Result<Vec<(String, std::path::PathBuf)>> {
    let mut out: Vec<(String, std::path::PathBuf)> = Vec::new();
    for spec in specs {
        let (name, path) = match spec.split_once('=') {
            Some((n, d)) => (n.to_string(), std::path::PathBuf::from(d)),
            None => {
                let d = std::path::PathBuf::from(spec);
                let n = d
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                let n = n.strip_suffix(".json").map_or(n.clone(), str::to_string);
                (n, d)
            }
        };
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        {
            return Err(Error::invalid(
                flag,
                format!("'{spec}': the name must be letters, digits, '.', '_' or '-' (NAME=PATH)"),
            ));
        }
        if out.iter().any(|(n, _)| *n == name) {
            return Err(Error::invalid(
                flag,
                format!("the name '{name}' is given twice (name them apart: NAME=PATH)"),
            ));
        }
        out.push((name, path));
    }
    Ok(out)
}

/// `--model [NAME=]DIR` values, loaded.
fn models(specs: &[String]) -> Result<Vec<(String, ctxprune::embed::SentenceEncoder)>> {
    named(specs, "--model")?
        .into_iter()
        .map(|(name, dir)| Ok((name, super::embed::load(&dir)?)))
        .collect()
}

/// `--tokenizer [NAME=]FILE` values, loaded; the built-in names are not taken.
fn tokenizers(specs: &[String]) -> Result<Vec<(String, Arc<ctxprune::tokens::HfTokenizer>)>> {
    named(specs, "--tokenizer")?
        .into_iter()
        .map(|(name, file)| {
            if matches!(name.as_str(), "o200k_base" | "cl100k_base" | "approx") {
                return Err(Error::invalid(
                    "--tokenizer",
                    format!("'{name}' is a built-in tokenizer's name: name the file apart (NAME=FILE)"),
                ));
            }
            Ok((name, Arc::new(ctxprune::tokens::HfTokenizer::load(&file)?)))
        })
        .collect()
}

/// `--pool [NAME=]FILE` values: named (by the file name without its extension; a pool
/// name is at most 64 of letters, digits, `.`, `_`, `-`), each file of a format the
/// loader reads and there now (it is read after the server listens).
fn pools(specs: &[String]) -> Result<Vec<(String, String)>> {
    let mut out: Vec<(String, String)> = Vec::new();
    for spec in specs {
        let (name, file_spec) = match spec.split_once('=') {
            Some((n, f)) => (n.to_string(), f.to_string()),
            None => {
                let (path, _) = ctxprune::io::split_spec(spec);
                let stem = path
                    .file_stem()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                (stem, spec.clone())
            }
        };
        let bad = |why: String| Error::invalid("--pool", format!("'{spec}': {why}"));
        if name.is_empty()
            || name.len() > 64
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        {
            return Err(bad(
                "the name must be 1 to 64 of letters, digits, '.', '_' or '-' (NAME=FILE)".into(),
            ));
        }
        if out.iter().any(|(n, _)| *n == name) {
            return Err(bad(format!(
                "the name '{name}' is given twice (name them apart: NAME=FILE)"
            )));
        }
        let (path, _) = ctxprune::io::split_spec(&file_spec);
        ctxprune::io::EmbeddingsFormat::of(path).map_err(|e| bad(e.to_string()))?;
        if !path.is_file() {
            return Err(bad(format!("no such file '{}'", path.display())));
        }
        out.push((name, file_spec));
    }
    Ok(out)
}

fn positive(v: Option<usize>, flag: &str) -> Result<Option<usize>> {
    match v {
        Some(0) => Err(Error::invalid(flag, "must be at least 1")),
        v => Ok(v),
    }
}

/// A duration flag in seconds, in (0, 86400].
fn seconds(v: Option<f64>, flag: &str) -> Result<Option<Duration>> {
    match v {
        None => Ok(None),
        Some(t) if t.is_finite() && t > 0.0 && t <= 86_400.0 => Ok(Some(Duration::from_secs_f64(t))),
        Some(t) => Err(Error::invalid(
            flag,
            format!("must be in (0, 86400] seconds, got {t}"),
        )),
    }
}

/// The exit status when the grace period ended with requests unanswered.
pub const EXIT_ABANDONED: u8 = 3;

/// Runs `ctxprune serve` until SIGTERM or Ctrl-C, then gives the requests in flight the
/// grace period: `Ok(true)` when every one was answered, `Ok(false)` when some were
/// abandoned (the caller exits with [`EXIT_ABANDONED`]).
pub fn run(a: ServeArgs) -> Result<bool> {
    let mut cfg = ServeConfig::default();
    if let Some(b) = positive(a.max_body_bytes, "--max-body-bytes")? {
        cfg.max_body_bytes = b;
    }
    for (v, flag, slot) in [
        (a.timeout, "--timeout", &mut cfg.timeout),
        (a.header_timeout, "--header-timeout", &mut cfg.header_timeout),
        (a.body_timeout, "--body-timeout", &mut cfg.body_timeout),
        (a.grace, "--grace", &mut cfg.grace),
    ] {
        if let Some(d) = seconds(v, flag)? {
            *slot = d;
        }
    }
    if let Some(c) = positive(a.max_concurrent, "--max-concurrent")? {
        cfg.max_concurrent = c;
    }
    if let Some(t) = positive(a.threads, "--threads")? {
        cfg.threads = t;
    }
    if let Some(w) = a.max_work {
        if !(w.is_finite() && w >= 1.0) {
            return Err(Error::invalid(
                "--max-work",
                format!("must be a finite number of operations >= 1, got {w}"),
            ));
        }
        cfg.max_work = w;
    }
    if let Some(m) = positive(a.max_request_memory, "--max-request-memory")? {
        cfg.max_request_memory = m;
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
    cfg.models = models(&a.model)?;
    cfg.tokenizers = tokenizers(&a.tokenizer)?;
    cfg.pools = pools(&a.pool)?;
    if let Some(t) = positive(a.max_embed_tokens, "--max-embed-tokens")? {
        if cfg.models.is_empty() {
            return Err(Error::invalid("--max-embed-tokens", "applies to --model"));
        }
        cfg.max_embed_tokens = t;
    }
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
