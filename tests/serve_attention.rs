//! Attention and the probe over HTTP: `POST /v1/attention/segment` with a tokenizer the
//! server loaded at start, and `POST /v1/probe` with the trajectories inline, each equal
//! to the library's (and so the CLI's) answer on the same input, and every bad input
//! refused naming its field.

use crate::attention_segment::PROMPT;
use crate::serve::{post, quiet, Server};
use ctxprune::attention::segment;
use ctxprune::serve::ServeConfig;
use ctxprune::tokens::HfTokenizer;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::Arc;

const TOKENIZER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/attention/tokenizer.json");

fn probe_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/probe/queries")
}

fn with_tokenizer() -> ServeConfig {
    ServeConfig {
        tokenizers: vec![(
            "qwen-test".into(),
            Arc::new(HfTokenizer::load(Path::new(TOKENIZER)).unwrap()),
        )],
        ..quiet()
    }
}

#[test]
fn segment_over_http_equals_the_library() {
    let s = Server::start(with_tokenizer());
    let tk = HfTokenizer::load(Path::new(TOKENIZER)).unwrap();
    let want = segment::segment(PROMPT, &segment::Template::qwen(), tk.tokenizer()).unwrap();
    let want = serde_json::to_value(&want).unwrap();
    // One tokenizer loaded: the request need not name it.
    for body in [
        json!({"prompt": PROMPT}),
        json!({"prompt": PROMPT, "tokenizer": "qwen-test", "template": "qwen"}),
    ] {
        let (st, got) = post(&s, "/v1/attention/segment", body);
        assert_eq!(st, 200, "{got}");
        assert_eq!(got, want);
    }
    assert!(want["steps"].as_array().is_some_and(|a| !a.is_empty()), "{want}");
    for (body, status, needle) in [
        (
            json!({"prompt": PROMPT, "tokenizer": "o200k"}),
            422,
            "unknown tokenizer 'o200k' (this server has: qwen-test)",
        ),
        (json!({"prompt": PROMPT, "template": "llama"}), 422, "llama"),
        (json!({}), 422, "invalid prompt"),
        (json!({"prompt": 3}), 422, "invalid prompt"),
        (json!({"prompt": PROMPT, "prompts": 1}), 422, "prompts"),
        // A prompt the template cannot read is refused naming the prompt.
        (
            json!({"prompt": "<|im_start|>user\nno end"}),
            422,
            "invalid prompt",
        ),
    ] {
        let (st, got) = post(&s, "/v1/attention/segment", body.clone());
        assert_eq!(st, status, "{body}: {got}");
        let e = got["error"].as_str().unwrap_or_default();
        assert!(e.contains(needle), "{body}: {e}");
    }
    // A server with no tokenizer says how to load one.
    let bare = Server::start(quiet());
    let (st, got) = post(&bare, "/v1/attention/segment", json!({"prompt": PROMPT}));
    assert_eq!(st, 422);
    assert!(
        got["error"].as_str().unwrap().contains("--tokenizer NAME=FILE"),
        "{got}"
    );
}

/// The fixture directory's labels, each with its trajectory inline: the request form.
fn inline_queries() -> Vec<Value> {
    let dir = probe_dir();
    let text = std::fs::read_to_string(dir.join("labels.jsonl")).unwrap();
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let mut v: Value = serde_json::from_str(l).unwrap();
            let file = v["trajectory"].as_str().unwrap().to_string();
            let t: Value = serde_json::from_str(&std::fs::read_to_string(dir.join(file)).unwrap()).unwrap();
            v["trajectory"] = t;
            v
        })
        .collect()
}

#[test]
fn probe_over_http_equals_the_cli_report() {
    let s = Server::start(with_tokenizer());
    let dir = probe_dir();
    let labels = dir.join("labels.jsonl");
    for (tokenizer, opts) in [
        ("o200k_base", ctxprune::probe::Options::default()),
        (
            "qwen-test",
            ctxprune::probe::Options {
                prefixes: 3,
                folds: 3,
                seed: 11,
                ..Default::default()
            },
        ),
    ] {
        let counter: Arc<dyn ctxprune::tokens::TokenCounter> = if tokenizer == "qwen-test" {
            Arc::new(HfTokenizer::load(Path::new(TOKENIZER)).unwrap())
        } else {
            ctxprune::tokens::counter(tokenizer).unwrap()
        };
        let report = ctxprune::probe::probe(&dir, &labels, &opts, counter.as_ref()).unwrap();
        let mut want = serde_json::to_value(&report).unwrap();
        // The directory holds a file no label names; a request has no directory.
        assert_eq!(want["unlabelled"], json!(["extra.json"]));
        want["unlabelled"] = json!([]);
        let (st, got) = post(
            &s,
            "/v1/probe",
            json!({
                "queries": inline_queries(), "prefixes": opts.prefixes, "folds": opts.folds,
                "seed": opts.seed, "tokenizer": tokenizer,
            }),
        );
        assert_eq!(st, 200, "{got}");
        assert_eq!(got, want, "tokenizer {tokenizer}");
    }
}

#[test]
fn probe_over_http_refuses_bad_queries_by_name() {
    let s = Server::start(quiet());
    let good = inline_queries();
    let with = |i: usize, key: &str, v: Value| {
        let mut q = good.clone();
        q[i][key] = v;
        json!({ "queries": q })
    };
    let mut dup = good.clone();
    dup[4]["id"] = dup[1]["id"].clone();
    let mut unknown = good.clone();
    unknown[2]["golden"] = json!([]);
    for (body, needle) in [
        (json!({}), "invalid queries: required"),
        (json!({"queries": []}), "invalid queries: empty"),
        (json!({"queries": {"id": "q"}}), "expected an array"),
        (
            json!({ "queries": unknown }),
            "invalid queries[2]: unknown field \"golden\"",
        ),
        (
            json!({ "queries": dup }),
            "invalid queries[4]: field \"id\": 'q02' is also the id of queries[1]",
        ),
        (
            with(3, "rescued", json!("yes")),
            "invalid queries[3]: field \"rescued\": expected true or false",
        ),
        (
            with(0, "gold", json!(["https://a.example/", 7])),
            "invalid queries[0]: field \"gold\"[1]",
        ),
        (
            with(5, "trajectory", json!("q06.json")),
            "invalid queries[5]: field \"trajectory\"",
        ),
        (
            with(5, "trajectory", json!([7])),
            "invalid queries[5]: field \"trajectory\"",
        ),
        (json!({"queries": good.clone(), "folds": 1}), "invalid folds"),
        (
            json!({"queries": good.clone(), "prefixes": 0}),
            "invalid prefixes",
        ),
        (
            json!({"queries": good.clone(), "tokenizer": "gpt2"}),
            "unknown tokenizer 'gpt2'",
        ),
        (json!({"queries": good[..2].to_vec()}), "invalid folds"),
    ] {
        let (st, got) = post(&s, "/v1/probe", body.clone());
        assert_eq!(st, 422, "{body}");
        let e = got["error"].as_str().unwrap_or_default();
        assert!(e.contains(needle), "want {needle:?} in {e:?}");
    }
}
