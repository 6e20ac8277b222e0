//! A rendered chat prompt cut into role-labelled spans grouped into interaction turns
//! (observation-masking.txt App. E.3), first as byte ranges ([`char_spans`]), then as
//! token spans through a tokenizer's byte offsets ([`segment_offsets`], [`segment`]).
//!
//! # The rules (the Qwen ChatML template, [`Template::qwen`])
//!
//! A message is `<|im_start|>ROLE\n … <|im_end|>`; the role name runs from the end of
//! `<|im_start|>` to the first `\n` and must be one the template knows (`system`, `user`,
//! `assistant`, `tool`). Text outside messages (the `\n` between them) is unassigned.
//!
//! - **system** message: one [`Role::System`] span from its `<|im_start|>` through its
//!   `<|im_end|>`, markers included. Block tags inside it are content: Qwen's tool-use
//!   system prompt quotes `<tool_call></tool_call>` when it tells the model how to call.
//! - **user** message without `<tool_response>`: one [`Role::User`] span, same extent.
//!   In a user message only `<tool_response>` opens a block: a person may write
//!   `<think>`, `</think>`, `<tool_call>` or `</tool_call>` (`answer in <think> tags`),
//!   and these are content (no span, no step). So is a `</tool_response>` with no open
//!   block: it cannot close anything, and calling it an error would reject a user who
//!   quotes the tag.
//! - **user** message with `<tool_response>` blocks (how Qwen3 renders tool messages):
//!   each `<tool_response>…</tool_response>` block, tags included, is one
//!   [`Role::Observation`] span; the rest of the message (the `<|im_start|>user\n` header,
//!   the newlines, `<|im_end|>`, and any text or tags between the blocks) is unassigned.
//! - **tool** message (`<|im_start|>tool … <|im_end|>`, older templates): one
//!   [`Role::Observation`] span from `<|im_start|>` through `<|im_end|>`. Like the system
//!   message it is opaque: block tags inside it (`<tool_response>` wrappers, or a page
//!   the tool fetched that quotes `<think>`) are content and make no spans or steps.
//! - **assistant** message: each `<think>…</think>` block, tags included, is a
//!   [`Role::Reasoning`] span; each `<tool_call>…</tool_call>` block, tags included, is a
//!   [`Role::ToolCall`] span; any other non-whitespace text (a final answer, a sentence
//!   between the reasoning and the call) is reasoning too (self-generated text), one span
//!   per stretch between blocks, from its first to its last non-whitespace byte. The header
//!   `<|im_start|>assistant\n`, the whitespace between blocks and `<|im_end|>` are
//!   unassigned. `<tool_response>` and `</tool_response>` open and close nothing in an
//!   assistant message: outside its blocks they are part of that free text (a model may
//!   write `the <tool_response> says …`), so they sit inside a reasoning span.
//! - The last message may be an assistant message without `<|im_end|>` (the generation
//!   prompt of a step, and what has been generated so far); in it, a `<think>` not closed
//!   before the end of the prompt is a reasoning span running to the end of the prompt.
//! - **Inside a block** only its own closing tag ends it: every other block tag is
//!   content. An observation may quote `<think>`, `</think>` or `<tool_call>` (a page
//!   about LLMs), reasoning may mention `<tool_call>` or `<tool_response>`, and a call's
//!   JSON argument may hold `<think>`; none of these opens, closes or nests a block, and a
//!   `<think>` inside content is not a step. A second `<think>` inside a `<think>` block
//!   is content too, so the block ends at the first `</think>` after its opening tag.
//! - **`<|im_start|>` and `<|im_end|>` are always structure**, inside a block as
//!   anywhere else: they are special tokens that a chat template never emits inside
//!   content (a tokenizer encodes them as single special tokens, so text cannot hold
//!   them). An `<|im_end|>` or `<|im_start|>` met inside an open block is the error "block
//!   not closed before its message ends", never content.
//! - **Steps**: reasoning step `r` is the `r`-th `<think>` tag that opens a block (one
//!   inside content does not count); [`char_spans`] gives the byte just after the tag,
//!   and [`segment_offsets`] the first token starting at or after that byte (`t_r`, "the
//!   first token after the `r`-th `<think>` tag"; when a tokenizer merges `<think>` with
//!   the newline after it, that is the token after the merged one).
//! - **Turns**: turn 0 starts at the beginning of the prompt; every `<think>` block after
//!   the first starts a new turn, and everything from a `<think>` block up to the next one
//!   belongs to that block's turn. So turn 0 holds the leading system and user spans, the
//!   first reasoning block, its tool calls and their observations; turn `k ≥ 1` holds the
//!   `k+1`-th reasoning block, its calls and their observations. `turns` is the last
//!   turn + 1 (1 for a prompt without `<think>`).
//!
//! # Errors
//!
//! A prompt that does not follow the template is an [`Error::InvalidArgument`] named
//! `prompt` whose message starts with the byte offset and the line (1-based) of the
//! problem: a message without `<|im_end|>` (other than a trailing assistant message), a
//! role header without its `\n`, an unknown role name, a `</think>` or `</tool_call>`
//! without its opening tag in an assistant message (outside any block), a block not
//! closed before its message ends (an `<|im_end|>` or `<|im_start|>` inside it) or, other
//! than a trailing `<think>`, before the end of the prompt, a block tag outside any
//! message, an `<|im_end|>` outside a message. Block tags that a message does not read as
//! structure are content, never errors: all of them in system and tool messages, all but
//! `<tool_response>` in user messages (a stray `</tool_response>` included), and
//! `<tool_response>`/`</tool_response>` in assistant messages. Nothing here panics:
//! prompts are arbitrary UTF-8 and every cut is on a char boundary (markers are matched
//! whole, and whitespace is trimmed char by char).
//!
//! # From bytes to tokens
//!
//! [`segment_offsets`] takes one `(start, end)` byte pair per token, in order (what
//! `tokenizers::Encoding::get_offsets` reports). A token belongs to the span holding its
//! start byte, so a token that straddles a span's end stays in the span it starts in. A
//! token that starts in unassigned bytes and reaches into a span belongs to that span:
//! BPE tokenizers merge a space with the word after it (`" The"`), and an assistant's
//! answer written after a space would otherwise lose its first token (or, as one word,
//! every token). Token starts must not decrease, and a span's tokens must be contiguous
//! (they are, for offsets in order). A span that no token starts in or reaches into
//! would be dropped; for these spans (markers included, text trimmed to non-whitespace)
//! that only happens when one token swallows it together with bytes of another span, and
//! it is an error naming the span and the token rather than a silent drop.
//!
//! # Adding a template
//!
//! A [`Template`] is data: the message markers, the role names and what each one is
//! ([`MessageKind`]), and the three block pairs. Another template is one more constructor
//! beside [`Template::qwen`] that fills these fields, its name in [`Template::NAMES`], and
//! one arm in [`Template::by_name`]; the parser does not change. For example:
//!
//! - Llama-3 (`<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n…<|eot_id|>`):
//!   `message_start = "<|start_header_id|>"`, `header_end = "<|end_header_id|>"`,
//!   `message_end = "<|eot_id|>"`, roles `system`, `user`, `assistant` and `ipython`
//!   ([`MessageKind::Tool`]); `<|begin_of_text|>` is text outside a message (unassigned).
//!   Llama-3 itself has no reasoning or tool-call delimiters: keep `<think>`/`</think>`
//!   for a reasoning fine-tune that writes them (DeepSeek-R1-Distill-Llama), and set
//!   `tool_call` to whatever pair the model wraps its calls in; bare-JSON calls are
//!   assistant text, hence reasoning. Llama 3.1 ends a tool-calling assistant message with
//!   `<|eom_id|>` instead of `<|eot_id|>`: one `message_end` cannot say that, so such
//!   prompts need `message_end` to become a list (a code change).
//! - gpt-oss (harmony, `<|start|>assistant<|channel|>analysis<|message|>…<|end|>`) does
//!   not fit as data alone: its reasoning is a whole message on the `analysis` channel,
//!   not a block inside one, and its headers carry a recipient (`to=functions.x`). It
//!   needs a [`MessageKind`] for "the whole message is one reasoning block, its step is
//!   the first token after the header" and role matching by header prefix.

