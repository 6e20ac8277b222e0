//! The masking policies users state elsewhere (SWE-agent's polling, Anthropic's
//! `clear_tool_uses_20250919`, the cache-aware hold), each against a direct evaluation of
//! its definition on seeded random trajectories; `clear_tool_inputs`; and the property
//! every provider checks: masking never orphans a tool message, under any policy.

use ctxprune::mask::masker::{MaskConfig, Masker};
use ctxprune::mask::policy::MaskOptions;
use ctxprune::mask::{Format, Trajectory};
use ctxprune::rng::Rng;
use ctxprune::tokens::{Approx, TokenCounter};
use proptest::prelude::*;
use serde_json::{json, Value};
use std::sync::Arc;

const TOOLS: [&str; 3] = ["search", "open", "run"];

fn words(rng: &mut Rng, n: usize) -> String {
    const W: [&str; 8] = [
        "alpha", "beta", "gamma", "delta", "page", "result", "token", "cache",
    ];
    (0..n)
        .map(|_| W[rng.below(W.len())])
        .collect::<Vec<_>>()
        .join(" ")
}

/// A seeded trajectory: `turns` turns of 1–3 parallel calls (errors now and then), the
/// answers to a turn's calls in a shuffled order, maybe a pending last turn and a final
/// text. One call per turn when `single`.
fn trajectory(seed: u64, turns: usize, format: Format, single: bool) -> Value {
    let mut rng = Rng::new(seed);
    let mut m = vec![
        json!({"role": "system", "content": "You are a research agent."}),
        json!({"role": "user", "content": words(&mut rng, 6)}),
    ];
    let pending = rng.below(4) == 0;
    for t in 0..turns {
        let n = if single { 1 } else { 1 + rng.below(3) };
        let calls: Vec<(String, &str, String)> = (0..n)
            .map(|k| {
                let tool = TOOLS[rng.below(3)];
                (
                    format!("c{t}_{k}"),
                    tool,
                    format!("{{\"q\":\"{}\",\"n\":{}}}", words(&mut rng, 2), rng.below(100)),
                )
            })
            .collect();
        let mut order: Vec<usize> = (0..n).collect();
        for i in (1..n).rev() {
            order.swap(i, rng.below(i + 1));
        }
        let last = t + 1 == turns;
        let results: Vec<(usize, String, bool)> = order
            .iter()
            .map(|&k| {
                let len = 1 + rng.below(60);
                (k, words(&mut rng, len), rng.below(7) == 0)
            })
            .collect();
        match format {
            Format::OpenAi => {
                let tc: Vec<Value> = calls
                    .iter()
                    .map(|(id, tool, a)| json!({"id": id, "type": "function", "function": {"name": tool, "arguments": a}}))
                    .collect();
                m.push(json!({"role": "assistant", "content": if rng.below(2) == 0 { Value::Null } else { json!(words(&mut rng, 3)) }, "tool_calls": tc}));
                if !(last && pending) {
                    for (k, text, err) in &results {
                        let mut r = json!({"role": "tool", "tool_call_id": calls[*k].0, "content": text});
                        if *err {
                            r["is_error"] = json!(true);
                        }
                        m.push(r);
                    }
                }
            }
            Format::Anthropic => {
                let mut blocks = vec![json!({"type": "text", "text": words(&mut rng, 3)})];
                for (id, tool, a) in &calls {
                    let input: Value = serde_json::from_str(a).unwrap();
                    blocks.push(json!({"type": "tool_use", "id": id, "name": tool, "input": input}));
                }
                m.push(json!({"role": "assistant", "content": blocks}));
                if !(last && pending) {
                    let rs: Vec<Value> = results
                        .iter()
                        .map(|(k, text, err)| {
                            let content = if rng.below(2) == 0 { json!(text) } else { json!([{"type": "text", "text": text}]) };
                            let mut r = json!({"type": "tool_result", "tool_use_id": calls[*k].0, "content": content});
                            if *err {
                                r["is_error"] = json!(true);
                            }
                            r
                        })
                        .collect();
                    m.push(json!({"role": "user", "content": rs}));
                }
            }
        }
    }
    if !pending && rng.below(2) == 0 {
        m.push(json!({"role": "assistant", "content": words(&mut rng, 5)}));
    }
    Value::Array(m)
}

