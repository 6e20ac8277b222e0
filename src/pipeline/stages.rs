//! Per-stage policies from a TOML file (`stages.toml` of `ctxprune pipeline`).
//!
//! ```toml
//! max_nodes = 64                 # most subqueries retrieved (default 64)
//!
//! [pre_retrieval]                # each table is optional; an absent one is off
//! policy = "controller"          # "off", "scorer" or "controller"
//! weights = "controller.safetensors"   # relative to this file's directory
//! tau = 0.5                      # keep p_keep >= tau (default 0.5)
//! keep_best_if_none = true       # keep the best sibling when none passes (default true)
//!
//! [post_retrieval]
//! policy = "scorer"
//! method = "grn"                 # mmr, grn, centroid, dpp, coverage, hybrid, lexical
//! mode = "gate"                  # gate or greedy (default greedy)
//! threshold = 0.85
//!
//! [pre_synthesis]
//! policy = "scorer"
//! method = "mmr"
//! k = 10                         # also token_budget, threshold, lambda, weights, preset
//! ```
//!
//! A scorer's options are checked exactly as `ctxprune select` checks its flags
//! ([`SelectOptions`], then [`Selector::new`]): an option the method or mode does not read
//! is an error, not ignored. The learned controller may sit at any stage (the paper uses it
//! at Pre-Retrieval; at the later stages its candidates are items, with their subquery's
//! depth and their retrieval order as the structural features). Unknown keys, wrong types
//! and out-of-range values are one-line errors naming the file, the table and the key.

use super::{Pipeline, Policy};
use crate::backend::Engine;
use crate::error::{Error, Result};
use crate::select::judge::LearnedController;
use crate::select::{SelectConfig, SelectOptions, Selector};
use std::path::{Path, PathBuf};
use toml::Value;

/// What one stage does, as the file says.
#[derive(Clone, Debug)]
pub enum StagePolicy {
    /// Keep everything.
    Off,
    /// A marginal-value scorer (checked).
    Scorer(SelectConfig),
    /// The learned controller: keep candidates with `p_keep >= tau`.
    Controller {
        /// The weights file, resolved against the stages file's directory.
        weights: PathBuf,
        /// The loaded network.
        controller: LearnedController,
        /// The keep threshold.
        tau: f64,
        /// Keep the best candidate of a decision when none passes.
        keep_best_if_none: bool,
    },
}

/// One stage: its policy and a one-line description for reports.
#[derive(Clone, Debug)]
pub struct StageSpec {
    /// The policy.
    pub policy: StagePolicy,
    /// For example `scorer grn gate threshold=0.85`, or `off`.
    pub description: String,
}

impl StageSpec {
    fn off() -> Self {
        StageSpec {
            policy: StagePolicy::Off,
            description: "off".into(),
        }
    }

    fn policy(&self) -> Policy {
        match &self.policy {
            StagePolicy::Off => Policy::Off,
            StagePolicy::Scorer(c) => Policy::Scorer(c.clone()),
            StagePolicy::Controller {
                controller,
                tau,
                keep_best_if_none,
                ..
            } => Policy::Judge {
                judge: Box::new(controller.clone()),
                tau: *tau,
                keep_best_if_none: *keep_best_if_none,
            },
        }
    }
}

/// A checked stages file.
#[derive(Clone, Debug)]
pub struct Stages {
    source: PathBuf,
    /// Most subqueries retrieved (`max_nodes`, by default 64).
    pub max_nodes: usize,
    /// `[pre_retrieval]`.
    pub pre_retrieval: StageSpec,
    /// `[post_retrieval]`.
    pub post_retrieval: StageSpec,
    /// `[pre_synthesis]`.
    pub pre_synthesis: StageSpec,
}

const TOP_KEYS: &str = "max_nodes, [pre_retrieval], [post_retrieval], [pre_synthesis]";
const SCORER_KEYS: &[&str] = &[
    "policy",
    "method",
    "mode",
    "k",
    "token_budget",
    "threshold",
    "lambda",
    "weights",
    "preset",
];
const CONTROLLER_KEYS: &[&str] = &["policy", "weights", "tau", "keep_best_if_none"];

/// Errors of one table: `FILE: [TABLE] KEY: MSG`.
struct Table<'a> {
    source: &'a Path,
    name: &'a str,
    t: &'a toml::Table,
}

