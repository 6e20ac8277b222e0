//! Observation masking on hand-made trajectories with the expected output written here.

use ctxprune::mask::masker::{MaskConfig, Masker};
use ctxprune::mask::{Format, Trajectory};
use ctxprune::tokens::Approx;
use serde_json::{json, Value};

/// Seven turns: turn 1 has two parallel calls, turn 2's observation is an error.
pub fn openai() -> Value {
    let mut m = vec![json!({"role": "system", "content": "be brief", "x-extra": {"keep": true}})];
    m.push(json!({"role": "user", "content": "research"}));
    m.push(json!({"role": "assistant", "content": null, "tool_calls": [
        {"id": "a", "type": "function", "function": {"name": "search", "arguments": "{\"q\":\"alpha\"}"}},
        {"id": "b", "type": "function", "function": {"name": "open", "arguments": "{\"url\":\"u1\"}"}}]}));
    m.push(json!({"role": "tool", "tool_call_id": "a", "content": format!("result alpha\nline 2 {}", "lorem ".repeat(200))}));
    m.push(json!({"role": "tool", "tool_call_id": "b", "content": format!("page one {}", "ipsum ".repeat(200)), "name": "open"}));
    m.push(json!({"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function": {"name": "fetch", "arguments": "{}"}}]}));
    m.push(json!({"role": "tool", "tool_call_id": "c", "content": "404", "is_error": true}));
    for t in 3..=7 {
        let id = format!("t{t}");
        m.push(json!({"role": "assistant", "tool_calls": [{"id": id, "type": "function", "function": {"name": "search", "arguments": format!("{{\"q\":\"{t}\"}}")}}]}));
        m.push(json!({"role": "tool", "tool_call_id": id, "content": format!("obs {t}")}));
    }
    Value::Array(m)
}

fn mask(doc: &Value, format: Format, cfg: MaskConfig) -> (Value, ctxprune::mask::masker::MaskStats) {
    let mut t = Trajectory::parse(&doc.to_string(), Some(format)).unwrap();
    let s = Masker::new(cfg, std::sync::Arc::new(Approx))
        .unwrap()
        .mask(&mut t);
    (serde_json::from_str(&t.to_json()).unwrap(), s)
}

#[test]
fn paper_rule_on_openai_messages() {
    let cfg = MaskConfig {
        placeholder: "[{tool} {args}: {lines} lines]".into(),
        ..MaskConfig::default()
    };
    let (out, s) = mask(&openai(), Format::OpenAi, cfg);
    let mut want = openai();
    // t = 7, K = 5: turns 1 and 2 are outside the window; turn 1's two parallel calls are
    // masked together, turn 2 is an error and stays; turns 3..7 stay.
    want[3]["content"] = json!("[search {\"q\":\"alpha\"}: 2 lines]");
    want[4]["content"] = json!("[open {\"url\":\"u1\"}: 1 lines]");
    assert_eq!(out, want);
    assert_eq!((s.turns, s.observations_masked, s.observations_kept), (7, 2, 6));
    assert!(s.tokens_after < s.tokens_before);
    assert!(s.rolling_input_tokens < s.rolling_input_tokens_unmasked);
    // Without keeping errors, turn 2 goes too; with K = 7 nothing is masked.
    let (_, s) = mask(
        &openai(),
        Format::OpenAi,
        MaskConfig {
            keep_errors: false,
            ..MaskConfig::default()
        },
    );
    assert_eq!(s.observations_masked, 3);
    let (out, s) = mask(
        &openai(),
        Format::OpenAi,
        MaskConfig {
            window: 7,
            ..MaskConfig::default()
        },
    );
    assert_eq!((out, s.observations_masked), (openai(), 0));
}

#[test]
fn options_keep_first_tools_step_trigger() {
    let base = MaskConfig {
        window: 2,
        ..MaskConfig::default()
    }; // boundary t - K = 5
    let masked = |cfg: MaskConfig| mask(&openai(), Format::OpenAi, cfg).1.observations_masked;
    // Turns 1..5 eligible: 2 (turn 1) + 0 (error) + 3 = 5.
    assert_eq!(masked(base.clone()), 5);
    assert_eq!(
        masked(MaskConfig {
            keep_first: true,
            ..base.clone()
        }),
        4
    );
    assert_eq!(
        masked(MaskConfig {
            tools_keep: vec!["search".into()],
            ..base.clone()
        }),
        1
    );
    assert_eq!(
        masked(MaskConfig {
            tools_mask: vec!["open".into()],
            ..base.clone()
        }),
        1
    );
    // Step 4: the boundary moves 0, 4, 8, ... -> 4 at t - K = 5: turns 1..4 (2 + 0 + 2).
    assert_eq!(
        masked(MaskConfig {
            step: 4,
            ..base.clone()
        }),
        4
    );
    assert_eq!(
        masked(MaskConfig {
            trigger_tokens: Some(1_000_000),
            ..base.clone()
        }),
        0
    );
    assert_eq!(
        masked(MaskConfig {
            trigger_tokens: Some(1),
            ..base.clone()
        }),
        5
    );
    assert_eq!(
        masked(MaskConfig {
            clear_at_least: 1_000_000,
            ..base
        }),
        0
    );
}

