//! attention::segment: a rendered Qwen prompt cut into role spans and turns, with the
//! expected byte ranges and token positions written here (counted by hand against the
//! word-level tokenizer in tests/data/attention/tokenizer.json: the eight template tags
//! are added tokens, spaces are dropped, every `\n` is a token of its own, any other
//! space-separated word is one token).

use ctxprune::attention::segment::{
    char_spans, load_tokenizer, segment, segment_offsets, Block, CharSpan, MessageKind, Template,
};
use ctxprune::attention::{Role, Segmentation, Span};
use ctxprune::Error;
use proptest::prelude::*;
use std::path::Path;

const TOKENIZER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/attention/tokenizer.json");

/// System (quoting the tool-call tags, as Qwen's tool prompt does), user, assistant
/// (think + call), user with two tool responses (Qwen3), assistant (think + a sentence +
/// call), an old-style tool message, and the generation prompt of the next step.
pub(crate) const PROMPT: &str = concat!(
    "<|im_start|>system\nYou are a helpful agent. Call tools within <tool_call></tool_call> tags.<|im_end|>\n",
    "<|im_start|>user\nFind the capital of France.<|im_end|>\n",
    "<|im_start|>assistant\n<think>\nI should search.\n</think>\n\n<tool_call>\n{\"name\": \"search\"}\n</tool_call><|im_end|>\n",
    "<|im_start|>user\n<tool_response>\nParis is the capital.\n</tool_response>\n<tool_response>\nFrance is in Europe.\n</tool_response><|im_end|>\n",
    "<|im_start|>assistant\n<think>\nConfirm it.\n</think>\n\nLet me open it.\n<tool_call>\n{\"name\": \"open\"}\n</tool_call><|im_end|>\n",
    "<|im_start|>tool\nParis confirmed.<|im_end|>\n",
    "<|im_start|>assistant\n<think>\n",
);

fn tok() -> tokenizers::Tokenizer {
    load_tokenizer(Path::new(TOKENIZER)).unwrap()
}

fn span(start: usize, end: usize, turn: usize, role: Role) -> Span {
    Span {
        start,
        end,
        turn,
        role,
    }
}

fn cspan(start: usize, end: usize, turn: usize, role: Role) -> CharSpan {
    CharSpan {
        start,
        end,
        turn,
        role,
    }
}

/// Byte offset of `s` in `p`, which must occur exactly once.
fn at(p: &str, s: &str) -> usize {
    let i = p.find(s).unwrap_or_else(|| panic!("{s:?} not in the prompt"));
    assert_eq!(p.rfind(s), Some(i), "{s:?} occurs twice");
    i
}

/// Byte offset one past `s` in `p`.
fn past(p: &str, s: &str) -> usize {
    at(p, s) + s.len()
}

/// The message of a `prompt` error, checked to start with the byte offset and line.
fn prompt_err(p: &str, byte: usize, line: usize) -> String {
    match char_spans(p, &Template::qwen()) {
        Err(Error::InvalidArgument { name, msg }) => {
            assert_eq!(name, "prompt", "{msg}");
            let head = format!("byte {byte} (line {line}): ");
            assert!(msg.starts_with(&head), "{msg:?} does not start with {head:?}");
            msg
        }
        other => panic!("expected an invalid prompt for {p:?}, got {other:?}"),
    }
}

#[test]
fn test_tokenizer_splits_as_counted() {
    // The hand counts below rely on this: tags whole, spaces dropped, "\n" alone, words
    // whole (unknown ones as [UNK]) with byte offsets.
    let e = tok()
        .encode("<|im_start|>user\nhi th\u{e9}re<|im_end|>\n", false)
        .unwrap();
    assert_eq!(
        e.get_tokens(),
        ["<|im_start|>", "user", "\n", "[UNK]", "[UNK]", "<|im_end|>", "\n"]
    );
    assert_eq!(
        e.get_offsets(),
        [
            (0, 12),
            (12, 16),
            (16, 17),
            (17, 19),
            (20, 26),
            (26, 36),
            (36, 37)
        ]
    );
}

#[test]
fn qwen_prompt_token_spans_turns_and_steps() {
    let got = segment(PROMPT, &Template::qwen(), &tok()).unwrap();
    let want = Segmentation {
        n_tokens: 104,
        turns: 3,
        steps: vec![30, 72, 103],
        spans: vec![
            span(0, 15, 0, Role::System),
            span(16, 25, 0, Role::User),
            span(29, 36, 0, Role::Reasoning),
            span(38, 44, 0, Role::ToolCall),
            span(49, 57, 0, Role::Observation),
            span(58, 66, 0, Role::Observation),
            span(71, 77, 1, Role::Reasoning),
            span(79, 83, 1, Role::Reasoning),
            span(84, 90, 1, Role::ToolCall),
            span(92, 98, 1, Role::Observation),
            span(102, 104, 2, Role::Reasoning),
        ],
    };
    assert_eq!(got, want);
    assert_eq!(got.step_turn(0), Some(0));
    assert_eq!(got.step_turn(1), Some(1));
    assert_eq!(got.step_turn(2), Some(2));
}