use super::{Role, Segmentation, Span};
use crate::error::{Error, Result};
use std::path::Path;

/// What a message is, by its role name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MessageKind {
    /// The system prompt: one [`Role::System`] span; block tags inside it are content.
    System,
    /// A user message: [`Role::User`], or observations when it holds tool responses.
    User,
    /// The model's own message: reasoning and tool-call blocks.
    Assistant,
    /// A tool's answer as a message of its own: one [`Role::Observation`] span; block tags
    /// inside it are content.
    Tool,
}

/// An opening and a closing tag.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Block {
    /// The opening tag (`<think>`).
    pub open: String,
    /// The closing tag (`</think>`).
    pub close: String,
}

impl Block {
    fn new(open: &str, close: &str) -> Self {
        Block {
            open: open.to_owned(),
            close: close.to_owned(),
        }
    }
}

/// The markers of a chat template (see the module docs for how they are read and how to
/// add a template).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Template {
    /// The name [`Template::by_name`] knows it by.
    pub name: String,
    /// Opens a message; the role name follows (`<|im_start|>`).
    pub message_start: String,
    /// Ends the role name (`\n`).
    pub header_end: String,
    /// Closes a message (`<|im_end|>`).
    pub message_end: String,
    /// Role names and what each message is.
    pub roles: Vec<(String, MessageKind)>,
    /// A reasoning block inside an assistant message (`<think>…</think>`).
    pub think: Block,
    /// A tool call inside an assistant message (`<tool_call>…</tool_call>`).
    pub tool_call: Block,
    /// A tool's answer inside a user (or tool) message
    /// (`<tool_response>…</tool_response>`).
    pub tool_response: Block,
}

