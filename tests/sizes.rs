//! The size guard (issue 23): every count read from a file or a flag is checked before
//! anything is sized by it, and products of counts against one byte budget; values that
//! would overflow (masses, token counts) are refused naming the file, the line and the
//! value; options that contradict each other are refused naming both.

use ctxprune::embed::SentenceEncoder;
use std::path::Path;

const TOKENIZER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/attention/tokenizer.json");

/// A tiny BERT sentence encoder (hidden 4, 2 heads, FFN 8, vocabulary 14, 16 positions)
/// whose weights hold `weight_layers` encoder layers and whose config.json says
/// `config_layers`; `config` edits the config's JSON text.
pub(crate) fn tiny_bert(
    dir: &Path,
    weight_layers: usize,
    config_layers: &str,
    config: impl Fn(String) -> String,
) {
    use safetensors::tensor::TensorView;
    let (h, i, v, p) = (4usize, 8usize, 14usize, 16usize);
    let text = format!(
        r#"{{"model_type": "bert", "vocab_size": {v}, "hidden_size": {h}, "num_hidden_layers": {config_layers},
  "num_attention_heads": 2, "intermediate_size": {i}, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
  "max_position_embeddings": {p}, "type_vocab_size": 2, "initializer_range": 0.02, "layer_norm_eps": 1e-12,
  "pad_token_id": 0}}"#
    );
    std::fs::write(dir.join("config.json"), config(text)).unwrap();
    std::fs::copy(TOKENIZER, dir.join("tokenizer.json")).unwrap();
    let mut shapes: Vec<(String, Vec<usize>)> = vec![
        ("embeddings.word_embeddings.weight".into(), vec![v, h]),
        ("embeddings.position_embeddings.weight".into(), vec![p, h]),
        ("embeddings.token_type_embeddings.weight".into(), vec![2, h]),
        ("embeddings.LayerNorm.weight".into(), vec![h]),
        ("embeddings.LayerNorm.bias".into(), vec![h]),
    ];
    for l in 0..weight_layers {
        let e = format!("encoder.layer.{l}");
        for part in ["query", "key", "value"] {
            shapes.push((format!("{e}.attention.self.{part}.weight"), vec![h, h]));
            shapes.push((format!("{e}.attention.self.{part}.bias"), vec![h]));
        }
        shapes.push((format!("{e}.attention.output.dense.weight"), vec![h, h]));
        shapes.push((format!("{e}.attention.output.dense.bias"), vec![h]));
        for ln in ["attention.output.LayerNorm", "output.LayerNorm"] {
            shapes.push((format!("{e}.{ln}.weight"), vec![h]));
            shapes.push((format!("{e}.{ln}.bias"), vec![h]));
        }
        shapes.push((format!("{e}.intermediate.dense.weight"), vec![i, h]));
        shapes.push((format!("{e}.intermediate.dense.bias"), vec![i]));
        shapes.push((format!("{e}.output.dense.weight"), vec![h, i]));
        shapes.push((format!("{e}.output.dense.bias"), vec![h]));
    }
    let mut rng = ctxprune::rng::Rng::new(11);
    let data: Vec<Vec<u8>> = shapes
        .iter()
        .map(|(name, s)| {
            let n: usize = s.iter().product();
            (0..n)
                .flat_map(|_| {
                    // LayerNorm weights near 1, everything else small.
                    let x = 0.2 * rng.normal() as f32
                        + if name.ends_with("LayerNorm.weight") {
                            1.0
                        } else {
                            0.0
                        };
                    x.to_le_bytes()
                })
                .collect()
        })
        .collect();
    let views: Vec<(String, TensorView)> = shapes
        .iter()
        .zip(&data)
        .map(|((n, s), d)| {
            (
                n.clone(),
                TensorView::new(safetensors::Dtype::F32, s.clone(), d).unwrap(),
            )
        })
        .collect();
    safetensors::tensor::serialize_to_file(views, None, &dir.join("model.safetensors")).unwrap();
}

fn load_err(dir: &Path) -> String {
    SentenceEncoder::load(dir).unwrap_err().to_string()
}