#[test]
fn anthropic_blocks_and_bad_input() {
    let doc = json!({"model": "m", "messages": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [
            {"type": "text", "text": "searching"},
            {"type": "tool_use", "id": "u1", "name": "search", "input": {"q": "a"}},
            {"type": "tool_use", "id": "u2", "name": "search", "input": {"q": "b"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "u1", "content": "A"},
            {"type": "tool_result", "tool_use_id": "u2", "content": [{"type": "text", "text": "B"}], "is_error": true}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "u3", "name": "open", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "u3", "content": "C"}]}
    ]});
    let (out, s) = mask(
        &doc,
        Format::Anthropic,
        MaskConfig {
            window: 1,
            placeholder: "[{tool} {args}]".into(),
            ..MaskConfig::default()
        },
    );
    let mut want = doc.clone();
    want["messages"][2]["content"][0]["content"] = json!("[search {\"q\":\"a\"}]");
    assert_eq!(
        out, want,
        "the error in the same turn is kept; the last turn is in the window"
    );
    assert_eq!((s.turns, s.observations_masked), (2, 1));
    let orphan = json!([{"role": "tool", "tool_call_id": "zz", "content": "x"}]);
    let e = Trajectory::parse(&orphan.to_string(), Some(Format::OpenAi))
        .unwrap_err()
        .to_string();
    assert!(e.contains("messages[0]") && e.contains("zz"), "{e}");
    assert!(Trajectory::parse("{not json", Some(Format::OpenAi))
        .unwrap_err()
        .to_string()
        .contains("malformed JSON"));
    assert!("gemini".parse::<Format>().is_err());
}

#[test]
fn page_pool_dedups_opens_and_finds() {
    use ctxprune::mask::pages::{evidence_snr, normalize_url, PagePool, PageRef};
    let mut p = PagePool::new();
    let a = p
        .add(
            Some("HTTPS://Example.org:443/a/b?x=1#frag"),
            "Alpha line\nbeta LINE two\ngamma",
        )
        .unwrap();
    let again = p
        .add(Some("https://example.org/a/b?x=1"), "other content")
        .unwrap();
    assert_eq!(a, again, "same page after normalisation");
    let b = p.add(None, "no url").unwrap();
    assert_eq!((a, b, p.len()), (0, 1, 2));
    assert_eq!(
        normalize_url("https://EXAMPLE.org/a/b?x=1#z").unwrap(),
        "https://example.org/a/b?x=1"
    );
    assert!(normalize_url("/relative/path").is_err());
    let w = p.open(PageRef::Url("https://example.org/a/b?x=1"), 1, 5).unwrap();
    assert_eq!((w.cursor, w.start, w.end, w.total), (0, 1, 3, 3));
    assert_eq!(w.lines, vec!["beta LINE two".to_string(), "gamma".to_string()]);
    assert!(p
        .open(PageRef::Cursor(0), 3, 1)
        .unwrap_err()
        .to_string()
        .contains("past the end"));
    assert!(p.open(PageRef::Cursor(9), 0, 1).is_err());
    assert_eq!(
        p.find("line", PageRef::Cursor(0)).unwrap(),
        vec![(0, 6, 10), (1, 5, 9)]
    );
    assert!(p.find("", PageRef::Cursor(0)).is_err());
    // SNR: U = {a, b, c} (a repeated), G = {a, z}: 1 / (2 + 1).
    let snr = evidence_snr(
        &[
            "https://x.org/a",
            "https://x.org/a#t",
            "https://x.org/b",
            "https://x.org/c",
        ],
        &["https://x.org/a", "https://x.org/z"],
    )
    .unwrap();
    assert!((snr - 1.0 / 3.0).abs() < 1e-12);
}

#[test]
fn semantic_masker_keeps_stale_observations_that_add_a_new_direction() {
    use ctxprune::select::Method;
    // 8 observations (turn 1 has two); the rule (K = 5, t = 7) masks turn 1's two.
    // Observation 0 repeats a live direction; observation 1 points somewhere new.
    let mut rows = vec![vec![0.0f32; 8]; 8];
    for (i, r) in rows.iter_mut().enumerate() {
        r[i.min(7)] = 1.0;
    }
    rows[0] = rows[5].clone(); // stale, redundant with live observation 5
    rows[1] = vec![0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0];
    rows[1][1] = 1.0; // no live observation has direction 1
    let e = ctxprune::Embeddings::from_rows(&rows, "obs").unwrap();
    let traj = Trajectory::parse(&openai().to_string(), Some(Format::OpenAi)).unwrap();
    let mut m = Masker::new(MaskConfig::default(), std::sync::Arc::new(Approx))
        .unwrap()
        .session();
    let (edits, kept_back) = m.plan_semantic(&traj, &e, Method::Grn, 0.5, None).unwrap();
    assert_eq!(kept_back, 1);
    assert_eq!(edits.len(), 1);
    assert_eq!(
        edits[0].0.message, 3,
        "the redundant observation is masked; the novel one is kept"
    );
    let short = ctxprune::Embeddings::from_rows(&rows[..3], "obs").unwrap();
    assert!(m.plan_semantic(&traj, &short, Method::Grn, 0.5, None).is_err());
}