#[test]
fn qwen_prompt_byte_ranges() {
    let p = PROMPT;
    let (spans, steps, turns) = char_spans(p, &Template::qwen()).unwrap();
    let want = vec![
        cspan(
            at(p, "<|im_start|>system"),
            past(p, "tags.<|im_end|>"),
            0,
            Role::System,
        ),
        cspan(
            at(p, "<|im_start|>user\nFind"),
            past(p, "France.<|im_end|>"),
            0,
            Role::User,
        ),
        cspan(
            at(p, "<think>\nI should"),
            past(p, "search.\n</think>"),
            0,
            Role::Reasoning,
        ),
        cspan(
            at(p, "<tool_call>\n{\"name\": \"search\"}"),
            past(p, "\"search\"}\n</tool_call>"),
            0,
            Role::ToolCall,
        ),
        cspan(
            at(p, "<tool_response>\nParis"),
            past(p, "capital.\n</tool_response>"),
            0,
            Role::Observation,
        ),
        cspan(
            at(p, "<tool_response>\nFrance"),
            past(p, "Europe.\n</tool_response>"),
            0,
            Role::Observation,
        ),
        cspan(
            at(p, "<think>\nConfirm"),
            past(p, "Confirm it.\n</think>"),
            1,
            Role::Reasoning,
        ),
        cspan(
            at(p, "Let me open it."),
            past(p, "Let me open it."),
            1,
            Role::Reasoning,
        ),
        cspan(
            at(p, "<tool_call>\n{\"name\": \"open\"}"),
            past(p, "\"open\"}\n</tool_call>"),
            1,
            Role::ToolCall,
        ),
        cspan(
            at(p, "<|im_start|>tool"),
            past(p, "confirmed.<|im_end|>"),
            1,
            Role::Observation,
        ),
        cspan(p.rfind("<think>").unwrap(), p.len(), 2, Role::Reasoning),
    ];
    assert_eq!(spans, want);
    assert_eq!(
        steps,
        vec![past(p, "<think>\nI") - 2, past(p, "<think>\nC") - 2, p.len() - 1]
    );
    assert_eq!(turns, 3);
}

#[test]
fn old_style_tool_messages_are_whole_observations() {
    let p = concat!(
        "<|im_start|>user\nGo<|im_end|>\n",
        "<|im_start|>assistant\n<think>\nx\n</think>\n<tool_call>\nc\n</tool_call><|im_end|>\n",
        "<|im_start|>tool\nout one<|im_end|>\n",
        "<|im_start|>tool\n<tool_response>\nout two\n</tool_response><|im_end|>\n",
    );
    let (cs, steps, turns) = char_spans(p, &Template::qwen()).unwrap();
    assert_eq!(
        cs,
        vec![
            cspan(0, past(p, "Go<|im_end|>"), 0, Role::User),
            cspan(at(p, "<think>"), past(p, "</think>"), 0, Role::Reasoning),
            cspan(at(p, "<tool_call>"), past(p, "</tool_call>"), 0, Role::ToolCall),
            cspan(
                at(p, "<|im_start|>tool\nout one"),
                past(p, "one<|im_end|>"),
                0,
                Role::Observation
            ),
            cspan(
                at(p, "<|im_start|>tool\n<tool"),
                past(p, "</tool_response><|im_end|>"),
                0,
                Role::Observation
            ),
        ]
    );
    assert_eq!(steps, vec![past(p, "<think>")]);
    assert_eq!(turns, 1);
    let seg = segment(p, &Template::qwen(), &tok()).unwrap();
    assert_eq!(
        seg,
        Segmentation {
            n_tokens: 40,
            turns: 1,
            steps: vec![10],
            spans: vec![
                span(0, 5, 0, Role::User),
                span(9, 14, 0, Role::Reasoning),
                span(15, 20, 0, Role::ToolCall),
                span(22, 28, 0, Role::Observation),
                span(29, 39, 0, Role::Observation),
            ],
        }
    );
}

#[test]
fn assistant_text_outside_blocks_is_trimmed_reasoning() {
    // A final answer between Unicode whitespace (NBSP, ideographic space) and a message
    // without any <think>: one turn.
    let p =
        "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n \u{a0}The answer\nis 42.\u{3000}\n<|im_end|>";
    let (cs, steps, turns) = char_spans(p, &Template::qwen()).unwrap();
    assert_eq!(
        cs,
        vec![
            cspan(0, past(p, "q<|im_end|>"), 0, Role::User),
            cspan(at(p, "The answer"), past(p, "is 42."), 0, Role::Reasoning),
        ]
    );
    assert!(steps.is_empty());
    assert_eq!(turns, 1);
    // Header and blank assistant messages make no spans.
    let (cs, _, _) = char_spans(
        "<|im_start|>assistant\n \n<|im_end|>\n<|im_start|>assistant\n",
        &Template::qwen(),
    )
    .unwrap();
    assert!(cs.is_empty());
    let (cs, steps, turns) = char_spans("", &Template::qwen()).unwrap();
    assert!(cs.is_empty() && steps.is_empty());
    assert_eq!(turns, 1);
}

