//! Rerank servers as oracles (SPEC §3): TEI (`POST /rerank {query, texts}` ->
//! `[{index, score}]`) and Cohere-style (`{query, documents, top_n}` ->
//! `{results: [{index, relevance_score}]}`), with a timeout, retries on transport errors,
//! 429 and 5xx, splitting of oversize batches, and a clear error on a malformed or failed
//! response; plus [`BatchQueue`], which merges concurrent callers' requests into batches
//! (max batch, max wait, idle flush; defaults 16 / 2000 ms / 500 ms as in
//! rerank-effective-token-cost.txt).

use super::Oracle;
use crate::error::{Error, Result};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The two common rerank APIs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Api {
    /// Text Embeddings Inference `/rerank`.
    Tei,
    /// Cohere-style `/rerank`.
    Cohere,
}

impl std::str::FromStr for Api {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "tei" => Ok(Api::Tei),
            "cohere" => Ok(Api::Cohere),
            _ => Err(Error::invalid(
                "oracle_api",
                format!("unknown API '{s}' (tei, cohere)"),
            )),
        }
    }
}

/// Client settings. Defaults: 30 s timeout, 2 retries, batches of at most 32 texts.
#[derive(Clone, Debug)]
pub struct HttpConfig {
    /// The endpoint (e.g. `http://127.0.0.1:8080/rerank`).
    pub url: String,
    /// Its API.
    pub api: Api,
    /// Per-request timeout.
    pub timeout: Duration,
    /// Retries after the first attempt (transport errors, 429, 5xx).
    pub retries: u32,
    /// Largest batch sent in one request; bigger calls are split.
    pub max_batch: usize,
    /// Cohere's `model` field, when the server wants one.
    pub model: Option<String>,
    /// Stops the calls: checked before every attempt, and no attempt (or wait between
    /// retries) runs past its deadline. By default none.
    pub cancel: Option<crate::cancel::Cancel>,
}

impl HttpConfig {
    /// Defaults for `url` and `api`.
    #[must_use]
    pub fn new(url: &str, api: Api) -> Self {
        HttpConfig {
            url: url.into(),
            api,
            timeout: Duration::from_secs(30),
            retries: 2,
            max_batch: 32,
            model: None,
            cancel: None,
        }
    }

    /// Sets the per-request timeout: `seconds` in (0, 86400] (errors name
    /// `oracle-timeout`).
    pub fn timeout_secs(mut self, seconds: f64) -> Result<Self> {
        if !(seconds.is_finite() && seconds > 0.0 && seconds <= 86_400.0) {
            return Err(Error::invalid(
                "oracle_timeout",
                format!("must be in (0, 86400] seconds, got {seconds}"),
            ));
        }
        self.timeout = Duration::from_secs_f64(seconds);
        Ok(self)
    }
}

/// A rerank server scoring `texts[i]` against `query`; refuses more than `budget` items.
pub struct HttpOracle {
    cfg: HttpConfig,
    agent: ureq::Agent,
    query: String,
    texts: Vec<String>,
    budget: usize,
    calls: usize,
}

