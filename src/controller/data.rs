//! `decisions.jsonl`: logged judge decisions, one per line (format in the module docs of
//! [`crate::controller`]), and the grouped train / held-out split by run.

use crate::embeddings::{narrow_f32, Embeddings};
use crate::error::{Error, Result};
use crate::rng::Rng;
use crate::select::judge::{Candidate, JudgeContext, LearnedController, Stage};
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::Path;

/// A frozen text encoder: one embedding row per text, in order. The training CLI wires a
/// sentence encoder to it; tests pass a closure.
pub type Encoder<'a> = &'a dyn Fn(&[&str]) -> Result<Embeddings>;

/// One logged decision: a candidate in a research state, and what the judge decided.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    /// The run (trajectory) it came from; the split keeps a run on one side.
    pub run: String,
    /// Depth of the candidate in the research tree.
    pub depth: usize,
    /// Its position among its siblings.
    pub order: usize,
    /// How many items were retained when the decision was made.
    pub retained: usize,
    /// The state embedding: the mean of the query and retained embeddings.
    pub state: Vec<f32>,
    /// The candidate's embedding.
    pub candidate: Vec<f32>,
    /// Whether the judge kept it (the classification target).
    pub keep: bool,
    /// The judge's utility, when logged (the regression target).
    pub utility: Option<f32>,
    /// The line of the log it came from (from 1).
    pub line: usize,
}

impl Decision {
    /// The feature vector, laid out as [`LearnedController::features`] lays it out:
    /// `[state, candidate, depth, order, retained]`.
    #[must_use]
    pub fn features(&self) -> Vec<f32> {
        let mut f = Vec::with_capacity(self.state.len() * 2 + 3);
        f.extend_from_slice(&self.state);
        f.extend_from_slice(&self.candidate);
        f.extend([self.depth as f32, self.order as f32, self.retained as f32]);
        f
    }

    /// The embedding width.
    #[must_use]
    pub fn embedding_dim(&self) -> usize {
        self.candidate.len()
    }
}

/// Reads a decisions log (see [`parse_decisions`]).
pub fn load_decisions(path: &Path, encoder: Option<Encoder<'_>>) -> Result<Vec<Decision>> {
    parse_decisions(
        path,
        &crate::io::file::read(path, crate::limits::TEXT_FILE_BYTES)?,
        encoder,
    )
}

/// Parses a decisions log held in memory; `source` names it in errors, which also name
/// the line (from 1) and the field. Blank lines are skipped; a field not in the format
/// is an error naming it (a misspelt `"utilty"` must not silently train without
/// utilities). Lines in the text form need `encoder`.
pub fn parse_decisions(source: &Path, bytes: &[u8], encoder: Option<Encoder<'_>>) -> Result<Vec<Decision>> {
    let bytes = bytes.strip_prefix(b"\xef\xbb\xbf").unwrap_or(bytes);
    let text = std::str::from_utf8(bytes).map_err(|e| Error::format(source, format!("not UTF-8: {e}")))?;
    let mut out: Vec<Decision> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let d = parse_line(source, i + 1, line, encoder)?;
        if let Some(first) = out.first() {
            if d.embedding_dim() != first.embedding_dim() {
                return Err(Error::format(
                    source,
                    format!(
                        "line {}: embeddings have {} values, line {} had {}",
                        d.line,
                        d.embedding_dim(),
                        first.line,
                        first.embedding_dim()
                    ),
                ));
            }
        }
        out.push(d);
    }
    if out.is_empty() {
        return Err(Error::format(source, "no decisions (every line is blank)"));
    }
    Ok(out)
}

