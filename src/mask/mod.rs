//! Observation masking for agent trajectories (observation-masking.txt §2; SPEC §2).
//!
//! A trajectory is read from the message format an agent already uses — OpenAI chat
//! messages (an assistant message with `tool_calls` and the `tool` messages answering
//! it) or Anthropic messages (`tool_use` blocks and the `tool_result` blocks answering
//! them), given or detected from the document — and kept as the original text plus an
//! index of where each turn's calls and observations live. Masking replaces observation
//! contents with a placeholder; the output is the input text with only those contents
//! replaced, so every other byte is kept (unknown fields, key order, number spellings such
//! as 30-digit integers, escapes, whitespace).
//!
//! Turn `i` (1-based) is the `i`-th assistant message that makes tool calls; all calls of
//! one turn are masked or kept together. An observation is an error when its message (or
//! block) says `"is_error": true`; the masker never guesses. Input the APIs would refuse is
//! an error naming the message or block: an observation answering no earlier call, a call
//! answered twice, a call id reused while its call is unanswered, a tool call or result in
//! a message of the wrong role, and markers of the other format.
//!
//! A [`masker::Masker`] is built once from a [`masker::MaskConfig`] and a token counter;
//! each conversation keeps a [`masker::MaskSession`], which reuses the counts of what it
//! has seen:
//!
//! ```
//! use ctxprune::mask::{masker::{MaskConfig, Masker}, Trajectory};
//! let turn = |i: usize| format!(
//!     r#"{{"role":"assistant","content":null,"tool_calls":[{{"id":"c{i}","type":"function","function":{{"name":"search","arguments":"{{}}"}}}}]}},
//!        {{"role":"tool","tool_call_id":"c{i}","content":"result {i} with many words of output"}}"#);
//! let text = format!("[{{\"role\":\"user\",\"content\":\"go\"}},{}]",
//!     (1..=7).map(turn).collect::<Vec<_>>().join(","));
//! let mut traj = Trajectory::parse(&text, None)?;
//! let masker = Masker::new(MaskConfig::default(), ctxprune::tokens::counter("approx")?)?;
//! let stats = masker.session().mask(&mut traj);     // the paper's rule: keep the last 5 turns
//! assert_eq!((stats.observations_masked, stats.observations_kept), (2, 5));
//! assert!(traj.to_json().contains("c1"));           // calls and ids stay; contents are replaced
//! # Ok::<(), ctxprune::Error>(())
//! ```

mod format;
mod index;
pub mod masker;
pub mod pages;
pub mod policy;
mod spans;
mod template;

pub use format::Format;
use format::{message_format, messages_of, Known};
use index::{Indexer, Staged};

use crate::error::{Error, Result};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// Where an observation's content lives: a message, and a content block within it
/// (Anthropic).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Loc {
    /// Index in the messages array.
    pub message: usize,
    /// Index of the `tool_result` block (Anthropic), `None` for an OpenAI tool message.
    pub block: Option<usize>,
}

impl std::fmt::Display for Loc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.block {
            None => write!(f, "messages[{}]", self.message),
            Some(b) => write!(f, "messages[{}].content[{b}]", self.message),
        }
    }
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

/// One turn: an assistant message with its parallel calls.
#[derive(Clone, Debug, PartialEq)]
pub struct Turn {
    /// Index of the assistant message.
    pub message: usize,
    /// Its calls.
    pub calls: Vec<Call>,
}

/// Where a new content is written: bytes `start..end` of the text are replaced by
/// `prefix` and the JSON string (an absent content is inserted before the closing brace).
#[derive(Clone, Copy, Debug)]
struct Splice {
    start: usize,
    end: usize,
    prefix: &'static str,
}

/// An observation: the call it answers (turn, call) and where its content is written.
#[derive(Clone, Copy, Debug)]
struct Slot {
    turn: usize,
    call: usize,
    splice: Splice,
}

/// A call made and not superseded: its turn and index, and where it was made.
#[derive(Clone, Copy, Debug)]
struct Opened {
    turn: usize,
    call: usize,
    at: CallAt,
}

/// Where a call was made: `messages[m].tool_calls[k]` (OpenAI) or `messages[m].content[k]`
/// (Anthropic).
#[derive(Clone, Copy, Debug)]
struct CallAt {
    format: Format,
    message: usize,
    index: usize,
}

impl std::fmt::Display for CallAt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let list = match self.format {
            Format::OpenAi => "tool_calls",
            Format::Anthropic => "content",
        };
        write!(f, "messages[{}].{list}[{}]", self.message, self.index)
    }
}

