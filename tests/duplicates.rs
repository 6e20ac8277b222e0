//! A repeated JSON key used to take the last value silently (a repeated `keep` flipped a
//! label); every reader of the crate goes through the one JSON reader (`io::json`) and
//! refuses it, naming the key and the file and line. Two tensor names for one layer are
//! refused naming both.

use std::path::Path;

const DUP: &str = "(a repeated key is an error, not the last value)";

/// Asserts `e` names the key, the file, and (`line`, when given) the line.
fn names(e: &ctxprune::Error, key: &str, file: &Path, line: Option<usize>) {
    let e = e.to_string();
    assert!(e.contains(&format!("duplicate key \"{key}\" {DUP}")), "{e}");
    assert!(e.starts_with(&file.display().to_string()), "{e}");
    if let Some(l) = line {
        assert!(e.contains(&format!(": line {l}: ")), "{e}");
    }
    assert_eq!(e.lines().count(), 1);
}

#[test]
fn json_lines_readers_refuse_a_repeated_key_naming_the_line() {
    let p = Path::new("rows.jsonl");
    // Embeddings as JSON lines: "embedding" twice on line 2.
    let text = "{\"embedding\": [1, 0]}\n{\"embedding\": [1, 0], \"embedding\": [0, 1]}\n";
    let e = ctxprune::io::parse_embeddings(
        p,
        ctxprune::io::EmbeddingsFormat::JsonLines,
        text.as_bytes(),
        None,
    )
    .unwrap_err();
    names(&e, "embedding", p, Some(2));
    // Texts: "tokens" twice on line 1.
    let e = ctxprune::io::parse_texts(p, b"{\"text\": \"a\", \"tokens\": 3, \"tokens\": 300}\n").unwrap_err();
    names(&e, "tokens", p, Some(1));
    // The pipeline's run log: "tokens" twice on line 3.
    let log = crate::pipeline_replay::RUN.replacen("\"tokens\":100,", "\"tokens\":100,\"tokens\":1,", 1);
    let line = log.lines().position(|l| l.contains("\"tokens\":1,")).unwrap() + 1;
    let e = ctxprune::pipeline::replay::RunLog::parse(&log, p, None).unwrap_err();
    names(&e, "tokens", p, Some(line));
    // The probe's labels: "rescued" twice on line 2.
    let labels = "{\"id\": \"a\", \"trajectory\": \"a.json\", \"rescued\": true}\n{\"id\": \"b\", \"trajectory\": \"b.json\", \"rescued\": true, \"rescued\": false}\n";
    let e = ctxprune::probe::parse_labels(p, labels).unwrap_err();
    names(&e, "rescued", p, Some(2));
}

/// The decisions log of `pipeline train`: a repeated `keep` flipped the label.
#[cfg(feature = "embed")]
#[test]
fn the_decisions_log_refuses_a_repeated_keep() {
    let p = Path::new("decisions.jsonl");
    let good = r#"{"run":"r1","depth":1,"order":0,"retained":3,"state_embedding":[0.1,0.2],"candidate_embedding":[0.3,0.4],"keep":true}"#;
    let bad = good.replace("\"keep\":true", "\"keep\":true,\"keep\":false");
    let text = format!("{good}\n{bad}\n");
    let e = ctxprune::controller::parse_decisions(p, text.as_bytes(), None).unwrap_err();
    names(&e, "keep", p, Some(2));
}

