//! `labels.jsonl`, one labelled No-CM trajectory per line, and the same label given as a
//! JSON object in a request (`POST /v1/probe`): one reader for both.

use crate::error::{Error, Result};
use serde_json::Value;
use std::collections::HashMap;
use std::path::Path;

/// One line of `labels.jsonl`, or one element of a request's list of labelled
/// trajectories.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Label {
    /// The query id (unique).
    pub id: String,
    /// The No-CM trajectory file, relative to the trajectories directory (empty for a
    /// trajectory given in memory, [`parse_inline`]).
    pub trajectory: String,
    /// Gold URLs, normalised; when present the target is the evidence SNR.
    pub gold: Option<Vec<String>>,
    /// Cited URLs, normalised; when present (and `gold` is not) they are the proxy's `C`.
    pub cited: Option<Vec<String>>,
    /// Whether CM rescued the query (No-CM wrong → CM correct).
    pub rescued: bool,
    /// The line it was read from (1-based), or its position in a list given in memory
    /// (1-based).
    pub line: usize,
}

/// The fields a label may have.
const LABEL_FIELDS: &str = "id, trajectory, rescued, gold, cited";

/// A normalised URL list field; errors through `at` name the field and element.
fn url_list(at: &dyn Fn(String) -> Error, key: &str, v: &Value) -> Result<Option<Vec<String>>> {
    match v {
        Value::Null => Ok(None),
        Value::Array(a) => a
            .iter()
            .enumerate()
            .map(|(i, u)| {
                let s = u.as_str().ok_or_else(|| {
                    at(format!(
                        "field \"{key}\"[{i}]: expected a URL string, got {}",
                        crate::io::json_type(u)
                    ))
                })?;
                crate::mask::pages::normalize_url(s).map_err(|e| {
                    let msg = match e {
                        Error::InvalidArgument { msg, .. } => msg,
                        e => e.to_string(),
                    };
                    at(format!("field \"{key}\"[{i}]: {msg}"))
                })
            })
            .collect::<Result<Vec<_>>>()
            .map(Some),
        other => Err(at(format!(
            "field \"{key}\": expected an array of URLs, got {}",
            crate::io::json_type(other)
        ))),
    }
}

/// A label's fields from one JSON object, with `line` its position; errors through `at`
/// (which says where the object is) name the field. The `trajectory` field is read by
/// `trajectory`: a file name in labels.jsonl, the messages themselves in a request.
fn label_of<T>(
    v: &Value,
    line: usize,
    at: &dyn Fn(String) -> Error,
    trajectory: impl FnOnce(&Value) -> Result<T>,
) -> Result<(Label, T)> {
    let Value::Object(o) = v else {
        return Err(at(format!(
            "expected a JSON object, got {}",
            crate::io::json_type(v)
        )));
    };
    if let Some(k) = o
        .keys()
        .find(|k| !LABEL_FIELDS.split(", ").any(|f| f == k.as_str()))
    {
        return Err(at(format!(
            "unknown field \"{k}\" (the fields are {LABEL_FIELDS})"
        )));
    }
    let id = match o.get("id") {
        None => return Err(at("field \"id\": missing".into())),
        Some(Value::String(s)) if !s.trim().is_empty() => s.clone(),
        Some(Value::String(_)) => return Err(at("field \"id\": is empty".into())),
        Some(other) => {
            return Err(at(format!(
                "field \"id\": expected a string, got {}",
                crate::io::json_type(other)
            )))
        }
    };
    let traj = match o.get("trajectory") {
        None => return Err(at("field \"trajectory\": missing".into())),
        Some(t) => trajectory(t)?,
    };
    let rescued = match o.get("rescued") {
        None => return Err(at("field \"rescued\": missing".into())),
        Some(Value::Bool(b)) => *b,
        Some(other) => {
            return Err(at(format!(
                "field \"rescued\": expected true or false, got {}",
                crate::io::json_type(other)
            )))
        }
    };
    let gold = o.get("gold").map_or(Ok(None), |v| url_list(at, "gold", v))?;
    let cited = o.get("cited").map_or(Ok(None), |v| url_list(at, "cited", v))?;
    let label = Label {
        id,
        trajectory: String::new(),
        gold,
        cited,
        rescued,
        line,
    };
    Ok((label, traj))
}