/// Absurd layer counts (and other sizes) in an encoder's config.json are refused by name
/// before anything is sized by them: the count used to size the list of layers
/// (`capacity overflow`, or an abort on a multi-terabyte allocation).
#[test]
fn an_encoder_config_with_absurd_sizes_is_refused_before_any_allocation() {
    let d = tempfile::tempdir().unwrap();
    // The tiny model loads and encodes as it is: the errors below are the sizes'.
    tiny_bert(d.path(), 2, "2", |t| t);
    let enc = SentenceEncoder::load(d.path()).unwrap();
    let e = enc.encode(&["user tool system"], &Default::default()).unwrap();
    assert_eq!((e.rows(), e.dim()), (1, 4));
    let cfg = d.path().join("config.json").display().to_string();
    for layers in ["1000000000000", "100000000000000000", "18446744073709551615", "0"] {
        tiny_bert(d.path(), 2, layers, |t| t);
        let err = load_err(d.path());
        assert_eq!(
            err,
            format!("{cfg}: \"num_hidden_layers\" must be in 1..=100000, got {layers}"),
            "{layers}"
        );
    }
    for (key, value, max) in [
        ("\"hidden_size\": 4", "\"hidden_size\": 1000000000000", 1_000_000),
        (
            "\"intermediate_size\": 8",
            "\"intermediate_size\": 18446744073709551615",
            1_000_000,
        ),
        ("\"vocab_size\": 14", "\"vocab_size\": 100000000000", 10_000_000),
        ("\"type_vocab_size\": 2", "\"type_vocab_size\": 0", 10_000_000),
    ] {
        tiny_bert(d.path(), 2, "2", |t| t.replace(key, value));
        let err = load_err(d.path());
        let field = key.split('"').nth(1).unwrap();
        assert!(
            err.starts_with(&format!("{cfg}: \"{field}\" must be in 1..={max}, got")),
            "{err}"
        );
    }
}

/// A config with fewer layers than its weights hold used some and ignored the rest; more
/// failed half-way on a missing tensor. Both name the two counts.
#[test]
fn an_encoder_config_and_weights_with_different_layer_counts_is_an_error_naming_both() {
    let d = tempfile::tempdir().unwrap();
    let cfg = d.path().join("config.json").display().to_string();
    let st = d.path().join("model.safetensors").display().to_string();
    for (held, said) in [(3, 2), (1, 2), (4, 1)] {
        tiny_bert(d.path(), held, &said.to_string(), |t| t);
        let err = load_err(d.path());
        assert_eq!(
            err,
            format!(
                "{cfg}: \"num_hidden_layers\" is {said} but {st} holds {held} encoder layers: the config and the weights must name the same layers"
            )
        );
    }
    tiny_bert(d.path(), 3, "3", |t| t);
    SentenceEncoder::load(d.path()).unwrap();
}

#[cfg(feature = "cli")]
mod cli {
    use std::process::{Command, Stdio};

    /// Runs the binary; (exit code, stdout, stderr), checked to be one line on stderr
    /// when the command failed.
    fn run(args: &[&str]) -> (i32, String, String) {
        let o = Command::new(env!("CARGO_BIN_EXE_ctxprune"))
            .args(args)
            .env_remove("CTXPRUNE_BACKEND")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let (out, err) = (
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        );
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        let code = o.status.code().unwrap_or(-1);
        if code != 0 {
            assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
            assert!(out.is_empty(), "{args:?}: {out}");
        }
        (code, out, err)
    }

    fn refused(args: &[&str], want: &str) {
        let (code, _, err) = run(args);
        assert_ne!(code, 0, "{args:?} succeeded");
        assert!(err.contains(want), "{args:?}: {err:?} lacks {want:?}");
    }