/// Violations of OpenAI's pairing rule, read off the JSON: every call id answered by one
/// tool message before the next assistant message, every tool message answering an open
/// call, arguments that are JSON text.
fn openai_violations(msgs: &[Value]) -> Vec<String> {
    let mut bad = Vec::new();
    let mut open: Vec<String> = Vec::new();
    for (i, m) in msgs.iter().enumerate() {
        match m["role"].as_str() {
            Some("assistant") => {
                if !open.is_empty() {
                    bad.push(format!("messages[{i}]: {open:?} unanswered"));
                }
                open.clear();
                for c in m["tool_calls"].as_array().into_iter().flatten() {
                    let id = c["id"].as_str().unwrap_or("").to_string();
                    if open.contains(&id) {
                        bad.push(format!("messages[{i}]: id {id} twice"));
                    }
                    open.push(id);
                    let a = c["function"]["arguments"].as_str();
                    if a.is_none_or(|a| serde_json::from_str::<Value>(a).is_err()) {
                        bad.push(format!("messages[{i}]: arguments not JSON text"));
                    }
                }
            }
            Some("tool") => {
                let id = m["tool_call_id"].as_str().unwrap_or("");
                match open.iter().position(|o| o == id) {
                    Some(p) => {
                        open.remove(p);
                    }
                    None => bad.push(format!("messages[{i}]: answers no open call")),
                }
            }
            _ => {}
        }
    }
    bad
}

/// Violations of Anthropic's: each `tool_use` answered once in the very next (user)
/// message, each `tool_result` answering a `tool_use` of the message before it, inputs
/// that are objects.
fn anthropic_violations(msgs: &[Value]) -> Vec<String> {
    let blocks = |m: &Value, ty: &str, key: &str| -> Vec<String> {
        m["content"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|b| b["type"] == ty)
            .map(|b| b[key].as_str().unwrap_or("").to_string())
            .collect()
    };
    let mut bad = Vec::new();
    for (i, m) in msgs.iter().enumerate() {
        let uses = blocks(m, "tool_use", "id");
        let results = blocks(m, "tool_result", "tool_use_id");
        for b in m["content"].as_array().into_iter().flatten() {
            if b["type"] == "tool_use" && !b["input"].is_object() {
                bad.push(format!("messages[{i}]: input not an object"));
            }
        }
        if !results.is_empty() {
            let prev = if i > 0 {
                blocks(&msgs[i - 1], "tool_use", "id")
            } else {
                Vec::new()
            };
            for r in &results {
                if !prev.contains(r) {
                    bad.push(format!(
                        "messages[{i}]: tool_result {r} answers no tool_use before it"
                    ));
                }
            }
        }
        if !uses.is_empty() && i + 1 < msgs.len() {
            let next = blocks(&msgs[i + 1], "tool_result", "tool_use_id");
            for u in &uses {
                if next.iter().filter(|n| *n == u).count() != 1 {
                    bad.push(format!("messages[{i}]: tool_use {u} not answered once next"));
                }
            }
        }
    }
    bad
}

/// What identifies each message for pairing: its role and the ids it carries, in order.
fn skeleton(msgs: &[Value]) -> Vec<(String, Vec<String>)> {
    msgs.iter()
        .map(|m| {
            let mut ids: Vec<String> = m["tool_calls"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|c| format!("call:{}:{}", c["id"], c["function"]["name"]))
                .collect();
            ids.extend(m["tool_call_id"].as_str().map(|s| format!("answer:{s}")));
            for b in m["content"].as_array().into_iter().flatten() {
                ids.push(format!("{}:{}:{}", b["type"], b["id"], b["tool_use_id"]));
            }
            (m["role"].to_string(), ids)
        })
        .collect()
}