#[test]
fn token_counters_exact_and_from_a_tokenizer_json() {
    use ctxprune::tokens::counter;
    let o200k = counter("o200k_base").unwrap();
    let cl100k = counter("cl100k_base").unwrap();
    assert_eq!(o200k.count("hello world"), 2);
    assert_eq!(cl100k.count("hello world"), 2);
    assert_eq!(counter("approx").unwrap().count("abcdefgh!"), 3);
    assert!(counter("gpt2-ish").is_err());

    // A WordLevel tokenizer.json written by hand: unknown words map to [UNK].
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("tokenizer.json");
    std::fs::write(
        &p,
        r#"{"version":"1.0","truncation":null,"padding":null,"added_tokens":[],"normalizer":null,
            "pre_tokenizer":{"type":"Whitespace"},"post_processor":null,"decoder":null,
            "model":{"type":"WordLevel","vocab":{"[UNK]":0,"hello":1,"world":2},"unk_token":"[UNK]"}}"#,
    )
    .unwrap();
    let hf = counter(p.to_str().unwrap()).unwrap();
    assert_eq!(hf.count("hello world foo bar"), 4);
    let bad = d.path().join("bad.json");
    std::fs::write(&bad, "{}").unwrap();
    let e = counter(bad.to_str().unwrap())
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(e.contains("bad.json"), "{e}");
}

/// One masker serves many conversations: the counts a session caches (keyed by message
/// position and text length) never reach another conversation. Two conversations whose
/// observations have the same byte length but different token counts get their own
/// counts; a session re-plans its own conversation to the same result.
#[test]
fn a_masker_is_shared_and_sessions_are_per_conversation() {
    use ctxprune::mask::{Format, Trajectory};
    use ctxprune::tokens::TokenCounter;
    struct Words;
    impl TokenCounter for Words {
        fn count(&self, text: &str) -> usize {
            text.split_whitespace().count()
        }
    }
    let m = Masker::new(MaskConfig::default(), std::sync::Arc::new(Words)).unwrap();
    let conv = |body: &str| -> Trajectory {
        let mut msgs = vec![serde_json::json!({"role": "user", "content": "q"})];
        for t in 0..8 {
            let id = format!("c{t}");
            msgs.push(serde_json::json!({"role": "assistant", "tool_calls": [{"id": id, "type": "function", "function": {"name": "f", "arguments": "{}"}}]}));
            msgs.push(serde_json::json!({"role": "tool", "tool_call_id": id, "content": body}));
        }
        Trajectory::parse(&serde_json::Value::Array(msgs).to_string(), Some(Format::OpenAi)).unwrap()
    };
    // Same length (19 bytes), 10 words against 1.
    let (a, b) = (conv("a b c d e f g h i j"), conv("abcdefghijklmnopqrs"));
    let (sa, sb) = (m.plan(&a).1, m.plan(&b).1);
    assert_eq!(
        sa.tokens_before - sb.tokens_before,
        8 * 9,
        "each of 8 observations: 10 words vs 1"
    );
    let mut session = m.session();
    assert_eq!(session.plan(&a).1, sa);
    assert_eq!(session.plan(&a).1, sa, "a re-plan from the cache");
    assert_eq!(m.session().plan(&b).1, sb, "another conversation: its own counts");
}

fn masker(cfg: MaskConfig) -> Masker {
    Masker::new(cfg, std::sync::Arc::new(Approx)).unwrap()
}

fn err(text: &str, format: Option<Format>) -> String {
    Trajectory::parse(text, format).unwrap_err().to_string()
}

/// One assistant message holding a tool_use and its tool_result used to index a turn that
/// did not exist yet (a panic); the Anthropic API requires results in a later user
/// message, so it is an error naming the block.
#[test]
fn a_tool_result_beside_its_tool_use_is_an_error_not_a_panic() {
    let doc = r#"{"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{}},{"type":"tool_result","tool_use_id":"t1","content":"r"}]}]}"#;
    for f in [Some(Format::Anthropic), None] {
        let e = err(doc, f);
        assert!(
            e.contains("messages[0].content[1]") && e.contains("tool_result"),
            "{e}"
        );
    }
    let e = err(
        r#"[{"role":"user","content":[{"type":"tool_use","id":"t1","name":"f","input":{}}]}]"#,
        None,
    );
    assert!(
        e.contains("messages[0].content[0]") && e.contains("\"user\""),
        "{e}"
    );
    let e = err(
        r#"[{"role":"user","tool_calls":[{"id":"a","function":{"name":"f"}}]}]"#,
        Some(Format::OpenAi),
    );
    assert!(
        e.contains("messages[0].tool_calls") && e.contains("\"user\""),
        "{e}"
    );
}

fn anthropic() -> Value {
    json!({"model": "m", "messages": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [
            {"type": "text", "text": "searching"},
            {"type": "tool_use", "id": "u1", "name": "search", "input": {"q": "a"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "u1", "content": "A"}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "u2", "name": "open", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "u2", "content": "B"}]}
    ]})
}