    #[test]
    fn attention_bench_refuses_absurd_sizes_by_flag() {
        let b = ["attention", "bench", "--backend", "cpu"];
        for (flag, v, want) in [
            (
                "--layers",
                "1000000000000",
                "invalid --layers: must be in 1..=100000, got 1000000000000",
            ),
            (
                "--n",
                "18446744073709551615",
                "invalid --n: must be in 1..=1000000000, got 18446744073709551615",
            ),
            (
                "--head-dim",
                "100000000000000000",
                "invalid --head-dim: must be in 1..=1000000, got 100000000000000000",
            ),
            ("--heads", "0", "invalid --heads: must be in 1..=1000000, got 0"),
        ] {
            let mut a = b.to_vec();
            a.extend([flag, v]);
            refused(&a, want);
        }
        // Each in range, their product far past the budget.
        refused(
            &[
                "attention", "bench", "--backend", "cpu", "--n", "1000000000", "--layers", "1000", "--head-dim",
                "1000000",
            ],
            "invalid --n: --layers 1000 x --n 1000000000 x (--heads + --kv-heads) 20 x --head-dim 1000000 x 4 bytes is more than 2^64",
        );
        refused(
            &[
                "attention",
                "bench",
                "--backend",
                "cpu",
                "--n",
                "100000000",
                "--layers",
                "8",
            ],
            "bytes, above the 17179869184 bytes one buffer may take",
        );
    }

    /// `--problems 10^12` aborted on an 8 TB allocation of per-problem results.
    #[test]
    fn eval_refuses_an_absurd_problem_count() {
        refused(
            &[
                "eval",
                "--problems",
                "1000000000000",
                "--budgets",
                "10",
                "--capacities",
                "5",
            ],
            "invalid --problems: must be in 1..=100000, got 1000000000000",
        );
    }

    #[cfg(feature = "embed")]
    #[test]
    fn pipeline_train_refuses_absurd_hidden_widths_before_reading_the_log() {
        let d = tempfile::tempdir().unwrap();
        let log = d.path().join("decisions.jsonl");
        std::fs::write(
            &log,
            "{\"run\":\"r1\",\"depth\":1,\"order\":0,\"retained\":3,\"state_embedding\":[0.1,0.2],\"candidate_embedding\":[0.3,0.4],\"keep\":true}\n",
        )
        .unwrap();
        let out = d.path().join("c.safetensors");
        let (log, out) = (log.display().to_string(), out.display().to_string());
        let base = ["pipeline", "train", "--log", &log, "--out", &out, "--hidden"];
        let mut a = base.to_vec();
        a.push("1000000000");
        refused(
            &a,
            "invalid --hidden: layer 0: width must be in 1..=1000000, got 1000000000",
        );
        let mut a = base.to_vec();
        a.push("100000,100000");
        refused(
            &a,
            "invalid --hidden: layer 0 width 100000 x layer 1 width 100000 x 4 bytes is 40000000000 bytes, above the 17179869184 bytes",
        );
        assert!(!std::path::Path::new(&out).exists());
    }

    /// Finite masses too large to be shares (1e308) overflowed the decay's sums and were
    /// written as null; they are refused naming the file, the field and the value.
    #[test]
    fn attention_decay_refuses_masses_that_are_not_shares() {
        use ctxprune::attention;
        let d = tempfile::tempdir().unwrap();
        let (qk, seg) = attention::synthetic(300, 1, 2, 1, 4, 7, 5).unwrap();
        let mut m = attention::mass(&ctxprune::Engine::cpu(), &qk, &seg).unwrap();
        m.steps[6].s[1][4] = 1e308;
        let p = d.path().join("m.json");
        std::fs::write(&p, serde_json::to_string(&m).unwrap()).unwrap();
        let js = d.path().join("d.json");
        let (ps, jss) = (p.display().to_string(), js.display().to_string());
        refused(
            &["attention", "decay", &ps, &ps, "--json", &jss],
            &format!("{ps}: invalid steps[6].s: row 1 holds 1e308; a share of one step's attention is a number in [0, 1]"),
        );
        assert!(!js.exists());
        m.steps[6].s[1][4] = 0.25;
        m.steps[2].unassigned = 1.5;
        std::fs::write(&p, serde_json::to_string(&m).unwrap()).unwrap();
        refused(
            &["attention", "decay", &ps],
            &format!("{ps}: invalid steps[2].unassigned: is 1.5e0"),
        );
        m.steps[2].unassigned = 0.0;
        std::fs::write(&p, serde_json::to_string(&m).unwrap()).unwrap();
        let (code, _, err) = run(&["attention", "decay", &ps, &ps, "--json", &jss]);
        assert_eq!(code, 0, "{err}");
        assert!(!std::fs::read_to_string(&js).unwrap().contains("null"));
    }

    fn write(dir: &std::path::Path, name: &str, text: &str) -> String {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    }