/// A random policy, through the options every surface builds its configuration from.
fn policy(rng: &mut Rng) -> MaskOptions {
    let pick = |rng: &mut Rng, n: usize| rng.below(n);
    match pick(rng, 6) {
        0 => MaskOptions {
            edit: Some(json!({"type": "clear_tool_uses_20250919",
                "trigger": {"type": "input_tokens", "value": rng.below(300)},
                "keep": {"type": "tool_uses", "value": rng.below(5)},
                "clear_at_least": {"type": "input_tokens", "value": rng.below(80)},
                "exclude_tools": if rng.below(3) == 0 { json!(["open"]) } else { json!([]) },
                "clear_tool_inputs": rng.below(2) == 0})),
            ..MaskOptions::default()
        },
        1 => MaskOptions {
            preset: Some("swe-agent".into()),
            window: Some(rng.below(5)),
            step: Some(1 + rng.below(4)),
            ..MaskOptions::default()
        },
        _ => MaskOptions {
            window: Some(rng.below(6)),
            unit: Some(["turns", "tool_uses"][rng.below(2)].into()),
            anchor: Some(["window", "start"][rng.below(2)].into()),
            step: Some(1 + rng.below(4)),
            hold: Some(rng.below(2) == 0),
            trigger_tokens: (rng.below(2) == 0).then(|| rng.below(400)),
            clear_at_least: Some(if rng.below(2) == 0 { rng.below(100) } else { 0 }),
            clear_tool_inputs: Some(rng.below(2) == 0),
            keep_first: Some(rng.below(3) == 0),
            keep_errors: Some(rng.below(3) != 0),
            tools_keep: Some(if rng.below(4) == 0 {
                vec!["run".into()]
            } else {
                Vec::new()
            }),
            ..MaskOptions::default()
        },
    }
}

fn masked(doc: &Value, format: Format, cfg: MaskConfig) -> (Value, String) {
    let mut t = Trajectory::parse(&doc.to_string(), Some(format)).unwrap();
    Masker::new(cfg, Arc::new(Approx)).unwrap().mask(&mut t);
    let text = t.to_json();
    (serde_json::from_str(&text).expect("masked output is JSON"), text)
}

fn never_orphans(seed: u64, turns: usize, format: Format) {
    let doc = trajectory(seed, turns, format, false);
    let mut rng = Rng::new(seed ^ 0x5eed);
    let cfg = policy(&mut rng).config().unwrap();
    let (out, text) = masked(&doc, format, cfg.clone());
    let msgs = out.as_array().unwrap();
    let before = doc.as_array().unwrap();
    assert_eq!(
        msgs.len(),
        before.len(),
        "a message was added or removed: {cfg:?}"
    );
    assert_eq!(skeleton(msgs), skeleton(before), "roles or ids changed: {cfg:?}");
    let bad = match format {
        Format::OpenAi => openai_violations(msgs),
        Format::Anthropic => anthropic_violations(msgs),
    };
    assert!(bad.is_empty(), "{bad:?} under {cfg:?}");
    // What masking wrote is still a trajectory the masker (and the provider) reads, and
    // masking it again changes nothing.
    let mut again = Trajectory::parse(&text, Some(format)).expect("masked output parses");
    Masker::new(cfg.clone(), Arc::new(Approx))
        .unwrap()
        .mask(&mut again);
    if !cfg.hold && cfg.trigger_tokens.is_none() && cfg.clear_at_least == 0 {
        assert_eq!(again.to_json(), text, "masking twice changed it: {cfg:?}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 10_000,
        failure_persistence: None,
        rng_seed: proptest::test_runner::RngSeed::Fixed(20_261_203),
        ..ProptestConfig::default()
    })]

    /// OpenAI chat messages with parallel calls, every policy: no orphan, no reorder.
    #[test]
    fn openai_pairing_holds_under_every_policy(seed in any::<u64>(), turns in 1usize..14) {
        never_orphans(seed, turns, Format::OpenAi);
    }

    /// Anthropic messages, every policy: each tool_use still answered in the next turn.
    #[test]
    fn anthropic_pairing_holds_under_every_policy(seed in any::<u64>(), turns in 1usize..14) {
        never_orphans(seed, turns, Format::Anthropic);
    }
}

/// Which observations (trajectory order) a masked document shows as placeholders.
fn masked_set(out: &Value, format: Format) -> Vec<bool> {
    let mut v = Vec::new();
    for m in out.as_array().unwrap() {
        match format {
            Format::OpenAi if m["role"] == "tool" => {
                v.push(m["content"].as_str().unwrap().starts_with("[observation omitted"))
            }
            Format::Anthropic => {
                for b in m["content"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|b| b["type"] == "tool_result")
                {
                    v.push(
                        b["content"]
                            .as_str()
                            .is_some_and(|s| s.starts_with("[observation omitted")),
                    );
                }
            }
            _ => {}
        }
    }
    v
}

