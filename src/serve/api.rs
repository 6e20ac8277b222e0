//! The endpoints' work, as plain functions of the shared state and the request body: the
//! same contracts as the CLI (the same options by name, the same output objects).

use super::text::{self, TextFields};
use super::{ApiError, Reply, Shared};
use crate::cancel::Cancel;
use crate::cost::{self, FlopsOptions, ModelShape};
use crate::error::Error;
use crate::estimate::{self, Estimate};
use crate::io::fields::Fields;
use crate::mask::masker::Masker;
use crate::mask::policy::MaskOptions;
use crate::mask::{Format, Trajectory};
use crate::rerank::http::{HttpConfig, HttpOracle};
use crate::rerank::{Oracle, Precomputed, RerankOptions, Reranker};
use crate::select::{check_reads, Method, Request, SelectOptions, Selector};
use crate::Embeddings;
use crate::Pool;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Instant;

/// The pool a request names (`"pool"`) or gives inline (`"embeddings"`, not yet resident:
/// the request's cost is admitted first).
enum PoolArg {
    Named(Arc<Pool>),
    Inline(Embeddings),
}

impl PoolArg {
    fn shape(&self) -> (usize, usize) {
        match self {
            PoolArg::Named(p) => (p.len(), p.dim()),
            PoolArg::Inline(e) => (e.rows(), e.dim()),
        }
    }

    /// Making an inline pool resident costs its copy; a named pool is resident already.
    fn cost(&self) -> Estimate {
        match self {
            PoolArg::Named(_) => Estimate::default(),
            PoolArg::Inline(e) => estimate::pool(e.rows(), e.dim()),
        }
    }

    fn resident(self, s: &Shared) -> Result<Arc<Pool>, ApiError> {
        match self {
            PoolArg::Named(p) => Ok(p),
            PoolArg::Inline(e) => Ok(Arc::new(Pool::new(&s.engine, e)?)),
        }
    }
}

fn pool_of(s: &Shared, f: &mut Fields, required: bool) -> Result<Option<PoolArg>, ApiError> {
    let name = f.str("pool")?;
    let inline = f.matrix("embeddings")?;
    match (name, inline) {
        (Some(_), Some(_)) => Err(Error::invalid("pool", "give a pool name or embeddings, not both").into()),
        (Some(n), None) => s.pools.get(&n).map(|p| Some(PoolArg::Named(p))),
        (None, Some(e)) => Ok(Some(PoolArg::Inline(e))),
        (None, None) if required => Err(Error::invalid("pool", "give a pool name or \"embeddings\"").into()),
        (None, None) => Ok(None),
    }
}