    #[test]
    fn rerank_refuses_more_prior_probes_than_budget_naming_both() {
        let d = tempfile::tempdir().unwrap();
        ctxprune::demo::data::write_pool(d.path(), 20, 4, 3).unwrap();
        let f = |n: &str| d.path().join(n).display().to_string();
        let (e, q, s) = (f("emb.npy"), f("query.npy"), f("scores.npy"));
        let base = [
            "rerank",
            "--method",
            "boundary-morph",
            "--backend",
            "cpu",
            "--embeddings",
            &e,
            "--query",
            &q,
            "--oracle-scores",
            &s,
            "--capacity",
            "3",
            "--prior",
            "adaptive",
            "--budget",
            "5",
        ];
        let mut a = base.to_vec();
        a.extend(["--prior-probes", "6"]);
        refused(
            &a,
            "invalid --prior-probes: 6 probe documents exceed the budget of 5 oracle calls",
        );
        let mut a = base.to_vec();
        a.extend(["--prior-probes", "5"]);
        let (code, _, err) = run(&a);
        assert_eq!(code, 0, "{err}");
    }

    /// A token count of 2^62 was refused as "not a whole number >= 1".
    #[test]
    fn token_counts_above_the_largest_accepted_say_so() {
        let d = tempfile::tempdir().unwrap();
        ctxprune::demo::data::write_pool(d.path(), 4, 4, 3).unwrap();
        let f = |n: &str| d.path().join(n).display().to_string();
        let (e, q, s) = (f("emb.npy"), f("query.npy"), f("scores.npy"));
        let t = write(d.path(), "t.json", "[3, 4611686018427387904, 2, 1]");
        refused(
            &[
                "rerank",
                "--method",
                "boundary-morph",
                "--backend",
                "cpu",
                "--embeddings",
                &e,
                "--query",
                &q,
                "--oracle-scores",
                &s,
                "--budget",
                "3",
                "--capacity",
                "2",
                "--token-capacity",
                "10",
                "--tokens",
                &t,
            ],
            "token count 1 is 4.611686018427388e18, above the largest accepted token count 9007199254740992",
        );
    }

    /// Tokens near f64::MAX overflowed the pipeline's sums; the error named neither the file
    /// nor the line.
    #[test]
    fn pipeline_token_counts_too_large_name_the_file_and_line() {
        let d = tempfile::tempdir().unwrap();
        let st = write(
            d.path(),
            "stages.toml",
            "[post_retrieval]\npolicy = \"scorer\"\nmethod = \"grn\"\nmode = \"gate\"\nthreshold = 0.5\n",
        );
        let run_log = crate::pipeline_replay::RUN.replacen("\"tokens\":60,", "\"tokens\":1e308,", 1);
        let line = run_log.lines().position(|l| l.contains("1e308")).unwrap() + 1;
        let input = write(d.path(), "run.jsonl", &run_log);
        refused(
            &["pipeline", "--config", &st, "--input", &input],
            &format!(
                "{input}: line {line}: \"tokens\" is 1e308, above the largest accepted token count 9007199254740992"
            ),
        );
    }

    /// With --model the texts and the query text are what the model embeds: no note may
    /// say they were not used.
    #[cfg(feature = "embed")]
    #[test]
    fn select_with_a_model_does_not_call_its_texts_unused() {
        let d = tempfile::tempdir().unwrap();
        let model = d.path().join("model");
        std::fs::create_dir(&model).unwrap();
        super::tiny_bert(&model, 1, "1", |t| t);
        let texts = write(
            d.path(),
            "texts.jsonl",
            "{\"text\": \"user tool\"}\n{\"text\": \"system\"}\n{\"text\": \"assistant tool user\"}\n",
        );
        let m = model.display().to_string();
        let (code, out, err) = run(&[
            "select",
            "--method",
            "mmr",
            "--k",
            "2",
            "--backend",
            "cpu",
            "--model",
            &m,
            "--texts",
            &texts,
            "--query-text",
            "tool user",
        ]);
        assert_eq!(code, 0, "{err}");
        assert!(!err.contains("not used"), "{err}");
        let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
        assert_eq!(v["selected"].as_array().unwrap().len(), 2, "{out}");
    }
}