/// SWE-agent's `LastNObservations._get_omit_indices`, transcribed. Its history's
/// observations are the instance template (the task, added as an observation) and then
/// one per action; with N of them, `last_removed = max(0, (N // polling) * polling - n)`
/// and observations `1..last_removed` are omitted (never the template). Returns, per tool
/// result, whether it is omitted.
fn swe_agent_omits(tool_results: usize, n: usize, polling: usize) -> Vec<bool> {
    let observations = tool_results + 1;
    let last_removed = (observations / polling * polling).saturating_sub(n);
    (1..observations).map(|i| i < last_removed).collect()
}

#[test]
fn the_swe_agent_preset_omits_what_swe_agent_omits() {
    let mut checked = 0;
    for seed in 0..300u64 {
        let mut rng = Rng::new(seed);
        let turns = 1 + rng.below(25);
        let doc = trajectory(seed, turns, Format::OpenAi, true);
        // SWE-agent's history has an observation for every action: drop a pending call.
        let msgs = doc.as_array().unwrap();
        if msgs
            .iter()
            .rev()
            .find(|m| m["role"] != "assistant" || m["tool_calls"].is_array())
            .is_some_and(|m| m["role"] == "assistant")
        {
            continue;
        }
        let (n, polling) = (rng.below(6), 1 + rng.below(5));
        let cfg = MaskOptions {
            preset: Some("swe-agent".into()),
            window: Some(n),
            step: Some(polling),
            ..MaskOptions::default()
        }
        .config()
        .unwrap();
        let (out, _) = masked(&doc, Format::OpenAi, cfg);
        let got = masked_set(&out, Format::OpenAi);
        assert_eq!(
            got,
            swe_agent_omits(got.len(), n, polling),
            "seed {seed}: n {n}, polling {polling}"
        );
        checked += 1;
    }
    assert!(checked > 150, "{checked} trajectories checked");
}

/// Anthropic's edit, from its definition: the request's input tokens (every message as
/// sent) over `trigger` → the oldest tool results are cleared, all but the `keep` most
/// recent tool uses, excluded tools and (here, by the crate's default) errors never; if
/// that clears fewer than `clear_at_least` tokens, nothing is cleared.
fn anthropic_reference(
    doc: &Value,
    trigger: usize,
    keep: usize,
    at_least: usize,
    exclude: &[&str],
) -> Vec<bool> {
    let c = Approx;
    let msgs = doc.as_array().unwrap();
    let text = |m: &Value| -> String {
        let mut s = m["content"].as_str().map(str::to_string).unwrap_or_default();
        if let Some(tc) = m.get("tool_calls") {
            s.push_str(&tc.to_string());
        }
        s
    };
    let input: usize = msgs.iter().map(|m| c.count(&text(m))).sum();
    // Tool uses in order, with their answer's message (if any).
    let mut uses: Vec<(String, String)> = Vec::new();
    for m in msgs {
        for tc in m["tool_calls"].as_array().into_iter().flatten() {
            uses.push((
                tc["id"].as_str().unwrap().into(),
                tc["function"]["name"].as_str().unwrap().into(),
            ));
        }
    }
    let cut = uses.len().saturating_sub(keep);
    let answers: Vec<&Value> = msgs.iter().filter(|m| m["role"] == "tool").collect();
    let clear: Vec<bool> = answers
        .iter()
        .map(|a| {
            let id = a["tool_call_id"].as_str().unwrap();
            let pos = uses.iter().position(|u| u.0 == id).unwrap();
            pos < cut && !exclude.contains(&uses[pos].1.as_str()) && a["is_error"] != true
        })
        .collect();
    let cleared: usize = answers
        .iter()
        .zip(&clear)
        .filter(|(_, c)| **c)
        .map(|(a, _)| c.count(a["content"].as_str().unwrap()))
        .sum();
    if input > trigger && cleared >= at_least && cleared > 0 {
        clear
    } else {
        vec![false; answers.len()]
    }
}