/// `POST /v1/select`.
pub fn select(s: &Shared, body: &[u8], cancel: &Cancel) -> Result<Value, ApiError> {
    let mut f = s.fields(body)?;
    let method = f
        .str("method")?
        .ok_or_else(|| Error::invalid("method", "required"))?;
    let mode = f.str("mode")?;
    let preset = f.str("preset")?;
    let weights = f.nums("weights")?;
    let opts = SelectOptions {
        method: &method,
        mode: mode.as_deref(),
        preset: preset.as_deref(),
        k: f.count("k")?,
        token_budget: f.num("token_budget")?,
        threshold: f.num("threshold")?,
        lambda: f.num("lambda")?,
        weights: weights.as_deref(),
    };
    let cfg = opts.config()?;
    let m = cfg.method_kind();
    let query = f.vector("query")?;
    let queries = f.matrix("queries")?;
    let costs = f.nums("costs")?;
    let retained = f.counts("retained")?.unwrap_or_default();
    let texts = f.strs("texts")?;
    let query_text = f.str("query_text")?;
    let tf = TextFields::read(&mut f)?;
    let pool = pool_of(s, &mut f, false)?;
    f.done()?;
    if let Some(qs) = queries {
        if query.is_some() {
            return Err(Error::invalid("queries", "give `query` or `queries`, not both").into());
        }
        if texts.is_some() || query_text.is_some() || m == Method::Lexical {
            return Err(Error::invalid(
                "queries",
                "a batch runs over embeddings: lexical and texts take one query",
            )
            .into());
        }
        for (given, name) in [
            (tf.model.is_some(), "model"),
            (tf.tokenizer.is_some(), "tokenizer"),
        ] {
            if given {
                return Err(Error::invalid(name, "applies to `texts`, not to a batch of `queries`").into());
            }
        }
        let Some(pool) = pool else {
            return Err(Error::invalid("pool", "give a pool name or `embeddings`").into());
        };
        return select_batch(s, &cfg, pool, &qs, costs.as_deref(), &retained, cancel);
    }
    let lexical = m == Method::Lexical;
    // Texts are embedded when they are the pool: a method that reads embeddings, and no
    // pool or embeddings given. They are counted when a token budget needs costs.
    let embedded = !lexical && pool.is_none() && texts.is_some();
    let counted = cfg.token_budget_value().is_some() && costs.is_none() && texts.is_some();
    if !lexical && pool.is_none() && texts.is_none() {
        return Err(Error::invalid("pool", "give a pool name, `embeddings`, or the `texts` to embed").into());
    }
    check_text_fields(&tf, embedded, counted)?;
    if embedded {
        if query.is_some() {
            return Err(Error::invalid(
                "query",
                "the texts are embedded by the model: give the query as `query_text`",
            )
            .into());
        }
        if query_text.is_some() && !m.reads_query() {
            return Err(Error::invalid(
                "query_text",
                format!("does not apply to {} (it does not read a query)", m.name()),
            )
            .into());
        }
    }
    check_reads(
        m,
        query.is_some() || (embedded && query_text.is_some()),
        query_text.is_some() && !embedded,
        texts.is_some() && !embedded && !counted,
    )?;
    let costs = match (&costs, &texts) {
        (None, Some(t)) if counted => Some(text::count(s, t, tf.tokenizer.as_deref())?),
        _ => costs,
    };
    let (pool, query) = match (&texts, embedded) {
        (Some(t), true) => {
            let (e, q) = text::embed_request(s, tf.model.as_deref(), t, query_text.as_deref(), cancel)?;
            (Some(PoolArg::Inline(e)), q)
        }
        _ => (pool, query),
    };
    if method_needs_query_text(m, embedded, query.is_some()) {
        return Err(Error::invalid(
            "query_text",
            format!("{} needs the query (`query_text`)", m.name()),
        )
        .into());
    }
    let (n, d) = match (&pool, &texts) {
        (Some(p), _) => p.shape(),
        (None, Some(t)) => (t.len(), 0),
        (None, None) => (0, 0),
    };
    let req = Request {
        query: query.as_deref(),
        texts: if lexical { texts.as_deref() } else { None },
        query_text: if lexical { query_text.as_deref() } else { None },
        costs: costs.as_deref(),
        retained: &retained,
        cancel: Some(cancel),
    };
    let cost = cfg.estimate(n, d, &req) + pool.as_ref().map_or_else(Estimate::default, PoolArg::cost);
    s.admit(&format!("this {} selection over {n} items", m.name()), cost)?;
    let pool = pool.map(|p| p.resident(s)).transpose()?;
    let selector = Selector::new(&s.engine, cfg)?;
    let t = Instant::now();
    let sel = selector.select_maybe_pool(pool.as_deref(), &req)?;
    Ok(sel.to_json(t.elapsed().as_secs_f64() * 1e3, costs.is_some()))
}

/// With texts embedded, a method that needs a query needs the query text.
fn method_needs_query_text(m: Method, embedded: bool, have_query: bool) -> bool {
    embedded && m.needs_query() && !have_query
}

/// `"model"` applies only where texts are embedded, `"tokenizer"` only where texts are
/// counted: either given elsewhere is an error naming it, never ignored.
fn check_text_fields(tf: &TextFields, embedded: bool, counted: bool) -> Result<(), ApiError> {
    if tf.model.is_some() && !embedded {
        return Err(Error::invalid(
            "model",
            "applies where the `texts` are embedded (no `embeddings` or `pool` given)",
        )
        .into());
    }
    if tf.tokenizer.is_some() && !counted {
        return Err(Error::invalid(
            "tokenizer",
            "applies where token costs are counted from the `texts` (a budget, and no costs given)",
        )
        .into());
    }
    Ok(())
}