#[test]
fn nested_repeated_keys_are_refused_in_every_document_reader() {
    use ctxprune::attention::{self, Segmentation};
    let p = Path::new("doc.json");
    // A model's config.json (cost): the old check looked at the top level only.
    let cfg = r#"{"num_hidden_layers": 2, "hidden_size": 8, "intermediate_size": 16,
      "num_attention_heads": 2, "rope_scaling": {"factor": 2.0, "type": "yarn", "factor": 4.0}}"#;
    let e = ctxprune::cost::ModelShape::from_json(cfg, p).unwrap_err();
    names(&e, "factor", p, None);
    assert!(e.to_string().contains("at line 2 column"), "{e}");
    // A segmentation: "role" twice in spans[0].
    let (qk, seg) = attention::synthetic(120, 1, 2, 1, 4, 3, 1).unwrap();
    let text = serde_json::to_string(&seg).unwrap();
    let dup = text.replacen("\"role\":\"system\"", "\"role\":\"user\",\"role\":\"system\"", 1);
    assert_ne!(dup, text);
    let e = Segmentation::from_json(&dup, p).unwrap_err();
    names(&e, "role", p, None);
    // An attention mass (`attention decay` reads them): "turn" twice in steps[1].
    let m = attention::mass(&ctxprune::Engine::cpu(), &qk, &seg).unwrap();
    let text = serde_json::to_string(&m).unwrap();
    let at = text.match_indices("\"turn\":").nth(1).unwrap().0;
    let dup = format!("{}\"turn\":0,{}", &text[..at], &text[at..]);
    let e = ctxprune::io::json::from_str::<attention::Mass>(&dup).unwrap_err();
    assert!(
        e.starts_with(&format!("duplicate key \"turn\" {DUP} at line 1 column")),
        "{e}"
    );
    // A trajectory (mask, probe): "content" twice in a message.
    let traj = r#"[{"role": "user", "content": "q"},
      {"role": "tool", "tool_call_id": "a", "content": "old", "content": "new"}]"#;
    let e = ctxprune::mask::Trajectory::parse(traj, None)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(&format!(
            "malformed JSON: duplicate key \"content\" {DUP} at line 2 column"
        )),
        "{e}"
    );
    // A stages file (TOML): the toml crate refuses a repeated key itself.
    let e = ctxprune::pipeline::stages::Stages::parse(
        "[post_retrieval]\npolicy = \"scorer\"\nmethod = \"grn\"\nmethod = \"mmr\"\n",
        Path::new("stages.toml"),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("stages.toml: line 4") && e.contains("duplicate key"),
        "{e}"
    );
}

/// A probe trajectory with a repeated key is an error naming the trajectory file.
#[test]
fn probe_trajectories_refuse_a_repeated_key() {
    let d = tempfile::tempdir().unwrap();
    let traj = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/probe/openai_small.json"),
    )
    .unwrap();
    let dup = traj.replacen("\"role\": \"user\"", "\"role\": \"user\", \"role\": \"user\"", 1);
    assert_ne!(dup, traj);
    std::fs::write(d.path().join("a.json"), dup).unwrap();
    let lp = d.path().join("labels.jsonl");
    std::fs::write(
        &lp,
        "{\"id\": \"a\", \"trajectory\": \"a.json\", \"rescued\": true}\n",
    )
    .unwrap();
    let labels = ctxprune::probe::load_labels(&lp).unwrap();
    let counter = ctxprune::tokens::counter("approx").unwrap();
    let e = ctxprune::probe::build(d.path(), &lp, &labels, &Default::default(), counter.as_ref())
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with(&d.path().join("a.json").display().to_string()),
        "{e}"
    );
    assert!(e.contains(&format!("duplicate key \"role\" {DUP}")), "{e}");
}

/// A safetensors file whose header is `header` over `data`.
fn safetensors_bytes(header: &str, data: &[u8]) -> Vec<u8> {
    let mut b = (header.len() as u64).to_le_bytes().to_vec();
    b.extend_from_slice(header.as_bytes());
    b.extend_from_slice(data);
    b
}

#[test]
fn every_safetensors_reader_checks_its_header_for_repeated_keys() {
    let d = tempfile::tempdir().unwrap();
    let t = |name: &str| {
        format!("\"{name}\": {{\"dtype\": \"F32\", \"shape\": [2, 2], \"data_offsets\": [0, 16]}}")
    };
    let data = [0x3f800000u32, 0, 0, 0x3f800000]
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect::<Vec<u8>>();
    // Embeddings: the tensor named twice (the safetensors crate keeps one silently), and a
    // repeated key inside one tensor's entry.
    let p = d.path().join("e.safetensors");
    for (header, key) in [
        (format!("{{{}, {}}}", t("embeddings"), t("embeddings")), "embeddings"),
        (
            "{\"embeddings\": {\"dtype\": \"F32\", \"shape\": [2, 2], \"shape\": [4, 1], \"data_offsets\": [0, 16]}}".to_string(),
            "shape",
        ),
    ] {
        std::fs::write(&p, safetensors_bytes(&header, &data)).unwrap();
        let e = ctxprune::io::load_embeddings(&p.display().to_string()).unwrap_err();
        names(&e, key, &p, None);
        assert!(e.to_string().contains("safetensors header: duplicate key"), "{e}");
        // The attention Q/K reader reads the same header.
        let e = ctxprune::attention::tensors::TensorFile::open(&p, None).err().expect("an error");
        names(&e, key, &p, None);
    }
    // The controller's weights.
    #[cfg(feature = "embed")]
    {
        let header = format!(
            "{{{}, \"__metadata__\": {{\"tau\": \"0.5\", \"tau\": \"0.9\"}}}}",
            t("reg.weight")
        );
        let bytes = safetensors_bytes(&header, &data);
        let cp = Path::new("controller.safetensors");
        let e = ctxprune::controller::ControllerModel::from_safetensors(&bytes, cp).unwrap_err();
        names(&e, "tau", cp, None);
    }
}