/// A trajectory's identity: every parse and every clone gets its own (a clone may be
/// extended or edited apart from the original).
#[derive(Debug)]
struct Uid(u64);

impl Uid {
    fn new() -> Self {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        Uid(NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
    }
}

impl Clone for Uid {
    fn clone(&self) -> Self {
        Uid::new()
    }
}

/// A parsed trajectory: the text as given, its JSON, and the turn index.
#[derive(Clone, Debug)]
pub struct Trajectory {
    /// Which trajectory this is (a fresh one per parse and per clone).
    uid: Uid,
    /// Messages in `text` (those appended later are in `tail`).
    base: usize,
    /// Messages (`(m, None)`) and blocks (`(m, Some(b))`) rewritten in place since the
    /// parse: their text is no longer the input's.
    touched: std::collections::HashSet<(usize, Option<usize>)>,
    /// The format, once given or detected.
    format: Option<Known>,
    /// The whole document (an array of messages, or an object with `"messages"`).
    doc: Value,
    /// Turns in order.
    turns: Vec<Turn>,
    /// The input text (never changed, so shared by clones: a 10 MB trajectory is not
    /// copied per turn).
    text: Arc<str>,
    /// Offset of the messages array's closing bracket in `text`.
    close: usize,
    /// Appended messages as written, inserted at `close`. Offsets (spans, edits) are in
    /// the text as written out: `text[..close]`, `tail`, `text[close..]`.
    tail: String,
    /// Replaced contents: start -> (end, replacement text).
    edits: BTreeMap<usize, (usize, String)>,
    /// Calls by id (the latest call with each id).
    open: HashMap<String, Opened>,
    /// Observations by location.
    obs: HashMap<Loc, Slot>,
    /// Where each call's arguments are written: (turn, call) -> the call, the value's bytes.
    args: HashMap<(usize, usize), (CallAt, std::ops::Range<usize>)>,
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

/// The string field `key` of `v`, or an error naming `at` and `what`.
fn str_field<'v>(v: &'v Value, key: &str, at: impl std::fmt::Display, what: &str) -> Result<&'v str> {
    v.get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| Error::invalid(at.to_string(), format!("{what} has no \"{key}\"")))
}

impl Trajectory {
    /// Parses `text`, in `format` or, when `None`, in the format its markers show (see
    /// [`Format::detect`]; a trajectory with no tool calls yet settles its format at the
    /// first message that has a marker). Errors name the message (and block) at fault.
    pub fn parse(text: &str, format: Option<Format>) -> Result<Self> {
        // The one JSON reader: a repeated key (two "content" members, two "messages") is
        // an error naming it, never the last value silently winning.
        let doc: Value = crate::io::json::value_str(text)
            .map_err(|e| Error::invalid("input", format!("malformed JSON: {e}")))?;
        let msgs = messages_of(&doc)?;
        let layout = spans::layout(text).map_err(|e| Error::invalid("input", e))?;
        let mut t = Trajectory {
            uid: Uid::new(),
            base: layout.messages.len(),
            touched: std::collections::HashSet::new(),
            format: format.map(|format| Known {
                format,
                why: "was given".into(),
            }),
            doc: Value::Null,
            turns: Vec::new(),
            text: Arc::from(""),
            close: layout.close,
            tail: String::new(),
            edits: BTreeMap::new(),
            open: HashMap::new(),
            obs: HashMap::new(),
            args: HashMap::new(),
        };
        if msgs.len() != layout.messages.len() {
            return Err(Error::invalid(
                "input",
                format!(
                    "{} messages parsed but {} found in the text",
                    msgs.len(),
                    layout.messages.len()
                ),
            ));
        }
        let staged = t.stage(msgs, 0, &layout.messages)?;
        t.commit(staged);
        t.text = Arc::from(text);
        t.doc = doc;
        Ok(t)
    }

    /// Appends messages (an agent loop's next turn) and indexes only them. On error the
    /// trajectory is as it was.
    pub fn extend(&mut self, new: Vec<Value>) -> Result<()> {
        let base = self.messages().len();
        // Each message as it will be written: before the closing bracket, after a comma.
        let mut insert = String::new();
        let mut spans = Vec::with_capacity(new.len());
        for (k, v) in new.iter().enumerate() {
            if base + k > 0 {
                insert.push(',');
            }
            let s = v.to_string();
            let mut sp =
                spans::message(&s).map_err(|e| Error::invalid(format!("messages[{}]", base + k), e))?;
            sp.shift(self.close + self.tail.len() + insert.len());
            spans.push(sp);
            insert.push_str(&s);
        }
        let staged = self.stage(&new, base, &spans)?;
        let Some(msgs) = self.messages_mut() else {
            return Err(Error::invalid("input", "the document has no messages array"));
        };
        msgs.extend(new);
        self.tail.push_str(&insert);
        self.commit(staged);
        Ok(())
    }