impl Template {
    /// The names [`Template::by_name`] knows.
    pub const NAMES: [&'static str; 1] = ["qwen"];

    /// Qwen2.5 / Qwen3 / Qwen3.5 ChatML: `<|im_start|>ROLE\n…<|im_end|>`, roles `system`,
    /// `user`, `assistant`, `tool`; `<think>`, `<tool_call>` and `<tool_response>` blocks.
    #[must_use]
    pub fn qwen() -> Template {
        Template {
            name: "qwen".to_owned(),
            message_start: "<|im_start|>".to_owned(),
            header_end: "\n".to_owned(),
            message_end: "<|im_end|>".to_owned(),
            roles: vec![
                ("system".to_owned(), MessageKind::System),
                ("user".to_owned(), MessageKind::User),
                ("assistant".to_owned(), MessageKind::Assistant),
                ("tool".to_owned(), MessageKind::Tool),
            ],
            think: Block::new("<think>", "</think>"),
            tool_call: Block::new("<tool_call>", "</tool_call>"),
            tool_response: Block::new("<tool_response>", "</tool_response>"),
        }
    }

    /// The template called `name` (one of [`Template::NAMES`]); any other name is an
    /// error for `--template` listing the known ones.
    pub fn by_name(name: &str) -> Result<Template> {
        match name {
            "qwen" => Ok(Template::qwen()),
            _ => Err(Error::invalid(
                "--template",
                format!(
                    "unknown template {name:?} (known: {})",
                    Template::NAMES.join(", ")
                ),
            )),
        }
    }

    /// Every marker non-empty and the markers distinct (a hand-built template).
    fn check(&self) -> Result<()> {
        let markers = self.markers();
        let bad = |msg: String| Err(Error::invalid(format!("template {}", self.name), msg));
        for (i, (m, _)) in markers.iter().enumerate() {
            if m.is_empty() {
                return bad(format!("marker {i} is empty"));
            }
            if markers[..i].iter().any(|(o, _)| o == m) {
                return bad(format!("marker {m:?} is used twice"));
            }
        }
        if self.header_end.is_empty() {
            return bad("header_end is empty".to_owned());
        }
        if let Some((r, _)) = self.roles.iter().find(|(r, _)| r.is_empty()) {
            return bad(format!("empty role name {r:?}"));
        }
        Ok(())
    }

    fn markers(&self) -> [(&str, Mk); 8] {
        [
            (&self.message_start, Mk::MsgStart),
            (&self.message_end, Mk::MsgEnd),
            (&self.think.open, Mk::Open(B::Think)),
            (&self.think.close, Mk::Close(B::Think)),
            (&self.tool_call.open, Mk::Open(B::Call)),
            (&self.tool_call.close, Mk::Close(B::Call)),
            (&self.tool_response.open, Mk::Open(B::Resp)),
            (&self.tool_response.close, Mk::Close(B::Resp)),
        ]
    }

    fn block(&self, b: B) -> &Block {
        match b {
            B::Think => &self.think,
            B::Call => &self.tool_call,
            B::Resp => &self.tool_response,
        }
    }
}

/// Bytes `start..end` of the prompt, in interaction turn `turn`, of one role.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CharSpan {
    /// First byte (a char boundary).
    pub start: usize,
    /// One past the last byte (a char boundary).
    pub end: usize,
    /// Interaction turn (0-based).
    pub turn: usize,
    /// Role.
    pub role: Role,
}