#[test]
fn arbitrary_utf8_inside_blocks() {
    let p = concat!(
        "<|im_start|>system\nr\u{e9}sum\u{e9} \u{1F980} e\u{301}\u{302}<|im_end|>\n",
        "<|im_start|>user\n\u{601D}\u{8003} \u{5E2E}\u{6211} \u{1F468}\u{200D}\u{1F469}\u{200D}\u{1F467}<|im_end|>\n",
        "<|im_start|>assistant\n<think>\n\u{1F914} a\u{308}\u{20DD} \u{05E9}\u{05DC}\u{05D5}\u{05DD}\n</think>\n",
        "\u{1F4A1}<tool_call>\n{\"q\": \"\u{1F980}\"}\n</tool_call>\u{2003}<|im_end|>\n",
        "<|im_start|>user\n<tool_response>\n\u{1F4C4} na\u{308}ive\n</tool_response><|im_end|>\n",
        "<|im_start|>assistant\n<think>\n\u{1F600}",
    );
    let (cs, steps, turns) = char_spans(p, &Template::qwen()).unwrap();
    assert_eq!(
        cs,
        vec![
            cspan(0, past(p, "\u{302}<|im_end|>"), 0, Role::System),
            cspan(
                at(p, "<|im_start|>user\n\u{601D}"),
                past(p, "\u{1F467}<|im_end|>"),
                0,
                Role::User
            ),
            cspan(
                at(p, "<think>\n\u{1F914}"),
                past(p, "\u{05DD}\n</think>"),
                0,
                Role::Reasoning
            ),
            cspan(at(p, "\u{1F4A1}"), past(p, "\u{1F4A1}"), 0, Role::Reasoning),
            cspan(at(p, "<tool_call>"), past(p, "</tool_call>"), 0, Role::ToolCall),
            cspan(
                at(p, "<tool_response>"),
                past(p, "</tool_response>"),
                0,
                Role::Observation
            ),
            cspan(at(p, "<think>\n\u{1F600}"), p.len(), 1, Role::Reasoning),
        ]
    );
    for c in &cs {
        assert!(p.is_char_boundary(c.start) && p.is_char_boundary(c.end), "{c:?}");
    }
    assert_eq!(
        steps,
        vec![
            past(p, "<think>\n\u{1F914}") - 5,
            past(p, "<think>\n\u{1F600}") - 5
        ]
    );
    assert_eq!(turns, 2);
    let seg = segment(p, &Template::qwen(), &tok()).unwrap();
    check_against_bytes(p, &seg, &tok());
    // The last step is the "\n" after the trailing <think>, the token before the last.
    assert_eq!(seg.steps[1], seg.n_tokens - 2);
    // An error after multi-byte text reports bytes, not chars (the trailing <think> closed,
    // then a </think> without <think>).
    let bad = format!("{p}</think>\n\u{1F600}</think>");
    let b = bad.len() - "</think>".len();
    prompt_err(&bad, b, 19);
}

/// Every token lies in the token span whose byte span holds its start byte (or, for a
/// token starting in unassigned bytes, the first byte span it reaches into), and no other.
fn check_against_bytes(p: &str, seg: &Segmentation, tk: &tokenizers::Tokenizer) {
    let (cs, _, _) = char_spans(p, &Template::qwen()).unwrap();
    let enc = tk.encode(p, false).unwrap();
    assert_eq!(seg.n_tokens, enc.len());
    for (i, &(s, e)) in enc.get_offsets().iter().enumerate() {
        let by_bytes = cs
            .iter()
            .find(|c| c.start <= s && s < c.end)
            .or_else(|| cs.iter().find(|c| s < c.start && c.start < e))
            .map(|c| (c.turn, c.role));
        let by_tokens = seg.span_at(i).map(|sp| (sp.turn, sp.role));
        assert_eq!(by_bytes, by_tokens, "token {i} at byte {s}");
    }
}