    /// The format, once given or detected (`None`: auto, and no message has a marker yet).
    #[must_use]
    pub fn format(&self) -> Option<Format> {
        self.format.as_ref().map(|k| k.format)
    }

    /// Turns in order.
    #[must_use]
    pub fn turns(&self) -> &[Turn] {
        &self.turns
    }

    /// The text of every call that has an observation, in order: what semantic masking
    /// embeds (one row each, in this order).
    #[must_use]
    pub fn observation_texts(&self) -> Vec<&str> {
        self.turns
            .iter()
            .flat_map(|t| {
                t.calls
                    .iter()
                    .filter(|c| c.observation.is_some())
                    .map(|c| c.text.as_str())
            })
            .collect()
    }

    /// The call an observation answers.
    #[must_use]
    pub fn call_at(&self, loc: Loc) -> Option<&Call> {
        let s = self.obs.get(&loc)?;
        self.turns.get(s.turn)?.calls.get(s.call)
    }

    /// How many of the leading messages `prev` held when it was `mark`ed this trajectory
    /// holds unchanged (except those it rewrote in place, see [`Self::touched`]): all of
    /// them (`usize::MAX`) when it is the same trajectory (it only grows: `extend`
    /// appends); the messages of `prev`'s text when this text starts with those bytes (the
    /// same parse cloned, or the document re-sent with messages appended); else none.
    /// What a masking session checks before it reuses its token counts.
    pub(crate) fn kept_from(&self, prev: &TextMark) -> usize {
        if self.uid.0 == prev.uid {
            return usize::MAX;
        }
        let same = Arc::ptr_eq(&self.text, &prev.text)
            || (self.text.len() >= prev.close
                && self.text.as_bytes()[..prev.close] == prev.text.as_bytes()[..prev.close]);
        if same {
            prev.base
        } else {
            0
        }
    }

    /// Whether the message `m` (`block: None`) or its block was rewritten in place.
    pub(crate) fn touched(&self, m: usize, block: Option<usize>) -> bool {
        !self.touched.is_empty() && self.touched.contains(&(m, block))
    }

    /// What [`Self::extends`] compares against later.
    pub(crate) fn mark(&self) -> TextMark {
        TextMark {
            uid: self.uid.0,
            text: self.text.clone(),
            close: self.close,
            base: self.base,
        }
    }

    /// The messages array.
    #[must_use]
    pub fn messages(&self) -> &[Value] {
        messages_of(&self.doc).unwrap_or(&[])
    }

    fn messages_mut(&mut self) -> Option<&mut Vec<Value>> {
        match &mut self.doc {
            Value::Array(a) => Some(a),
            Value::Object(o) => o.get_mut("messages").and_then(Value::as_array_mut),
            _ => None,
        }
    }

    /// Indexes `msgs` (messages `base..`) without changing anything: every error is found
    /// here, so [`Self::commit`] cannot fail. `spans[k]` locates `msgs[k]` in the text.
    fn stage(&self, msgs: &[Value], base: usize, spans: &[spans::Message]) -> Result<Staged> {
        let mut ix = Indexer {
            t: self,
            st: Staged {
                format: self.format.clone(),
                turns: Vec::new(),
                open: HashMap::new(),
                answers: Vec::new(),
                args: Vec::new(),
            },
            answered: HashMap::new(),
        };
        for (k, msg) in msgs.iter().enumerate() {
            let m = base + k;
            if !msg.is_object() {
                return Err(Error::invalid(format!("messages[{m}]"), "is not an object"));
            }
            let here = Loc {
                message: m,
                block: None,
            };
            let role = str_field(msg, "role", here, "the message")?;
            let Some(known) = message_format(msg, m, ix.st.format.as_ref())? else {
                continue;
            };
            let format = ix.st.format.get_or_insert(known).format;
            let sp = spans
                .get(k)
                .ok_or_else(|| Error::invalid(format!("messages[{m}]"), "not found in the text"))?;
            match format {
                Format::OpenAi => ix.openai(msg, m, role, sp)?,
                Format::Anthropic => ix.anthropic(msg, m, role, sp)?,
            }
        }
        Ok(ix.st)
    }