/// The labelled byte ranges of `prompt` (sorted, disjoint, non-empty), the byte just
/// after each `<think>` tag (one per reasoning step, increasing), and the number of
/// turns; the rules and the errors are in the module docs.
pub fn char_spans(prompt: &str, t: &Template) -> Result<(Vec<CharSpan>, Vec<usize>, usize)> {
    t.check()?;
    Parser {
        p: prompt,
        t,
        lx: Lexer::new(prompt, t),
        spans: Vec::new(),
        steps: Vec::new(),
        turn: 0,
    }
    .run()
}

/// Token spans from the token byte offsets of `prompt` (one `(start, end)` pair per
/// token, in order, as a tokenizer reports them): a token belongs to the [`char_spans`]
/// span holding its start byte (or, starting in unassigned bytes, to the first span it
/// reaches into), and step `r` is the first token starting at or after the byte after the
/// `r`-th `<think>`. Errors: the prompt's (see [`char_spans`]); `offsets[i]` past the
/// prompt, reversed, or starting before the token before it; a span that gets no token
/// or non-contiguous tokens (named, with the token that swallows it); a `<think>` with no
/// token after it; and [`Segmentation::new`]'s checks.
pub fn segment_offsets(prompt: &str, t: &Template, offsets: &[(usize, usize)]) -> Result<Segmentation> {
    let (cs, steps_b, turns) = char_spans(prompt, t)?;
    for (i, &(s, e)) in offsets.iter().enumerate() {
        if s > e || e > prompt.len() {
            return Err(Error::invalid(
                format!("offsets[{i}]"),
                format!(
                    "bytes {s}..{e} are not a range inside the prompt ({} bytes)",
                    prompt.len()
                ),
            ));
        }
        if i > 0 && s < offsets[i - 1].0 {
            return Err(Error::invalid(
                format!("offsets[{i}]"),
                format!(
                    "starts at byte {s}, before token {} (which starts at {})",
                    i - 1,
                    offsets[i - 1].0
                ),
            ));
        }
    }
    // The span of each token: the one holding its start byte, else (a start in unassigned
    // bytes) the first one it reaches into.
    let mut ranges: Vec<Option<(usize, usize)>> = vec![None; cs.len()];
    for (i, &(s, e)) in offsets.iter().enumerate() {
        let k = cs.partition_point(|c| c.end <= s);
        let Some(c) = cs.get(k) else { continue };
        if c.start <= s || c.start < e {
            ranges[k] = match ranges[k] {
                None => Some((i, i + 1)),
                Some((a, z)) if z == i => Some((a, i + 1)),
                Some((a, z)) => {
                    return Err(Error::invalid(
                        "offsets",
                        format!(
                            "the tokens of span {k} ({}, bytes {}..{}) are not contiguous: tokens {a}..{z}, then token {i}",
                            c.role.name(),
                            c.start,
                            c.end
                        ),
                    ))
                }
            };
        }
    }
    let mut spans = Vec::with_capacity(cs.len());
    for (k, (c, r)) in cs.iter().zip(&ranges).enumerate() {
        let Some((a, z)) = *r else {
            let j = offsets.partition_point(|&(s, _)| s < c.start);
            let by = match j.checked_sub(1).map(|j| (j, offsets[j])) {
                Some((j, (s, e))) if e > c.start => format!("token {j} (bytes {s}..{e}) covers it"),
                _ => "no token covers it".to_owned(),
            };
            return Err(Error::invalid(
                "offsets",
                format!(
                    "span {k} ({}, turn {}, bytes {}..{}, line {}) gets no token: {by}",
                    c.role.name(),
                    c.turn,
                    c.start,
                    c.end,
                    line_of(prompt, c.start)
                ),
            ));
        };
        spans.push(Span {
            start: a,
            end: z,
            turn: c.turn,
            role: c.role,
        });
    }
    let first_at = |b: usize| offsets.partition_point(|&(s, _)| s < b);
    let mut steps = Vec::with_capacity(steps_b.len());
    for (r, &b) in steps_b.iter().enumerate() {
        let tr = first_at(b);
        if tr == offsets.len() {
            return Err(Error::invalid(
                "offsets",
                format!(
                    "reasoning step {r}: no token starts at or after byte {b} (line {}), the end of its {}",
                    line_of(prompt, b),
                    t.think.open
                ),
            ));
        }
        steps.push(tr);
    }
    Segmentation::new(offsets.len(), turns, steps, spans)
}