#[test]
fn template_by_name() {
    assert_eq!(Template::by_name("qwen").unwrap(), Template::qwen());
    match Template::by_name("llama3") {
        Err(Error::InvalidArgument { name, msg }) => {
            assert_eq!(name, "--template");
            assert!(msg.contains("llama3") && msg.contains("qwen"), "{msg}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_template_is_data() {
    // The Llama-3 markers with the Qwen blocks, as the module docs describe.
    let t = Template {
        name: "llama3-think".into(),
        message_start: "<|start_header_id|>".into(),
        header_end: "<|end_header_id|>".into(),
        message_end: "<|eot_id|>".into(),
        roles: vec![
            ("system".into(), MessageKind::System),
            ("user".into(), MessageKind::User),
            ("assistant".into(), MessageKind::Assistant),
            ("ipython".into(), MessageKind::Tool),
        ],
        think: Block {
            open: "<think>".into(),
            close: "</think>".into(),
        },
        tool_call: Block {
            open: "<tool_call>".into(),
            close: "</tool_call>".into(),
        },
        tool_response: Block {
            open: "<tool_response>".into(),
            close: "</tool_response>".into(),
        },
    };
    let p = concat!(
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nq<|eot_id|>",
        "<|start_header_id|>assistant<|end_header_id|>\n\n<think>a</think><tool_call>c</tool_call><|eot_id|>",
        "<|start_header_id|>ipython<|end_header_id|>\n\nr<|eot_id|>",
        "<|start_header_id|>assistant<|end_header_id|>\n\n<think>b",
    );
    let (cs, steps, turns) = char_spans(p, &t).unwrap();
    let roles: Vec<(Role, usize)> = cs.iter().map(|c| (c.role, c.turn)).collect();
    assert_eq!(
        roles,
        [
            (Role::User, 0),
            (Role::Reasoning, 0),
            (Role::ToolCall, 0),
            (Role::Observation, 0),
            (Role::Reasoning, 1)
        ]
    );
    assert_eq!(cs[0].start, at(p, "<|start_header_id|>user"));
    assert_eq!(steps, vec![past(p, "<think>a") - 1, p.len() - 1]);
    assert_eq!(turns, 2);
    // A hand-built template with an empty or repeated marker is refused.
    let mut bad = t.clone();
    bad.think.close = String::new();
    assert!(char_spans(p, &bad).is_err());
    let mut bad = t;
    bad.tool_call.open = "<think>".into();
    assert!(char_spans(p, &bad).is_err());
}

#[test]
fn unterminated_messages() {
    let p = "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nhello";
    let m = prompt_err(p, at(p, "<|im_start|>user"), 3);
    assert!(
        m.contains("user message") && m.contains("end of the prompt"),
        "{m}"
    );

    let p = "<|im_start|>user\nhi\n<|im_start|>assistant\nok<|im_end|>";
    let m = prompt_err(p, 0, 1);
    assert!(
        m.contains(&format!("byte {} (line 3)", at(p, "<|im_start|>assistant"))),
        "{m}"
    );

    // Only the last message may be an unterminated assistant message.
    let p = "<|im_start|>assistant\n<think>\nhm\n</think>\n<|im_start|>user\nx<|im_end|>";
    let m = prompt_err(p, 0, 1);
    assert!(m.contains("assistant message"), "{m}");
    let p = "<|im_start|>assistant\n<think>\nhm\n<|im_start|>user\nx<|im_end|>";
    let m = prompt_err(p, at(p, "<think>"), 2);
    assert!(m.contains("not closed"), "{m}");

    let p = "<|im_start|>tool\nout";
    prompt_err(p, 0, 1);
    // A role header without its newline.
    let p = "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant";
    prompt_err(p, at(p, "<|im_start|>assistant"), 3);
}

#[test]
fn unmatched_blocks() {
    let p = "<|im_start|>assistant\nx\n</think><|im_end|>";
    let m = prompt_err(p, at(p, "</think>"), 3);
    assert!(m.contains("</think> without <think>"), "{m}");

    // A <think> inside a <think> block is content: the first </think> closes the block
    // and the second one has no <think>.
    let p = "<|im_start|>assistant\n<think>\na\n<think>\nb</think></think><|im_end|>";
    let m = prompt_err(p, at(p, "</think><|im_end|>"), 5);
    assert!(m.contains("</think> without <think>"), "{m}");

    // In an assistant message </tool_call> still needs its <tool_call>.
    let p = "<|im_start|>assistant\n<think>\nx\n</think>\n</tool_call><|im_end|>";
    let m = prompt_err(p, at(p, "</tool_call>"), 5);
    assert!(m.contains("</tool_call> without <tool_call>"), "{m}");

    // A block cut by the end of its message, and by the end of the prompt.
    let p = "<|im_start|>assistant\n<tool_call>\n{}<|im_end|>";
    let m = prompt_err(p, at(p, "<tool_call>"), 2);
    assert!(m.contains("not closed") && m.contains("the message ends"), "{m}");
    // <|im_end|> and <|im_start|> are structure even inside a block (module docs).
    let p = "<|im_start|>user\n<tool_response>\nthe page quotes <|im_end|> here\n</tool_response><|im_end|>";
    let m = prompt_err(p, at(p, "<tool_response>"), 2);
    assert!(
        m.contains("not closed") && m.contains(&format!("byte {}", at(p, "<|im_end|> here"))),
        "{m}"
    );
    let p = "<|im_start|>assistant\n<think>\nsay <|im_start|>user\nhi</think><|im_end|>";
    let m = prompt_err(p, at(p, "<think>"), 2);
    assert!(
        m.contains("not closed") && m.contains("the next message starts"),
        "{m}"
    );
    let p = "<|im_start|>assistant\n<tool_call>\n{";
    prompt_err(p, at(p, "<tool_call>"), 2);
    let p = "<|im_start|>user\n<tool_response>\nabc";
    prompt_err(p, at(p, "<tool_response>"), 2);
}

/// `char_spans` and `segment` of `p` against the expected byte spans, steps (bytes),
/// turns, and token segmentation.
fn check_literal(p: &str, bytes: &[CharSpan], byte_steps: &[usize], turns: usize, tokens: Segmentation) {
    let (cs, steps, t) = char_spans(p, &Template::qwen()).unwrap();
    assert_eq!(cs, bytes);
    assert_eq!(steps, byte_steps);
    assert_eq!(t, turns);
    let seg = segment(p, &Template::qwen(), &tok()).unwrap();
    assert_eq!(seg, tokens);
    check_against_bytes(p, &seg, &tok());
}

#[test]
fn block_tags_inside_an_observation_are_content() {
    // A Qwen3 tool response and an old-style tool message that quote <think>, </think>
    // and <tool_call> (a browsed page about LLMs): each stays one observation, and the
    // quoted <think>s are not steps (two steps, one per real <think>).
    let p = concat!(
        "<|im_start|>user\nq<|im_end|>\n",
        "<|im_start|>assistant\n<think>\nx\n</think>\n<tool_call>\nc\n</tool_call><|im_end|>\n",
        "<|im_start|>user\n<tool_response>\nput reasoning in <think> tags, end it with </think> and call with <tool_call>\n</tool_response><|im_end|>\n",
        "<|im_start|>tool\nthe page says <think> and </think> and <tool_call><|im_end|>\n",
        "<|im_start|>assistant\n<think>\n",
    );
    assert_eq!(p.len(), 353);
    check_literal(
        p,
        &[
            cspan(0, 28, 0, Role::User),
            cspan(51, 69, 0, Role::Reasoning),
            cspan(70, 96, 0, Role::ToolCall),
            cspan(124, 234, 0, Role::Observation),
            cspan(245, 322, 0, Role::Observation),
            cspan(345, 353, 1, Role::Reasoning),
        ],
        &[58, 352],
        2,
        Segmentation {
            n_tokens: 62,
            turns: 2,
            steps: vec![10, 61],
            spans: vec![
                span(0, 5, 0, Role::User),
                span(9, 14, 0, Role::Reasoning),
                span(15, 20, 0, Role::ToolCall),
                span(25, 42, 0, Role::Observation),
                span(44, 56, 0, Role::Observation),
                span(60, 62, 1, Role::Reasoning),
            ],
        },
    );
    // The reviewer's repro, and an old-style tool message holding a tool call and a
    // stray closing tag.
    let p = "<|im_start|>user\n<tool_response>\n…reasoning in <think> tags.\n</tool_response><|im_end|>";
    let (cs, steps, turns) = char_spans(p, &Template::qwen()).unwrap();
    assert_eq!(cs, vec![cspan(17, 79, 0, Role::Observation)]);
    assert_eq!((steps.len(), turns), (0, 1));
    let p = "<|im_start|>tool\n<tool_call>x</tool_call> </tool_response><|im_end|>";
    let (cs, steps, _) = char_spans(p, &Template::qwen()).unwrap();
    assert_eq!(cs, vec![cspan(0, 68, 0, Role::Observation)]);
    assert!(steps.is_empty());
}

#[test]
fn block_tags_inside_reasoning_are_content() {
    // Reasoning that mentions <tool_call> and <tool_response>, closed and (in the
    // generation prompt) unclosed: two reasoning blocks, two steps.
    let p = concat!(
        "<|im_start|>assistant\n<think>\nemit <tool_call> then read the <tool_response>\n</think>\n<tool_call>\nc\n</tool_call><|im_end|>\n",
        "<|im_start|>user\n<tool_response>\nr\n</tool_response><|im_end|>\n",
        "<|im_start|>assistant\n<think>\nno <tool_call> yet",
    );
    assert_eq!(p.len(), 233);
    check_literal(
        p,
        &[
            cspan(22, 85, 0, Role::Reasoning),
            cspan(86, 112, 0, Role::ToolCall),
            cspan(140, 174, 0, Role::Observation),
            cspan(207, 233, 1, Role::Reasoning),
        ],
        &[29, 214],
        2,
        Segmentation {
            n_tokens: 39,
            turns: 2,
            steps: vec![4, 35],
            spans: vec![
                span(3, 13, 0, Role::Reasoning),
                span(14, 19, 0, Role::ToolCall),
                span(24, 29, 0, Role::Observation),
                span(34, 39, 1, Role::Reasoning),
            ],
        },
    );
    // A <think> and closing tags of other blocks inside a <think> block.
    let p = "<|im_start|>assistant\n<think>\na <think> b </tool_call> c </tool_response></think><|im_end|>";
    let (cs, steps, turns) = char_spans(p, &Template::qwen()).unwrap();
    assert_eq!(cs, vec![cspan(22, 81, 0, Role::Reasoning)]);
    assert_eq!((steps, turns), (vec![29], 1));
}

#[test]
fn block_tags_inside_a_tool_call_are_content() {
    // A call whose JSON argument holds <think>: one call span, one step.
    let p = concat!(
        "<|im_start|>assistant\n<think>\nx\n</think>\n<tool_call>\n{\"text\": \"use <think> here\"}\n</tool_call><|im_end|>\n",
        "<|im_start|>user\n<tool_response>\nr\n</tool_response><|im_end|>\n",
    );
    assert_eq!(p.len(), 167);
    check_literal(
        p,
        &[
            cspan(22, 40, 0, Role::Reasoning),
            cspan(41, 94, 0, Role::ToolCall),
            cspan(122, 156, 0, Role::Observation),
        ],
        &[29],
        1,
        Segmentation {
            n_tokens: 29,
            turns: 1,
            steps: vec![4],
            spans: vec![
                span(3, 8, 0, Role::Reasoning),
                span(9, 17, 0, Role::ToolCall),
                span(22, 27, 0, Role::Observation),
            ],
        },
    );
    // A <tool_call>, </think> and <tool_response> inside a call.
    let p = "<|im_start|>assistant\n<tool_call>\n<tool_call></think><tool_response>\n</tool_call><|im_end|>";
    let (cs, steps, _) = char_spans(p, &Template::qwen()).unwrap();
    assert_eq!(cs, vec![cspan(22, 81, 0, Role::ToolCall)]);
    assert!(steps.is_empty());
}

#[test]
fn block_tags_outside_messages() {
    let p = "<tool_response>\nr\n</tool_response>";
    let m = prompt_err(p, 0, 1);
    assert!(m.contains("<tool_response> outside any message"), "{m}");

    let p = "<|im_start|>user\nq<|im_end|>\n</think>";
    let m = prompt_err(p, at(p, "</think>"), 3);
    assert!(m.contains("</think> outside any message"), "{m}");

    let p = "\n<|im_end|>";
    prompt_err(p, 1, 2);

    // The system message is opaque: Qwen's tool prompt quotes the tags.
    let p = "<|im_start|>system\nUse <tool_call></tool_call>; results come in <tool_response>.<|im_end|>\n";
    let (cs, steps, _) = char_spans(p, &Template::qwen()).unwrap();
    assert_eq!(cs, vec![cspan(0, past(p, ".<|im_end|>"), 0, Role::System)]);
    assert!(steps.is_empty());
}

#[test]
fn unknown_role() {
    let p = "<|im_start|>system\ns<|im_end|>\n<|im_start|>developer\nhi<|im_end|>";
    let m = prompt_err(p, past(p, "\n<|im_start|>"), 3);
    assert!(
        m.contains("\"developer\"") && m.contains("system, user, assistant, tool"),
        "{m}"
    );
    // A long header is cut in the message.
    let p = format!("<|im_start|>{}\n<|im_end|>", "\u{1F980}".repeat(500));
    let m = prompt_err(&p, 12, 1);
    assert!(m.len() < 400, "{m}");
}

#[test]
fn offsets_merged_think_newline() {
    // "<think>\n" as one token (bytes 22..30): the step is the token after it.
    let p = "<|im_start|>assistant\n<think>\nhi\n</think><|im_end|>";
    let offsets = [
        (0, 12),
        (12, 21),
        (21, 22),
        (22, 30),
        (30, 32),
        (32, 33),
        (33, 41),
        (41, 51),
    ];
    let got = segment_offsets(p, &Template::qwen(), &offsets).unwrap();
    assert_eq!(
        got,
        Segmentation {
            n_tokens: 8,
            turns: 1,
            steps: vec![4],
            spans: vec![span(3, 7, 0, Role::Reasoning)],
        }
    );
    // A token straddling a span's end stays with the span it starts in.
    let offsets = [(0, 12), (12, 22), (22, 30), (30, 33), (33, 45), (45, 51)];
    let got = segment_offsets(p, &Template::qwen(), &offsets).unwrap();
    assert_eq!(got.spans, vec![span(2, 5, 0, Role::Reasoning)]);
    assert_eq!(got.steps, vec![3]);
}

#[test]
fn offsets_errors() {
    let q = Template::qwen();
    // " Answer" as one token starting in the unassigned header reaches into the answer.
    let p = "<|im_start|>assistant\n Answer<|im_end|>";
    let offsets = [(0, 12), (12, 21), (21, 22), (22, 29), (29, 39)];
    let got = segment_offsets(p, &q, &offsets).unwrap();
    assert_eq!(got.spans, vec![span(3, 4, 0, Role::Reasoning)]);
    // Overlapping offsets that leave a gap inside the answer's tokens.
    let offsets = [(0, 12), (12, 21), (21, 25), (22, 23), (23, 29), (29, 39)];
    match segment_offsets(p, &q, &offsets) {
        Err(Error::InvalidArgument { msg, .. }) => assert!(msg.contains("not contiguous"), "{msg}"),
        other => panic!("{other:?}"),
    }
    // One token covering the end of a <think> block and all of the answer after it.
    let p = "<|im_start|>assistant\n<think>x</think>y<|im_end|>";
    let offsets = [
        (0, 12),
        (12, 21),
        (21, 22),
        (22, 29),
        (29, 30),
        (30, 39),
        (39, 49),
    ];
    match segment_offsets(p, &q, &offsets) {
        Err(Error::InvalidArgument { msg, .. }) => {
            assert!(
                msg.contains("span 1 (reasoning") && msg.contains("token 5 (bytes 30..39) covers it"),
                "{msg}"
            )
        }
        other => panic!("{other:?}"),
    }
    // Starts that go back, reversed ranges, ranges past the prompt.
    let p = "<|im_start|>user\nhi<|im_end|>";
    for (bad, i) in [
        (vec![(0, 12), (12, 16), (10, 12)], 2),
        (vec![(0, 12), (16, 12)], 1),
        (vec![(0, 12), (12, 30)], 1),
    ] {
        match segment_offsets(p, &q, &bad) {
            Err(Error::InvalidArgument { name, .. }) => assert_eq!(name, format!("offsets[{i}]")),
            other => panic!("{bad:?}: {other:?}"),
        }
    }
    // A prompt ending in <think>: no token after it.
    let p = "<|im_start|>assistant\n<think>";
    match segment_offsets(p, &q, &[(0, 12), (12, 21), (21, 22), (22, 29)]) {
        Err(Error::InvalidArgument { msg, .. }) => assert!(msg.contains("reasoning step 0"), "{msg}"),
        other => panic!("{other:?}"),
    }
    // Prompt errors come first.
    assert!(segment_offsets("</think>", &q, &[(0, 8)]).is_err());
    // Nothing in, nothing out.
    let empty = segment_offsets("", &q, &[]).unwrap();
    assert_eq!((empty.n_tokens, empty.turns, empty.spans.len()), (0, 1, 0));
}

#[test]
fn segment_ignores_padding_and_truncation() {
    let mut tk = tok();
    tk.with_truncation(Some(tokenizers::TruncationParams {
        max_length: 5,
        ..Default::default()
    }))
    .unwrap();
    tk.with_padding(Some(tokenizers::PaddingParams {
        strategy: tokenizers::PaddingStrategy::Fixed(300),
        ..Default::default()
    }));
    let seg = segment(PROMPT, &Template::qwen(), &tk).unwrap();
    assert_eq!(seg.n_tokens, 104);
    assert_eq!(seg.steps, vec![30, 72, 103]);
}

#[test]
fn load_tokenizer_errors_name_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.json");
    match load_tokenizer(&missing) {
        Err(Error::Io { path, .. }) => assert_eq!(path, missing),
        other => panic!("{:?}", other.map(|_| ())),
    }
    let bad = dir.path().join("tokenizer.json");
    std::fs::write(&bad, "{\"model\": 3}").unwrap();
    match load_tokenizer(&bad) {
        Err(Error::Format { path, msg }) => {
            assert_eq!(path, bad);
            assert!(msg.contains("tokenizer.json"), "{msg}");
        }
        other => panic!("{:?}", other.map(|_| ())),
    }
}

/// A well-formed conversation from a grammar: (prompt, number of <think> blocks). The
/// content of blocks and tool messages also quotes block tags (all but the block's own
/// closing tag), plain user messages quote all but <tool_response>, and assistant free
/// text quotes <tool_response> tags: all of these are content, no spans and no steps.
fn conversation() -> impl Strategy<Value = (String, usize)> {
    let pieces = vec![
        "a",
        "word",
        " ",
        "\n",
        "\u{e9}",
        "e\u{301}",
        "\u{1F980}",
        "\u{3000}",
        "<",
        "|>",
        "think",
    ];
    let text = prop::collection::vec(prop::sample::select(pieces.clone()), 0..6).prop_map(|v| v.concat());
    let mut quoting = pieces;
    quoting.extend([
        "<think>",
        "</think>",
        "<tool_call>",
        "</tool_call>",
        "<tool_response>",
        "</tool_response>",
    ]);
    let quoted = prop::collection::vec(prop::sample::select(quoting), 0..6).prop_map(|v| v.concat());
    // Quoted content of a block: every block tag but the one that closes it.
    let inside = |q: &str, close: &str| q.replace(close, "");
    // Quoted text of an assistant message outside blocks: only <tool_response> tags.
    let resp_tags = |q: &str| {
        ["<think>", "</think>", "<tool_call>", "</tool_call>"]
            .iter()
            .fold(q.to_owned(), |acc, tag| acc.replace(tag, ""))
    };
    let assistant_part = (0..3usize, text.clone(), quoted.clone());
    let message = (
        0..5usize,
        prop::collection::vec(assistant_part, 0..4),
        text.clone(),
        quoted.clone(),
    );
    (prop::collection::vec(message, 0..7), any::<bool>(), text, quoted).prop_map(move |(msgs, gen, tail, tq)| {
        let mut p = String::new();
        let mut thinks = 0;
        for (kind, parts, body, q) in msgs {
            match kind {
                0 => p += &format!("<|im_start|>system\n{body}{q}<tool_call></tool_call><|im_end|>\n"),
                1 => p += &format!("<|im_start|>user\n{body}{}<|im_end|>\n", q.replace("<tool_response>", "")),
                2 => {
                    let r = inside(&q, "</tool_response>");
                    p += &format!("<|im_start|>user\n<tool_response>\n{body}{r}\n</tool_response>\n<tool_response>{r}{body}</tool_response><|im_end|>\n");
                }
                3 => p += &format!("<|im_start|>tool\n{body}{q}<|im_end|>\n"),
                _ => {
                    p += "<|im_start|>assistant\n";
                    for (k, t, q) in parts {
                        match k {
                            0 => {
                                thinks += 1;
                                p += &format!("<think>{t}{}</think>", inside(&q, "</think>"));
                            }
                            1 => p += &format!("<tool_call>{}{t}</tool_call>", inside(&q, "</tool_call>")),
                            // Free text may quote <tool_response> tags (content).
                            _ => p += &format!("{t}{}", resp_tags(&q)),
                        }
                    }
                    p += "<|im_end|>\n";
                }
            }
        }
        if gen {
            thinks += 1;
            p += &format!("<|im_start|>assistant\n<think>\n{tail}{}", inside(&tq, "</think>"));
        }
        (p, thinks)
    })
}

/// Text glued from markers, role names and multi-byte pieces: mostly invalid.
fn soup() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop::sample::select(vec![
            "<|im_start|>",
            "<|im_end|>",
            "<think>",
            "</think>",
            "<tool_call>",
            "</tool_call>",
            "<tool_response>",
            "</tool_response>",
            "system\n",
            "user\n",
            "assistant\n",
            "tool\n",
            "\n",
            " ",
            "x",
            "\u{1F980}",
            "e\u{301}",
            "<|im_",
            "</",
            "\u{a0}",
        ]),
        0..30,
    )
    .prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, failure_persistence: None, ..ProptestConfig::default() })]

    /// Well-formed conversations parse; one step per <think>; turns = steps (at least 1);
    /// spans sorted, disjoint, non-empty, on char boundaries; and the token spans agree
    /// with the byte spans token by token.
    #[test]
    fn well_formed_conversations((p, thinks) in conversation()) {
        let (cs, steps, turns) = char_spans(&p, &Template::qwen()).unwrap();
        prop_assert_eq!(steps.len(), thinks);
        prop_assert_eq!(turns, thinks.max(1));
        let mut prev = 0;
        for c in &cs {
            prop_assert!(prev <= c.start && c.start < c.end && c.end <= p.len(), "{:?}", c);
            prop_assert!(p.is_char_boundary(c.start) && p.is_char_boundary(c.end));
            prev = c.end;
        }
        for &s in &steps {
            prop_assert!(cs.iter().any(|c| c.role == Role::Reasoning && c.start < s && s <= c.end));
        }
        let seg = segment(&p, &Template::qwen(), &tok()).unwrap();
        check_against_bytes(&p, &seg, &tok());
    }

    /// Anything else: an answer or an error, never a panic.
    #[test]
    fn never_panics(p in soup()) {
        if let Ok((cs, _, _)) = char_spans(&p, &Template::qwen()) {
            for c in &cs {
                prop_assert!(p.is_char_boundary(c.start) && p.is_char_boundary(c.end));
            }
        }
        let _ = segment(&p, &Template::qwen(), &tok());
    }
}