/// `POST /v1/select` with `"queries"` (a Q x d matrix): one selection per query over the
/// one pool, the passes over it shared ([`Selector::select_many`]); `{"results": [...]}`
/// with one `/v1/select` answer per query, in order. Any query's error fails the batch,
/// naming it (`queries[3]`).
fn select_batch(
    s: &Shared,
    cfg: &crate::select::SelectConfig,
    pool: PoolArg,
    qs: &Embeddings,
    costs: Option<&[f64]>,
    retained: &[usize],
    cancel: &Cancel,
) -> Result<Value, ApiError> {
    let (n, d) = pool.shape();
    let m = cfg.method_kind();
    check_reads(m, true, false, false)?;
    let reqs: Vec<Request<'_>> = (0..qs.rows())
        .map(|i| Request {
            query: Some(qs.row(i)),
            costs,
            retained,
            cancel: Some(cancel),
            ..Request::default()
        })
        .collect();
    let each = reqs
        .first()
        .map_or_else(Estimate::default, |r| cfg.estimate(n, d, r));
    let q = qs.rows() as f64;
    let cost = Estimate {
        ops: each.ops * q,
        bytes: each.bytes * q,
    } + pool.cost();
    s.admit(
        &format!(
            "this batch of {} {} selections over {n} items",
            qs.rows(),
            m.name()
        ),
        cost,
    )?;
    let pool = pool.resident(s)?;
    let selector = Selector::new(&s.engine, cfg.clone())?;
    let t = Instant::now();
    let out = selector.select_many(&pool, &reqs);
    let ms = t.elapsed().as_secs_f64() * 1e3;
    let mut results = Vec::with_capacity(out.len());
    for (i, r) in out.into_iter().enumerate() {
        let sel = r.map_err(|e| match e {
            Error::Cancelled { .. } => e,
            e => Error::invalid(format!("queries[{i}]"), e.to_string()),
        })?;
        results.push(sel.to_json(ms, costs.is_some()));
    }
    Ok(json!({ "results": results, "elapsed_ms": ms }))
}

/// An oracle that times its calls (the server reports compute and oracle time apart) and
/// stops the rerank before a call once the request is cancelled: the GP's rounds end
/// there, between oracle calls.
struct Timed<'a> {
    inner: &'a mut dyn Oracle,
    spent: std::time::Duration,
    cancel: &'a Cancel,
}

impl Oracle for Timed<'_> {
    fn score(&mut self, items: &[usize]) -> crate::Result<Vec<f64>> {
        self.cancel.check()?;
        let t = Instant::now();
        let r = self.inner.score(items);
        self.spent += t.elapsed();
        r
    }
}