/// A wrong `--format` used to find no calls and return the input unmasked.
#[test]
fn the_format_is_detected_and_a_wrong_one_is_an_error_naming_the_marker() {
    assert_eq!(Format::detect(&openai()).unwrap(), Some(Format::OpenAi));
    assert_eq!(Format::detect(&anthropic()).unwrap(), Some(Format::Anthropic));
    assert_eq!(
        Format::detect(&json!([{"role": "user", "content": "hi"}])).unwrap(),
        None
    );
    assert!(Format::detect(&json!(3)).is_err());
    let e = err(&anthropic().to_string(), Some(Format::OpenAi));
    assert!(
        e.contains("openai was given, but messages[1].content[1] is an Anthropic tool_use block"),
        "{e}"
    );
    let e = err(&openai().to_string(), Some(Format::Anthropic));
    assert!(
        e.contains("anthropic was given, but messages[2].tool_calls is an OpenAI tool call list"),
        "{e}"
    );
    // Both formats in one document: detection names both places.
    let mut mixed = openai();
    mixed
        .as_array_mut()
        .unwrap()
        .push(anthropic()["messages"][1].clone());
    let e = Format::detect(&mixed).unwrap_err().to_string();
    assert!(
        e.contains("openai was detected at messages[2].tool_calls")
            && e.contains("messages[17].content[1] is an Anthropic tool_use block"),
        "{e}"
    );
    assert_eq!(e, err(&mixed.to_string(), None));
    assert!(err(&mixed.to_string(), Some(Format::OpenAi)).contains("messages[17].content[1]"));
    // Auto reads each format as the explicit one does.
    for (doc, f) in [(openai(), Format::OpenAi), (anthropic(), Format::Anthropic)] {
        let a = Trajectory::parse(&doc.to_string(), None).unwrap();
        let b = Trajectory::parse(&doc.to_string(), Some(f)).unwrap();
        assert_eq!((a.format(), a.turns()), (Some(f), b.turns()));
    }
    // A conversation with no calls yet settles its format at the first marker.
    let mut t = Trajectory::parse(r#"[{"role":"user","content":"q"}]"#, None).unwrap();
    assert_eq!(t.format(), None);
    t.extend(anthropic()["messages"].as_array().unwrap()[1..3].to_vec())
        .unwrap();
    assert_eq!((t.format(), t.turns().len()), (Some(Format::Anthropic), 1));
    let e = t.extend(vec![
        json!({"role": "tool", "tool_call_id": "u1", "content": "x"}),
    ]);
    assert!(e.unwrap_err().to_string().contains(
        "anthropic was detected at messages[1].content[1], but messages[3] is an OpenAI tool message"
    ),);
}

/// Two tool messages answering one call id: the first used to be neither masked nor
/// counted. The APIs require one answer per call id.
#[test]
fn two_answers_to_one_call_and_reused_open_ids_are_errors_naming_both_places() {
    let call = |id: &str| json!({"role": "assistant", "tool_calls": [{"id": id, "type": "function", "function": {"name": "f", "arguments": "{}"}}]});
    let tool = |id: &str| json!({"role": "tool", "tool_call_id": id, "content": "r"});
    let e = err(&json!([call("a"), tool("a"), tool("a")]).to_string(), None);
    assert!(
        e.contains("messages[2]")
            && e.contains("messages[1] already answered")
            && e.contains("messages[0].tool_calls[0]"),
        "{e}"
    );
    let mut doc = anthropic();
    doc["messages"][4]["content"][0]["tool_use_id"] = json!("u1");
    let e = err(&doc.to_string(), None);
    assert!(
        e.contains("messages[4].content[0]") && e.contains("messages[2].content[0] already answered"),
        "{e}"
    );
    // An id reused while its call is unanswered: which call an answer belongs to is unknown.
    let e = err(&json!([call("a"), call("a"), tool("a")]).to_string(), None);
    assert!(
        e.contains("messages[1].tool_calls[0]") && e.contains("messages[0].tool_calls[0]"),
        "{e}"
    );
    // An id reused after its call was answered is a new call.
    let t = Trajectory::parse(
        &json!([call("a"), tool("a"), call("a"), tool("a")]).to_string(),
        None,
    )
    .unwrap();
    let obs: Vec<_> = t
        .turns()
        .iter()
        .map(|t| t.calls[0].observation.unwrap().message)
        .collect();
    assert_eq!(obs, [1, 3]);
    // A failed extend leaves the trajectory as it was.
    let mut t = Trajectory::parse(&json!([call("a"), tool("a")]).to_string(), None).unwrap();
    let before = (t.to_json(), t.turns().to_vec(), t.messages().len());
    assert!(t.extend(vec![call("b"), tool("b"), tool("b")]).is_err());
    assert!(t
        .extend(vec![
            json!({"role": "tool", "tool_call_id": "a", "is_error": "yes"})
        ])
        .is_err());
    assert_eq!((t.to_json(), t.turns().to_vec(), t.messages().len()), before);
    t.extend(vec![call("b"), tool("b")]).unwrap();
    assert_eq!(t.turns().len(), 2);
}

/// The output is the input with only masked contents replaced: big integers, number
/// spellings, escapes (an escaped key too) and whitespace survive.
#[test]
fn every_byte_outside_the_masked_contents_is_kept() {
    let text = "{\"model\":\"m\",\r\n \"messages\" : [\n {\"role\":\"user\" , \"content\":\"caf\\u00e9 \\ud83d\\ude00 \\/\", \"n\": 123456789012345678901234567890, \"f\": [1e5, 1.0, -0.0, 2E-3]},\r\n\t{\"role\": \"assistant\",\"tool_calls\":[{\"id\":\"a\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}], \"id\": 123456789012345678901234567890},\n {\"role\":\"tool\",\"tool_call_id\":\"a\",\"x\":{\"content\":1},\"c\\u006fntent\" : \"dup\"  , \"y\":1.50},\n {\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"b\",\"type\":\"function\",\"function\":{\"name\":\"g\",\"arguments\":\"{}\"}}]},\n {\"role\":\"tool\",\"tool_call_id\":\"b\"   }\n], \"z\": 1.0}\n";
    let mut t = Trajectory::parse(text, None).unwrap();
    let m = masker(MaskConfig {
        window: 0,
        placeholder: "[{tool} \"{lines}\"]".into(),
        ..MaskConfig::default()
    });
    assert_eq!(m.mask(&mut t).observations_masked, 2);
    let want = text
        .replace(
            "\"c\\u006fntent\" : \"dup\"",
            "\"c\\u006fntent\" : \"[f \\\"1\\\"]\"",
        )
        .replace("\"b\"   }", "\"b\"   ,\"content\":\"[g \\\"0\\\"]\"}");
    assert_eq!(t.to_json(), want);
    // Appended messages go before the messages array's closing bracket.
    t.extend(vec![
        json!({"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function": {"name": "h", "arguments": "{}"}}]}),
        json!({"role": "tool", "tool_call_id": "c", "content": "new"}),
    ])
    .unwrap();
    let appended = ",{\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"c\",\"type\":\"function\",\"function\":{\"name\":\"h\",\"arguments\":\"{}\"}}]},{\"role\":\"tool\",\"tool_call_id\":\"c\",\"content\":\"new\"}";
    let want = want.replace("\n], \"z\"", &format!("\n{appended}], \"z\""));
    assert_eq!(t.to_json(), want);
    m.mask(&mut t);
    assert_eq!(
        t.to_json(),
        want.replace("\"content\":\"new\"", "\"content\":\"[h \\\"1\\\"]\"")
    );
    // Into an empty array, with no leading comma.
    let mut t = Trajectory::parse(" [ ] ", None).unwrap();
    t.extend(vec![json!({"role": "user", "content": "q"})]).unwrap();
    assert_eq!(t.to_json(), " [ {\"role\":\"user\",\"content\":\"q\"}] ");
    // Replacing where there is no observation is an error.
    let e = t.replace(
        ctxprune::mask::Loc {
            message: 0,
            block: None,
        },
        "x",
    );
    assert!(e.unwrap_err().to_string().contains("messages[0]"));
}