/// One line's decision.
fn parse_line(source: &Path, ln: usize, line: &str, encoder: Option<Encoder<'_>>) -> Result<Decision> {
    let at = |field: &str, m: String| {
        let f = if field.is_empty() {
            String::new()
        } else {
            format!("\"{field}\": ")
        };
        Error::format(source, format!("line {ln}: {f}{m}"))
    };
    let v = crate::io::json::value_str(line).map_err(|e| at("", format!("invalid JSON: {e}")))?;
    let Value::Object(o) = &v else {
        return Err(at(
            "",
            format!("expected a JSON object, got {}", crate::io::json_type(&v)),
        ));
    };
    const FIELDS: [&str; 11] = [
        "run",
        "depth",
        "order",
        "retained",
        "state_embedding",
        "candidate_embedding",
        "keep",
        "utility",
        "query",
        "retained_texts",
        "candidate",
    ];
    if let Some(k) = o.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Err(at(
            k,
            format!("is not a field of a decision ({})", FIELDS.join(", ")),
        ));
    }
    let run = match o.get("run") {
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        Some(Value::String(_)) => return Err(at("run", "is empty".into())),
        Some(other) => {
            return Err(at(
                "run",
                format!("is {}, not a string", crate::io::json_type(other)),
            ))
        }
        None => return Err(at("run", "missing (a string naming the trajectory)".into())),
    };
    let count = |field: &str, required: bool| -> Result<Option<usize>> {
        match o.get(field) {
            None if required => Err(at(field, "missing (a non-negative integer)".into())),
            None => Ok(None),
            Some(x) => x
                .as_u64()
                .and_then(|n| usize::try_from(n).ok())
                .map(Some)
                .ok_or_else(|| at(field, format!("must be a non-negative integer, got {x}"))),
        }
    };
    let (depth, order) = (count("depth", true)?, count("order", true)?);
    let keep = match o.get("keep") {
        Some(Value::Bool(b)) => *b,
        Some(other) => {
            return Err(at(
                "keep",
                format!("is {}, not true or false", crate::io::json_type(other)),
            ))
        }
        None => return Err(at("keep", "missing (true or false)".into())),
    };
    let utility = match o.get("utility") {
        None | Some(Value::Null) => None,
        Some(x) => {
            let u = x
                .as_f64()
                .ok_or_else(|| at("utility", format!("is {}, not a number", crate::io::json_type(x))))?;
            Some(narrow_f32(u).map_err(|m| at("utility", m))?)
        }
    };
    let has_emb = o.contains_key("state_embedding") || o.contains_key("candidate_embedding");
    let has_text = o.contains_key("query") || o.contains_key("retained_texts") || o.contains_key("candidate");
    let (state, candidate, retained) = match (has_emb, has_text) {
        (true, true) => {
            return Err(at(
                "",
                "has both embeddings (state_embedding, candidate_embedding) and texts (query, retained_texts, candidate): give one form".into(),
            ))
        }
        (false, false) => {
            return Err(at(
                "",
                "missing \"state_embedding\" and \"candidate_embedding\" (or the texts \"query\" and \"candidate\")".into(),
            ))
        }
        (true, false) => {
            let state = vector(o.get("state_embedding"), "state_embedding", &at)?;
            let cand = vector(o.get("candidate_embedding"), "candidate_embedding", &at)?;
            if cand.len() != state.len() {
                return Err(at(
                    "candidate_embedding",
                    format!("has {} values, \"state_embedding\" has {}", cand.len(), state.len()),
                ));
            }
            let retained = count("retained", true)?.unwrap_or(0);
            (state, cand, retained)
        }
        (false, true) => {
            let Some(enc) = encoder else {
                return Err(at(
                    "query",
                    "texts need a frozen encoder (pass --model DIR), or log state_embedding and candidate_embedding instead".into(),
                ));
            };
            let text = |field: &str| -> Result<&str> {
                match o.get(field) {
                    Some(Value::String(s)) => Ok(s),
                    Some(other) => Err(at(field, format!("is {}, not a string", crate::io::json_type(other)))),
                    None => Err(at(field, "missing (a string)".into())),
                }
            };
            let (query, cand) = (text("query")?, text("candidate")?);
            let retained: Vec<&str> = match o.get("retained_texts") {
                None => Vec::new(),
                Some(Value::Array(a)) => a
                    .iter()
                    .enumerate()
                    .map(|(i, x)| {
                        x.as_str().ok_or_else(|| {
                            at("retained_texts", format!("element {i} is {}, not a string", crate::io::json_type(x)))
                        })
                    })
                    .collect::<Result<_>>()?,
                Some(other) => {
                    return Err(at(
                        "retained_texts",
                        format!("is {}, not an array of strings", crate::io::json_type(other)),
                    ))
                }
            };
            if let Some(r) = count("retained", false)? {
                if r != retained.len() {
                    return Err(at(
                        "retained",
                        format!("is {r}, but \"retained_texts\" has {} texts", retained.len()),
                    ));
                }
            }
            let mut texts = vec![query];
            texts.extend(&retained);
            texts.push(cand);
            let e = enc(&texts).map_err(|e| at("query", format!("the encoder failed: {e}")))?;
            if e.rows() != texts.len() {
                return Err(at(
                    "query",
                    format!("the encoder returned {} rows for {} texts", e.rows(), texts.len()),
                ));
            }
            let rows: Vec<&[f32]> = (1..=retained.len()).map(|r| e.row(r)).collect();
            let ctx = JudgeContext {
                stage: Stage::PreRetrieval,
                query_text: query,
                query: e.row(0),
                retained: &rows,
            };
            let c = Candidate {
                text: cand,
                embedding: e.row(texts.len() - 1),
                depth: depth.unwrap_or(0),
                order: order.unwrap_or(0),
            };
            // The one feature function inference uses: the state is its first D values.
            let f = LearnedController::features(&ctx, &c).map_err(|e| at("query", e.to_string()))?;
            let d = e.dim();
            (f[..d].to_vec(), f[d..2 * d].to_vec(), rows.len())
        }
    };
    Ok(Decision {
        run,
        depth: depth.unwrap_or(0),
        order: order.unwrap_or(0),
        retained,
        state,
        candidate,
        keep,
        utility,
        line: ln,
    })
}

