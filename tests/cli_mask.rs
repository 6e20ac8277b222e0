//! The `ctxprune mask` contract: the input's bytes with only masked contents replaced on
//! stdout; for bad input, a non-zero exit, exactly one line on stderr naming the message,
//! block or flag at fault, and nothing on stdout.

use crate::mask::openai;
use serde_json::{json, Value};

/// Runs the CLI with `input` on stdin: (exit code, stdout, stderr).
fn run(args: &[&str], input: &str) -> (i32, String, String) {
    crate::cli::run_with_input(args, Some(input.as_bytes()))
}

/// Asserts the CLI refuses: non-zero exit, empty stdout, one line on stderr holding `want`.
fn refused(args: &[&str], input: &str, want: &str) {
    let (code, out, err) = run(args, input);
    assert!(code != 0, "{args:?}: exit 0");
    assert!(out.is_empty(), "{args:?}: stdout {out}");
    assert_eq!(err.lines().count(), 1, "{args:?}: stderr {err}");
    assert!(
        err.ends_with('\n') && err.contains(want),
        "{args:?}: {err} (want {want})"
    );
}

fn masked(args: &[&str], input: &str) -> String {
    let (code, out, err) = run(args, input);
    assert_eq!(code, 0, "{args:?}: {err}");
    assert!(err.is_empty(), "{args:?}: {err}");
    out
}

fn anthropic() -> String {
    json!({"messages": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [{"type": "text", "text": "t"}, {"type": "tool_use", "id": "u1", "name": "f", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "u1", "content": "A"}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "u2", "name": "g", "input": {}}]}
    ]})
    .to_string()
}

#[test]
fn mask_writes_messages_and_stats() {
    let d = tempfile::tempdir().unwrap();
    let stats = d.path().join("s.json");
    let out = masked(
        &[
            "mask",
            "--format",
            "openai",
            "--tokenizer",
            "o200k_base",
            "--stats",
            stats.to_str().unwrap(),
        ],
        &openai().to_string(),
    );
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v[4]["name"], "open", "unknown fields survive");
    let s: Value = serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    for k in [
        "turns",
        "observations_masked",
        "observations_kept",
        "tokens_before",
        "tokens_after",
        "rolling_input_tokens",
        "rolling_input_tokens_unmasked",
    ] {
        assert!(s.get(k).is_some(), "missing {k}");
    }
    assert_eq!(s["observations_masked"], 2);
}

/// Bad input of every kind: one line, naming what is wrong and where, nothing on stdout.
#[test]
fn bad_input_is_one_line_naming_the_place() {
    let o = ["mask", "--format", "openai"];
    let a = ["mask", "--format", "anthropic"];
    let auto = ["mask", "--format", "auto"];
    refused(&o, "{oops", "malformed JSON");
    refused(&o, "3", "expected an array of messages");
    refused(
        &o,
        r#"[{"role":"tool","tool_call_id":"q","content":"x"}]"#,
        "no earlier call",
    );
    refused(
        &["mask", "--format", "gemini"],
        "[]",
        "unknown format 'gemini' (auto, openai, anthropic)",
    );
    refused(
        &["mask", "--format", "openai", "--tokenizer", "x/tokenizer.json"],
        "[]",
        "x/tokenizer.json",
    );
    // A tool_result beside its tool_use used to panic (index out of bounds).
    refused(
        &a,
        r#"{"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{}},{"type":"tool_result","tool_use_id":"t1","content":"r"}]}]}"#,
        "invalid messages[0].content[1]: a tool_result block in a message with role \"assistant\"",
    );
    // A wrong --format used to return the input unmasked.
    refused(
        &o,
        &anthropic(),
        "invalid --format: openai was given, but messages[1].content[1] is an Anthropic tool_use block",
    );
    refused(
        &a,
        &openai().to_string(),
        "invalid --format: anthropic was given, but messages[2].tool_calls is an OpenAI tool call list",
    );
    let mut mixed = openai();
    mixed.as_array_mut().unwrap().push(
        json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a", "content": "x"}]}),
    );
    refused(
        &auto,
        &mixed.to_string(),
        "invalid --format: openai was detected at messages[2].tool_calls, but messages[17].content[0] is an Anthropic tool_result block",
    );
    // Two answers to one call used to drop the first from masking and accounting.
    refused(
        &auto,
        r#"[{"role":"assistant","tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"a","content":"1"},{"role":"tool","tool_call_id":"a","content":"2"}]"#,
        "invalid messages[2]: answers \"a\" (made at messages[0].tool_calls[0]), which messages[1] already answered",
    );
    refused(
        &o,
        r#"[{"role":"assistant","tool_calls":[{"id":"a","function":{"name":"f"}}]},{"role":"tool","tool_call_id":"a","is_error":"yes"}]"#,
        "invalid messages[1].is_error: is \"yes\", not true or false",
    );
}

/// Flag values: negative numbers reach the value parser (which names the flag), an unknown
/// placeholder field and a step of 0 name theirs.
#[test]
fn bad_flags_name_the_flag() {
    for (flag, shown) in [
        ("--window", "'--window <WINDOW>'"),
        ("--step", "'--step <STEP>'"),
        ("--trigger-tokens", "'--trigger-tokens <TRIGGER_TOKENS>'"),
        ("--clear-at-least", "'--clear-at-least <CLEAR_AT_LEAST>'"),
    ] {
        refused(
            &["mask", "--format", "openai", flag, "-1"],
            "[]",
            &format!("error: invalid value '-1' for {shown}"),
        );
    }
    refused(
        &["mask", "--format", "openai", "--step", "0"],
        "[]",
        "invalid --step: must be at least 1",
    );
    refused(
        &["mask", "--format", "openai", "--placeholder", "[{tool} {result}]"],
        "[]",
        "invalid --placeholder: unknown field {result} (known: {tool}, {args}, {tokens}, {lines}",
    );
    refused(
        &["mask", "--format", "openai", "--keep-errors", "maybe"],
        "[]",
        "--keep-errors",
    );
}