#[test]
fn the_anthropic_edit_clears_what_its_definition_clears() {
    let mut active = 0;
    for seed in 0..400u64 {
        let mut rng = Rng::new(seed + 1000);
        let doc = trajectory(seed, 1 + rng.below(14), Format::OpenAi, false);
        let (trigger, keep, at_least) = (rng.below(600), rng.below(6), rng.below(150));
        let exclude: &[&str] = if rng.below(2) == 0 { &["open"] } else { &[] };
        let edit = json!({"type": "clear_tool_uses_20250919",
            "trigger": {"type": "input_tokens", "value": trigger}, "keep": {"type": "tool_uses", "value": keep},
            "clear_at_least": {"type": "input_tokens", "value": at_least}, "exclude_tools": exclude});
        let cfg = MaskConfig::from_edit(&edit).unwrap();
        let mut t = Trajectory::parse(&doc.to_string(), Some(Format::OpenAi)).unwrap();
        let stats = Masker::new(cfg, Arc::new(Approx)).unwrap().mask(&mut t);
        let out: Value = serde_json::from_str(&t.to_json()).unwrap();
        let got = masked_set(&out, Format::OpenAi);
        let want = anthropic_reference(&doc, trigger, keep, at_least, exclude);
        // The reference's clear_at_least compares the results' tokens; the masker's
        // compares the same (the placeholder's tokens are not subtracted there).
        assert_eq!(
            got, want,
            "seed {seed}: trigger {trigger} keep {keep} at least {at_least}"
        );
        assert_eq!(stats.cleared_tool_uses, want.iter().filter(|w| **w).count());
        // (A placeholder can be longer than a short result: then nothing counts as cleared.)
        assert_eq!(
            stats.cleared_input_tokens,
            stats.tokens_before.saturating_sub(stats.tokens_after)
        );
        active += usize::from(stats.cleared_tool_uses > 0);
    }
    assert!(active > 100, "only {active} trajectories cleared anything");
}

/// The cache-aware hold, from its definition: replay the requests one by one (each turn's
/// context), keeping the boundary until the context *as masked* exceeds the trigger and
/// moving it to the window's edge only if that clears at least `clear_at_least` more
/// tokens. The final request's boundary is the masked set.
fn hold_reference(doc: &Value, window: usize, trigger: usize, at_least: usize) -> Vec<bool> {
    let c = Approx;
    let msgs = doc.as_array().unwrap();
    let mut turn_msg = Vec::new();
    for (i, m) in msgs.iter().enumerate() {
        if m["tool_calls"].is_array() {
            turn_msg.push(i);
        }
    }
    let msg_tokens: Vec<usize> = msgs
        .iter()
        .map(|m| {
            let mut s = m["content"].as_str().map(str::to_string).unwrap_or_default();
            if let Some(tc) = m.get("tool_calls") {
                s.push_str(&tc.to_string());
            }
            c.count(&s)
        })
        .collect();
    // Per turn: tool results (message index, tokens, eligible).
    let mut obs: Vec<Vec<(usize, usize, bool)>> = vec![Vec::new(); turn_msg.len()];
    for (i, m) in msgs.iter().enumerate() {
        if m["role"] == "tool" {
            let t = turn_msg.iter().rposition(|&a| a < i).unwrap();
            obs[t].push((i, c.count(m["content"].as_str().unwrap()), m["is_error"] != true));
        }
    }
    let placeholder_tokens = |i: usize| -> usize {
        // The placeholder the masker writes for this result.
        let call = msgs[..i].iter().rev().find_map(|m| {
            m["tool_calls"]
                .as_array()
                .and_then(|tc| tc.iter().find(|c| c["id"] == msgs[i]["tool_call_id"]).cloned())
        });
        let call = call.unwrap();
        let text = msgs[i]["content"].as_str().unwrap();
        let args = call["function"]["arguments"].as_str().unwrap();
        c.count(&format!(
            "[observation omitted: {}({}) returned {} tokens, {} lines]",
            call["function"]["name"].as_str().unwrap(),
            args,
            c.count(text),
            text.lines().count()
        ))
    };
    let raw_before = |b: usize| -> usize { obs[..b].iter().flatten().filter(|o| o.2).map(|o| o.1).sum() };
    let net_before = |b: usize| -> i64 {
        obs[..b]
            .iter()
            .flatten()
            .filter(|o| o.2)
            .map(|o| o.1 as i64 - placeholder_tokens(o.0) as i64)
            .sum()
    };
    let mut b = 0;
    let times: Vec<(usize, usize)> = (0..turn_msg.len())
        .map(|i| (i, msg_tokens[..turn_msg[i]].iter().sum()))
        .chain(std::iter::once((turn_msg.len(), msg_tokens.iter().sum())))
        .collect();
    for (u, ctx) in times {
        let cand = u.saturating_sub(window);
        let masked = (ctx as i64 - net_before(b)).max(0) as usize;
        if cand > b && masked > trigger && raw_before(cand) - raw_before(b) >= at_least {
            b = cand;
        }
    }
    obs.iter()
        .enumerate()
        .flat_map(|(t, o)| o.iter().map(move |x| (t, x.0, x.2)))
        .collect::<Vec<_>>()
        .into_iter()
        .map(|(t, i, e)| (i, t < b && e))
        .collect::<std::collections::BTreeMap<_, _>>()
        .into_values()
        .collect()
}