impl HttpOracle {
    /// A client for `cfg` over the pool's `texts`.
    pub fn new(cfg: HttpConfig, query: &str, texts: Vec<String>, budget: usize) -> Result<Self> {
        if cfg.max_batch == 0 {
            return Err(Error::invalid("max_batch", "must be at least 1"));
        }
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(cfg.timeout))
            .http_status_as_error(false)
            .build()
            .into();
        Ok(HttpOracle {
            cfg,
            agent,
            query: query.into(),
            texts,
            budget,
            calls: 0,
        })
    }

    fn request(&self, items: &[usize]) -> Result<Vec<f64>> {
        let docs: Vec<&str> = items.iter().map(|&i| self.texts[i].as_str()).collect();
        let body = match self.cfg.api {
            Api::Tei => {
                serde_json::json!({"query": self.query, "texts": docs, "raw_scores": false, "truncate": true})
            }
            Api::Cohere => {
                let mut b = serde_json::json!({"query": self.query, "documents": docs, "top_n": docs.len()});
                if let Some(m) = &self.cfg.model {
                    b["model"] = m.clone().into();
                }
                b
            }
        };
        let body = body.to_string();
        let url = &self.cfg.url;
        let fail = |status: Option<u16>, msg: String| Error::Oracle {
            oracle: url.clone(),
            status,
            msg,
        };
        let mut last = String::new();
        let mut last_status = None;
        let cancel = self.cfg.cancel.as_ref();
        // The time an attempt (or a wait) may take: the timeout, within the deadline.
        let within = |d: Duration| {
            cancel
                .and_then(crate::cancel::Cancel::remaining)
                .map_or(d, |r| d.min(r))
        };
        for attempt in 0..=self.cfg.retries {
            if attempt > 0 {
                std::thread::sleep(within(Duration::from_millis(100 << (attempt - 1).min(6))));
            }
            crate::cancel::check(cancel)?;
            let resp = self
                .agent
                .post(url)
                .config()
                .timeout_global(Some(within(self.cfg.timeout)))
                .build()
                .header("content-type", "application/json")
                .send(&body);
            let resp = match resp {
                Ok(r) => r,
                Err(e) => {
                    last = format!("request failed: {e}");
                    last_status = None;
                    continue;
                }
            };
            let status = resp.status().as_u16();
            let text = resp
                .into_body()
                .read_to_string()
                .map_err(|e| fail(Some(status), format!("reading the response: {e}")));
            if status == 429 || status >= 500 {
                last = "server error".to_string();
                last_status = Some(status);
                continue;
            }
            let text = text?;
            if status >= 400 {
                return Err(fail(
                    Some(status),
                    text.chars()
                        .take(200)
                        .collect::<String>()
                        .replace(['\n', '\r'], " "),
                ));
            }
            return parse_response(self.cfg.api, &text, items.len()).map_err(|m| fail(None, m));
        }
        Err(fail(
            last_status,
            format!("{last} (after {} attempts)", self.cfg.retries + 1),
        ))
    }
}

/// Scores by position from a rerank server's response body for a request of `n` texts,
/// checking every index in `0..n` appears exactly once with a score in [0, 1]; the error
/// says what is malformed. What [`HttpOracle`] runs on every response (public for other
/// transports and for the fuzz target).
pub fn parse_response(api: Api, text: &str, n: usize) -> std::result::Result<Vec<f64>, String> {
    let v = crate::io::json::value_str(text).map_err(|e| format!("malformed response (not JSON: {e})"))?;
    let (list, key) = match api {
        Api::Tei => (v.as_array(), "score"),
        Api::Cohere => (v.get("results").and_then(|r| r.as_array()), "relevance_score"),
    };
    let list = list.ok_or_else(|| {
        format!(
            "malformed response: expected {}",
            if api == Api::Tei {
                "a JSON array"
            } else {
                "{\"results\": [...]}"
            }
        )
    })?;
    let mut out = vec![f64::NAN; n];
    for (k, e) in list.iter().enumerate() {
        let i = e
            .get("index")
            .and_then(serde_json::Value::as_u64)
            .ok_or_else(|| format!("malformed response: entry {k} has no index"))? as usize;
        let s = e
            .get(key)
            .and_then(serde_json::Value::as_f64)
            .ok_or_else(|| format!("malformed response: entry {k} has no {key}"))?;
        if i >= n || !out[i].is_nan() {
            return Err(format!(
                "malformed response: index {i} is out of range or repeated"
            ));
        }
        if !(0.0..=1.0).contains(&s) {
            return Err(format!("score {s} of index {i} is outside [0, 1]"));
        }
        out[i] = s;
    }
    if let Some(i) = out.iter().position(|s| s.is_nan()) {
        return Err(format!(
            "malformed response: no score for index {i} ({} of {n} returned)",
            list.len()
        ));
    }
    Ok(out)
}

impl Oracle for HttpOracle {
    fn score(&mut self, items: &[usize]) -> Result<Vec<f64>> {
        if self.calls + items.len() > self.budget {
            return Err(Error::invalid(
                "oracle",
                format!(
                    "{} more calls would exceed the budget of {}",
                    items.len(),
                    self.budget
                ),
            ));
        }
        if let Some(&i) = items.iter().find(|&&i| i >= self.texts.len()) {
            return Err(Error::invalid(
                "oracle",
                format!("item {i} has no text ({} texts)", self.texts.len()),
            ));
        }
        let mut out = Vec::with_capacity(items.len());
        for chunk in items.chunks(self.cfg.max_batch) {
            let scores = self.request(chunk)?;
            // Counted per chunk: what the server already scored is spent even if a later
            // chunk fails.
            self.calls += chunk.len();
            out.extend(scores);
        }
        Ok(out)
    }
}