    fn commit(&mut self, st: Staged) {
        self.format = st.format;
        self.turns.extend(st.turns);
        self.open.extend(st.open);
        self.args
            .extend(st.args.into_iter().map(|(k, at, r)| (k, (at, r))));
        for a in st.answers {
            if let Some(c) = self.turns.get_mut(a.turn).and_then(|t| t.calls.get_mut(a.call)) {
                c.observation = Some(a.loc);
                c.is_error = a.is_error;
                c.lines = a.text.lines().count();
                c.text = a.text;
            }
            self.obs.insert(
                a.loc,
                Slot {
                    turn: a.turn,
                    call: a.call,
                    splice: a.splice,
                },
            );
        }
    }

    /// Replaces the content of the observation at `loc` with `text` (in the JSON, in the
    /// call's text, and in the output); a location that is not an observation is an error.
    pub fn replace(&mut self, loc: Loc, text: &str) -> Result<()> {
        let Some(&Slot { turn, call, splice }) = self.obs.get(&loc) else {
            return Err(Error::invalid(loc.to_string(), "is not an observation"));
        };
        let json = format!("{}{}", splice.prefix, Value::from(text));
        self.edits.insert(splice.start, (splice.end, json));
        self.touched.insert((loc.message, None));
        self.touched.insert((loc.message, loc.block));
        let msg = self.messages_mut().and_then(|m| m.get_mut(loc.message));
        let node = match loc.block {
            None => msg,
            Some(b) => msg.and_then(|m| m.get_mut("content")).and_then(|c| c.get_mut(b)),
        };
        if let Some(o) = node.and_then(Value::as_object_mut) {
            o.insert("content".into(), Value::String(text.into()));
        }
        if let Some(c) = self.turns.get_mut(turn).and_then(|t| t.calls.get_mut(call)) {
            c.text = text.into();
            c.lines = text.lines().count();
        }
        Ok(())
    }

    /// Clears the arguments of the call the observation at `loc` answers: an OpenAI call's
    /// `function.arguments` becomes `"{}"`, an Anthropic `tool_use`'s `input` becomes `{}`;
    /// the call, its id and its tool stay. False when the call wrote no arguments (there is
    /// nothing to clear); a location that is not an observation is an error.
    pub fn clear_input(&mut self, loc: Loc) -> Result<bool> {
        let Some(&Slot { turn, call, .. }) = self.obs.get(&loc) else {
            return Err(Error::invalid(loc.to_string(), "is not an observation"));
        };
        let Some((at, range)) = self.args.get(&(turn, call)).cloned() else {
            return Ok(false);
        };
        let (json, value) = match at.format {
            Format::OpenAi => ("\"{}\"", Value::String("{}".into())),
            Format::Anthropic => ("{}", Value::Object(serde_json::Map::new())),
        };
        self.edits.insert(range.start, (range.end, json.into()));
        self.touched.insert((at.message, None));
        let node = self.messages_mut().and_then(|m| m.get_mut(at.message));
        let node = match at.format {
            Format::OpenAi => node
                .and_then(|m| m.get_mut("tool_calls"))
                .and_then(|c| c.get_mut(at.index))
                .and_then(|c| c.get_mut("function")),
            Format::Anthropic => node
                .and_then(|m| m.get_mut("content"))
                .and_then(|c| c.get_mut(at.index)),
        };
        let key = match at.format {
            Format::OpenAi => "arguments",
            Format::Anthropic => "input",
        };
        if let Some(o) = node.and_then(Value::as_object_mut) {
            o.insert(key.into(), value);
        }
        if let Some(c) = self.turns.get_mut(turn).and_then(|t| t.calls.get_mut(call)) {
            c.args = "{}".into();
        }
        Ok(true)
    }

    /// The document as JSON text: the input with only the replaced contents changed, and
    /// appended messages (compact) before the messages array's closing bracket.
    #[must_use]
    pub fn to_json(&self) -> String {
        let (head, rest) = self.text.split_at(self.close);
        let written = [head, &self.tail, rest].concat();
        let mut out = String::with_capacity(written.len());
        let mut from = 0;
        // Splices are disjoint and lie on ASCII bytes (quotes, brackets, braces, digits).
        for (&start, (end, with)) in &self.edits {
            out.push_str(&written[from..start]);
            out.push_str(with);
            from = *end;
        }
        out.push_str(&written[from..]);
        out
    }
}

/// A trajectory as a session last saw it (its text shared, not copied).
#[derive(Clone, Debug)]
pub(crate) struct TextMark {
    uid: u64,
    text: Arc<str>,
    close: usize,
    base: usize,
}