#[test]
fn the_hold_moves_the_boundary_as_its_definition_does() {
    let mut moved_less = 0;
    for seed in 0..300u64 {
        let mut rng = Rng::new(seed + 7);
        let doc = trajectory(seed, 2 + rng.below(16), Format::OpenAi, false);
        let (window, trigger, at_least) = (rng.below(4), 50 + rng.below(400), rng.below(200));
        let opts = |hold| MaskOptions {
            window: Some(window),
            trigger_tokens: Some(trigger),
            clear_at_least: Some(at_least),
            hold: Some(hold),
            ..MaskOptions::default()
        };
        let (out, _) = masked(&doc, Format::OpenAi, opts(true).config().unwrap());
        let got = masked_set(&out, Format::OpenAi);
        assert_eq!(
            got,
            hold_reference(&doc, window, trigger, at_least),
            "seed {seed}: K {window} trigger {trigger} at least {at_least}"
        );
        let (plain, _) = masked(&doc, Format::OpenAi, opts(false).config().unwrap());
        moved_less += usize::from(got != masked_set(&plain, Format::OpenAi));
    }
    assert!(
        moved_less > 30,
        "the hold differed from masking from scratch on only {moved_less}"
    );
}

#[test]
fn clear_tool_inputs_clears_the_masked_calls_arguments_and_nothing_else() {
    for format in [Format::OpenAi, Format::Anthropic] {
        let doc = trajectory(5, 9, format, false);
        let cfg = MaskConfig {
            window: 3,
            clear_tool_inputs: true,
            keep_errors: false,
            ..MaskConfig::default()
        };
        let (out, text) = masked(&doc, format, cfg.clone());
        let (kept, _) = masked(
            &doc,
            format,
            MaskConfig {
                clear_tool_inputs: false,
                ..cfg.clone()
            },
        );
        let before = doc.as_array().unwrap();
        let mut cleared = 0;
        for (i, (m, k)) in out
            .as_array()
            .unwrap()
            .iter()
            .zip(kept.as_array().unwrap())
            .enumerate()
        {
            match format {
                Format::OpenAi => {
                    for (j, c) in m["tool_calls"].as_array().into_iter().flatten().enumerate() {
                        let id = &c["id"];
                        let answer = out.as_array().unwrap().iter().find(|r| &r["tool_call_id"] == id);
                        let is_masked = answer.is_some_and(|r| {
                            r["content"].as_str().unwrap().starts_with("[observation omitted")
                        });
                        let want = if is_masked {
                            json!("{}")
                        } else {
                            before[i]["tool_calls"][j]["function"]["arguments"].clone()
                        };
                        assert_eq!(c["function"]["arguments"], want, "messages[{i}].tool_calls[{j}]");
                        cleared += usize::from(is_masked);
                    }
                }
                Format::Anthropic => {
                    for (j, b) in m["content"].as_array().into_iter().flatten().enumerate() {
                        if b["type"] == "tool_use" {
                            let masked = out
                                .as_array()
                                .unwrap()
                                .iter()
                                .flat_map(|r| r["content"].as_array().into_iter().flatten())
                                .any(|r| {
                                    r["tool_use_id"] == b["id"]
                                        && r["content"]
                                            .as_str()
                                            .is_some_and(|s| s.starts_with("[observation omitted"))
                                });
                            let want = if masked {
                                json!({})
                            } else {
                                before[i]["content"][j]["input"].clone()
                            };
                            assert_eq!(b["input"], want, "messages[{i}].content[{j}]");
                            cleared += usize::from(masked);
                        }
                    }
                }
            }
            // Everything but call arguments and placeholders' {args} is as without clearing.
            if m["role"] != "assistant" && format == Format::OpenAi {
                let strip = |v: &Value| {
                    v["content"]
                        .as_str()
                        .map(|s| s.split('(').next().unwrap().to_string())
                };
                assert_eq!(strip(m), strip(k));
            }
        }
        assert!(cleared >= 3, "{format}: only {cleared} cleared");
        // The placeholder does not show the cleared arguments, and masking again changes
        // nothing.
        assert!(
            !text.contains("[observation omitted: search({\\\"q"),
            "{format}: arguments shown"
        );
        let mut again = Trajectory::parse(&text, Some(format)).unwrap();
        Masker::new(cfg, Arc::new(Approx)).unwrap().mask(&mut again);
        assert_eq!(again.to_json(), text, "{format}: masking twice changed it");
    }
}