/// Parses `labels.jsonl` text (`source` names it in errors). One JSON object per line:
/// `{"id": "q17", "trajectory": "q17.json", "gold": [..], "cited": [..], "rescued": true}`
/// with `id`, `trajectory` (non-empty strings) and `rescued` (a boolean) required, `gold`
/// and `cited` optional (arrays of absolute URLs, or null). Blank lines are skipped. An
/// unknown field is an error (a misspelt `gold` must not silently turn the target into
/// the proxy), as is a duplicate id. Errors name the file, the line (1-based) and the
/// field.
pub fn parse_labels(source: &Path, text: &str) -> Result<Vec<Label>> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut out: Vec<Label> = Vec::new();
    let mut ids: HashMap<String, usize> = HashMap::new();
    for (k, raw) in text.lines().enumerate() {
        let line = k + 1;
        if raw.trim().is_empty() {
            continue;
        }
        let at = |msg: String| Error::format(source, format!("line {line}: {msg}"));
        let v = crate::io::json::value_str(raw).map_err(|e| at(format!("not valid JSON: {e}")))?;
        let (mut label, file) = label_of(&v, line, &at, |t| match t {
            Value::String(s) if !s.trim().is_empty() => Ok(s.clone()),
            Value::String(_) => Err(at("field \"trajectory\": is empty".into())),
            other => Err(at(format!(
                "field \"trajectory\": expected a string, got {}",
                crate::io::json_type(other)
            ))),
        })?;
        label.trajectory = file;
        if let Some(first) = ids.insert(label.id.clone(), line) {
            return Err(at(format!(
                "field \"id\": '{}' is also the id on line {first}",
                label.id
            )));
        }
        out.push(label);
    }
    if out.is_empty() {
        return Err(Error::format(source, "no labels (every line is blank)"));
    }
    Ok(out)
}

/// Reads and parses a labels file ([`parse_labels`]).
pub fn load_labels(path: &Path) -> Result<Vec<Label>> {
    parse_labels(
        path,
        &crate::io::file::read_text(path, crate::limits::TEXT_FILE_BYTES)?,
    )
}

/// Labelled trajectories given in memory, as a request gives them: a JSON array of
/// objects with a label's fields whose `trajectory` is the messages themselves (an
/// OpenAI or Anthropic message list, or an object with `"messages"`), not a file name.
/// Errors name the input `name` and the element: `queries[3]: field "gold"[0]: ...`.
/// Each label's `line` is its position in the list, 1-based; `trajectory` is empty.
pub fn parse_inline(name: &str, v: &Value) -> Result<Vec<(Label, crate::mask::Trajectory)>> {
    let Value::Array(items) = v else {
        return Err(Error::invalid(
            name,
            format!(
                "expected an array of labelled trajectories, got {}",
                crate::io::json_type(v)
            ),
        ));
    };
    if items.is_empty() {
        return Err(Error::invalid(
            name,
            "empty (give at least one labelled trajectory)",
        ));
    }
    let mut ids: HashMap<String, usize> = HashMap::new();
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let at = |msg: String| Error::invalid(format!("{name}[{i}]"), msg);
        let (label, traj) = label_of(item, i + 1, &at, |t| {
            if !(t.is_array() || t.is_object()) {
                return Err(at(format!(
                    "field \"trajectory\": expected the messages (an array, or an object with \"messages\"), got {}",
                    crate::io::json_type(t)
                )));
            }
            let text = serde_json::to_string(t).map_err(|e| at(format!("field \"trajectory\": {e}")))?;
            crate::mask::Trajectory::parse(&text, None).map_err(|e| at(format!("field \"trajectory\": {e}")))
        })?;
        if let Some(first) = ids.insert(label.id.clone(), i) {
            return Err(at(format!(
                "field \"id\": '{}' is also the id of {name}[{first}]",
                label.id
            )));
        }
        out.push((label, traj));
    }
    Ok(out)
}
