//! The two message formats, OpenAI's and Anthropic's, told apart by their markers (a
//! `tool_calls` array, `tool` messages; `tool_use` and `tool_result` blocks) message by
//! message, and the messages array of a document.

use crate::error::{Error, Result};
use serde_json::Value;

/// The two message formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// OpenAI chat messages.
    OpenAi,
    /// Anthropic messages.
    Anthropic,
}

impl std::fmt::Display for Format {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Format::OpenAi => "openai",
            Format::Anthropic => "anthropic",
        })
    }
}

impl std::str::FromStr for Format {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "openai" => Ok(Format::OpenAi),
            "anthropic" => Ok(Format::Anthropic),
            _ => Err(Error::invalid(
                "format",
                format!("unknown format '{s}' (openai, anthropic)"),
            )),
        }
    }
}

impl Format {
    /// The format `doc` (an array of messages, or an object with `"messages"`) is written
    /// in, from its markers: OpenAI's are assistant `tool_calls` and `"role": "tool"`
    /// messages, Anthropic's are `tool_use` and `tool_result` content blocks. `None` when
    /// it has neither (it makes no tool calls: there is nothing to mask in either format);
    /// an error naming both places when it has both.
    pub fn detect(doc: &Value) -> Result<Option<Format>> {
        let mut known: Option<Known> = None;
        for (m, msg) in messages_of(doc)?.iter().enumerate() {
            if let Some(k) = message_format(msg, m, known.as_ref())? {
                known.get_or_insert(k);
            }
        }
        Ok(known.map(|k| k.format))
    }
}

/// A format and how it was settled ("was given", "was detected at messages[3]").
#[derive(Clone, Debug)]
pub(super) struct Known {
    pub(super) format: Format,
    pub(super) why: String,
}

/// The first place in message `m` that only format `f` has, and what it is.
fn marker(msg: &Value, m: usize, f: Format) -> Option<(String, &'static str)> {
    match f {
        Format::OpenAi => {
            if msg.get("role").and_then(Value::as_str) == Some("tool") {
                return Some((format!("messages[{m}]"), "an OpenAI tool message"));
            }
            match msg.get("tool_calls") {
                None | Some(Value::Null) => None,
                Some(Value::Array(a)) if a.is_empty() => None,
                Some(_) => Some((format!("messages[{m}].tool_calls"), "an OpenAI tool call list")),
            }
        }
        Format::Anthropic => msg
            .get("content")
            .and_then(Value::as_array)?
            .iter()
            .enumerate()
            .find_map(|(b, blk)| {
                let what = match blk.get("type").and_then(Value::as_str)? {
                    "tool_use" => "an Anthropic tool_use block",
                    "tool_result" => "an Anthropic tool_result block",
                    _ => return None,
                };
                Some((format!("messages[{m}].content[{b}]"), what))
            }),
    }
}

/// The format message `m` is written in (`None`: it has no marker of either); an error
/// when it has markers of both, or of another format than the one `known`.
pub(super) fn message_format(msg: &Value, m: usize, known: Option<&Known>) -> Result<Option<Known>> {
    let (format, (place, what)) = match (marker(msg, m, Format::OpenAi), marker(msg, m, Format::Anthropic)) {
        (None, None) => return Ok(None),
        (Some((p, w)), Some((q, v))) => {
            return Err(Error::invalid(
                format!("messages[{m}]"),
                format!("mixes formats: {p} is {w} and {q} is {v}"),
            ))
        }
        (Some(o), None) => (Format::OpenAi, o),
        (None, Some(a)) => (Format::Anthropic, a),
    };
    if let Some(k) = known.filter(|k| k.format != format) {
        return Err(Error::invalid(
            "format",
            format!("{} {}, but {place} is {what}", k.format, k.why),
        ));
    }
    Ok(Some(Known {
        format,
        why: format!("was detected at {place}"),
    }))
}

/// The messages of a document, or an error saying what the document is instead.
pub(super) fn messages_of(doc: &Value) -> Result<&[Value]> {
    match doc {
        Value::Array(a) => Ok(a),
        Value::Object(o) => match o.get("messages") {
            Some(Value::Array(a)) => Ok(a),
            _ => Err(Error::invalid(
                "input",
                "expected an array of messages or an object with \"messages\"",
            )),
        },
        _ => Err(Error::invalid(
            "input",
            "expected an array of messages or an object with \"messages\"",
        )),
    }
}