/// An encoder directory: config.json, tokenizer.json and the weights' header.
#[cfg(feature = "embed")]
#[test]
fn an_encoder_directory_refuses_repeated_keys_in_each_file() {
    use ctxprune::embed::SentenceEncoder;
    let d = tempfile::tempdir().unwrap();
    crate::sizes::tiny_bert(d.path(), 1, "1", |t| t);
    SentenceEncoder::load(d.path()).unwrap();
    let cfg = d.path().join("config.json");
    crate::sizes::tiny_bert(d.path(), 1, "1", |t| t.replacen('{', "{\"hidden_size\": 8, ", 1));
    let e = SentenceEncoder::load(d.path()).unwrap_err();
    names(&e, "hidden_size", &cfg, None);
    crate::sizes::tiny_bert(d.path(), 1, "1", |t| t);
    let tok = d.path().join("tokenizer.json");
    let text = std::fs::read_to_string(&tok).unwrap();
    std::fs::write(
        &tok,
        text.replacen(
            "\"type\": \"WordLevel\",",
            "\"type\": \"WordLevel\", \"type\": \"BPE\",",
            1,
        ),
    )
    .unwrap();
    let e = SentenceEncoder::load(d.path()).unwrap_err();
    names(&e, "type", &tok, None);
    // The same reader serves `--tokenizer FILE.json` (mask, probe) and `attention segment`.
    let e = ctxprune::tokens::HfTokenizer::load(&tok).expect_err("an error");
    names(&e, "type", &tok, None);
    crate::sizes::tiny_bert(d.path(), 1, "1", |t| t);
    let st = d.path().join("model.safetensors");
    let bytes = std::fs::read(&st).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header = std::str::from_utf8(&bytes[8..8 + n]).unwrap();
    // Repeat the first tensor's dtype inside its entry: same length as a padded header.
    let dup = header.replacen("\"dtype\":\"F32\"", "\"dtype\":\"F32\",\"dtype\":\"F32\"", 1);
    assert_ne!(dup, header);
    std::fs::write(&st, safetensors_bytes(&dup, &bytes[8 + n..])).unwrap();
    let e = SentenceEncoder::load(d.path()).unwrap_err();
    names(&e, "dtype", &st, None);
    // The pooling config read through modules.json.
    crate::sizes::tiny_bert(d.path(), 1, "1", |t| t);
    std::fs::write(
        d.path().join("modules.json"),
        r#"[{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]"#,
    )
    .unwrap();
    std::fs::create_dir(d.path().join("1_Pooling")).unwrap();
    let pool = d.path().join("1_Pooling/config.json");
    std::fs::write(
        &pool,
        r#"{"pooling_mode_mean_tokens": true, "pooling_mode_cls_token": false, "pooling_mode_mean_tokens": false}"#,
    )
    .unwrap();
    let e = SentenceEncoder::load(d.path()).unwrap_err();
    names(&e, "pooling_mode_mean_tokens", &pool, None);
}

/// `layers.01.q` beside `layers.1.q` replaced each other silently.
#[test]
fn two_tensor_names_for_one_layer_are_refused_naming_both() {
    use safetensors::tensor::TensorView;
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("qk.safetensors");
    let b = [0u8; 4 * 8 * 6];
    let views = vec![
        (
            "layers.1.q",
            TensorView::new(safetensors::Dtype::F32, vec![8, 2, 3], &b[..4 * 48]).unwrap(),
        ),
        (
            "layers.01.q",
            TensorView::new(safetensors::Dtype::F32, vec![8, 2, 3], &b[..4 * 48]).unwrap(),
        ),
        (
            "layers.1.k",
            TensorView::new(safetensors::Dtype::F32, vec![8, 1, 3], &b[..4 * 24]).unwrap(),
        ),
    ];
    safetensors::tensor::serialize_to_file(views, None, &p).unwrap();
    let e = ctxprune::attention::tensors::TensorFile::open(&p, None)
        .err()
        .expect("an error")
        .to_string();
    assert!(
        e.contains("tensors 'layers.01.q' and 'layers.1.q' name the same layer and kind")
            || e.contains("tensors 'layers.1.q' and 'layers.01.q' name the same layer and kind"),
        "{e}"
    );
    assert!(e.starts_with(&p.display().to_string()), "{e}");
}
