//! The server's settings as a user gives them (flags of `ctxprune serve`, keyword arguments
//! of Python's `ctxprune_rs.Service`), checked once into a [`ServeConfig`]: every surface
//! that starts the service refuses the same values with the same words.

use super::ServeConfig;
use crate::{Error, Result};
use std::sync::Arc;
use std::time::Duration;

/// A `[NAME=]PATH` setting: a model directory, a tokenizer file or a pool file, with the
/// name requests use for it (derived from the path when not given).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Named {
    /// The name, or None to take it from the path.
    pub name: Option<String>,
    /// The file or directory (a pool's may end in `:TENSOR` after `.safetensors`).
    pub path: String,
}

impl Named {
    /// `NAME=PATH` or `PATH` (split at the first `=`).
    #[must_use]
    pub fn parse(spec: &str) -> Self {
        match spec.split_once('=') {
            Some((n, p)) => Named {
                name: Some(n.to_string()),
                path: p.to_string(),
            },
            None => Named {
                name: None,
                path: spec.to_string(),
            },
        }
    }

    /// As the user wrote it, for messages.
    fn spec(&self) -> String {
        match &self.name {
            Some(n) => format!("{n}={}", self.path),
            None => self.path.clone(),
        }
    }
}

/// Every setting of the service, None (or empty) for its default
/// ([`ServeConfig::default`]). [`ServeOptions::config`] checks them all; an error names
/// the setting in snake case (`max_body_bytes`), which each surface spells its own way.
#[derive(Clone, Debug, Default)]
#[allow(missing_docs)] // each field is the `ServeConfig` field of its name
pub struct ServeOptions {
    pub max_body_bytes: Option<usize>,
    /// Seconds.
    pub timeout: Option<f64>,
    /// Seconds.
    pub header_timeout: Option<f64>,
    /// Seconds.
    pub body_timeout: Option<f64>,
    /// Seconds.
    pub grace: Option<f64>,
    pub max_concurrent: Option<usize>,
    pub threads: Option<usize>,
    pub max_work: Option<f64>,
    pub max_request_memory: Option<usize>,
    pub max_queue: Option<usize>,
    pub max_pool_bytes: Option<usize>,
    pub oracle_url: Option<String>,
    pub oracle_api: Option<String>,
    pub allow_oracle_urls: bool,
    /// No per-request log lines (`ServeConfig::log` off).
    pub quiet: bool,
    /// Sentence-transformers directories, loaded by [`ServeOptions::config`].
    pub model: Vec<Named>,
    /// HuggingFace tokenizer.json files, loaded by [`ServeOptions::config`].
    pub tokenizer: Vec<Named>,
    /// Start-up pools (checked here: the name, the format, the file's presence; read when
    /// the server starts).
    pub pool: Vec<Named>,
    pub max_embed_tokens: Option<usize>,
}

/// A name requests may use: letters, digits, `.`, `_`, `-`.
fn good_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// `specs` named (by the path's last component, without the `.json` of a file, when no
/// name is given); names unique and good.
fn named(specs: &[Named], setting: &str) -> Result<Vec<(String, std::path::PathBuf)>> {
    let mut out: Vec<(String, std::path::PathBuf)> = Vec::new();
    for spec in specs {
        let path = std::path::PathBuf::from(&spec.path);
        let name = spec.name.clone().unwrap_or_else(|| {
            let n = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            n.strip_suffix(".json").map_or(n.clone(), str::to_string)
        });
        if !good_name(&name) {
            return Err(Error::invalid(
                setting,
                format!(
                    "'{}': the name must be letters, digits, '.', '_' or '-' (NAME=PATH)",
                    spec.spec()
                ),
            ));
        }
        if out.iter().any(|(n, _)| *n == name) {
            return Err(Error::invalid(
                setting,
                format!("the name '{name}' is given twice (name them apart: NAME=PATH)"),
            ));
        }
        out.push((name, path));
    }
    Ok(out)
}

