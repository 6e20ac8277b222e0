//! Observation masking for agent trajectories (observation-masking.txt §2; SPEC §2).
//!
//! A trajectory is read from the message format an agent already uses — OpenAI chat
//! messages (an assistant message with `tool_calls` and the `tool` messages answering
//! it) or Anthropic messages (`tool_use` blocks and the `tool_result` blocks answering
//! them) — and kept as the original JSON plus an index of where each turn's calls and
//! observations live. Masking replaces observation contents with a placeholder and
//! leaves every other byte of meaning alone: unknown fields, ordering, the system prompt.
//!
//! Turn `i` (1-based) is the `i`-th assistant message that makes tool calls; all calls of
//! one turn are masked or kept together. An observation is an error when its message (or
//! block) says `"is_error": true`; the masker never guesses.

pub mod masker;
pub mod pages;

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

/// Where an observation's content lives: a message, and a content block within it
/// (Anthropic).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Loc {
    /// Index in the messages array.
    pub message: usize,
    /// Index of the `tool_result` block (Anthropic), `None` for an OpenAI tool message.
    pub block: Option<usize>,
}

/// One tool call and its observation.
#[derive(Clone, Debug, PartialEq)]
pub struct Call {
    /// The call id.
    pub id: String,
    /// Tool name.
    pub tool: String,
    /// Arguments as compact JSON text.
    pub args: String,
    /// The observation, once answered.
    pub observation: Option<Loc>,
    /// Whether the observation is marked as an error.
    pub is_error: bool,
    /// The observation's text (text parts joined with newlines).
    pub text: String,
    /// Lines in `text` (counted once, at indexing).
    pub lines: usize,
}

/// The string field `key` of `v`, or an error naming `at` and `what`.
fn str_field<'v>(v: &'v Value, key: &str, at: &str, what: &str) -> Result<&'v str> {
    v.get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| Error::invalid(at, format!("{what} has no \"{key}\"")))
}

impl Call {
    fn new(id: &str, tool: &str, args: String) -> Self {
        Call {
            id: id.into(),
            tool: tool.into(),
            args,
            observation: None,
            is_error: false,
            text: String::new(),
            lines: 0,
        }
    }
}

/// Records the observation answering call `id` (`node` is the tool message or the
/// `tool_result` block); an id no earlier call made is an error naming `at`.
fn answer(
    turns: &mut [Turn],
    open: &std::collections::HashMap<String, (usize, usize)>,
    id: &str,
    at: &str,
    loc: Loc,
    node: &Value,
) -> Result<()> {
    let &(ti, ci) = open
        .get(id)
        .ok_or_else(|| Error::invalid(at, format!("answers \"{id}\", which no earlier call made")))?;
    let call = &mut turns[ti].calls[ci];
    call.observation = Some(loc);
    call.is_error = node.get("is_error").and_then(Value::as_bool).unwrap_or(false);
    call.text = content_text(node.get("content").unwrap_or(&Value::Null));
    call.lines = call.text.lines().count();
    Ok(())
}

/// One turn: an assistant message with its parallel calls.
#[derive(Clone, Debug, PartialEq)]
pub struct Turn {
    /// Index of the assistant message.
    pub message: usize,
    /// Its calls.
    pub calls: Vec<Call>,
}

/// A parsed trajectory: the JSON as given and the turn index.
#[derive(Clone, Debug)]
pub struct Trajectory {
    /// The format it was read in.
    pub format: Format,
    /// The whole document (an array of messages, or an object with `"messages"`).
    pub doc: Value,
    /// Turns in order.
    pub turns: Vec<Turn>,
    /// Calls not yet answered: id -> (turn, call).
    open: std::collections::HashMap<String, (usize, usize)>,
    /// Messages indexed so far.
    indexed: usize,
}

fn content_text(c: &Value) -> String {
    match c {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str).or_else(|| p.as_str()))
            .collect::<Vec<_>>()
            .join("\n"),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

impl Trajectory {
    /// Parses `text` in `format`. Errors name the message (and block) at fault.
    pub fn parse(text: &str, format: Format) -> Result<Self> {
        let doc: Value = serde_json::from_str(text)
            .map_err(|e| Error::invalid("input", format!("malformed JSON: {e}")))?;
        if !(doc.is_array() || doc.get("messages").is_some_and(Value::is_array)) {
            return Err(Error::invalid(
                "input",
                "expected an array of messages or an object with \"messages\"",
            ));
        }
        let mut t = Trajectory {
            format,
            doc,
            turns: Vec::new(),
            open: Default::default(),
            indexed: 0,
        };
        t.index()?;
        Ok(t)
    }

    /// Appends messages (an agent loop's next turn) and indexes only them.
    pub fn extend(&mut self, new: Vec<Value>) -> Result<()> {
        match self.messages_mut() {
            Some(m) => m.extend(new),
            None => return Err(Error::invalid("input", "the document has no messages array")),
        }
        self.index()
    }

