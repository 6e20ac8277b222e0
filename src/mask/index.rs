//! Indexing new messages into a trajectory: every call and the observation answering it,
//! checked against the providers' pairing rules before anything is applied.

use super::*;

/// What indexing found, checked and not yet applied.
pub(super) struct Staged {
    pub(super) format: Option<Known>,
    /// New turns, numbered after the trajectory's.
    pub(super) turns: Vec<Turn>,
    /// Calls made, by id.
    pub(super) open: HashMap<String, Opened>,
    pub(super) answers: Vec<Answer>,
    /// Where the new calls' arguments are written.
    pub(super) args: Vec<((usize, usize), CallAt, std::ops::Range<usize>)>,
}

pub(super) struct Answer {
    pub(super) turn: usize,
    pub(super) call: usize,
    pub(super) loc: Loc,
    pub(super) is_error: bool,
    pub(super) text: String,
    pub(super) splice: Splice,
}

/// Indexing state: the trajectory as it is, and what the new messages add to it.
pub(super) struct Indexer<'a> {
    pub(super) t: &'a Trajectory,
    pub(super) st: Staged,
    /// Calls answered by the new messages: (turn, call) -> where.
    pub(super) answered: HashMap<(usize, usize), Loc>,
}

impl Indexer<'_> {
    /// The latest call made with `id`: (turn, call, where it was made).
    pub(super) fn lookup(&self, id: &str) -> Option<Opened> {
        self.st.open.get(id).or_else(|| self.t.open.get(id)).copied()
    }

    /// Where call `(turn, call)` was answered, if it was.
    pub(super) fn answer_of(&self, turn: usize, call: usize) -> Option<Loc> {
        self.answered
            .get(&(turn, call))
            .copied()
            .or_else(|| self.t.turns.get(turn)?.calls.get(call)?.observation)
    }

    pub(super) fn begin_turn(&mut self, m: usize) {
        self.st.turns.push(Turn {
            message: m,
            calls: Vec::new(),
        });
    }

    pub(super) fn end_turn(&mut self) {
        if self.st.turns.last().is_some_and(|t| t.calls.is_empty()) {
            self.st.turns.pop();
        }
    }

    /// A call of the turn begun last, made at `at`.
    pub(super) fn call(&mut self, id: &str, tool: &str, args: String, at: CallAt) -> Result<()> {
        if let Some(prev) = self.lookup(id) {
            if self.answer_of(prev.turn, prev.call).is_none() {
                let prev = prev.at;
                return Err(Error::invalid(
                    at.to_string(),
                    format!("call id \"{id}\" is also the id of {prev}, which is not answered yet (call ids must be unique)"),
                ));
            }
        }
        let turn = (self.t.turns.len() + self.st.turns.len()).saturating_sub(1);
        let Some(tr) = self.st.turns.last_mut() else {
            return Err(Error::invalid(at.to_string(), "a call outside a turn"));
        };
        self.st.open.insert(
            id.into(),
            Opened {
                turn,
                call: tr.calls.len(),
                at,
            },
        );
        tr.calls.push(Call::new(id, tool, args));
        Ok(())
    }

    /// The observation at `loc` (`node` is the tool message or the `tool_result` block,
    /// `obj` where it is in the text) answering call `id`.
    pub(super) fn answer(
        &mut self,
        id: &str,
        loc: Loc,
        node: &Value,
        obj: Option<&spans::Obj>,
    ) -> Result<()> {
        let at = loc.to_string();
        let Opened { turn, call, at: made } = self
            .lookup(id)
            .ok_or_else(|| Error::invalid(&at, format!("answers \"{id}\", which no earlier call made")))?;
        if let Some(prev) = self.answer_of(turn, call) {
            return Err(Error::invalid(
                &at,
                format!("answers \"{id}\" (made at {made}), which {prev} already answered (one answer per call id)"),
            ));
        }
        let is_error = match node.get("is_error") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(v) => {
                return Err(Error::invalid(
                    format!("{at}.is_error"),
                    format!("is {v}, not true or false"),
                ))
            }
        };
        let obj = obj.ok_or_else(|| Error::invalid(&at, "not found in the text"))?;
        let splice = match &obj.content {
            Some(r) => Splice {
                start: r.start,
                end: r.end,
                prefix: "",
            },
            None => Splice {
                start: obj.close,
                end: obj.close,
                prefix: if obj.empty {
                    "\"content\":"
                } else {
                    ",\"content\":"
                },
            },
        };
        self.answered.insert((turn, call), loc);
        self.st.answers.push(Answer {
            turn,
            call,
            loc,
            is_error,
            text: content_text(node.get("content").unwrap_or(&Value::Null)),
            splice,
        });
        Ok(())
    }

    pub(super) fn openai(&mut self, msg: &Value, m: usize, role: &str, sp: &spans::Message) -> Result<()> {
        if role == "tool" {
            let loc = Loc {
                message: m,
                block: None,
            };
            let id = str_field(msg, "tool_call_id", loc, "the tool message")?;
            return self.answer(id, loc, msg, sp.obj.as_ref());
        }
        let calls = match msg.get("tool_calls") {
            None | Some(Value::Null) => return Ok(()),
            Some(Value::Array(c)) => c,
            Some(_) => {
                return Err(Error::invalid(
                    format!("messages[{m}].tool_calls"),
                    "is not an array",
                ))
            }
        };
        if calls.is_empty() {
            return Ok(());
        }
        if role != "assistant" {
            return Err(Error::invalid(
                format!("messages[{m}].tool_calls"),
                format!("tool calls in a message with role \"{role}\" (only assistant messages make them)"),
            ));
        }
        self.begin_turn(m);
        for (k, c) in calls.iter().enumerate() {
            let at = CallAt {
                format: Format::OpenAi,
                message: m,
                index: k,
            };
            let id = str_field(c, "id", at, "the call")?;
            let f = c
                .get("function")
                .ok_or_else(|| Error::invalid(at.to_string(), "has no \"function\""))?;
            let tool = str_field(f, "name", at, "the function")?;
            let args = match f.get("arguments") {
                Some(Value::String(s)) => s.clone(),
                Some(v) => v.to_string(),
                None => String::new(),
            };
            self.call(id, tool, args, at)?;
            self.args_at(at, sp.arguments.get(k).cloned().flatten());
        }
        self.end_turn();
        Ok(())
    }

    /// Records where the call just made at `at` has its arguments written.
    pub(super) fn args_at(&mut self, at: CallAt, range: Option<std::ops::Range<usize>>) {
        let turn = (self.t.turns.len() + self.st.turns.len()).saturating_sub(1);
        if let (Some(r), Some(tr)) = (range, self.st.turns.last()) {
            self.st
                .args
                .push(((turn, tr.calls.len().saturating_sub(1)), at, r));
        }
    }

    pub(super) fn anthropic(&mut self, msg: &Value, m: usize, role: &str, sp: &spans::Message) -> Result<()> {
        let Some(blocks) = msg.get("content").and_then(Value::as_array) else {
            return Ok(());
        };
        self.begin_turn(m);
        for (b, blk) in blocks.iter().enumerate() {
            let at = CallAt {
                format: Format::Anthropic,
                message: m,
                index: b,
            };
            match blk.get("type").and_then(Value::as_str) {
                Some("tool_use") => {
                    if role != "assistant" {
                        return Err(Error::invalid(
                            at.to_string(),
                            format!("a tool_use block in a message with role \"{role}\" (only assistant messages make tool calls)"),
                        ));
                    }
                    let id = str_field(blk, "id", at, "tool_use")?;
                    let tool = str_field(blk, "name", at, "tool_use")?;
                    let args = blk.get("input").map_or(String::new(), Value::to_string);
                    self.call(id, tool, args, at)?;
                    let input = sp
                        .blocks
                        .get(b)
                        .and_then(Option::as_ref)
                        .and_then(|o| o.input.clone());
                    self.args_at(at, input);
                }
                Some("tool_result") => {
                    if role != "user" {
                        return Err(Error::invalid(
                            at.to_string(),
                            format!("a tool_result block in a message with role \"{role}\" (tool results go in a later user message)"),
                        ));
                    }
                    let id = str_field(blk, "tool_use_id", at, "tool_result")?;
                    let loc = Loc {
                        message: m,
                        block: Some(b),
                    };
                    self.answer(id, loc, blk, sp.blocks.get(b).and_then(Option::as_ref))?;
                }
                _ => {}
            }
        }
        self.end_turn();
        Ok(())
    }
}