/// [`segment_offsets`] with the offsets of `tokenizer` encoding `prompt` without special
/// tokens added (the rendered prompt already holds them). Padding and truncation set in
/// the tokenizer's file are ignored: every token of the prompt is kept.
pub fn segment(prompt: &str, t: &Template, tokenizer: &tokenizers::Tokenizer) -> Result<Segmentation> {
    let unlimited;
    let tk = if tokenizer.get_padding().is_some() || tokenizer.get_truncation().is_some() {
        let mut c = tokenizer.clone();
        c.with_padding(None);
        c.with_truncation(None).map_err(|e| {
            Error::invalid(
                "tokenizer",
                format!(
                    "cannot turn truncation off: {}",
                    crate::error::flatten_lines(&e.to_string())
                ),
            )
        })?;
        unlimited = c;
        &unlimited
    } else {
        tokenizer
    };
    let enc = tk.encode(prompt, false).map_err(|e| {
        Error::invalid(
            "tokenizer",
            format!(
                "cannot encode the prompt: {}",
                crate::error::flatten_lines(&e.to_string())
            ),
        )
    })?;
    segment_offsets(prompt, t, enc.get_offsets())
}

/// A HuggingFace `tokenizer.json` ([`crate::tokens::load_tokenizer`]: the file contract
/// and the one JSON reader); errors name the file ([`Error::Io`], or [`Error::Format`]
/// when it is not a tokenizer).
pub fn load_tokenizer(path: &Path) -> Result<tokenizers::Tokenizer> {
    crate::tokens::load_tokenizer(path)
}

/// 1-based line of byte `at`.
fn line_of(p: &str, at: usize) -> usize {
    1 + p.as_bytes()[..at.min(p.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
}

/// A block kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum B {
    Think,
    Call,
    Resp,
}

/// A marker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mk {
    MsgStart,
    MsgEnd,
    Open(B),
    Close(B),
}

/// Finds the next marker (leftmost, then longest).
struct Lexer<'a> {
    bytes: &'a [u8],
    markers: [(&'a str, Mk); 8],
    first: [bool; 256],
}

impl<'a> Lexer<'a> {
    fn new(p: &'a str, t: &'a Template) -> Self {
        let markers = t.markers();
        let mut first = [false; 256];
        for (m, _) in &markers {
            if let Some(&b) = m.as_bytes().first() {
                first[usize::from(b)] = true;
            }
        }
        Lexer {
            bytes: p.as_bytes(),
            markers,
            first,
        }
    }

    /// The next marker at or after byte `from`: (offset, marker, length). A match starts
    /// and ends on char boundaries: a marker is whole UTF-8 whose first byte is not a
    /// continuation byte.
    fn next(&self, from: usize) -> Option<(usize, Mk, usize)> {
        self.next_of(from, |_| true)
    }

    /// [`Lexer::next`] among the markers `keep` accepts (leftmost, then longest): the
    /// others are content and are skipped.
    fn next_of(&self, from: usize, keep: impl Fn(Mk) -> bool) -> Option<(usize, Mk, usize)> {
        let tail = self.bytes.get(from..)?;
        for (i, &b) in tail.iter().enumerate() {
            if !self.first[usize::from(b)] {
                continue;
            }
            let here = &tail[i..];
            let best = self
                .markers
                .iter()
                .filter(|&&(m, mk)| keep(mk) && here.starts_with(m.as_bytes()))
                .max_by_key(|(m, _)| m.len());
            if let Some(&(m, mk)) = best {
                return Some((from + i, mk, m.len()));
            }
        }
        None
    }
}

struct Parser<'a> {
    p: &'a str,
    t: &'a Template,
    lx: Lexer<'a>,
    spans: Vec<CharSpan>,
    steps: Vec<usize>,
    turn: usize,
}