/// A non-empty array of finite numbers that fit in f32.
fn vector(v: Option<&Value>, field: &str, at: &dyn Fn(&str, String) -> Error) -> Result<Vec<f32>> {
    let v = v.ok_or_else(|| at(field, "missing (an array of numbers)".into()))?;
    crate::io::json_f32_array(v).map_err(|m| at(field, m))
}

/// A train / held-out split of decisions by run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Split {
    /// Indices of the training decisions, in log order.
    pub train: Vec<usize>,
    /// Indices of the held-out decisions, in log order.
    pub heldout: Vec<usize>,
    /// The training runs, sorted.
    pub train_runs: Vec<String>,
    /// The held-out runs, sorted.
    pub heldout_runs: Vec<String>,
}

/// Splits decisions by run (App. B.3: one trajectory is never on both sides): the runs
/// are sorted by name, shuffled by `seed`, and the first `round(holdout × runs)` (at
/// least 1, at most all but one) are held out. `holdout` must be in (0, 1); a log with
/// fewer than two runs cannot be split and is an error.
pub fn split_by_run(decisions: &[Decision], holdout: f64, seed: u64) -> Result<Split> {
    if !(holdout > 0.0 && holdout < 1.0) {
        return Err(Error::invalid(
            "--holdout",
            format!("must be in (0, 1), got {holdout}"),
        ));
    }
    let runs: Vec<&str> = decisions
        .iter()
        .map(|d| d.run.as_str())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    if runs.len() < 2 {
        return Err(Error::invalid(
            "decisions",
            format!(
                "{} run(s) in the log; a held-out split by run needs at least 2",
                runs.len()
            ),
        ));
    }
    let mut order = runs.clone();
    let mut rng = Rng::new(seed ^ SPLIT_STREAM);
    for i in (1..order.len()).rev() {
        order.swap(i, rng.below(i + 1));
    }
    let n_hold = ((holdout * runs.len() as f64).round() as usize).clamp(1, runs.len() - 1);
    let held: BTreeSet<&str> = order[..n_hold].iter().copied().collect();
    let (heldout, train): (Vec<usize>, Vec<usize>) =
        (0..decisions.len()).partition(|&i| held.contains(decisions[i].run.as_str()));
    Ok(Split {
        train,
        heldout,
        train_runs: runs
            .iter()
            .filter(|r| !held.contains(*r))
            .map(|r| r.to_string())
            .collect(),
        heldout_runs: held.iter().map(|r| r.to_string()).collect(),
    })
}

/// Keeps the split's random stream apart from the initialisation's and the shuffling's
/// for the same `--seed`.
const SPLIT_STREAM: u64 = 0x5_9117;
