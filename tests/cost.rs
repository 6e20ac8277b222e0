//! Cost accounting against App. G's published numbers and hand computations.

use ctxprune::cost::{
    effective_token_cost, heterogeneous_etc, ndcg_at_k, recall_at_k, window_plan, ModelShape,
};

fn config(dir: &std::path::Path, name: &str, body: &str) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, body).unwrap();
    p
}

const QWEN3_RERANKER: &str = r#"{"architectures": ["Qwen3ForCausalLM"], "hidden_act": "silu", "hidden_size": 1024,
 "intermediate_size": 3072, "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8,
 "use_sliding_window": false, "max_position_embeddings": 40960}"#;

fn gpt_oss_20b() -> String {
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
    assert_eq!(effective_token_cost(100.0, 50.0, 10.0, 0.3, 5.0), 165.0);
    assert_eq!(heterogeneous_etc(165.0, 100.0, 0.32), 197.0);
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

#[test]
fn cost_cli_prints_one_json_object() {
    let run = |args: &[&str]| {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_ctxprune"))
            .args(args)
            .output()
            .unwrap();
        (
            o.status.success(),
            String::from_utf8_lossy(&o.stdout).to_string(),
            String::from_utf8_lossy(&o.stderr).to_string(),
        )
    };
    let (ok, out, _) = run(&["cost", "plan", "--depth", "50"]);
    assert!(ok);
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(
        v["windows"],
        serde_json::json!([[30, 50], [20, 40], [10, 30], [0, 20]])
    );
    assert_eq!(v["duplication"], 1.6);
    let d = tempfile::tempdir().unwrap();
    let p = config(d.path(), "g.json", &gpt_oss_20b());
    let (ok, out, err) = run(&["cost", "flops", "--config", p.to_str().unwrap()]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert!((v["gflops_per_token"].as_f64().unwrap() - 7.947).abs() < 0.001);
    assert_eq!(v["per_layer"].as_array().unwrap().len(), 24);
    let (ok, out, _) = run(&[
        "cost",
        "etc",
        "--input-noncached",
        "100",
        "--input-cached",
        "50",
        "--output",
        "10",
    ]);
    assert!(ok);
    assert_eq!(out.trim(), r#"{"etc":165.0}"#);
    let (ok, out, err) = run(&["cost", "flops", "--hidden", "8"]);
    assert!(!ok && out.is_empty() && err.contains("--layers"), "{err}");
}