    /// The messages array.
    #[must_use]
    pub fn messages(&self) -> &[Value] {
        match &self.doc {
            Value::Array(a) => a,
            Value::Object(o) => o
                .get("messages")
                .and_then(Value::as_array)
                .map_or(&[], Vec::as_slice),
            _ => &[],
        }
    }

    fn messages_mut(&mut self) -> Option<&mut Vec<Value>> {
        match &mut self.doc {
            Value::Array(a) => Some(a),
            Value::Object(o) => o.get_mut("messages").and_then(Value::as_array_mut),
            _ => None,
        }
    }

    fn index(&mut self) -> Result<()> {
        let msgs: &[Value] = match &self.doc {
            Value::Array(a) => a,
            Value::Object(o) => o
                .get("messages")
                .and_then(Value::as_array)
                .map_or(&[], Vec::as_slice),
            _ => &[],
        };
        let turns = &mut self.turns;
        let open = &mut self.open;
        for (m, msg) in msgs.iter().enumerate().skip(self.indexed) {
            let role = msg
                .get("role")
                .and_then(Value::as_str)
                .ok_or_else(|| Error::invalid(format!("messages[{m}]"), "has no \"role\""))?;
            match (self.format, role) {
                (Format::OpenAi, "assistant") => {
                    if let Some(calls) = msg.get("tool_calls").and_then(Value::as_array) {
                        let mut turn = Turn {
                            message: m,
                            calls: Vec::new(),
                        };
                        for (k, c) in calls.iter().enumerate() {
                            let at = || format!("messages[{m}].tool_calls[{k}]");
                            let id = str_field(c, "id", &at(), "the call")?;
                            let f = c
                                .get("function")
                                .ok_or_else(|| Error::invalid(at(), "has no \"function\""))?;
                            let tool = str_field(f, "name", &at(), "the function")?;
                            let args = match f.get("arguments") {
                                Some(Value::String(s)) => s.clone(),
                                Some(v) => v.to_string(),
                                None => String::new(),
                            };
                            open.insert(id.to_string(), (turns.len(), turn.calls.len()));
                            turn.calls.push(Call::new(id, tool, args));
                        }
                        if !turn.calls.is_empty() {
                            turns.push(turn);
                        }
                    }
                }
                (Format::OpenAi, "tool") => {
                    let id = msg.get("tool_call_id").and_then(Value::as_str).ok_or_else(|| {
                        Error::invalid(format!("messages[{m}]"), "tool message has no \"tool_call_id\"")
                    })?;
                    answer(
                        turns,
                        open,
                        id,
                        &format!("messages[{m}]"),
                        Loc {
                            message: m,
                            block: None,
                        },
                        msg,
                    )?;
                }
                (Format::Anthropic, _) => {
                    let Some(blocks) = msg.get("content").and_then(Value::as_array) else {
                        continue;
                    };
                    let mut turn = Turn {
                        message: m,
                        calls: Vec::new(),
                    };
                    for (b, blk) in blocks.iter().enumerate() {
                        match blk.get("type").and_then(Value::as_str) {
                            Some("tool_use") if role == "assistant" => {
                                let at = || format!("messages[{m}].content[{b}]");
                                let id = str_field(blk, "id", &at(), "tool_use")?;
                                let tool = str_field(blk, "name", &at(), "tool_use")?;
                                let args = blk.get("input").map_or(String::new(), Value::to_string);
                                open.insert(id.to_string(), (turns.len(), turn.calls.len()));
                                turn.calls.push(Call::new(id, tool, args));
                            }
                            Some("tool_result") => {
                                let at = format!("messages[{m}].content[{b}]");
                                let id = blk.get("tool_use_id").and_then(Value::as_str).ok_or_else(|| {
                                    Error::invalid(&at, "tool_result has no \"tool_use_id\"")
                                })?;
                                answer(
                                    turns,
                                    open,
                                    id,
                                    &at,
                                    Loc {
                                        message: m,
                                        block: Some(b),
                                    },
                                    blk,
                                )?;
                            }
                            _ => {}
                        }
                    }
                    if !turn.calls.is_empty() {
                        turns.push(turn);
                    }
                }
                _ => {}
            }
        }
        self.indexed = msgs.len();
        Ok(())
    }

    /// Replaces the content of the observation at `loc` with `text`.
    pub fn replace(&mut self, loc: Loc, text: &str) {
        let Some(msgs) = self.messages_mut() else { return };
        let Some(msg) = msgs.get_mut(loc.message) else {
            return;
        };
        let target = match loc.block {
            None => Some(msg),
            Some(b) => msg.get_mut("content").and_then(|c| c.get_mut(b)),
        };
        if let Some(t) = target.and_then(Value::as_object_mut) {
            t.insert("content".into(), Value::String(text.into()));
        }
    }

    /// The document as JSON text.
    #[must_use]
    pub fn to_json(&self) -> String {
        self.doc.to_string()
    }
}