impl<'a> Parser<'a> {
    fn run(mut self) -> Result<(Vec<CharSpan>, Vec<usize>, usize)> {
        let mut pos = 0;
        while let Some((at, mk, _)) = self.lx.next(pos) {
            pos = match mk {
                Mk::MsgStart => self.message(at)?,
                Mk::MsgEnd => {
                    return Err(self.err(
                        at,
                        format!(
                            "{} outside a message (no {} before it)",
                            self.t.message_end, self.t.message_start
                        ),
                    ))
                }
                Mk::Open(b) => return Err(self.outside(at, self.t.block(b).open.as_str())),
                Mk::Close(b) => return Err(self.outside(at, self.t.block(b).close.as_str())),
            };
        }
        Ok((self.spans, self.steps, self.turn + 1))
    }

    fn err(&self, at: usize, msg: impl std::fmt::Display) -> Error {
        Error::invalid(
            "prompt",
            format!("byte {at} (line {}): {msg}", line_of(self.p, at)),
        )
    }

    fn push(&mut self, start: usize, end: usize, role: Role) {
        self.spans.push(CharSpan {
            start,
            end,
            turn: self.turn,
            role,
        });
    }

    /// A block tag outside any message.
    fn outside(&self, at: usize, tag: &str) -> Error {
        self.err(at, format!("{tag} outside any message"))
    }

    fn unopened(&self, at: usize, b: B) -> Error {
        let bl = self.t.block(b);
        self.err(at, format!("{} without {}", bl.close, bl.open))
    }

    /// A message that does not end: `next` is the `<|im_start|>` met first, if any.
    fn unterminated(&self, at: usize, role: &str, next: Option<usize>) -> Error {
        let before = match next {
            Some(n) => format!(
                "the next {} at byte {n} (line {})",
                self.t.message_start,
                line_of(self.p, n)
            ),
            None => "the end of the prompt".to_owned(),
        };
        self.err(
            at,
            format!("the {role} message has no {} before {before}", self.t.message_end),
        )
    }

    /// The block opened at `at`: `Some(end)` after its closing tag, `None` when the prompt
    /// ends first. Inside it only its own closing tag and the message markers count: any
    /// other block tag is content (an observation quoting `<think>`, reasoning that
    /// mentions `<tool_call>`), and so is a second opening tag of the same block.
    fn block(&self, at: usize, b: B) -> Result<Option<usize>> {
        let bl = self.t.block(b);
        let ends = |mk: Mk| mk == Mk::Close(b) || matches!(mk, Mk::MsgStart | Mk::MsgEnd);
        match self.lx.next_of(at + bl.open.len(), ends) {
            None => Ok(None),
            Some((y, Mk::Close(_), len)) => Ok(Some(y + len)),
            Some((y, mk, _)) => Err(self.err(
                at,
                format!(
                    "{} is not closed: {} at byte {y} (line {}) comes before its {}",
                    bl.open,
                    if mk == Mk::MsgEnd {
                        format!("the message ends ({})", self.t.message_end)
                    } else {
                        format!("the next message starts ({})", self.t.message_start)
                    },
                    line_of(self.p, y),
                    bl.close
                ),
            )),
        }
    }

    /// The message whose `<|im_start|>` is at `at`; the byte after it.
    fn message(&mut self, at: usize) -> Result<usize> {
        let hstart = at + self.t.message_start.len();
        let rest = &self.p[hstart..];
        let Some(hlen) = rest.find(self.t.header_end.as_str()) else {
            return Err(self.err(
                at,
                format!(
                    "the role name after {} has no end ({:?}) before the end of the prompt",
                    self.t.message_start, self.t.header_end
                ),
            ));
        };
        let name = &rest[..hlen];
        let t: &'a Template = self.t;
        let Some((role, kind)) = t.roles.iter().find(|(r, _)| r == name) else {
            let mut shown: String = name.chars().take(40).collect();
            if shown.len() < name.len() {
                shown.push('…');
            }
            let known: Vec<&str> = self.t.roles.iter().map(|(r, _)| r.as_str()).collect();
            return Err(self.err(
                hstart,
                format!(
                    "unknown role {shown:?} after {} (known: {})",
                    self.t.message_start,
                    known.join(", ")
                ),
            ));
        };
        let cstart = hstart + hlen + self.t.header_end.len();
        match *kind {
            MessageKind::Assistant => self.assistant(at, cstart),
            k => self.other(at, cstart, role, k),
        }
    }

