//! Observation masking at agent scale: a 500-turn trajectory with 1,000 observations of
//! about 2,000 o200k tokens each. Measures the first full pass (every count exact and
//! new) and the re-plan after one more turn is appended, with earlier counts cached, as
//! an agent loop calls it. Run: `cargo bench --bench mask && python3 benches/medians.py`.

use criterion::{criterion_group, criterion_main, Criterion};
use ctxprune::mask::masker::{MaskConfig, Masker};
use ctxprune::mask::policy::MaskOptions;
use ctxprune::mask::{Format, Trajectory};
use ctxprune::rng::Rng;
use serde_json::{json, Value};
use std::hint::black_box;
use std::time::Duration;

const WORDS: [&str; 16] = [
    "retrieval",
    "agent",
    "context",
    "window",
    "token",
    "budget",
    "observation",
    "search",
    "result",
    "page",
    "latency",
    "cache",
    "summary",
    "evidence",
    "query",
    "report",
];

fn text(rng: &mut Rng, words: usize) -> String {
    (0..words)
        .map(|i| {
            if i % 12 == 11 {
                "\n"
            } else {
                WORDS[rng.below(WORDS.len())]
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn turn(rng: &mut Rng, t: usize) -> Vec<Value> {
    let ids = [format!("c{t}a"), format!("c{t}b")];
    let mut m = vec![json!({"role": "assistant", "content": null, "tool_calls": [
        {"id": ids[0], "type": "function", "function": {"name": "search", "arguments": format!("{{\"q\":\"topic {t}\"}}")}},
        {"id": ids[1], "type": "function", "function": {"name": "open", "arguments": format!("{{\"url\":\"https://example.org/{t}\"}}")}}]})];
    for id in ids {
        m.push(json!({"role": "tool", "tool_call_id": id, "content": text(rng, 1940)}));
    }
    m
}

fn benches(c: &mut Criterion) {
    let mut rng = Rng::new(1);
    let mut msgs = vec![
        json!({"role": "system", "content": "You are a research agent."}),
        json!({"role": "user", "content": "research"}),
    ];
    for t in 0..500 {
        msgs.extend(turn(&mut rng, t));
    }
    let next = turn(&mut rng, 500);
    let doc = Value::Array(msgs).to_string();
    let counter = ctxprune::tokens::counter("o200k_base").unwrap();
    let traj = Trajectory::parse(&doc, Some(Format::OpenAi)).unwrap();
    let mut g = c.benchmark_group("cpu");
    g.sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5));
    g.bench_function("mask_first_pass_500_turns_1000_obs_o200k", |b| {
        b.iter(|| {
            let m = Masker::new(MaskConfig::default(), counter.clone()).unwrap();
            black_box(m.plan(&traj))
        })
    });
    // Every policy: the paper's window, SWE-agent's polling, Anthropic's edit (from
    // scratch each request), and the cache-aware hold.
    let opts = |f: fn(&mut MaskOptions)| {
        let mut o = MaskOptions::default();
        f(&mut o);
        o.config().unwrap()
    };
    let policies = [
        ("mask_replan_after_one_more_turn_cached", MaskConfig::default()),
        (
            "mask_replan_swe_agent_polling",
            opts(|o| {
                o.preset = Some("swe-agent".into());
                o.step = Some(5);
            }),
        ),
        (
            "mask_replan_anthropic_edit",
            opts(|o| {
                o.edit = Some(serde_json::json!({"type": "clear_tool_uses_20250919",
                    "clear_at_least": {"type": "input_tokens", "value": 50000}, "clear_tool_inputs": true}));
            }),
        ),
        (
            "mask_replan_hold",
            opts(|o| {
                o.hold = Some(true);
                o.trigger_tokens = Some(100_000);
                o.clear_at_least = Some(50_000);
            }),
        ),
    ];
    for (name, cfg) in policies {
        let mut warm = Masker::new(cfg, counter.clone()).unwrap().session();
        let first = warm.plan(&traj).1;
        eprintln!("{name}: first pass {first:?}");
        g.bench_function(name, |b| {
            b.iter_batched(
                || (traj.clone(), next.clone()),
                // The loop keeps its trajectory: it is handed back, dropped outside the timing.
                |(mut t, n)| {
                    t.extend(n).unwrap();
                    let p = black_box(warm.plan(&t));
                    (t, p)
                },
                criterion::BatchSize::LargeInput,
            )
        });
    }
    g.finish();
}

criterion_group!(mask_benches, benches);
criterion_main!(mask_benches);