/// Start-up pools: named (by the file name without its extension; a pool name is at most
/// 64 of letters, digits, `.`, `_`, `-`), each file of a format the loader reads and there
/// now.
fn pools(specs: &[Named]) -> Result<Vec<(String, String)>> {
    let mut out: Vec<(String, String)> = Vec::new();
    for spec in specs {
        let (path, _) = crate::io::split_spec(&spec.path);
        let name = spec.name.clone().unwrap_or_else(|| {
            path.file_stem()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        });
        let bad = |why: String| Error::invalid("pool", format!("'{}': {why}", spec.spec()));
        if name.len() > 64 || !good_name(&name) {
            return Err(bad(
                "the name must be 1 to 64 of letters, digits, '.', '_' or '-' (NAME=FILE)".into(),
            ));
        }
        if out.iter().any(|(n, _)| *n == name) {
            return Err(bad(format!(
                "the name '{name}' is given twice (name them apart: NAME=FILE)"
            )));
        }
        crate::io::EmbeddingsFormat::of(path).map_err(|e| bad(e.to_string()))?;
        if !path.is_file() {
            return Err(bad(format!("no such file '{}'", path.display())));
        }
        out.push((name, spec.path.clone()));
    }
    Ok(out)
}

fn positive(v: Option<usize>, setting: &str) -> Result<Option<usize>> {
    match v {
        Some(0) => Err(Error::invalid(setting, "must be at least 1")),
        v => Ok(v),
    }
}

/// A duration in seconds, in (0, 86400].
fn seconds(v: Option<f64>, setting: &str) -> Result<Option<Duration>> {
    match v {
        None => Ok(None),
        Some(t) if t.is_finite() && t > 0.0 && t <= 86_400.0 => Ok(Some(Duration::from_secs_f64(t))),
        Some(t) => Err(Error::invalid(
            setting,
            format!("must be in (0, 86400] seconds, got {t}"),
        )),
    }
}

impl ServeOptions {
    /// The settings checked, and the models and tokenizers loaded: the first bad one is
    /// the error, naming it.
    pub fn config(&self) -> Result<ServeConfig> {
        let mut cfg = ServeConfig::default();
        if let Some(b) = positive(self.max_body_bytes, "max_body_bytes")? {
            cfg.max_body_bytes = b;
        }
        for (v, setting, slot) in [
            (self.timeout, "timeout", &mut cfg.timeout),
            (self.header_timeout, "header_timeout", &mut cfg.header_timeout),
            (self.body_timeout, "body_timeout", &mut cfg.body_timeout),
            (self.grace, "grace", &mut cfg.grace),
        ] {
            if let Some(d) = seconds(v, setting)? {
                *slot = d;
            }
        }
        if let Some(c) = positive(self.max_concurrent, "max_concurrent")? {
            cfg.max_concurrent = c;
        }
        if let Some(t) = positive(self.threads, "threads")? {
            cfg.threads = t;
        }
        if let Some(w) = self.max_work {
            if !(w.is_finite() && w >= 1.0) {
                return Err(Error::invalid(
                    "max_work",
                    format!("must be a finite number of operations >= 1, got {w}"),
                ));
            }
            cfg.max_work = w;
        }
        if let Some(m) = positive(self.max_request_memory, "max_request_memory")? {
            cfg.max_request_memory = m;
        }
        if let Some(q) = self.max_queue {
            cfg.max_queue = q;
        }
        if let Some(b) = self.max_pool_bytes {
            cfg.max_pool_bytes = b;
        }
        if let Some(api) = &self.oracle_api {
            if self.oracle_url.is_none() {
                return Err(Error::invalid("oracle_api", "applies to `oracle_url`"));
            }
            api.parse::<crate::rerank::http::Api>()?;
            cfg.oracle_api = api.clone();
        }
        cfg.oracle_url = self.oracle_url.clone();
        cfg.allow_oracle_urls = self.allow_oracle_urls;
        cfg.log = !self.quiet;
        cfg.pools = pools(&self.pool)?;
        cfg.models = named(&self.model, "model")?
            .into_iter()
            .map(|(name, dir)| Ok((name, crate::embed::SentenceEncoder::load(&dir)?)))
            .collect::<Result<_>>()?;
        cfg.tokenizers = named(&self.tokenizer, "tokenizer")?
            .into_iter()
            .map(|(name, file)| {
                if matches!(name.as_str(), "o200k_base" | "cl100k_base" | "approx") {
                    return Err(Error::invalid(
                        "tokenizer",
                        format!("'{name}' is a built-in tokenizer's name: name the file apart (NAME=FILE)"),
                    ));
                }
                Ok((name, Arc::new(crate::tokens::HfTokenizer::load(&file)?)))
            })
            .collect::<Result<_>>()?;
        if let Some(t) = positive(self.max_embed_tokens, "max_embed_tokens")? {
            if cfg.models.is_empty() {
                return Err(Error::invalid("max_embed_tokens", "applies to `model`"));
            }
            cfg.max_embed_tokens = t;
        }
        Ok(cfg)
    }
}