/// `POST /v1/rerank`.
pub fn rerank(s: &Shared, body: &[u8], cancel: &Cancel) -> Result<Value, ApiError> {
    let mut f = s.fields(body)?;
    let method = f.str("method")?.unwrap_or_else(|| "boundary-morph".into());
    let budget = f
        .count("budget")?
        .ok_or_else(|| Error::invalid("budget", "required"))?;
    let capacity = f
        .count("capacity")?
        .ok_or_else(|| Error::invalid("capacity", "required"))?;
    let (kernel, prior, acquisition) = (f.str("kernel")?, f.str("prior")?, f.str("acquisition")?);
    let row_precision = f.str("row_precision")?;
    let hyperparameters = f.str("hyperparameters")?;
    let opts = RerankOptions {
        kernel: kernel.as_deref(),
        kappa: f.num("kappa")?.map(|k| k as f32),
        prior: prior.as_deref(),
        acquisition: acquisition.as_deref(),
        beta0: f.num("beta0")?,
        graph_degree: f.count("graph_degree")?,
        seed_div: f.num("seed_div")?,
        frac: f.num("frac")?,
        batch: f.count("batch")?,
        token_capacity: f.count("token_capacity")?.map(|t| t as u64),
        prior_probes: f.count("prior_probes")?,
        row_precision: row_precision.as_deref(),
        hyperparameters: hyperparameters.as_deref(),
        feedback_neighbours: f.num("feedback_neighbours")?,
        ..RerankOptions::new(&method, budget, capacity)
    };
    let cfg = opts.config()?;
    let method = cfg.method;
    let query = f.vector("query")?;
    let scores = f.nums("oracle_scores")?;
    let url = f.str("oracle_url")?;
    let api = f.str("oracle_api")?;
    let timeout = f.num("oracle_timeout")?;
    let texts = f.strs("texts")?;
    let query_text = f.str("query_text")?;
    let tokens = match f.nums("tokens")? {
        Some(v) => Some(crate::rerank::options::token_counts(&v, "tokens")?),
        None => None,
    };
    let tf = TextFields::read(&mut f)?;
    let pool = pool_of(s, &mut f, false)?;
    f.done()?;
    // The texts are embedded for the GP when no pool is given; counted when a token
    // capacity needs counts.
    let embedded = pool.is_none() && texts.is_some();
    let counted = cfg.token_capacity.is_some() && tokens.is_none() && texts.is_some();
    check_text_fields(&tf, embedded, counted)?;
    let tokens = match (&texts, counted) {
        (Some(t), true) => {
            let c = text::count(s, t, tf.tokenizer.as_deref())?;
            Some(c.into_iter().map(|v| v as u64).collect::<Vec<u64>>())
        }
        _ => tokens,
    };
    let (pool, query) = match (pool, &texts) {
        (Some(p), _) => (p, query),
        (None, Some(t)) => {
            if query.is_some() {
                return Err(Error::invalid(
                    "query",
                    "the texts are embedded by the model: give the query as `query_text`",
                )
                .into());
            }
            if query_text.is_none() {
                return Err(
                    Error::invalid("query_text", "required to embed the query with the texts").into(),
                );
            }
            let (e, q) = text::embed_request(s, tf.model.as_deref(), t, query_text.as_deref(), cancel)?;
            (PoolArg::Inline(e), q)
        }
        (None, None) => {
            return Err(
                Error::invalid("pool", "give a pool name, `embeddings`, or the `texts` to embed").into(),
            )
        }
    };
    let query = query.ok_or_else(|| Error::invalid("query", "required"))?;
    let (n, d) = pool.shape();
    s.admit(
        &format!("this {} rerank over {n} items", cfg.method.name()),
        cfg.estimate(n, d) + pool.cost(),
    )?;
    let pool = pool.resident(s)?;
    let reranker = Reranker::new(&s.engine, cfg)?;
    let budget = budget.min(n);
    let url = match (&scores, url) {
        (Some(_), Some(_)) => {
            return Err(Error::invalid("oracle_url", "give oracle_scores or oracle_url, not both").into())
        }
        (_, Some(_)) if !s.cfg.allow_oracle_urls => {
            return Err(Error::invalid(
                "oracle_url",
                "this server takes no oracle URL from requests (start it with --allow-oracle-urls, or give it --oracle-url)",
            )
            .into())
        }
        (Some(_), None) => None,
        (None, u) => u.or_else(|| s.cfg.oracle_url.clone()),
    };
    let mut oracle: Box<dyn Oracle> = match (scores, url) {
        (Some(sc), _) => {
            if sc.len() != n {
                return Err(Error::invalid(
                    "oracle_scores",
                    format!("{} scores for a pool of {n}", sc.len()),
                )
                .into());
            }
            for (given, name) in [
                (api.is_some(), "oracle_api"),
                (timeout.is_some(), "oracle_timeout"),
                (texts.is_some() && !embedded && !counted, "texts"),
                (query_text.is_some() && !embedded, "query_text"),
            ] {
                if given {
                    return Err(Error::invalid(name, "applies to an oracle URL").into());
                }
            }
            Box::new(Precomputed::new(sc, budget)?)
        }
        (None, Some(u)) => {
            let texts =
                texts.ok_or_else(|| Error::invalid("texts", "an oracle URL needs the pool's texts"))?;
            if texts.len() != n {
                return Err(
                    Error::invalid("texts", format!("{} texts for a pool of {n}", texts.len())).into(),
                );
            }
            let qt = query_text
                .ok_or_else(|| Error::invalid("query_text", "an oracle URL needs the query text"))?;
            let mut hc = HttpConfig::new(&u, api.as_deref().unwrap_or(&s.cfg.oracle_api).parse()?);
            if let Some(t) = timeout {
                hc = hc.timeout_secs(t)?;
            }
            hc.max_batch = s.cfg.max_batch;
            // Each call and retry waits at most until the request's deadline.
            hc.cancel = Some(cancel.clone());
            // Straight to the upstream, split into batches of at most `max_batch`. (A
            // BatchQueue merges concurrent callers of one oracle; a rerank API scores one
            // query per call, so requests with different queries cannot share a batch, and
            // a queue per request would only add its idle wait to every call.)
            Box::new(HttpOracle::new(hc, &qt, texts, budget)?)
        }
        (None, None) => {
            return Err(Error::invalid(
                "oracle_scores",
                "give oracle_scores, or oracle_url with texts and query_text",
            )
            .into())
        }
    };
    let t = Instant::now();
    let mut timed = Timed {
        inner: oracle.as_mut(),
        spent: std::time::Duration::ZERO,
        cancel,
    };
    let r = reranker.rerank_tokens(&pool, &query, tokens.as_deref(), &mut timed)?;
    let oracle_ms = timed.spent.as_secs_f64() * 1e3;
    Ok(r.to_json(method, t.elapsed().as_secs_f64() * 1e3 - oracle_ms, oracle_ms))
}