impl Table<'_> {
    fn err(&self, key: &str, msg: impl std::fmt::Display) -> Error {
        Error::format(self.source, format!("[{}] {key}: {msg}", self.name))
    }

    fn str(&self, key: &str) -> Result<Option<&str>> {
        match self.t.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(v) => Err(self.err(key, format!("must be a string, got {}", v.type_str()))),
        }
    }

    fn number(&self, key: &str) -> Result<Option<f64>> {
        match self.t.get(key) {
            None => Ok(None),
            Some(Value::Float(x)) => Ok(Some(*x)),
            // Integers this large are not what anyone means; they would round in f64.
            Some(Value::Integer(i)) if i.unsigned_abs() <= 1 << 53 => Ok(Some(*i as f64)),
            Some(v) => Err(self.err(key, format!("must be a number, got {}", describe(v)))),
        }
    }

    fn count(&self, key: &str) -> Result<Option<usize>> {
        match self.t.get(key) {
            None => Ok(None),
            Some(Value::Integer(i)) => usize::try_from(*i)
                .map(Some)
                .map_err(|_| self.err(key, format!("must be an integer >= 0, got {i}"))),
            Some(v) => Err(self.err(key, format!("must be an integer >= 0, got {}", describe(v)))),
        }
    }
}

/// A TOML value for an error: its type, and the value when it is short.
fn describe(v: &Value) -> String {
    match v {
        Value::Integer(_) | Value::Float(_) | Value::Boolean(_) => {
            format!("{} {v}", v.type_str())
        }
        Value::String(s) if s.chars().count() <= 40 => format!("string \"{s}\""),
        v => v.type_str().to_string(),
    }
}

impl Stages {
    /// Reads and checks a stages file (format in the module docs).
    pub fn load(path: &Path) -> Result<Stages> {
        let text = crate::io::file::read_text(path, crate::limits::CONFIG_FILE_BYTES)?;
        Self::parse(&text, path)
    }

    /// Checks a stages file's text; `source` names it in errors, and a controller's
    /// relative `weights` path is resolved against its directory.
    pub fn parse(text: &str, source: &Path) -> Result<Stages> {
        let top: toml::Table = toml::from_str(text).map_err(|e| {
            let at = e.span().map_or(String::new(), |s| {
                let before = &text[..s.start.min(text.len())];
                let line = before.matches('\n').count() + 1;
                let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
                format!("line {line}, column {col}: ")
            });
            Error::format(
                source,
                format!("{at}not valid TOML: {}", crate::error::flatten_lines(e.message())),
            )
        })?;
        let mut out = Stages {
            source: source.to_path_buf(),
            max_nodes: Pipeline::default().max_nodes,
            pre_retrieval: StageSpec::off(),
            post_retrieval: StageSpec::off(),
            pre_synthesis: StageSpec::off(),
        };
        let dir = source.parent().unwrap_or(Path::new(""));
        for (key, v) in &top {
            match key.as_str() {
                "max_nodes" => {
                    out.max_nodes = match v {
                        Value::Integer(i) if *i >= 1 => usize::try_from(*i)
                            .map_err(|_| Error::format(source, format!("max_nodes: {i} is too large")))?,
                        v => {
                            return Err(Error::format(
                                source,
                                format!("max_nodes: must be an integer >= 1, got {}", describe(v)),
                            ))
                        }
                    }
                }
                "pre_retrieval" => out.pre_retrieval = stage(source, dir, key, v)?,
                "post_retrieval" => out.post_retrieval = stage(source, dir, key, v)?,
                "pre_synthesis" => out.pre_synthesis = stage(source, dir, key, v)?,
                other => {
                    return Err(Error::format(
                        source,
                        format!("unknown key '{other}' (the file has {TOP_KEYS})"),
                    ))
                }
            }
        }
        Ok(out)
    }

    /// The file the stages were read from.
    #[must_use]
    pub fn source(&self) -> &Path {
        &self.source
    }

