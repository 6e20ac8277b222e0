//! Cost accounting against App. G's published numbers and hand computations.

use ctxprune::cost::{
    effective_token_cost, heterogeneous_etc, ndcg_at_k, recall_at_k, window_plan, Activation, ModelShape,
    MAX_LAYERS, MAX_TOKENS, MAX_WIDTH, MAX_WINDOWS,
};
use proptest::prelude::*;
use std::path::Path;

fn config(dir: &std::path::Path, name: &str, body: &str) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, body).unwrap();
    p
}

const QWEN3_RERANKER: &str = r#"{"architectures": ["Qwen3ForCausalLM"], "hidden_act": "silu", "hidden_size": 1024,
 "intermediate_size": 3072, "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8,
 "use_sliding_window": false, "max_position_embeddings": 40960}"#;

pub fn gpt_oss_20b() -> String {
    let types: Vec<&str> = (0..24)
        .map(|i| {
            if i % 2 == 0 {
                "\"sliding_attention\""
            } else {
                "\"full_attention\""
            }
        })
        .collect();
    format!(
        r#"{{"architectures": ["GptOssForCausalLM"], "hidden_act": "silu", "hidden_size": 2880, "intermediate_size": 2880,
 "num_attention_heads": 64, "num_hidden_layers": 24, "num_key_value_heads": 8, "num_local_experts": 32,
 "num_experts_per_tok": 4, "sliding_window": 128, "layer_types": [{}]}}"#,
        types.join(", ")
    )
}