/// `POST /v1/mask`: `{"messages": [...] | {...}, options}` -> `{"messages", "stats"}`.
pub fn mask(s: &Shared, body: &[u8], cancel: &Cancel) -> Result<Reply, ApiError> {
    let mut f = s.fields(body)?;
    let messages = f
        .raw("messages")
        .ok_or_else(|| Error::invalid("messages", "required"))?;
    // The messages become a tree of JSON values: its memory is admitted first.
    s.admit(
        "masking these messages",
        estimate::json(&Fields::scan(messages))
            + Estimate {
                // The text kept, the token counts' work, and the masked copy written back.
                ops: 4.0 * messages.len() as f64,
                bytes: 3.0 * messages.len() as f64,
            },
    )?;
    let format = match f.str("format")?.as_deref().unwrap_or("auto") {
        "auto" => None,
        x => Some(x.parse::<Format>()?),
    };
    let edit = f
        .raw("edit")
        .map(|e| crate::io::json::value_str(e).map_err(|m| Error::invalid("edit", m)))
        .transpose()?;
    let cfg = MaskOptions {
        preset: f.str("preset")?,
        edit,
        window: f.count("window")?,
        keep_errors: f.bool("keep_errors")?,
        keep_first: f.bool("keep_first")?,
        tools_keep: f.strs("tools_keep")?,
        tools_mask: f.strs("tools_mask")?,
        trigger_tokens: f.count("trigger_tokens")?,
        clear_at_least: f.count("clear_at_least")?,
        step: f.count("step")?,
        unit: f.str("unit")?,
        anchor: f.str("anchor")?,
        hold: f.bool("hold")?,
        clear_tool_inputs: f.bool("clear_tool_inputs")?,
        placeholder: f.str("placeholder")?,
    }
    .config()?;
    let tokenizer = f
        .str("tokenizer")?
        .unwrap_or_else(|| crate::tokens::DEFAULT_TOKENIZER.into());
    let model = f.str("model")?;
    let semantic_method = f.str("semantic_method")?;
    let semantic_tau = f.num("semantic_tau")?;
    let query_text = f.str("query_text")?;
    f.done()?;
    // Semantic masking: with a model (named, or the server's only one when a semantic
    // option is given).
    let semantic =
        model.is_some() || semantic_method.is_some() || semantic_tau.is_some() || query_text.is_some();
    let gate = if semantic {
        Some(crate::mask::policy::semantic_gate(
            semantic_method.as_deref(),
            semantic_tau,
            query_text.is_some(),
        )?)
    } else {
        None
    };
    // Named encodings only: a server reads no file a request names.
    let counter = s.counter(&tokenizer)?;
    let masker = Masker::new(cfg, counter)?;
    let mut traj = Trajectory::parse(messages, format)?;
    let mut stats = match gate {
        None => serde_json::to_value(masker.mask(&mut traj)),
        Some((method, tau)) => {
            let obs: Vec<String> = traj.observation_texts().into_iter().map(str::to_string).collect();
            let (st, kept_back) = if obs.is_empty() {
                text::encoder(s, model.as_deref())?;
                (masker.mask(&mut traj), 0)
            } else {
                let (e, q) = text::embed_request(s, model.as_deref(), &obs, query_text.as_deref(), cancel)?;
                masker.mask_semantic(&mut traj, &e, method, tau, q.as_deref())?
            };
            serde_json::to_value(st).map(|mut v| {
                v["semantic_kept_back"] = json!(kept_back);
                v
            })
        }
    }
    .map_err(|e| Error::invalid("stats", e.to_string()))?;
    // The masked messages as text: every byte outside the masked contents is the input's.
    let stats = serde_json::to_string(&std::mem::take(&mut stats))
        .map_err(|e| Error::invalid("stats", e.to_string()))?;
    Ok(Reply::Raw(format!(
        "{{\"messages\":{},\"stats\":{stats}}}",
        traj.to_json()
    )))
}