/// The placeholder used to be expanded by chained replaces, so a tool named
/// `{args}{tokens}` rendered as `{tool}13({tool})`.
#[test]
fn the_placeholder_is_expanded_once_and_unknown_fields_are_errors() {
    let doc = json!([
        {"role": "assistant", "tool_calls": [{"id": "a", "type": "function", "function": {"name": "{args}{tokens}", "arguments": "{tool}"}}]},
        {"role": "tool", "tool_call_id": "a", "content": "abcdefghijklmnopqrstuvwxyz"},
        {"role": "assistant", "tool_calls": [{"id": "b", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}
    ]);
    let (out, _) = mask(
        &doc,
        Format::OpenAi,
        MaskConfig {
            window: 1,
            placeholder: "{tool}({args}) {tokens} {} {x-y} {{lines}}".into(),
            ..MaskConfig::default()
        },
    );
    assert_eq!(out[1]["content"], "{args}{tokens}({tool}) 7 {} {x-y} {1}");
    for (p, name) in [
        ("{tool} {result}", "{result}"),
        ("{Tool}", "{Tool}"),
        ("{a_1}", "{a_1}"),
    ] {
        let e = Masker::new(
            MaskConfig {
                placeholder: p.into(),
                ..MaskConfig::default()
            },
            std::sync::Arc::new(Approx),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains(name) && e.contains("{tool}, {args}, {tokens}, {lines}"),
            "{e}"
        );
    }
    let e = Masker::new(
        MaskConfig {
            step: 0,
            ..MaskConfig::default()
        },
        std::sync::Arc::new(Approx),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("step"), "{e}");
}

/// An agent loop re-masks its masked history every turn: the second pass recognises the
/// placeholders (the counts in them may be any digits), leaves them and counts them as
/// masked; the tokens it reports are the masked context's.
#[test]
fn masking_twice_changes_nothing() {
    let m = masker(MaskConfig::default());
    let mut t = Trajectory::parse(&openai().to_string(), None).unwrap();
    let s1 = m.mask(&mut t);
    let once = t.to_json();
    let mut again = Trajectory::parse(&once, None).unwrap();
    let s2 = m.mask(&mut again);
    assert_eq!(again.to_json(), once);
    assert_eq!(
        (s2.observations_masked, s2.observations_kept),
        (s1.observations_masked, s1.observations_kept)
    );
    assert_eq!(
        s2.tokens_before, s1.tokens_after,
        "the masked context, counted as given"
    );
    assert_eq!(s2.tokens_after, s2.tokens_before, "this pass saves nothing");
    // In place, with one session: the same.
    let mut session = m.session();
    let mut t = Trajectory::parse(&openai().to_string(), None).unwrap();
    assert_eq!(session.mask(&mut t), s1);
    assert_eq!(session.mask(&mut t), s2);
    assert_eq!(t.to_json(), once);
}

/// Random trajectories in both formats, written with odd whitespace, escapes, absent
/// contents, 30-digit integers and unusual number spellings (no repeated keys: the parser
/// refuses those).
mod generated {
    use ctxprune::mask::Loc;
    use ctxprune::rng::Rng;
    use std::collections::HashMap;
    use std::ops::Range;

    /// JSON as written: numbers and literals verbatim (serde_json would rewrite them).
    #[derive(Clone, Debug)]
    pub enum J {
        Raw(&'static str),
        Str(String),
        Arr(Vec<J>),
        /// Members, and the location when the object is an observation.
        Obj(Vec<(String, J)>, Option<Loc>),
    }

    fn s(x: &str) -> J {
        J::Str(x.into())
    }

    fn obj(m: Vec<(&str, J)>) -> J {
        J::Obj(m.into_iter().map(|(k, v)| (k.to_string(), v)).collect(), None)
    }

    /// An observation object as written: its last "content" value, its closing brace and
    /// whether it has no members.
    pub type Written = HashMap<Loc, (Option<Range<usize>>, usize, bool)>;

    /// Writes `j` with random whitespace between tokens (not around it), recording where
    /// each observation object's content and closing brace are.
    pub fn write(j: &J, rng: &mut Rng, out: &mut String, obs: &mut Written) {
        match j {
            J::Raw(r) => out.push_str(r),
            J::Str(x) => string(x, rng, out),
            J::Arr(items) => {
                out.push('[');
                for (i, it) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    ws(rng, out);
                    write(it, rng, out, obs);
                    ws(rng, out);
                }
                if items.is_empty() {
                    ws(rng, out);
                }
                out.push(']');
            }
            J::Obj(members, loc) => {
                out.push('{');
                let mut content = None;
                for (i, (k, v)) in members.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    ws(rng, out);
                    string(k, rng, out);
                    ws(rng, out);
                    out.push(':');
                    ws(rng, out);
                    let start = out.len();
                    write(v, rng, out, obs);
                    if k == "content" {
                        content = Some(start..out.len());
                    }
                    ws(rng, out);
                }
                if members.is_empty() {
                    ws(rng, out);
                }
                if let Some(l) = loc {
                    obs.insert(*l, (content, out.len(), members.is_empty()));
                }
                out.push('}');
            }
        }
    }

    /// The document's text, and where its observations are.
    pub fn text(j: &J, rng: &mut Rng) -> (String, Written) {
        let (mut out, mut obs) = (String::new(), Written::new());
        ws(rng, &mut out);
        write(j, rng, &mut out, &mut obs);
        ws(rng, &mut out);
        (out, obs)
    }

    fn ws(rng: &mut Rng, out: &mut String) {
        out.push_str(["", "", "", " ", "\n  ", "\t", "\r\n "][rng.below(7)]);
    }

    /// A JSON string, escaping some characters that need no escape.
    fn string(x: &str, rng: &mut Rng, out: &mut String) {
        out.push('"');
        for c in x.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                c if (c as u32) < 0x20 || (!c.is_ascii() && rng.below(2) == 0) || rng.below(20) == 0 => {
                    let mut b = [0u16; 2];
                    for u in c.encode_utf16(&mut b) {
                        out.push_str(&format!("\\u{:04x}", u));
                    }
                }
                c => out.push(c),
            }
        }
        out.push('"');
    }

    const WORDS: [&str; 8] = [
        "alpha",
        "β-test",
        "😀",
        "line\nbreak",
        "\"quoted\"",
        "back\\slash",
        "tab\t",
        "x",
    ];
    const TOOLS: [&str; 4] = ["search", "open", "{args}{tokens}", "ünï"];

    fn words(rng: &mut Rng) -> String {
        (0..1 + rng.below(12))
            .map(|_| WORDS[rng.below(WORDS.len())])
            .collect::<Vec<_>>()
            .join(" ")
    }

    fn extras(rng: &mut Rng, m: &mut Vec<(String, J)>) {
        let all: [(&str, J); 6] = [
            ("x-big", J::Raw("123456789012345678901234567890")),
            ("x-f", J::Raw("1e5")),
            ("x-g", J::Raw("1.0")),
            (
                "x-h",
                J::Arr(vec![
                    J::Raw("-0.0"),
                    J::Raw("2E-3"),
                    J::Raw("-123456789012345678901234567890"),
                ]),
            ),
            ("x-u", s("é😀\u{1}")),
            ("x-o", obj(vec![("content", s("nested")), ("k", J::Raw("null"))])),
        ];
        for (k, v) in all {
            if rng.below(4) == 0 {
                m.push((k.into(), v));
            }
        }
    }

    /// An observation's members after its id: a content in one of several shapes, maybe an
    /// error flag, maybe extra fields.
    fn observation(rng: &mut Rng, m: &mut Vec<(String, J)>) {
        match rng.below(6) {
            0 => {}
            1 => m.push((
                "content".into(),
                J::Arr(vec![obj(vec![("type", s("text")), ("text", J::Str(words(rng)))])]),
            )),
            2 => {
                m.push(("x".into(), J::Raw("true")));
                m.push(("content".into(), J::Str(words(rng))));
            }
            3 => m.push(("content".into(), J::Raw("123456789012345678901234567890"))),
            _ => m.push(("content".into(), J::Str(words(rng)))),
        }
        match rng.below(4) {
            0 => m.push(("is_error".into(), J::Raw("true"))),
            1 => m.push(("is_error".into(), J::Raw("false"))),
            _ => {}
        }
        extras(rng, m);
    }

    /// A trajectory of `turns` tool-calling turns of 1 to 3 parallel calls, some never
    /// answered, as a document (an array, or an object with "messages").
    pub fn trajectory(rng: &mut Rng, anthropic: bool, turns: usize) -> J {
        let mut msgs = Vec::new();
        let mut first = vec![
            ("role".to_string(), s("user")),
            ("content".to_string(), J::Str(words(rng))),
        ];
        extras(rng, &mut first);
        msgs.push(J::Obj(first, None));
        for t in 0..turns {
            let calls: Vec<(String, &str, String)> = (0..1 + rng.below(3))
                .map(|k| {
                    let args = format!(
                        "{{\"q\":\"{}\",\"n\":123456789012345678901234567890}}",
                        rng.below(100)
                    );
                    (format!("c{t}.{k}é"), TOOLS[rng.below(TOOLS.len())], args)
                })
                .collect();
            let answered: Vec<bool> = calls.iter().map(|_| rng.below(8) != 0).collect();
            if anthropic {
                let mut blocks = Vec::new();
                if rng.below(2) == 0 {
                    blocks.push(obj(vec![("type", s("text")), ("text", J::Str(words(rng)))]));
                }
                for (id, tool, _) in &calls {
                    blocks.push(obj(vec![
                        ("type", s("tool_use")),
                        ("id", J::Str(id.clone())),
                        ("name", s(tool)),
                        ("input", obj(vec![("q", s("v")), ("n", J::Raw("1.0"))])),
                    ]));
                }
                let mut a = vec![
                    ("role".to_string(), s("assistant")),
                    ("content".to_string(), J::Arr(blocks)),
                ];
                extras(rng, &mut a);
                msgs.push(J::Obj(a, None));
                let m = msgs.len();
                let mut results = Vec::new();
                for ((id, _, _), ok) in calls.iter().zip(&answered) {
                    if *ok {
                        let mut r = vec![
                            ("type".to_string(), s("tool_result")),
                            ("tool_use_id".to_string(), J::Str(id.clone())),
                        ];
                        observation(rng, &mut r);
                        let b = results.len();
                        results.push(J::Obj(
                            r,
                            Some(Loc {
                                message: m,
                                block: Some(b),
                            }),
                        ));
                    }
                }
                if !results.is_empty() {
                    msgs.push(J::Obj(
                        vec![("role".into(), s("user")), ("content".into(), J::Arr(results))],
                        None,
                    ));
                }
            } else {
                let list = calls
                    .iter()
                    .map(|(id, tool, args)| {
                        obj(vec![
                            ("id", J::Str(id.clone())),
                            ("type", s("function")),
                            (
                                "function",
                                obj(vec![("name", s(tool)), ("arguments", J::Str(args.clone()))]),
                            ),
                        ])
                    })
                    .collect();
                let mut a = vec![
                    ("role".to_string(), s("assistant")),
                    ("content".to_string(), J::Raw("null")),
                    ("tool_calls".to_string(), J::Arr(list)),
                ];
                extras(rng, &mut a);
                msgs.push(J::Obj(a, None));
                for ((id, _, _), ok) in calls.iter().zip(&answered) {
                    if *ok {
                        let mut r = vec![
                            ("role".to_string(), s("tool")),
                            ("tool_call_id".to_string(), J::Str(id.clone())),
                        ];
                        observation(rng, &mut r);
                        let m = msgs.len();
                        msgs.push(J::Obj(
                            r,
                            Some(Loc {
                                message: m,
                                block: None,
                            }),
                        ));
                    }
                }
            }
        }
        match rng.below(3) {
            0 => J::Arr(msgs),
            1 => obj(vec![
                ("model", s("m")),
                ("messages", J::Arr(msgs)),
                ("z", J::Raw("-12.5e-3")),
            ]),
            _ => obj(vec![
                ("t", J::Raw("0.1")),
                ("messages", J::Arr(msgs)),
                ("m", J::Arr(vec![])),
            ]),
        }
    }
}