#[test]
fn app_g_numbers_reproduce_from_config_files() {
    let d = tempfile::tempdir().unwrap();
    let q = ModelShape::from_config(&config(d.path(), "q.json", QWEN3_RERANKER)).unwrap();
    let g = ModelShape::from_config(&config(d.path(), "g.json", &gpt_oss_20b())).unwrap();
    let (fq, fg) = (q.gflops_per_token(32_768), g.gflops_per_token(32_768));
    assert!((fq - 2.58).abs() < 0.005, "qwen3-reranker-0.6b: {fq}");
    assert!(
        (fg - 7.95).abs() < 0.005,
        "gpt-oss-20b: {fg} (App. G prints 7.96)"
    );
    assert!((fq / fg - 0.32).abs() < 0.01, "gamma {}", fq / fg);
    // Per layer by hand: qwen3 = 4·1024²·1.5 + 2·1024·32768 + 2·3·1024·3072.
    let per = q.flops_per_layer(32_768);
    assert_eq!(per.len(), 28);
    assert_eq!(
        per[0],
        4.0 * 1024.0 * 1024.0 * 1.5 + 2.0 * 1024.0 * 32768.0 + 6.0 * 1024.0 * 3072.0
    );
    // gpt-oss: sliding layers see W = 128, full ones T.
    let pg = g.flops_per_layer(32_768);
    assert!(pg[1] - pg[0] == 2.0 * 2880.0 * (32_768.0 - 128.0));
    // A GELU model with two matrices.
    let gelu = r#"{"hidden_act": "gelu_new", "hidden_size": 8, "intermediate_size": 32, "num_attention_heads": 2, "num_hidden_layers": 1}"#;
    let m = ModelShape::from_config(&config(d.path(), "gelu.json", gelu)).unwrap();
    assert_eq!(
        m.flops_per_layer(10),
        vec![4.0 * 64.0 * 2.0 + 2.0 * 8.0 * 10.0 + 2.0 * 2.0 * 8.0 * 32.0]
    );
    // Malformed configs name the field.
    let bad = config(d.path(), "bad.json", r#"{"hidden_size": 8}"#);
    assert!(ModelShape::from_config(&bad)
        .unwrap_err()
        .to_string()
        .contains("num_hidden_layers"));
}

#[test]
fn window_plan_etc_and_retrieval_metrics() {
    let (w, dup) = window_plan(50, 20, 10).unwrap();
    assert_eq!(w, vec![(30, 50), (20, 40), (10, 30), (0, 20)]);
    assert!((dup - 1.6).abs() < 1e-12);
    assert_eq!(window_plan(10, 20, 10).unwrap(), (vec![(0, 10)], 1.0));
    assert_eq!(window_plan(25, 20, 10).unwrap().0, vec![(5, 25), (0, 15)]);
    assert!(window_plan(50, 10, 20).is_err());
    assert!(window_plan(0, 20, 10).is_err());
    assert_eq!(effective_token_cost(100.0, 50.0, 10.0, 0.3, 5.0).unwrap(), 165.0);
    assert_eq!(heterogeneous_etc(165.0, 100.0, 0.32).unwrap(), 197.0);
    // NDCG@3 of ranking [1, 0, 2] with gains [3, 1, 0], linear gains (trec_eval):
    // (1/log2 2 + 3/log2 3) / (3 + 1/log2 3).
    let got = ndcg_at_k(&[1, 0, 2], &[3.0, 1.0, 0.0], 3);
    let want = (1.0 + 3.0 / 3f64.log2()) / (3.0 + 1.0 / 3f64.log2());
    assert!((got - want).abs() < 1e-12);
    assert_eq!(ndcg_at_k(&[0], &[0.0], 1), 0.0);
    assert_eq!(recall_at_k(&[2, 0, 1], &[3.0, 1.0, 0.0], 2), 0.5);
    // Repeats count once.
    assert_eq!(recall_at_k(&[0, 0], &[1.0, 1.0], 2), 0.5);
    assert!(ndcg_at_k(&[0, 0, 0], &[1.0, 1.0, 1.0], 3) <= 1.0);
}

/// The error text of `r`, which must be an error.
fn err<T: std::fmt::Debug>(r: ctxprune::Result<T>) -> String {
    r.unwrap_err().to_string()
}

/// A config.json text from `fields` (raw JSON values) on top of a small valid dense model.
fn json(fields: &[(&str, &str)]) -> String {
    let mut m: serde_json::Map<String, serde_json::Value> = serde_json::from_str(
        r#"{"hidden_act": "silu", "hidden_size": 8, "intermediate_size": 16,
            "num_attention_heads": 4, "num_hidden_layers": 3}"#,
    )
    .unwrap();
    for (k, v) in fields {
        m.insert(k.to_string(), serde_json::from_str(v).unwrap());
    }
    serde_json::Value::Object(m).to_string()
}

#[test]
fn shapes_beyond_the_limits_are_refused_before_anything_is_allocated() {
    // Before: a capacity-overflow panic, a 16 TB allocation abort, 43 s and 7.8 GB.
    for layers in [usize::MAX, 1_000_000_000_000, 100_000_000, MAX_LAYERS + 1, 0] {
        let e = err(ModelShape::dense(layers, 1024, 3072, 16, 16));
        assert!(
            e.contains("invalid layers") && e.contains("1..=100000") && e.contains(&layers.to_string()),
            "{e}"
        );
    }
    assert_eq!(
        ModelShape::dense(MAX_LAYERS, 8, 8, 2, 2).unwrap().layers.len(),
        MAX_LAYERS
    );
    for (i, name) in ["hidden", "ffn", "q_heads", "kv_heads"].iter().enumerate() {
        let mut a = [8, 8, 2, 2];
        a[i] = MAX_WIDTH + 1;
        if i == 2 {
            a[3] = 1; // kv-heads <= q-heads still holds.
        }
        let e = err(ModelShape::dense(2, a[0], a[1], a[2], a[3]));
        assert!(
            e.contains(&format!("invalid {name}: must be in 1..=1000000")),
            "{e}"
        );
    }
    assert!(err(ModelShape::dense(2, 8, 8, 2, 4)).contains("invalid kv_heads: 4 exceeds the 2 query heads"));
    let mut s = ModelShape::dense(4, 8, 8, 2, 2).unwrap();
    assert!(err(s.set_sliding(5, 10)).contains("invalid sliding_layers: 5 exceeds the 4 layers"));
    assert!(err(s.set_sliding(2, 0)).contains("invalid window"));
    assert!(err(s.set_sliding(2, MAX_TOKENS + 1)).contains("invalid window"));
    s.set_sliding(2, 10).unwrap();
    assert_eq!(s.layers, vec![None, None, Some(10), Some(10)]);
    s.set_sliding(0, 10).unwrap();
    assert_eq!(s.layers, vec![None; 4]);
    // A shape built by hand is checked by flops() (the unchecked formula stays as it was).
    let mut h = s.clone();
    h.experts_active = 0;
    assert!(err(h.flops(10)).contains("invalid experts_active"));
    h.experts_active = 1;
    h.layers[1] = Some(0);
    assert!(err(h.flops(10)).contains("invalid window: layer 1"));
    h.layers = vec![];
    assert!(err(h.flops(10)).contains("invalid layers"));
}