#[test]
fn block_tags_in_a_user_message_are_content() {
    // A person asks for <think> tags and mentions </tool_call>: one user span over the
    // whole message, no step from the quoted <think> (the one step is the assistant's).
    // Bytes: <|im_start|> 0..12, user 12..16, \n 16, answer 17..23, in 24..26,
    // <think> 27..34, tags, 35..40, not 41..44, </tool_call> 45..57, ones 58..62,
    // <|im_end|> 62..72, \n 72; <|im_start|> 73..85, assistant 85..94, \n 94,
    // <think> 95..102, \n 102, ok 103..105, \n 105, </think> 106..114, \n 114,
    // 42 115..117, <|im_end|> 117..127.
    // Tokens: 0 <|im_start|>, 1 user, 2 \n, 3 answer, 4 in, 5 <think>, 6 tags,, 7 not,
    // 8 </tool_call>, 9 ones, 10 <|im_end|>, 11 \n, 12 <|im_start|>, 13 assistant, 14 \n,
    // 15 <think>, 16 \n, 17 ok, 18 \n, 19 </think>, 20 \n, 21 42, 22 <|im_end|>.
    let p = concat!(
        "<|im_start|>user\nanswer in <think> tags, not </tool_call> ones<|im_end|>\n",
        "<|im_start|>assistant\n<think>\nok\n</think>\n42<|im_end|>",
    );
    assert_eq!(p.len(), 127);
    check_literal(
        p,
        &[
            cspan(0, 72, 0, Role::User),
            cspan(95, 114, 0, Role::Reasoning),
            cspan(115, 117, 0, Role::Reasoning),
        ],
        &[102],
        1,
        Segmentation {
            n_tokens: 23,
            turns: 1,
            steps: vec![16],
            spans: vec![
                span(0, 11, 0, Role::User),
                span(15, 20, 0, Role::Reasoning),
                span(21, 22, 0, Role::Reasoning),
            ],
        },
    );
    // Only the user message: still one span, and no step at all.
    let p = "<|im_start|>user\nanswer in <think> tags, not </tool_call> ones<|im_end|>";
    let (cs, steps, turns) = char_spans(p, &Template::qwen()).unwrap();
    assert_eq!(cs, vec![cspan(0, 72, 0, Role::User)]);
    assert_eq!((steps.len(), turns), (0, 1));
    // Every tag but <tool_response>, and a stray </tool_response>, is content.
    let p = "<|im_start|>user\n</think><tool_call></tool_response><think>\nx<|im_end|>";
    let (cs, steps, _) = char_spans(p, &Template::qwen()).unwrap();
    assert_eq!(cs, vec![cspan(0, p.len(), 0, Role::User)]);
    assert!(steps.is_empty());
    // With <tool_response> blocks, tags between the blocks stay unassigned text (the
    // trailing </tool_response> included) and make no step.
    let p = "<|im_start|>user\n<tool_response>\nr\n</tool_response> <think> </tool_response><|im_end|>";
    let (cs, steps, _) = char_spans(p, &Template::qwen()).unwrap();
    assert_eq!(
        cs,
        vec![cspan(17, past(p, "r\n</tool_response>"), 0, Role::Observation)]
    );
    assert!(steps.is_empty());
}