/// The output is the input's bytes with only masked contents replaced: a 30-digit id, `1e5`,
/// `1.0`, escapes, whitespace and the final newline (or its absence) are kept; a second
/// run changes nothing; `auto` finds the format.
#[test]
fn output_keeps_the_input_bytes_and_a_second_run_changes_nothing() {
    let text = "[ {\"role\":\"user\",\"content\":\"caf\\u00e9\",\"id\":123456789012345678901234567890},\n  {\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"a\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}],\"x\":[1e5,1.0]},\n  {\"role\":\"tool\",\"tool_call_id\":\"a\",\"content\":\"long observation\"},\n  {\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"b\",\"type\":\"function\",\"function\":{\"name\":\"g\",\"arguments\":\"{}\"}}]}\n]\n";
    let args = [
        "mask",
        "--format",
        "auto",
        "--window",
        "1",
        "--tokenizer",
        "approx",
        "--placeholder",
        "- {tool}({args}) {tokens} -",
    ];
    let out = masked(&args, text);
    assert_eq!(out, text.replace("\"long observation\"", "\"- f({}) 4 -\""));
    assert_eq!(masked(&args, &out), out, "masking is idempotent");
    let bare = text.trim_end();
    assert_eq!(masked(&args, bare), out.trim_end());
    // Both formats, detected, as when given.
    for (input, f) in [(openai().to_string(), "openai"), (anthropic(), "anthropic")] {
        let given = masked(&["mask", "--format", f, "--window", "1"], &input);
        assert_eq!(
            masked(&["mask", "--format", "auto", "--window", "1"], &input),
            given
        );
        assert_ne!(given, input, "{f}: something was masked");
    }
}

/// The placeholder is expanded in one pass: a tool named `{args}{tokens}` is shown as
/// itself.
#[test]
fn a_tool_named_like_a_field_is_shown_as_itself() {
    let input = r#"[{"role":"assistant","tool_calls":[{"id":"a","type":"function","function":{"name":"{args}{tokens}","arguments":"{tool}"}}]},{"role":"tool","tool_call_id":"a","content":"abcdefghijkl"},{"role":"assistant","tool_calls":[{"id":"b","type":"function","function":{"name":"f","arguments":"{}"}}]}]"#;
    let out = masked(
        &[
            "mask",
            "--format",
            "openai",
            "--window",
            "1",
            "--tokenizer",
            "approx",
            "--placeholder",
            "{tool}({args}) {tokens}",
        ],
        input,
    );
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v[1]["content"], "{args}{tokens}({tool}) 3");
}

#[test]
fn the_anthropic_edit_and_the_presets_from_the_command_line() {
    let doc = openai().to_string();
    // The edit as JSON text and as a file give the same bytes.
    let edit = r#"{"type": "clear_tool_uses_20250919", "keep": {"type": "tool_uses", "value": 2}, "trigger": {"type": "input_tokens", "value": 1}}"#;
    let inline = masked(
        &[
            "mask",
            "--format",
            "openai",
            "--tokenizer",
            "approx",
            "--edit",
            edit,
        ],
        &doc,
    );
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("edit.json");
    std::fs::write(&f, edit).unwrap();
    let from_file = masked(
        &[
            "mask",
            "--format",
            "openai",
            "--tokenizer",
            "approx",
            "--edit",
            f.to_str().unwrap(),
        ],
        &doc,
    );
    assert_eq!(inline, from_file);
    let v: Value = serde_json::from_str(&inline).unwrap();
    let omitted = v
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| {
            m["content"]
                .as_str()
                .is_some_and(|s| s.starts_with("[observation omitted"))
        })
        .count();
    // 8 tool uses: the last 2 kept, and the error among the 6 before them.
    assert_eq!(omitted, 5, "{inline}");
    masked(
        &[
            "mask",
            "--format",
            "openai",
            "--preset",
            "swe-agent",
            "--window",
            "2",
            "--step",
            "3",
        ],
        &doc,
    );
    refused(
        &["mask", "--format", "openai", "--edit", edit, "--window", "3"],
        &doc,
        "--window",
    );
    refused(
        &["mask", "--format", "openai", "--preset", "swe"],
        &doc,
        "--preset",
    );
    refused(&["mask", "--format", "openai", "--unit", "pages"], &doc, "--unit");
    refused(
        &[
            "mask",
            "--format",
            "openai",
            "--edit",
            r#"{"type": "clear_tool_uses_20250919", "keep": 3}"#,
        ],
        &doc,
        "--edit: keep",
    );
    refused(
        &[
            "mask",
            "--format",
            "openai",
            "--edit",
            r#"{"type": "clear_tool_uses_20250919", "type": "x"}"#,
        ],
        &doc,
        "--edit",
    );
    refused(
        &["mask", "--format", "openai", "--edit", "/nonexistent/edit.json"],
        &doc,
        "--edit",
    );
}