#[test]
fn a_session_reuses_counts_only_for_the_history_it_saw() {
    // Two conversations of the same shape (lengths equal, texts not): a shared session
    // gives each what a fresh session gives it.
    let counter: Arc<dyn TokenCounter> = ctxprune::tokens::counter("o200k_base").unwrap();
    let cfg = MaskConfig {
        window: 1,
        trigger_tokens: Some(60),
        ..MaskConfig::default()
    };
    let m = Masker::new(cfg, counter).unwrap();
    let a = json!([{"role": "user", "content": "go"},
        {"role": "assistant", "tool_calls": [{"id": "x", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "x", "content": "aaaa aaaa aaaa aaaa aaaa aaaa aaaa aaaa aaaa aaaa aaaa aaaa"},
        {"role": "assistant", "tool_calls": [{"id": "y", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "y", "content": "ok"}]);
    let mut b = a.clone();
    let letters: Vec<String> = "abcdefghijklmnopqrstuvwxyz0123456789"
        .chars()
        .cycle()
        .take(30)
        .map(String::from)
        .collect();
    b[2]["content"] = json!(letters.join(" "));
    assert_eq!(
        a[2]["content"].as_str().unwrap().len(),
        b[2]["content"].as_str().unwrap().len()
    );
    let mut shared = m.session();
    for doc in [&a, &b, &a, &b] {
        let t = Trajectory::parse(&doc.to_string(), Some(Format::OpenAi)).unwrap();
        assert_eq!(shared.plan(&t), m.session().plan(&t));
    }
    // A trajectory extended in place, then another text equal to it up to the first
    // extension but not after (same lengths): counted afresh, not from the extension.
    let mut grown = Trajectory::parse(&a.to_string(), Some(Format::OpenAi)).unwrap();
    let mut shared = m.session();
    shared.plan(&grown);
    let more = |content: &str| {
        vec![
            json!({"role": "assistant", "tool_calls": [{"id": "z", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}),
            json!({"role": "tool", "tool_call_id": "z", "content": content}),
        ]
    };
    grown.extend(more("aaaaaaaa aaaaaaaa aaaaaaaa aaaaaaaa")).unwrap();
    assert_eq!(shared.plan(&grown), m.session().plan(&grown));
    let mut other = a.clone();
    other
        .as_array_mut()
        .unwrap()
        .extend(more("a a a a a a a a a a a a a a a a a a"));
    let other = Trajectory::parse(&other.to_string(), Some(Format::OpenAi)).unwrap();
    assert_eq!(shared.plan(&other), m.session().plan(&other));
    // Two clones of one parse, extended apart (same lengths, different texts): each
    // counted as what it holds.
    let base = Trajectory::parse(&a.to_string(), Some(Format::OpenAi)).unwrap();
    let mut s = m.session();
    for content in [
        "aaaaaaaa aaaaaaaa aaaaaaaa aaaaaaaa",
        "a a a a a a a a a a a a a a a a a a",
        "aaaaaaaa aaaaaaaa aaaaaaaa aaaaaaaa",
    ] {
        let mut c = base.clone();
        c.extend(more(content)).unwrap();
        assert_eq!(s.plan(&c), m.session().plan(&c), "{content}");
    }
    // Masked in place, then the original re-sent, then the masked one again: each counted
    // as what it now holds.
    let mut t = Trajectory::parse(&a.to_string(), Some(Format::OpenAi)).unwrap();
    let mut s = m.session();
    s.mask(&mut t);
    let fresh = Trajectory::parse(&a.to_string(), Some(Format::OpenAi)).unwrap();
    assert_eq!(s.plan(&fresh), m.session().plan(&fresh));
    assert_eq!(s.plan(&t), m.session().plan(&t));
    // A history re-sent with one more turn keeps its counts (and its answer).
    let mut longer = a.clone();
    longer
        .as_array_mut()
        .unwrap()
        .push(json!({"role": "assistant", "content": "done"}));
    let t = Trajectory::parse(&longer.to_string(), Some(Format::OpenAi)).unwrap();
    assert_eq!(shared.plan(&t), m.session().plan(&t));
}