#[test]
fn tool_response_tags_in_assistant_text_are_content() {
    // A final answer that mentions <tool_response> and </tool_response>: after the
    // <think> block, one reasoning span from "The" through the closing tag.
    // Bytes: <|im_start|> 0..12, assistant 12..21, \n 21, <think> 22..29, \n 29, x 30,
    // \n 31, </think> 32..40, \n 40, The 41..44, <tool_response> 45..60, says 61..65,
    // 42 66..68, </tool_response> 69..85, <|im_end|> 85..95.
    // Tokens: 0 <|im_start|>, 1 assistant, 2 \n, 3 <think>, 4 \n, 5 x, 6 \n, 7 </think>,
    // 8 \n, 9 The, 10 <tool_response>, 11 says, 12 42, 13 </tool_response>, 14 <|im_end|>.
    let p =
        "<|im_start|>assistant\n<think>\nx\n</think>\nThe <tool_response> says 42 </tool_response><|im_end|>";
    assert_eq!(p.len(), 95);
    check_literal(
        p,
        &[
            cspan(22, 40, 0, Role::Reasoning),
            cspan(41, 85, 0, Role::Reasoning),
        ],
        &[29],
        1,
        Segmentation {
            n_tokens: 15,
            turns: 1,
            steps: vec![4],
            spans: vec![span(3, 8, 0, Role::Reasoning), span(9, 14, 0, Role::Reasoning)],
        },
    );
    // A whole assistant message that is only the tag (no <think>): one reasoning span,
    // no step.
    let p = "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<tool_response>\nr\n</tool_response><|im_end|>";
    let (cs, steps, turns) = char_spans(p, &Template::qwen()).unwrap();
    assert_eq!(
        cs,
        vec![
            cspan(0, past(p, "q<|im_end|>"), 0, Role::User),
            cspan(
                at(p, "<tool_response>"),
                past(p, "</tool_response>"),
                0,
                Role::Reasoning
            ),
        ]
    );
    assert_eq!((steps.len(), turns), (0, 1));
    // A tool call after such text keeps its meaning.
    let p = "<|im_start|>assistant\nsee </tool_response>\n<tool_call>\nc\n</tool_call><|im_end|>";
    let (cs, _, _) = char_spans(p, &Template::qwen()).unwrap();
    assert_eq!(
        cs,
        vec![
            cspan(at(p, "see"), past(p, "see </tool_response>"), 0, Role::Reasoning),
            cspan(at(p, "<tool_call>"), past(p, "</tool_call>"), 0, Role::ToolCall),
        ]
    );
}