fn set_content(doc: &mut Value, loc: ctxprune::mask::Loc, text: &str) {
    let msgs = if doc.is_array() { doc } else { &mut doc["messages"] };
    let node = match loc.block {
        None => &mut msgs[loc.message],
        Some(b) => &mut msgs[loc.message]["content"][b],
    };
    node["content"] = Value::from(text);
}

fn generated_config(rng: &mut ctxprune::rng::Rng) -> MaskConfig {
    MaskConfig {
        window: rng.below(4),
        keep_errors: rng.below(2) == 0,
        keep_first: rng.below(4) == 0,
        step: 1 + rng.below(3),
        placeholder: [
            ctxprune::mask::masker::DEFAULT_PLACEHOLDER,
            "<{tool}|{args}|{tokens}>",
            "{lines}:{tokens}:{tool} {}",
        ][rng.below(3)]
        .into(),
        ..MaskConfig::default()
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

    /// (a) masking twice is masking once, byte for byte; (b) only observation contents
    /// change; (c) every byte outside the replaced contents is the input's.
    #[test]
    fn masking_is_idempotent_and_changes_only_masked_contents(
        seed in 0u64..u64::MAX,
        anthropic in proptest::bool::ANY,
        turns in 0usize..7,
        given in proptest::bool::ANY,
    ) {
        let mut rng = ctxprune::rng::Rng::new(seed);
        let doc = generated::trajectory(&mut rng, anthropic, turns);
        let (text, written) = generated::text(&doc, &mut rng);
        let format = given.then_some(if anthropic { Format::Anthropic } else { Format::OpenAi });
        let m = masker(generated_config(&mut rng));
        let traj = Trajectory::parse(&text, format).unwrap();
        let (edits, _) = m.plan(&traj);
        let mut session = m.session();
        let mut t = traj.clone();
        let s1 = session.mask(&mut t);
        let once = t.to_json();

        // (c): the input with exactly the planned contents replaced, where the generator
        // wrote them (an absent content is inserted before the closing brace).
        let mut cuts: Vec<(usize, usize, String)> = edits
            .iter()
            .map(|(loc, ph)| {
                let (content, close, empty) = written[loc].clone();
                let js = Value::from(ph.as_str()).to_string();
                match content {
                    Some(r) => (r.start, r.end, js),
                    None => (close, close, format!("{}\"content\":{js}", if empty { "" } else { "," })),
                }
            })
            .collect();
        cuts.sort_by_key(|c| c.0);
        let mut want = String::new();
        let mut from = 0;
        for (a, b, with) in cuts {
            want.push_str(&text[from..a]);
            want.push_str(&with);
            from = b;
        }
        want.push_str(&text[from..]);
        proptest::prop_assert_eq!(&once, &want);

        // (b): as JSON, the output is the input with the masked contents replaced.
        let mut input: Value = serde_json::from_str(&text).unwrap();
        for (loc, ph) in &edits {
            set_content(&mut input, *loc, ph);
        }
        let output: Value = serde_json::from_str(&once).unwrap();
        proptest::prop_assert_eq!(input, output);

        // (a): again, from the text and in place with the same session.
        let mut again = Trajectory::parse(&once, format).unwrap();
        let s2 = m.mask(&mut again);
        proptest::prop_assert_eq!(&again.to_json(), &once);
        proptest::prop_assert_eq!(
            (s2.observations_masked, s2.observations_kept),
            (s1.observations_masked, s1.observations_kept)
        );
        session.mask(&mut t);
        proptest::prop_assert_eq!(&t.to_json(), &once);
    }
}

/// Arbitrary JSON, with the keys and values trajectories use, up to depth 4.
fn arbitrary_json() -> impl proptest::strategy::Strategy<Value = Value> {
    use proptest::prelude::*;
    let word = prop::sample::select(vec![
        "assistant",
        "user",
        "tool",
        "system",
        "tool_use",
        "tool_result",
        "text",
        "function",
        "a",
        "b",
        "",
    ]);
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        (-1e6f64..1e6).prop_map(Value::from),
        word.prop_map(Value::from),
        "\\PC{0,6}".prop_map(Value::from),
    ];
    let key = prop::sample::select(vec![
        "role",
        "content",
        "tool_calls",
        "tool_call_id",
        "type",
        "id",
        "name",
        "function",
        "arguments",
        "input",
        "tool_use_id",
        "is_error",
        "messages",
        "text",
        "x",
    ]);
    leaf.prop_recursive(4, 64, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((key.clone(), inner), 0..7)
                .prop_map(|kv| { Value::Object(kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect()) }),
        ]
    })
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]

    /// (d) Parsing and masking any JSON never panics: it is an error, or output that is
    /// JSON and stable under a second pass. Extending with any messages never panics and,
    /// when refused, leaves the trajectory as it was.
    #[test]
    fn parse_and_mask_never_panic_on_arbitrary_json(v in arbitrary_json(), wrap in 0usize..3, window in 0usize..2) {
        let doc = match wrap {
            0 => v.clone(),
            1 => json!({"messages": v.clone()}),
            _ => json!([v.clone()]),
        };
        let text = doc.to_string();
        let m = masker(MaskConfig { window, keep_errors: false, ..MaskConfig::default() });
        for f in [None, Some(Format::OpenAi), Some(Format::Anthropic)] {
            if let Ok(mut t) = Trajectory::parse(&text, f) {
                m.mask(&mut t);
                let once = t.to_json();
                let _: Value = serde_json::from_str(&once).unwrap();
                let mut again = Trajectory::parse(&once, f).unwrap();
                m.mask(&mut again);
                proptest::prop_assert_eq!(again.to_json(), once);
            }
            let mut t = Trajectory::parse(&openai().to_string(), None).unwrap();
            let before = (t.to_json(), t.turns().to_vec());
            let new = match &v { Value::Array(a) => a.clone(), other => vec![other.clone()] };
            match t.extend(new) {
                Ok(()) => { m.mask(&mut t); let _: Value = serde_json::from_str(&t.to_json()).unwrap(); }
                Err(_) => proptest::prop_assert_eq!((t.to_json(), t.turns().to_vec()), before),
            }
        }
    }
}