    /// A system, user or tool message.
    fn other(&mut self, at: usize, cstart: usize, role: &str, kind: MessageKind) -> Result<usize> {
        // Qwen's tool-use system prompt quotes the tags, and a tool's output is whatever
        // the tool returned: in both, block tags are content. A user may write any tag
        // but `<tool_response>` (the template's wrapper for tool answers) as text.
        let opaque = matches!(kind, MessageKind::System | MessageKind::Tool);
        let keep = |mk: Mk| match mk {
            Mk::MsgStart | Mk::MsgEnd => true,
            Mk::Open(B::Resp) => !opaque,
            Mk::Open(_) | Mk::Close(_) => false,
        };
        let mut pos = cstart;
        let mut responses = 0usize;
        let end = loop {
            let next = self.lx.next_of(pos, keep);
            let Some((x, mk, len)) = next else {
                return Err(self.unterminated(at, role, None));
            };
            match mk {
                Mk::MsgEnd => break x + len,
                Mk::MsgStart => return Err(self.unterminated(at, role, Some(x))),
                Mk::Open(B::Resp) => {
                    let Some(e) = self.block(x, B::Resp)? else {
                        return Err(self.err(
                            x,
                            format!(
                                "{} is not closed before the end of the prompt",
                                self.t.tool_response.open
                            ),
                        ));
                    };
                    self.push(x, e, Role::Observation);
                    responses += 1;
                    pos = e;
                }
                // Content (`keep` skips these already; no panic path here).
                Mk::Open(_) | Mk::Close(_) => pos = x + len,
            }
        };
        match kind {
            MessageKind::System => self.push(at, end, Role::System),
            MessageKind::User if responses == 0 => self.push(at, end, Role::User),
            MessageKind::Tool => self.push(at, end, Role::Observation),
            _ => {}
        }
        Ok(end)
    }

    /// Non-whitespace text in `a..b` of an assistant message: a reasoning span.
    fn text(&mut self, a: usize, b: usize) {
        let s = &self.p[a..b];
        let start = a + (s.len() - s.trim_start().len());
        let end = a + s.trim_end().len();
        if start < end {
            self.push(start, end, Role::Reasoning);
        }
    }

    /// An assistant message (the last one may be unterminated).
    fn assistant(&mut self, at: usize, cstart: usize) -> Result<usize> {
        let mut gap = cstart;
        loop {
            // `<tool_response>` tags are the assistant's own text here.
            let next = self
                .lx
                .next_of(gap, |mk| !matches!(mk, Mk::Open(B::Resp) | Mk::Close(B::Resp)));
            self.text(gap, next.map_or(self.p.len(), |(x, _, _)| x));
            let Some((x, mk, len)) = next else {
                return Ok(self.p.len());
            };
            gap = match mk {
                Mk::MsgEnd => return Ok(x + len),
                Mk::MsgStart => return Err(self.unterminated(at, "assistant", Some(x))),
                Mk::Open(B::Think) => {
                    if !self.steps.is_empty() {
                        self.turn += 1;
                    }
                    self.steps.push(x + len);
                    let e = self.block(x, B::Think)?.unwrap_or(self.p.len());
                    self.push(x, e, Role::Reasoning);
                    e
                }
                Mk::Open(B::Call) => {
                    let Some(e) = self.block(x, B::Call)? else {
                        return Err(self.err(
                            x,
                            format!(
                                "{} is not closed before the end of the prompt",
                                self.t.tool_call.open
                            ),
                        ));
                    };
                    self.push(x, e, Role::ToolCall);
                    e
                }
                // Content (`next_of` above skips these already; no panic path here).
                Mk::Open(B::Resp) | Mk::Close(B::Resp) => x + len,
                Mk::Close(b) => return Err(self.unopened(x, b)),
            };
        }
    }
}