    /// The stages in pipeline order, with their table names.
    #[must_use]
    pub fn stages(&self) -> [(&'static str, &StageSpec); 3] {
        [
            ("pre_retrieval", &self.pre_retrieval),
            ("post_retrieval", &self.post_retrieval),
            ("pre_synthesis", &self.pre_synthesis),
        ]
    }

    /// A fresh [`Pipeline`] with these policies (a controller is copied, so the stages can
    /// build any number of pipelines), on the CPU engine (set `engine` for another).
    #[must_use]
    pub fn pipeline(&self) -> Pipeline {
        Pipeline {
            pre_retrieval: self.pre_retrieval.policy(),
            post_retrieval: self.post_retrieval.policy(),
            pre_synthesis: self.pre_synthesis.policy(),
            max_nodes: self.max_nodes,
            engine: Engine::cpu(),
        }
    }

    /// Refuses a controller whose input width does not fit embeddings of dimension `dim`
    /// (its features are `2 * dim + 3` wide), naming the table and its weights.
    pub fn check_dim(&self, dim: usize) -> Result<()> {
        for (name, s) in self.stages() {
            if let StagePolicy::Controller {
                weights, controller, ..
            } = &s.policy
            {
                let want = 2 * dim + 3;
                if controller.input_width() != want {
                    return Err(Error::format(
                        &self.source,
                        format!(
                            "[{name}] weights: {} takes {} features, but the run's embeddings of dimension {dim} give 2 x {dim} + 3 = {want}",
                            weights.display(),
                            controller.input_width()
                        ),
                    ));
                }
            }
        }
        Ok(())
    }
}

fn stage(source: &Path, dir: &Path, name: &str, v: &Value) -> Result<StageSpec> {
    let Value::Table(t) = v else {
        return Err(Error::format(
            source,
            format!("{name}: must be a table [{name}], got {}", describe(v)),
        ));
    };
    let tb = Table { source, name, t };
    let policy = tb
        .str("policy")?
        .ok_or_else(|| tb.err("policy", "missing (\"off\", \"scorer\" or \"controller\")"))?;
    let allowed: &[&str] = match policy {
        "off" => &["policy"],
        "scorer" => SCORER_KEYS,
        "controller" => CONTROLLER_KEYS,
        other => {
            return Err(tb.err(
                "policy",
                format!("unknown policy \"{other}\" (off, scorer, controller)"),
            ))
        }
    };
    if let Some(k) = t.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(tb.err(
            k,
            format!(
                "unknown key for policy \"{policy}\" (its keys: {})",
                allowed.join(", ")
            ),
        ));
    }
    match policy {
        "scorer" => scorer(&tb),
        "controller" => controller(&tb, dir),
        _ => Ok(StageSpec::off()),
    }
}

fn scorer(tb: &Table<'_>) -> Result<StageSpec> {
    let method = tb.str("method")?.ok_or_else(|| {
        tb.err(
            "method",
            "missing (mmr, grn, centroid, dpp, coverage, hybrid, lexical)",
        )
    })?;
    let weights: Option<Vec<f64>> = match tb.t.get("weights") {
        None => None,
        Some(Value::Array(a)) => Some(
            a.iter()
                .enumerate()
                .map(|(i, x)| match x {
                    Value::Float(f) => Ok(*f),
                    Value::Integer(n) if n.unsigned_abs() <= 1 << 53 => Ok(*n as f64),
                    v => Err(tb.err(
                        "weights",
                        format!("element {i} must be a number, got {}", describe(v)),
                    )),
                })
                .collect::<Result<_>>()?,
        ),
        Some(v) => {
            return Err(tb.err(
                "weights",
                format!("must be an array of numbers, got {}", describe(v)),
            ))
        }
    };
    let opts = SelectOptions {
        method,
        mode: tb.str("mode")?,
        preset: tb.str("preset")?,
        k: tb.count("k")?,
        token_budget: tb.number("token_budget")?,
        threshold: tb.number("threshold")?,
        lambda: tb.number("lambda")?,
        weights: weights.as_deref(),
    };
    // Checked as the CLI checks its flags: the options, then the ranges.
    let named = |e: Error| match e {
        Error::InvalidArgument { name, msg } => tb.err(&name.replace('-', "_"), msg),
        e => Error::format(tb.source, format!("[{}] {e}", tb.name)),
    };
    let cfg = opts.config().map_err(named)?;
    Selector::new(&Engine::cpu(), cfg.clone()).map_err(named)?;
    let mut description = format!(
        "scorer {} {}",
        cfg.method_kind().name(),
        opts.mode.unwrap_or("greedy")
    );
    for key in &SCORER_KEYS[3..] {
        if let Some(v) = tb.t.get(*key) {
            description.push_str(&format!(" {key}={v}"));
        }
    }
    Ok(StageSpec {
        policy: StagePolicy::Scorer(cfg),
        description,
    })
}

fn controller(tb: &Table<'_>, dir: &Path) -> Result<StageSpec> {
    let w = tb
        .str("weights")?
        .ok_or_else(|| tb.err("weights", "missing (the controller's .safetensors file)"))?;
    let weights = dir.join(w);
    // The file contract and the safetensors header check, then the controller's own checks.
    let controller = crate::io::safetensors_header::read(&weights)
        .and_then(|bytes| LearnedController::from_safetensors(&bytes, &weights))
        .map_err(|e| tb.err("weights", e.to_string()))?;
    let tau = tb.number("tau")?.unwrap_or(0.5);
    if !tau.is_finite() {
        return Err(tb.err("tau", format!("must be finite, got {tau}")));
    }
    let keep_best_if_none = match tb.t.get("keep_best_if_none") {
        None => true,
        Some(Value::Boolean(b)) => *b,
        Some(v) => {
            return Err(tb.err(
                "keep_best_if_none",
                format!("must be true or false, got {}", describe(v)),
            ))
        }
    };
    Ok(StageSpec {
        description: format!("controller {w} tau={tau} keep_best_if_none={keep_best_if_none}"),
        policy: StagePolicy::Controller {
            weights,
            controller,
            tau,
            keep_best_if_none,
        },
    })
}