#[test]
fn flops_are_checked_and_match_the_formula() {
    let s = ModelShape::dense(3, 8, 16, 4, 2).unwrap();
    let f = s.flops(100).unwrap();
    assert_eq!(f.per_layer, s.flops_per_layer(100));
    assert_eq!(f.total, s.flops_per_layer(100).iter().sum::<f64>());
    assert!((f.total / 1e9 - s.gflops_per_token(100)).abs() < 1e-18);
    for t in [0, MAX_TOKENS + 1, usize::MAX] {
        let e = err(s.flops(t));
        assert!(e.contains("invalid context: must be in 1..=1000000000"), "{e}");
    }
    // The largest shape the limits allow is finite everywhere.
    let mut big = ModelShape::dense(MAX_LAYERS, MAX_WIDTH, MAX_WIDTH, MAX_WIDTH, MAX_WIDTH).unwrap();
    big.experts_active = MAX_WIDTH;
    let f = big.flops(MAX_TOKENS).unwrap();
    assert!(f.total.is_finite() && f.per_layer.iter().all(|x| x.is_finite()));
}

#[test]
fn config_errors_name_the_file_and_the_field() {
    let p = Path::new("dir/config.json");
    let parse = |fields: &[(&str, &str)]| ModelShape::from_json(&json(fields), p);
    assert_eq!(parse(&[]).unwrap(), ModelShape::dense(3, 8, 16, 4, 4).unwrap());
    // A present key of the wrong type is not "missing".
    for (v, shown) in [
        (r#""24""#, r#""24""#),
        ("-1", "-1"),
        ("2.5", "2.5"),
        ("true", "true"),
        ("[3]", "[3]"),
    ] {
        let e = err(parse(&[("num_hidden_layers", v)]));
        assert_eq!(
            e,
            format!("dir/config.json: \"num_hidden_layers\" is not a positive integer: {shown}")
        );
    }
    let e = err(parse(&[("num_hidden_layers", "0")]));
    assert_eq!(
        e,
        "dir/config.json: \"num_hidden_layers\" must be in 1..=100000, got 0"
    );
    let e = err(parse(&[("num_hidden_layers", "18446744073709551615")]));
    assert!(
        e.contains("\"num_hidden_layers\" must be in 1..=100000, got 18446744073709551615"),
        "{e}"
    );
    let e = err(parse(&[("num_hidden_layers", "1000000000000000000000000")]));
    assert!(
        e.contains("\"num_hidden_layers\" is not a positive integer: 1e+24"),
        "{e}"
    );
    for k in ["hidden_size", "intermediate_size", "num_attention_heads"] {
        let e = err(parse(&[(k, "1000001")]));
        assert!(e.contains(&format!("\"{k}\" must be in 1..=1000000")), "{e}");
    }
    // Invalid values name the config field, not a CLI flag.
    let e = err(parse(&[
        ("num_attention_heads", "16"),
        ("num_key_value_heads", "32"),
    ]));
    assert_eq!(
        e,
        "dir/config.json: \"num_key_value_heads\" = 32 exceeds \"num_attention_heads\" = 16"
    );
    let e = err(parse(&[("num_key_value_heads", "0")]));
    assert!(
        e.starts_with("dir/config.json: \"num_key_value_heads\" must be in"),
        "{e}"
    );
    let e = err(parse(&[("num_experts_per_tok", "\"2\"")]));
    assert!(
        e.contains("\"num_experts_per_tok\" is not a positive integer: \"2\""),
        "{e}"
    );
    let e = err(parse(&[("hidden_act", "3")]));
    assert!(e.contains("\"hidden_act\" is not a string: 3"), "{e}");
    let e = err(parse(&[("hidden_act", "\"relu\"")]));
    assert!(e.contains("\"hidden_act\" is \"relu\", not one of"), "{e}");
    let e = err(parse(&[("model_type", "1")]));
    assert!(e.contains("\"model_type\" is not a string"), "{e}");
    let e = err(parse(&[("layer_types", "\"full_attention\"")]));
    assert!(e.contains("\"layer_types\" is not an array"), "{e}");
    let e = err(parse(&[("layer_types", r#"["full_attention"]"#)]));
    assert!(
        e.contains("\"layer_types\" has 1 entries for \"num_hidden_layers\" = 3"),
        "{e}"
    );
    let e = err(parse(&[(
        "layer_types",
        r#"["full_attention", "chunked_attention", 1]"#,
    )]));
    assert!(e.contains("\"layer_types\"[1] is not"), "{e}");
    let e = err(parse(&[(
        "layer_types",
        r#"["full_attention", "sliding_attention", "full_attention"]"#,
    )]));
    assert!(
        e.contains("\"layer_types\"[1] is sliding_attention but \"sliding_window\""),
        "{e}"
    );
    let e = err(parse(&[("use_sliding_window", "\"no\"")]));
    assert!(e.contains("\"use_sliding_window\" is not true or false"), "{e}");
    // A sliding window with nothing saying which layers slide is refused, not ignored.
    let e = err(parse(&[("sliding_window", "4096")]));
    assert!(
        e.contains("\"sliding_window\" = 4096 but no \"layer_types\""),
        "{e}"
    );
    let e = err(parse(&[
        ("sliding_window", "4096"),
        ("use_sliding_window", "true"),
    ]));
    assert!(e.contains("\"sliding_window\" = 4096"), "{e}");
    assert_eq!(
        parse(&[("sliding_window", "4096"), ("use_sliding_window", "false")]).unwrap(),
        parse(&[]).unwrap()
    );
    // null is absent (HF writes null for unset options); a missing key is named.
    assert_eq!(
        parse(&[("sliding_window", "null"), ("num_key_value_heads", "null")]).unwrap(),
        parse(&[]).unwrap()
    );
    let e = err(parse(&[("hidden_size", "null")]));
    assert_eq!(e, "dir/config.json: missing \"hidden_size\" (a positive integer)");
    // Not an object, not JSON, deeply nested: errors, never a panic or a stack overflow.
    let e = err(ModelShape::from_json("[1, 2]", p));
    assert!(
        e.contains("dir/config.json: expected a JSON object, got an array"),
        "{e}"
    );
    // A repeated key is an error, not the last value silently winning.
    let dup = json(&[]).replacen('{', "{\"num_hidden_layers\": 200, ", 1);
    let e = err(ModelShape::from_json(&dup, p));
    assert!(e.contains("duplicate key \"num_hidden_layers\""), "{e}");
    assert!(err(ModelShape::from_json("", p)).contains("invalid JSON"));
    let deep = "[".repeat(100_000);
    assert!(err(ModelShape::from_json(&deep, p)).contains("invalid JSON"));
    // Long values are cut in the message, so the error stays short.
    let e = err(parse(&[("hidden_size", &format!("\"{}\"", "x".repeat(10_000)))]));
    assert!(e.len() < 200, "{e}");
    // A leading UTF-8 byte-order mark (Windows editors) is skipped.
    let bom = format!("\u{feff}{}", json(&[]));
    assert_eq!(ModelShape::from_json(&bom, p).unwrap(), parse(&[]).unwrap());
    let d = tempfile::tempdir().unwrap();
    let f = config(d.path(), "bom.json", &bom);
    assert_eq!(ModelShape::from_config(&f).unwrap(), parse(&[]).unwrap());
    // Gated GELU for gemma, plain GELU otherwise.
    let g = parse(&[
        ("hidden_act", "\"gelu_pytorch_tanh\""),
        ("model_type", "\"gemma2\""),
    ])
    .unwrap();
    assert_eq!(g.activation, Activation::SwiGlu);
    let g = parse(&[("hidden_activation", "\"gelu\"")]);
    assert_eq!(g.unwrap().activation, Activation::SwiGlu, "hidden_act wins");
    let g = ModelShape::from_json(
        &json(&[])
            .replace("hidden_act", "hidden_activation")
            .replace("silu", "gelu"),
        p,
    );
    assert_eq!(g.unwrap().activation, Activation::Gelu);
}

/// A JSON leaf a config field might hold, hostile or not.
fn leaf() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<u64>().prop_map(|v| v.to_string()),
        (0u64..200).prop_map(|v| v.to_string()),
        any::<i64>().prop_map(|v| v.to_string()),
        any::<f64>()
            .prop_filter("finite", |v| v.is_finite())
            .prop_map(|v| format!("{v:e}")),
        "[a-z_]{0,20}".prop_map(|s| format!("\"{s}\"")),
        Just("null".to_string()),
        Just("true".to_string()),
        Just("\"sliding_attention\"".to_string()),
        Just("\"gelu\"".to_string()),
        prop::collection::vec(
            prop_oneof![
                Just("\"full_attention\""),
                Just("\"sliding_attention\""),
                Just("1")
            ],
            0..8
        )
        .prop_map(|v| format!("[{}]", v.join(","))),
    ]
}

const KEYS: [&str; 14] = [
    "num_hidden_layers",
    "hidden_size",
    "intermediate_size",
    "moe_intermediate_size",
    "num_attention_heads",
    "num_key_value_heads",
    "num_experts_per_tok",
    "experts_per_token",
    "hidden_act",
    "hidden_activation",
    "model_type",
    "layer_types",
    "sliding_window",
    "use_sliding_window",
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// `from_json` never panics; what it accepts is a valid shape whose checked FLOPs are
    /// finite.
    #[test]
    fn from_json_never_panics(
        fields in prop::collection::vec((0..KEYS.len(), leaf()), 0..12),
        raw in ".{0,64}",
        t in 1usize..100_000,
    ) {
        let p = Path::new("fuzz.json");
        let _ = ModelShape::from_json(&raw, p);
        let body: Vec<String> = fields.iter().map(|(k, v)| format!("\"{}\": {v}", KEYS[*k])).collect();
        let text = format!("{{{}}}", body.join(", "));
        for text in [text.clone(), format!("\u{feff}{text}"), text[..text.len() / 2].to_string()] {
            if let Ok(s) = ModelShape::from_json(&text, p) {
                prop_assert!(s.validate().is_ok());
                let f = s.flops(t).unwrap();
                prop_assert!(f.total.is_finite());
            }
        }
        // Every valid base with one field replaced: Ok or an error naming the file.
        let (k, v) = fields.first().cloned().unwrap_or((0, "1".into()));
        if let Err(e) = ModelShape::from_json(&json(&[(KEYS[k], &v)]), p) {
            prop_assert!(e.to_string().starts_with("fuzz.json: "), "{}", e);
        }
    }

    /// The window count computed up front is the number of windows the plan has, the
    /// windows cover the depth back to front, and the duplication is documents fed / depth.
    #[test]
    fn window_plan_counts_before_it_builds(depth in 1usize..300, window in 1usize..40, stride_frac in 0.0f64..1.0) {
        let stride = 1 + ((window - 1) as f64 * stride_frac) as usize;
        let (w, dup) = window_plan(depth, window, stride).unwrap();
        let want = if depth <= window { 1 } else { 1 + (depth - window).div_ceil(stride) };
        prop_assert_eq!(w.len(), want);
        prop_assert_eq!(w[0].1, depth);
        prop_assert_eq!(w.last().unwrap().0, 0);
        for x in w.windows(2) {
            prop_assert_eq!(x[0].1 - x[1].1, stride);
        }
        let fed: usize = w.iter().map(|(s, e)| e - s).sum();
        prop_assert_eq!(dup, fed as f64 / depth as f64);
    }
}

#[test]
fn window_plans_beyond_the_limit_are_refused_before_they_are_built() {
    let e = err(window_plan(usize::MAX, 20, 10));
    assert!(
        e.contains("invalid depth:") && e.contains("more than the 100000 allowed"),
        "{e}"
    );
    // The largest plan allowed is built; one more window is refused.
    let depth = 20 + (MAX_WINDOWS - 1) * 10;
    assert_eq!(window_plan(depth, 20, 10).unwrap().0.len(), MAX_WINDOWS);
    assert!(err(window_plan(depth + 1, 20, 10)).contains(&format!("needs {} windows", MAX_WINDOWS + 1)));
    // A window as deep as the ranking is one window, however large.
    assert_eq!(
        window_plan(usize::MAX, usize::MAX, 1).unwrap(),
        (vec![(0, usize::MAX)], 1.0)
    );
    assert!(err(window_plan(50, 0, 0)).contains("invalid window: must be positive"));
    assert!(err(window_plan(50, 20, 0)).contains("invalid stride: must be positive"));
    assert!(err(window_plan(0, 20, 10)).contains("invalid depth: must be positive"));
    assert!(err(window_plan(50, 10, 20)).contains("invalid stride: 20 exceeds the window 10"));
}

#[test]
fn etc_is_finite_or_an_error_naming_the_inputs() {
    let e = err(effective_token_cost(1e308, 1e308, 1e308, 0.3, 1e308));
    assert_eq!(
        e,
        "invalid etc: input_noncached + alpha * input_cached + beta * output is not a finite \
         number for input_noncached = 1e308, input_cached = 1e308, output = 1e308, alpha = 0.3, beta = 1e308"
    );
    for (i, name) in ["input_noncached", "input_cached", "output", "alpha", "beta"]
        .iter()
        .enumerate()
    {
        for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -1.0, -1e300] {
            let mut a = [1.0; 5];
            a[i] = bad;
            let e = err(effective_token_cost(a[0], a[1], a[2], a[3], a[4]));
            assert!(
                e.starts_with(&format!("invalid {name}: must be finite and >= 0, got ")),
                "{e}"
            );
            assert!(!e.contains("000000000"), "{e}");
        }
    }
    assert!(
        err(heterogeneous_etc(1e308, 1e308, 1e10)).contains("invalid etc: etc_agent + gamma * etc_reranker")
    );
    assert!(err(heterogeneous_etc(1.0, 1.0, f64::NAN)).contains("invalid gamma"));
    assert_eq!(effective_token_cost(0.0, 0.0, 0.0, 0.0, 0.0).unwrap(), 0.0);
}

#[test]
fn eval_refuses_what_it_used_to_clamp_or_wrap() {
    use ctxprune::rerank::eval;
    let e = err(eval::check(1, 1, 300, &[1_000_000_000], &[10]));
    assert_eq!(
        e,
        "invalid budgets: element 0 (1000000000) is outside 0..=300 (the pool has 300 documents)"
    );
    let e = err(eval::run(1, 1, 300, &[5, 301], &[3], &mut |_, _| {
        panic!("no work before the check")
    }));
    assert!(e.contains("invalid budgets: element 1 (301)"), "{e}");
    assert!(err(eval::check(1, 1, 300, &[5], &[0]))
        .contains("invalid capacities: element 0 (0) is outside 1..=300"));
    assert!(err(eval::check(1, 1, 300, &[5], &[301])).contains("invalid capacities"));
    assert!(err(eval::check(1, 1, 300, &[5, 6, 5], &[3]))
        .contains("invalid budgets: element 2 (5) repeats element 0"));
    assert!(err(eval::check(1, 1, 300, &[], &[3])).contains("invalid budgets: is empty"));
    assert!(err(eval::check(0, 1, 300, &[5], &[3])).contains("invalid problems: must be at least 1"));
    assert!(err(eval::check(1, 1, 0, &[0], &[1])).contains("invalid n"));
    // Seeds: checked, not wrapped to 0.
    let e = err(eval::seeds(u64::MAX, 2));
    assert!(
        e.contains("invalid seed: 18446744073709551615 + 2 problems - 1 exceeds the largest seed"),
        "{e}"
    );
    assert_eq!(eval::seeds(u64::MAX, 1).unwrap(), u64::MAX..=u64::MAX);
    assert_eq!(eval::seeds(5, 3).unwrap(), 5..=7);
    assert_eq!(*eval::seeds(1, usize::MAX).unwrap().end(), u64::MAX);
    assert!(err(eval::seeds(2, usize::MAX)).contains("invalid seed"));
    // A budget of 0 (no oracle calls) and the whole pool are in range.
    eval::check(1, 1, 300, &[0, 300], &[300]).unwrap();
    // Steps: one per method run, the per-problem callback after each problem.
    let mut steps = vec![];
    let cells = eval::run_steps(2, 3, 200, &[0, 4], &[3], &mut |s| steps.push(*s)).unwrap();
    let per = 2 * eval::variants().len();
    assert_eq!(steps.len(), 2 * per);
    assert!(steps
        .iter()
        .enumerate()
        .all(|(i, s)| s.run == i % per + 1 && s.runs == per && s.problem == i / per + 1));
    let mut seen = vec![];
    assert_eq!(
        eval::run(2, 3, 200, &[0, 4], &[3], &mut |p, n| seen.push((p, n))).unwrap(),
        cells
    );
    assert_eq!(seen, vec![(1, 2), (2, 2)]);
}

#[test]
fn plot_renders_fully_and_reports_write_errors() {
    use ctxprune::rerank::{eval, plot};
    assert!(err(plot::render(&[])).contains("cells is empty"));
    let cells = eval::run(1, 3, 200, &[2, 4], &[3], &mut |_, _| {}).unwrap();
    let png = plot::render(&cells).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    assert_eq!(
        &png[png.len() - 8..png.len() - 4],
        b"IEND",
        "the closing chunk is written"
    );
    let mut bad = cells.clone();
    bad[3].ce_ncg = f64::NAN;
    assert!(err(plot::render(&bad)).contains("invalid cells[3]"));
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("a.png");
    plot::plot(&cells, &p).unwrap();
    assert_eq!(std::fs::read(&p).unwrap(), png);
    // A write error is returned, not lost when a buffer is dropped.
    if Path::new("/dev/full").exists() {
        let e = err(plot::plot(&cells, Path::new("/dev/full")));
        assert!(e.starts_with("/dev/full: "), "{e}");
    }
    let e = err(plot::plot(&cells, &d.path().join("no/such/dir.png")));
    assert!(e.contains("dir.png"), "{e}");
}