/// `POST /v1/cost/flops`: a `config` object (a config.json's content) or the sizes.
pub fn flops(s: &Shared, body: &[u8]) -> Result<Value, ApiError> {
    // The config's text as sent (the body's read refused any repeated key in it).
    let mut f = s.fields(body)?;
    let config = f.raw("config");
    if let Some(c) = config {
        s.admit("reading this config", estimate::json(&Fields::scan(c)))?;
    }
    let config = config
        .map(|c| ModelShape::from_json(c, std::path::Path::new("config")))
        .transpose()?;
    let activation = f.str("activation")?;
    let opts = FlopsOptions {
        config,
        layers: f.count("layers")?,
        hidden: f.count("hidden")?,
        ffn: f.count("ffn")?,
        q_heads: f.count("q_heads")?,
        kv_heads: f.count("kv_heads")?,
        experts_active: f.count("experts_active")?,
        activation: activation.as_deref(),
        sliding_layers: f.count("sliding_layers")?,
        window: f.count("window")?,
    };
    let context = f.count("context")?.unwrap_or(32_768);
    f.done()?;
    Ok(opts.gflops_json(context)?)
}

/// `POST /v1/cost/etc`.
pub fn etc(s: &Shared, body: &[u8]) -> Result<Value, ApiError> {
    let mut f = s.fields(body)?;
    let need = |v: Option<f64>, n: &str| v.ok_or_else(|| Error::invalid(n, "required"));
    let a = need(f.num("input_noncached")?, "input_noncached")?;
    let b = need(f.num("input_cached")?, "input_cached")?;
    let c = need(f.num("output")?, "output")?;
    let alpha = f.num("alpha")?.unwrap_or(0.3);
    let beta = f.num("beta")?.unwrap_or(5.0);
    f.done()?;
    Ok(json!({"etc": cost::effective_token_cost(a, b, c, alpha, beta)?}))
}

/// `POST /v1/cost/plan`.
pub fn plan(s: &Shared, body: &[u8]) -> Result<Value, ApiError> {
    let mut f = s.fields(body)?;
    let depth = f
        .count("depth")?
        .ok_or_else(|| Error::invalid("depth", "required"))?;
    let window = f.count("window")?.unwrap_or(20);
    let stride = f.count("stride")?.unwrap_or(10);
    f.done()?;
    let (w, dup) = cost::window_plan(depth, window, stride)?;
    let w: Vec<[usize; 2]> = w.into_iter().map(|(s, e)| [s, e]).collect();
    Ok(json!({"windows": w, "duplication": dup}))
}

/// `PUT /v1/pools/{name}`: `{"embeddings": ...}`.
pub fn put_pool(s: &Shared, name: &str, body: &[u8]) -> Result<Value, ApiError> {
    let mut f = s.fields(body)?;
    let e = f
        .matrix("embeddings")?
        .ok_or_else(|| Error::invalid("embeddings", "required"))?;
    f.done()?;
    s.admit(&format!("pool '{name}'"), estimate::pool(e.rows(), e.dim()))?;
    s.pools.put(&s.engine, name, e)
}