/// Batching settings: flush at `max_batch` items, `max_wait` after the first queued item,
/// or `idle` after the last arrival, whichever comes first.
#[derive(Clone, Copy, Debug)]
pub struct BatchConfig {
    /// Items per batch. By default 16.
    pub max_batch: usize,
    /// Longest wait of the oldest queued item. By default 2000 ms.
    pub max_wait: Duration,
    /// Flush when no request arrived for this long. By default 500 ms.
    pub idle: Duration,
}

impl Default for BatchConfig {
    fn default() -> Self {
        BatchConfig {
            max_batch: 16,
            max_wait: Duration::from_millis(2000),
            idle: Duration::from_millis(500),
        }
    }
}

type Reply = mpsc::Sender<Result<Vec<f64>>>;

/// Merges concurrent callers' oracle requests into batches on a worker thread. Cloned
/// handles ([`BatchHandle`]) block until their items are scored.
/// The worker ends once the queue and every handle are dropped (after flushing).
pub struct BatchQueue {
    tx: mpsc::Sender<(Vec<usize>, Reply)>,
}

/// A caller's handle on a [`BatchQueue`]; an [`Oracle`].
#[derive(Clone)]
pub struct BatchHandle {
    tx: mpsc::Sender<(Vec<usize>, Reply)>,
}

impl BatchQueue {
    /// Starts the worker over `inner`.
    pub fn new(mut inner: Box<dyn Oracle + Send>, cfg: BatchConfig) -> Self {
        let (tx, rx) = mpsc::channel::<(Vec<usize>, Reply)>();
        std::thread::spawn(move || {
            let mut pending: Vec<(Vec<usize>, Reply)> = Vec::new();
            let (mut first, mut last) = (Instant::now(), Instant::now());
            loop {
                let queued: usize = pending.iter().map(|p| p.0.len()).sum();
                let wait = if pending.is_empty() {
                    None
                } else {
                    let now = Instant::now();
                    Some(
                        (first + cfg.max_wait)
                            .min(last + cfg.idle)
                            .saturating_duration_since(now),
                    )
                };
                let msg = match wait {
                    None => rx.recv().map_err(|_| mpsc::RecvTimeoutError::Disconnected),
                    Some(w) if queued < cfg.max_batch.max(1) => rx.recv_timeout(w),
                    Some(_) => Err(mpsc::RecvTimeoutError::Timeout),
                };
                match msg {
                    Ok(m) => {
                        if pending.is_empty() {
                            first = Instant::now();
                        }
                        last = Instant::now();
                        pending.push(m);
                        if pending.iter().map(|p| p.0.len()).sum::<usize>() < cfg.max_batch.max(1) {
                            continue;
                        }
                    }
                    Err(mpsc::RecvTimeoutError::Timeout) => {}
                    Err(mpsc::RecvTimeoutError::Disconnected) => {
                        if pending.is_empty() {
                            return;
                        }
                    }
                }
                let batch = std::mem::take(&mut pending);
                let items: Vec<usize> = batch.iter().flat_map(|b| b.0.iter().copied()).collect();
                match inner.score(&items) {
                    Ok(scores) => {
                        let mut at = 0;
                        for (req, reply) in batch {
                            let _ = reply.send(Ok(scores[at..at + req.len()].to_vec()));
                            at += req.len();
                        }
                    }
                    Err(e) => {
                        let (oracle, status, msg) = match e {
                            Error::Oracle { oracle, status, msg } => (oracle, status, msg),
                            other => ("batch".to_string(), None, other.to_string()),
                        };
                        for (_, reply) in batch {
                            let _ = reply.send(Err(Error::Oracle {
                                oracle: oracle.clone(),
                                status,
                                msg: msg.clone(),
                            }));
                        }
                    }
                }
            }
        });
        BatchQueue { tx }
    }

    /// A handle for one caller.
    #[must_use]
    pub fn handle(&self) -> BatchHandle {
        BatchHandle { tx: self.tx.clone() }
    }
}

impl Oracle for BatchHandle {
    fn score(&mut self, items: &[usize]) -> Result<Vec<f64>> {
        let (tx, rx) = mpsc::channel();
        let stopped = || Error::Oracle {
            oracle: "batch".into(),
            status: None,
            msg: "the batching queue has stopped".into(),
        };
        self.tx.send((items.to_vec(), tx)).map_err(|_| stopped())?;
        rx.recv().map_err(|_| stopped())?
    }
}
