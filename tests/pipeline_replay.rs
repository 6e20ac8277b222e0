//! `ctxprune pipeline`: a hand-made research tree replayed under one-, two- and
//! three-stage policies, with what each keeps and prunes written here by name and the
//! accounting (App. A) computed by hand; the stages file, the log's errors, and the CLI.

use ctxprune::pipeline::replay::{RunLog, Trace};
use ctxprune::pipeline::stages::Stages;
use ctxprune::pipeline::{Pipeline, Policy, Report, StageReport};
use ctxprune::select::{Method, Mode, SelectConfig};
use ctxprune::{Embeddings, Result};
use std::path::Path;

/// The research tree, in 4-D with axis-aligned embeddings (e1 = [1,0,0,0], ...), so that
/// the squared GRN residual of a candidate against the context is 1 (a new axis) or 0 (an
/// axis the context already spans) and every gate at tau = 0.5 is plain to see:
///
/// ```text
/// query (1,2,3,4)
/// s1  e1 10 tk   items s1#0 e1 100 tk, s1#1 e2 60 tk
///   s1.1  e2 6 tk   item s1.1#0 e2 70 tk
///   s1.2  e3 9 tk   items s1.2#0 e3 90 tk, s1.2#1 e1 25 tk
/// s2  e2 12 tk   items s2#0 e1 80 tk, s2#1 (1,1,0,0) 40 tk
///   s2.1  e4 7 tk   item s2.1#0 e4 50 tk
///     s2.1.1  e3 5 tk   item s2.1.1#0 e3 45 tk
/// s3  e3 8 tk    (no items)
///   s3.1  e4 11 tk  item s3.1#0 e4 110 tk
/// ```
///
/// Children are written before their parents' later siblings, and s2.1.1 before s2.1
/// (a parent may come later in the file).
pub const RUN: &str = r#"{"type":"query","text":"why do solid-state batteries fail","embedding":[1,2,3,4]}
{"type":"subquery","id":"s1","parent":null,"depth":0,"text":"anode","tokens":10,"embedding":[1,0,0,0]}
{"type":"item","subquery":"s1","text":"lithium dendrites","tokens":100,"embedding":[1,0,0,0]}
{"type":"item","subquery":"s1","text":"interface resistance","tokens":60,"embedding":[0,1,0,0]}
{"type":"subquery","id":"s1.1","parent":"s1","depth":1,"text":"anode resistance","tokens":6,"embedding":[0,1,0,0]}
{"type":"item","subquery":"s1.1","text":"resistance again","tokens":70,"embedding":[0,1,0,0]}
{"type":"subquery","id":"s1.2","parent":"s1","depth":1,"text":"anode cracking","tokens":9,"embedding":[0,0,1,0]}
{"type":"item","subquery":"s1.2","text":"cracking","tokens":90,"embedding":[0,0,1,0]}
{"type":"item","subquery":"s1.2","text":"dendrites once more","tokens":25,"embedding":[1,0,0,0]}

{"type":"subquery","id":"s2","parent":null,"depth":0,"text":"cathode","tokens":12,"embedding":[0,1,0,0]}
{"type":"item","subquery":"s2","text":"dendrites again","tokens":80,"embedding":[1,0,0,0]}
{"type":"item","subquery":"s2","text":"dendrites and resistance","tokens":40,"embedding":[1,1,0,0]}
{"type":"subquery","id":"s2.1.1","parent":"s2.1","depth":2,"text":"coating cost","tokens":5,"embedding":[0,0,1,0]}
{"type":"item","subquery":"s2.1.1","text":"cost","tokens":45,"embedding":[0,0,1,0]}
{"type":"subquery","id":"s2.1","parent":"s2","depth":1,"text":"cathode coatings","tokens":7,"embedding":[0,0,0,1]}
{"type":"item","subquery":"s2.1","text":"coatings","tokens":50,"embedding":[0,0,0,1]}
{"type":"subquery","id":"s3","parent":null,"depth":0,"text":"electrolyte","tokens":8,"embedding":[0,0,1,0]}
{"type":"subquery","id":"s3.1","parent":"s3","depth":1,"text":"sulfide electrolytes","tokens":11,"embedding":[0,0,0,1]}
{"type":"item","subquery":"s3.1","text":"sulfides","tokens":110,"embedding":[0,0,0,1]}
"#;

fn log() -> RunLog {
    RunLog::parse(RUN, Path::new("run.jsonl"), None).unwrap()
}

fn grn_gate() -> Policy {
    Policy::Scorer(SelectConfig::new(Method::Grn).mode(Mode::Gate).threshold(0.5))
}

/// MMR (lambda 0.35) greedy to k = 2 with the query (1,2,3,4): the context items are
/// orthogonal, so the redundancy term is 0 and MMR keeps the two most relevant, e4 then e3.
fn mmr_k2() -> Policy {
    Policy::Scorer(SelectConfig::new(Method::Mmr).k(2))
}

fn ids(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

fn stage(candidates: usize, kept: usize, tokens_in: f64, tokens_kept: f64) -> StageReport {
    StageReport {
        candidates,
        kept,
        tokens_in,
        tokens_kept,
    }
}

fn context(r: &Report) -> Vec<&str> {
    r.context.iter().map(|i| i.id.as_str()).collect()
}

fn close(got: f64, want: f64, what: &str) {
    assert!((got - want).abs() < 1e-12, "{what}: got {got}, expected {want}");
}

#[test]
fn the_log_is_read_as_written() {
    let l = log();
    assert_eq!(l.dim(), 4);
    assert_eq!(l.subqueries().len(), 8);
    assert_eq!(l.items().len(), 10);
    let s = &l.subqueries()[4];
    assert_eq!(
        (s.id.as_str(), s.parent.as_deref(), s.depth, s.line),
        ("s2.1.1", Some("s2.1"), 2, 14)
    );
    let it: Vec<&str> = l.items().iter().map(|i| i.id.as_str()).collect();
    assert_eq!(
        it,
        ["s1#0", "s1#1", "s1.1#0", "s1.2#0", "s1.2#1", "s2#0", "s2#1", "s2.1.1#0", "s2.1#0", "s3.1#0"]
    );
    assert_eq!(l.query().embedding, vec![1.0, 2.0, 3.0, 4.0]);
}

#[test]
fn without_pruning_the_whole_tree_is_explored_breadth_first() {
    let out = log().replay(Pipeline::default()).unwrap();
    let (r, t) = (&out.report, &out.trace);
    // Roots, then children in the order their parents were explored.
    assert_eq!(
        t.explored,
        ids(&["s1", "s2", "s3", "s1.1", "s1.2", "s2.1", "s3.1", "s2.1.1"])
    );
    assert_eq!((r.nodes_explored, r.nodes_pruned, r.truncated), (8, 0, false));
    // Subquery tokens 10+12+8+6+9+7+11+5 = 68; item tokens
    // 100+60 + 80+40 + 70 + 90+25 + 50 + 110 + 45 = 670.
    assert_eq!(r.pre_retrieval, stage(8, 8, 68.0, 68.0));
    assert_eq!(r.post_retrieval, stage(10, 10, 670.0, 670.0));
    assert_eq!(r.pre_synthesis, stage(10, 10, 670.0, 670.0));
    assert_eq!(
        context(r),
        ["s1#0", "s1#1", "s2#0", "s2#1", "s1.1#0", "s1.2#0", "s1.2#1", "s2.1#0", "s3.1#0", "s2.1.1#0"]
    );
    assert!(t.pruned.is_empty() && t.stopped.is_empty() && t.not_reached.is_empty());
}

/// One stage: Post-Retrieval GRN gate, tau = 0.5.
#[test]
fn one_stage_post_retrieval_gate() {
    let p = Pipeline {
        post_retrieval: grn_gate(),
        ..Pipeline::default()
    };
    let out = log().replay(p).unwrap();
    let (r, t) = (&out.report, &out.trace);
    // s1: context {} -> s1#0 (e1) and s1#1 (e2) are new: kept; context spans e1, e2.
    // s2: s2#0 (e1) and s2#1 (in span{e1, e2}) have residual 0: pruned; with nothing kept
    //     s2 does not expand, so s2.1 and s2.1.1 are never reached.
    // s3: no items, so it expands: s3.1.
    // s1.1: s1.1#0 (e2) pruned.  s1.2: s1.2#0 (e3) kept, s1.2#1 (e1) pruned.
    // s3.1: s3.1#0 (e4) kept.
    let want = Trace {
        explored: ids(&["s1", "s2", "s3", "s1.1", "s1.2", "s3.1"]),
        pruned: vec![],
        queued: vec![],
        stopped: ids(&["s2"]),
        not_reached: ids(&["s2.1.1", "s2.1"]),
        items_kept: ids(&["s1#0", "s1#1", "s1.2#0", "s3.1#0"]),
        items_pruned: ids(&["s2#0", "s2#1", "s1.1#0", "s1.2#1"]),
    };
    assert_eq!(*t, want);
    assert_eq!((r.nodes_explored, r.nodes_pruned, r.truncated), (6, 0, false));
    // Pre-Retrieval (off) saw the 3 roots, s1's 2 children and s3's 1:
    // 10+12+8 + 6+9 + 11 = 56 tokens.
    assert_eq!(r.pre_retrieval, stage(6, 6, 56.0, 56.0));
    // Post-Retrieval: items of the explored nodes, 2+2+0+1+2+1 = 8, tokens
    // 160 + 120 + 0 + 70 + 115 + 110 = 575; kept 100+60+90+110 = 360.
    assert_eq!(r.post_retrieval, stage(8, 4, 575.0, 360.0));
    close(r.post_retrieval.pruning_ratio(), 0.5, "post ratio");
    close(
        r.post_retrieval.token_reduction(),
        215.0 / 575.0,
        "post reduction",
    );
    // Pre-Synthesis (off) keeps the 4 items, 360 tokens.
    assert_eq!(r.pre_synthesis, stage(4, 4, 360.0, 360.0));
    close(r.pre_synthesis.pruning_ratio(), 0.0, "syn ratio");
    assert_eq!(context(r), ["s1#0", "s1#1", "s1.2#0", "s3.1#0"]);
}

/// Two stages: Post-Retrieval GRN gate + Pre-Synthesis MMR k = 2.
#[test]
fn two_stage_post_retrieval_and_pre_synthesis() {
    let p = Pipeline {
        post_retrieval: grn_gate(),
        pre_synthesis: mmr_k2(),
        ..Pipeline::default()
    };
    let out = log().replay(p).unwrap();
    let (r, t) = (&out.report, &out.trace);
    // Exploration is the one-stage run's: Pre-Synthesis comes after it.
    assert_eq!(t.explored, ids(&["s1", "s2", "s3", "s1.1", "s1.2", "s3.1"]));
    assert_eq!(t.items_kept, ids(&["s1#0", "s1#1", "s1.2#0", "s3.1#0"]));
    assert_eq!((r.nodes_explored, r.nodes_pruned), (6, 0));
    assert_eq!(r.pre_retrieval, stage(6, 6, 56.0, 56.0));
    assert_eq!(r.post_retrieval, stage(8, 4, 575.0, 360.0));
    // MMR picks s3.1#0 (e4, cos 4/sqrt 30) then s1.2#0 (e3, 3/sqrt 30): 110 + 90 = 200 of
    // 360 tokens, 2 of 4 items.
    assert_eq!(context(r), ["s3.1#0", "s1.2#0"]);
    assert_eq!(r.pre_synthesis, stage(4, 2, 360.0, 200.0));
    close(r.pre_synthesis.pruning_ratio(), 0.5, "syn ratio");
    close(r.pre_synthesis.token_reduction(), 160.0 / 360.0, "syn reduction");
}

/// Three stages: Pre-Retrieval GRN gate + Post-Retrieval GRN gate + Pre-Synthesis MMR.
#[test]
fn three_stage_prunes_a_branch_before_retrieval() {
    let p = Pipeline {
        pre_retrieval: grn_gate(),
        post_retrieval: grn_gate(),
        pre_synthesis: mmr_k2(),
        ..Pipeline::default()
    };
    let out = log().replay(p).unwrap();
    let (r, t) = (&out.report, &out.trace);
    // Roots are judged against the empty context: all kept. After s1, the context spans
    // e1, e2: of s1's children, s1.1 (e2) has residual 0 and is pruned before retrieval,
    // s1.2 (e3) is kept. s3.1 (e4) is kept. s2 stops as before.
    let want = Trace {
        explored: ids(&["s1", "s2", "s3", "s1.2", "s3.1"]),
        pruned: ids(&["s1.1"]),
        queued: vec![],
        stopped: ids(&["s2"]),
        not_reached: ids(&["s2.1.1", "s2.1"]),
        items_kept: ids(&["s1#0", "s1#1", "s1.2#0", "s3.1#0"]),
        items_pruned: ids(&["s2#0", "s2#1", "s1.2#1"]),
    };
    assert_eq!(*t, want);
    assert_eq!((r.nodes_explored, r.nodes_pruned, r.truncated), (5, 1, false));
    // Pre-Retrieval: 6 candidates, 56 tokens; s1.1's 6 pruned: 5 kept, 50 tokens.
    assert_eq!(r.pre_retrieval, stage(6, 5, 56.0, 50.0));
    close(r.pre_retrieval.pruning_ratio(), 1.0 / 6.0, "pre ratio");
    close(r.pre_retrieval.token_reduction(), 6.0 / 56.0, "pre reduction");
    // Post-Retrieval: s1.1's item is never retrieved: 7 items, 575 - 70 = 505 tokens.
    assert_eq!(r.post_retrieval, stage(7, 4, 505.0, 360.0));
    close(r.post_retrieval.pruning_ratio(), 3.0 / 7.0, "post ratio");
    close(
        r.post_retrieval.token_reduction(),
        145.0 / 505.0,
        "post reduction",
    );
    assert_eq!(r.pre_synthesis, stage(4, 2, 360.0, 200.0));
    assert_eq!(context(r), ["s3.1#0", "s1.2#0"]);
    // The JSON carries the same numbers under the documented names.
    let j = r.to_json();
    assert_eq!(j["nodes_explored"], 5);
    assert_eq!(j["nodes_pruned"], 1);
    assert_eq!(j["stages"]["pre_retrieval"]["pruned"], 1);
    assert_eq!(j["stages"]["post_retrieval"]["tokens_in"], 505.0);
    close(
        j["stages"]["pre_synthesis"]["token_reduction"].as_f64().unwrap(),
        160.0 / 360.0,
        "json syn reduction",
    );
    assert_eq!(j["context"]["tokens"], 200.0);
    assert_eq!(j["context"]["ids"], serde_json::json!(["s3.1#0", "s1.2#0"]));
    let table = r.to_table();
    assert!(
        table.contains("nodes explored 5, pruned before retrieval 1"),
        "{table}"
    );
    assert!(table.contains("final context: 2 items, 200 tokens"), "{table}");
}

#[test]
fn max_nodes_leaves_the_rest_queued() {
    let p = Pipeline {
        max_nodes: 3,
        ..Pipeline::default()
    };
    let out = log().replay(p).unwrap();
    assert!(out.report.truncated);
    assert_eq!(out.trace.explored, ids(&["s1", "s2", "s3"]));
    assert_eq!(out.trace.queued, ids(&["s1.1", "s1.2", "s2.1", "s3.1"]));
    assert_eq!(out.trace.not_reached, ids(&["s2.1.1"]));
}

/// A controller with zero weights and `cls.bias` = -3: `p_keep = sigmoid(-3) < 0.5` for
/// every candidate, so with `keep_best_if_none` each decision keeps its first candidate.
fn constant_controller(dir: &Path, inputs: usize) {
    let z = vec![0.0f32; inputs];
    crate::pipeline::write_controller(
        dir,
        &[
            ("reg.weight", vec![1, inputs], z.clone()),
            ("reg.bias", vec![1], vec![0.0]),
            ("cls.weight", vec![1, inputs], z),
            ("cls.bias", vec![1], vec![-3.0]),
        ],
    );
}

#[test]
fn a_stages_file_with_the_controller_at_pre_retrieval() {
    let dir = tempfile::tempdir().unwrap();
    constant_controller(dir.path(), 2 * 4 + 3);
    let path = dir.path().join("stages.toml");
    std::fs::write(
        &path,
        "max_nodes = 10\n[pre_retrieval]\npolicy = \"controller\"\nweights = \"controller.safetensors\"\n",
    )
    .unwrap();
    let st = Stages::load(&path).unwrap();
    assert_eq!(st.max_nodes, 10);
    assert_eq!(
        st.pre_retrieval.description,
        "controller controller.safetensors tau=0.5 keep_best_if_none=true"
    );
    assert_eq!(st.post_retrieval.description, "off");
    st.check_dim(4).unwrap();
    let out = log().replay(st.pipeline()).unwrap();
    // Roots: only s1 survives; s1's children: only s1.1.
    assert_eq!(out.trace.explored, ids(&["s1", "s1.1"]));
    assert_eq!(out.trace.pruned, ids(&["s2", "s3", "s1.2"]));
    assert_eq!(out.trace.not_reached, ids(&["s2.1.1", "s2.1", "s3.1"]));
    // 5 subqueries judged (10+12+8 + 6+9 = 45 tokens), 2 kept (10 + 6 = 16).
    assert_eq!(out.report.pre_retrieval, stage(5, 2, 45.0, 16.0));
    assert_eq!(out.report.post_retrieval, stage(3, 3, 230.0, 230.0));
    // The same weights cannot read 8-D embeddings: named by table and key.
    let e = st.check_dim(8).unwrap_err().to_string();
    assert!(
        e.contains("stages.toml: [pre_retrieval] weights:") && e.contains("takes 11 features"),
        "{e}"
    );
}

#[test]
fn a_stages_file_with_scorers_matches_the_three_stage_policies() {
    let text = r#"
[pre_retrieval]
policy = "scorer"
method = "grn"
mode = "gate"
threshold = 0.5

[post_retrieval]
policy = "scorer"
method = "grn"
mode = "gate"
threshold = 0.5

[pre_synthesis]
policy = "scorer"
method = "mmr"
k = 2
"#;
    let st = Stages::parse(text, Path::new("stages.toml")).unwrap();
    assert_eq!(st.max_nodes, 64);
    assert_eq!(st.post_retrieval.description, "scorer grn gate threshold=0.5");
    assert_eq!(st.pre_synthesis.description, "scorer mmr greedy k=2");
    let out = log().replay(st.pipeline()).unwrap();
    assert_eq!(out.trace.pruned, ids(&["s1.1"]));
    assert_eq!(context(&out.report), ["s3.1#0", "s1.2#0"]);
}

#[test]
fn stages_errors_name_the_file_the_table_and_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let f = |body: &str| {
        Stages::parse(body, &dir.path().join("st.toml"))
            .unwrap_err()
            .to_string()
    };
    let cases: &[(&str, &str)] = &[
        ("max_node = 3", "st.toml: unknown key 'max_node'"),
        (
            "max_nodes = 0",
            "st.toml: max_nodes: must be an integer >= 1, got integer 0",
        ),
        (
            "max_nodes = \"7\"",
            "max_nodes: must be an integer >= 1, got string \"7\"",
        ),
        (
            "pre_retrieval = 3",
            "pre_retrieval: must be a table [pre_retrieval]",
        ),
        (
            "[post_retrieval]\nmethod = \"grn\"",
            "[post_retrieval] policy: missing",
        ),
        (
            "[post_retrieval]\npolicy = \"judge\"",
            "[post_retrieval] policy: unknown policy \"judge\"",
        ),
        (
            "[pre_synthesis]\npolicy = \"off\"\nk = 3",
            "[pre_synthesis] k: unknown key for policy \"off\"",
        ),
        (
            "[post_retrieval]\npolicy = \"scorer\"",
            "[post_retrieval] method: missing",
        ),
        (
            "[post_retrieval]\npolicy = \"scorer\"\nmethod = \"bm25\"",
            "[post_retrieval] method: unknown method 'bm25'",
        ),
        (
            "[post_retrieval]\npolicy = \"scorer\"\nmethod = \"grn\"\ntau = 0.3",
            "[post_retrieval] tau: unknown key for policy \"scorer\"",
        ),
        (
            "[post_retrieval]\npolicy = \"scorer\"\nmethod = \"mmr\"\nk = \"5\"",
            "[post_retrieval] k: must be an integer >= 0, got string \"5\"",
        ),
        (
            "[post_retrieval]\npolicy = \"scorer\"\nmethod = \"mmr\"\nk = -1",
            "[post_retrieval] k: must be an integer >= 0, got -1",
        ),
        (
            "[post_retrieval]\npolicy = \"scorer\"\nmethod = \"mmr\"\nlambda = 2",
            "[post_retrieval] lambda: must be in [0, 1], got 2",
        ),
        (
            "[post_retrieval]\npolicy = \"scorer\"\nmethod = \"grn\"\nlambda = 0.5",
            "[post_retrieval] lambda: applies to mmr and lexical",
        ),
        (
            "[post_retrieval]\npolicy = \"scorer\"\nmethod = \"grn\"\nmode = \"gate\"\nk = 3",
            "[post_retrieval] k: gate mode keeps every candidate",
        ),
        (
            "[post_retrieval]\npolicy = \"scorer\"\nmethod = \"grn\"\nmode = \"sometimes\"",
            "[post_retrieval] mode:",
        ),
        (
            "[post_retrieval]\npolicy = \"scorer\"\nmethod = \"mmr\"\ntoken_budget = -5",
            "[post_retrieval] token_budget: must be finite and >= 0",
        ),
        (
            "[post_retrieval]\npolicy = \"scorer\"\nmethod = \"hybrid\"\nweights = [1, \"x\", 2]",
            "[post_retrieval] weights: element 1 must be a number",
        ),
        (
            "[post_retrieval]\npolicy = \"scorer\"\nmethod = \"hybrid\"\nweights = [1, 2]",
            "[post_retrieval] weights: hybrid takes three weights",
        ),
        (
            "[post_retrieval]\npolicy = \"scorer\"\nmethod = \"grn\"\nmode = \"gate\"\nthreshold = nan",
            "[post_retrieval] threshold: must be finite",
        ),
        (
            "[pre_retrieval]\npolicy = \"controller\"",
            "[pre_retrieval] weights: missing",
        ),
        (
            "[pre_retrieval]\npolicy = \"controller\"\nweights = \"none.safetensors\"",
            "[pre_retrieval] weights: ",
        ),
        (
            "[pre_retrieval]\npolicy = \"scorer\"\nmethod = \"grn\"\n[pre_retrieval.x]\ny = 1",
            "[pre_retrieval] x: unknown key",
        ),
        ("[post_retrieval\npolicy = 1", "st.toml: line 1, column"),
    ];
    for (body, want) in cases {
        let e = f(body);
        assert!(e.contains(want), "{body:?}: {e:?} lacks {want:?}");
        assert_eq!(e.lines().count(), 1, "{body:?}: {e:?}");
    }
    // A missing weights file is named with its directory.
    let e = f("[pre_retrieval]\npolicy = \"controller\"\nweights = \"none.safetensors\"");
    assert!(
        e.contains(&dir.path().join("none.safetensors").display().to_string()),
        "{e}"
    );
    // The controller's other keys are checked too.
    constant_controller(dir.path(), 11);
    for (body, want) in [
        (
            "tau = \"high\"",
            "[pre_retrieval] tau: must be a number, got string \"high\"",
        ),
        ("tau = inf", "[pre_retrieval] tau: must be finite"),
        (
            "keep_best_if_none = 1",
            "[pre_retrieval] keep_best_if_none: must be true or false",
        ),
        (
            "lambda = 0.5",
            "[pre_retrieval] lambda: unknown key for policy \"controller\"",
        ),
    ] {
        let e = f(&format!(
            "[pre_retrieval]\npolicy = \"controller\"\nweights = \"controller.safetensors\"\n{body}"
        ));
        assert!(e.contains(want), "{body:?}: {e:?} lacks {want:?}");
    }
}

/// `RUN` with line `n` (from 1) replaced by `with`.
fn edit(n: usize, with: &str) -> String {
    RUN.lines()
        .enumerate()
        .map(|(i, l)| if i + 1 == n { with } else { l })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn log_errors_name_the_file_and_the_line() {
    let err = |text: &str| {
        RunLog::parse(text, Path::new("run.jsonl"), None)
            .unwrap_err()
            .to_string()
    };
    let sub = |id: &str, parent: &str, depth: &str| {
        format!(
            r#"{{"type":"subquery","id":"{id}","parent":{parent},"depth":{depth},"text":"t","tokens":1,"embedding":[1,0,0,0]}}"#
        )
    };
    let cases: Vec<(String, &str)> = vec![
        (edit(5, &sub("s1.1", "\"s1\"", "2")), "run.jsonl: line 5: \"depth\" is 2, but its parent \"s1\" (line 2) has depth 0, so it must be 1"),
        (edit(2, &sub("s1", "null", "1")), "run.jsonl: line 2: \"depth\" is 1, but a subquery with parent null has depth 0, so it must be 0"),
        (edit(5, &sub("s1.1", "\"s9\"", "1")), "run.jsonl: line 5: parent \"s9\" is not the id of any subquery in this file"),
        (edit(5, &sub("s1", "null", "0")), "run.jsonl: line 5: duplicate subquery id \"s1\" (first on line 2)"),
        (edit(2, &sub("s1", "\"s1.1\"", "2")), "run.jsonl: line 2: subquery \"s1\" is its own ancestor (parents s1 -> s1.1 -> s1: a cycle of 2)"),
        (edit(5, &sub("s1.1", "\"s1.1\"", "1")), "run.jsonl: line 5: subquery \"s1.1\" is its own ancestor"),
        (edit(3, r#"{"type":"item","subquery":"s1","text":"x","tokens":100}"#), "run.jsonl: line 3: no \"embedding\", and no text encoder was given"),
        (edit(3, r#"{"type":"item","subquery":"s1","text":"x","tokens":100,"embedding":[1,0,0]}"#), "run.jsonl: line 3: embedding has 3 values, but line 1's has 4"),
        (edit(3, r#"{"type":"item","subquery":"s1","text":"x","tokens":0,"embedding":[1,0,0,0]}"#), "run.jsonl: line 3: \"tokens\" must be a finite number > 0, got 0"),
        (edit(3, r#"{"type":"item","subquery":"s1","text":"x","tokens":-2.5,"embedding":[1,0,0,0]}"#), "run.jsonl: line 3: \"tokens\" must be a finite number > 0, got -2.5"),
        (edit(3, r#"{"type":"item","subquery":"s1","text":"x","tokens":"9","embedding":[1,0,0,0]}"#), "run.jsonl: line 3: \"tokens\" is a string, not a number"),
        (edit(3, r#"{"type":"item","subquery":"s1","text":"x","embedding":[1,0,0,0]}"#), "run.jsonl: line 3: missing \"tokens\""),
        (edit(3, r#"{"type":"item","subquery":"s1","text":"x","tokens":1,"embedding":[0,0,0,0]}"#), "run.jsonl: line 3: embedding is all zeros"),
        (edit(3, r#"{"type":"item","subquery":"s1","text":"x","tokens":1,"embedding":[1,1e39,0,0]}"#), "run.jsonl: line 3: \"embedding\" element 1: 1e39 does not fit in f32"),
        (edit(3, r#"{"type":"item","subquery":"s1","text":"x","tokens":1,"embedding":[1,0,0,0],"url":"u"}"#), "run.jsonl: line 3: unknown field \"url\" (\"item\" records have type, subquery, text, tokens, embedding)"),
        (edit(3, r#"{"type":"item","subquery":"s7","text":"x","tokens":1,"embedding":[1,0,0,0]}"#), "run.jsonl: line 3: subquery \"s7\" is not the id of any subquery in this file"),
        (edit(3, r#"{"type":"result","subquery":"s1"}"#), "run.jsonl: line 3: \"type\" is \"result\" (query, subquery or item)"),
        (edit(3, r#"{"subquery":"s1"}"#), "run.jsonl: line 3: missing \"type\""),
        (edit(3, "[1, 2]"), "run.jsonl: line 3: expected a JSON object, got an array"),
        (edit(3, "{\"type\": "), "run.jsonl: line 3: invalid JSON"),
        (edit(3, RUN.lines().next().unwrap()), "run.jsonl: line 3: a second \"query\" record (the first is on line 1"),
        (RUN.lines().skip(1).collect::<Vec<_>>().join("\n"), "run.jsonl: no \"query\" record"),
        (edit(2, r#"{"type":"subquery","id":"s1","parent":null,"depth":-1,"text":"t","tokens":1,"embedding":[1,0,0,0]}"#), "run.jsonl: line 2: \"depth\" must be an integer >= 0, got -1"),
        (edit(2, r#"{"type":"subquery","id":"s1","parent":3,"depth":0,"text":"t","tokens":1,"embedding":[1,0,0,0]}"#), "run.jsonl: line 2: \"parent\" is a number, not null or a subquery id"),
    ];
    for (text, want) in &cases {
        let e = err(text);
        assert!(e.contains(want), "{e:?} lacks {want:?}");
        assert_eq!(e.lines().count(), 1, "{e:?}");
    }
}

/// A chain of 50,000 subqueries, each the parent of the next and written child first: the
/// checks are linear (no walk to the root per subquery), and the replay stops at max_nodes.
#[test]
fn a_deep_chain_is_checked_in_linear_time() {
    let n = 50_000;
    let mut text = String::from("{\"type\":\"query\",\"text\":\"q\",\"embedding\":[1,0]}\n");
    for i in (0..n).rev() {
        let parent = if i == 0 {
            "null".to_string()
        } else {
            format!("\"c{}\"", i - 1)
        };
        text.push_str(&format!(
            "{{\"type\":\"subquery\",\"id\":\"c{i}\",\"parent\":{parent},\"depth\":{i},\"text\":\"t\",\"tokens\":1,\"embedding\":[0,1]}}\n"
        ));
    }
    let t = std::time::Instant::now();
    let l = RunLog::parse(&text, Path::new("chain.jsonl"), None).unwrap();
    let out = l.replay(Pipeline::default()).unwrap();
    assert!(t.elapsed().as_secs() < 20, "{:?}", t.elapsed());
    assert_eq!(out.report.nodes_explored, 64);
    assert!(out.report.truncated);
    // Closing the chain into a loop is a cycle, named from its first line.
    let looped = text.replacen(
        "\"parent\":null,\"depth\":0",
        &format!("\"parent\":\"c{}\",\"depth\":0", n - 1),
        1,
    );
    let e = RunLog::parse(&looped, Path::new("chain.jsonl"), None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("chain.jsonl: line 2: subquery \"c49999\" is its own ancestor (parents c49999 -> c49998 -> c49997 -> c49996 -> ... -> c49999: a cycle of 50000)"), "{e}");
}

#[test]
fn an_encoder_embeds_the_records_without_one() {
    // Drop the embeddings of the query and of s1#1; the encoder gives fixed vectors.
    let text = edit(
        1,
        r#"{"type":"query","text":"why do solid-state batteries fail"}"#,
    );
    let text = text.replace(
        r#""text":"interface resistance","tokens":60,"embedding":[0,1,0,0]"#,
        r#""text":"interface resistance","tokens":60"#,
    );
    let calls = std::cell::Cell::new(0);
    let enc = |texts: &[&str]| -> Result<Embeddings> {
        calls.set(calls.get() + 1);
        assert_eq!(
            texts,
            ["why do solid-state batteries fail", "interface resistance"]
        );
        Embeddings::new(2, 4, vec![1.0, 2.0, 3.0, 4.0, 0.0, 1.0, 0.0, 0.0], "enc")
    };
    let l = RunLog::parse(&text, Path::new("run.jsonl"), Some(&enc)).unwrap();
    assert_eq!(calls.get(), 1);
    assert_eq!(l.query().embedding, vec![1.0, 2.0, 3.0, 4.0]);
    assert_eq!(l.items()[1].embedding, vec![0.0, 1.0, 0.0, 0.0]);
    // Same replay as with the embeddings written out.
    let p = || Pipeline {
        post_retrieval: grn_gate(),
        ..Pipeline::default()
    };
    assert_eq!(l.replay(p()).unwrap().trace, log().replay(p()).unwrap().trace);
    // An encoder of another dimension is refused at the first line it embedded.
    let wide =
        |t: &[&str]| -> Result<Embeddings> { Embeddings::new(t.len(), 5, vec![1.0; 5 * t.len()], "enc") };
    let e = RunLog::parse(&text, Path::new("run.jsonl"), Some(&wide))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("run.jsonl: line 1: the text encoder's embedding has 5 values, but line 2's has 4"),
        "{e}"
    );
    let short = |_: &[&str]| -> Result<Embeddings> { Embeddings::new(1, 4, vec![1.0; 4], "enc") };
    let e = RunLog::parse(&text, Path::new("run.jsonl"), Some(&short))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("the text encoder returned 1 embeddings for 2 texts"),
        "{e}"
    );
}

#[cfg(feature = "cli")]
mod cli {
    use super::RUN;
    use crate::cli::run;

    const STAGES: &str = r#"
[pre_retrieval]
policy = "scorer"
method = "grn"
mode = "gate"
threshold = 0.5

[post_retrieval]
policy = "scorer"
method = "grn"
mode = "gate"
threshold = 0.5

[pre_synthesis]
policy = "scorer"
method = "mmr"
k = 2
"#;

    #[test]
    fn pipeline_prints_the_accounting_as_json_and_as_a_table() {
        let d = tempfile::tempdir().unwrap();
        let (st, input) = (d.path().join("stages.toml"), d.path().join("run.jsonl"));
        std::fs::write(&st, STAGES).unwrap();
        std::fs::write(&input, RUN).unwrap();
        let (st, input) = (st.display().to_string(), input.display().to_string());
        let (code, out, err) = run(&[
            "pipeline",
            "--config",
            &st,
            "--input",
            &input,
            "--format",
            "json",
            "--backend",
            "cpu",
        ]);
        assert_eq!(code, 0, "{err}");
        assert!(err.is_empty(), "{err}");
        let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
        // The three-stage numbers of three_stage_prunes_a_branch_before_retrieval.
        assert_eq!(v["nodes_explored"], 5);
        assert_eq!(v["nodes_pruned"], 1);
        assert_eq!(v["truncated"], false);
        assert_eq!(v["max_nodes"], 64);
        let s = &v["stages"];
        for (stage, c, k, tin, tk) in [
            ("pre_retrieval", 6, 5, 56.0, 50.0),
            ("post_retrieval", 7, 4, 505.0, 360.0),
            ("pre_synthesis", 4, 2, 360.0, 200.0),
        ] {
            assert_eq!(s[stage]["candidates"], c, "{stage}");
            assert_eq!(s[stage]["kept"], k, "{stage}");
            assert_eq!(s[stage]["pruned"], c - k, "{stage}");
            assert_eq!(s[stage]["tokens_in"], tin, "{stage}");
            assert_eq!(s[stage]["tokens_kept"], tk, "{stage}");
            assert_eq!(s[stage]["pruning_ratio"], 1.0 - k as f64 / c as f64, "{stage}");
            assert_eq!(s[stage]["token_reduction"], 1.0 - tk / tin, "{stage}");
        }
        assert_eq!(v["context"]["items"], 2);
        assert_eq!(v["context"]["tokens"], 200.0);
        assert_eq!(v["policies"]["pre_synthesis"], "scorer mmr greedy k=2");
        assert_eq!(v["trace"]["pruned"], serde_json::json!(["s1.1"]));
        assert_eq!(v["trace"]["stopped"], serde_json::json!(["s2"]));
        // The table: one row per stage and the totals.
        let (code, out, err) = run(&["pipeline", "--config", &st, "--input", &input]);
        assert_eq!(code, 0, "{err}");
        // The last line naming the stage is its row (the first describes its policy).
        let row = out
            .lines()
            .rev()
            .find(|l| l.starts_with("post_retrieval "))
            .unwrap_or_else(|| panic!("{out}"));
        let cols: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(
            cols,
            ["post_retrieval", "7", "4", "42.9", "505", "360", "28.7"],
            "{out}"
        );
        assert!(
            out.contains("nodes explored 5, pruned before retrieval 1, truncated by max_nodes: no"),
            "{out}"
        );
        assert!(out.contains("final context: 2 items, 200 tokens"), "{out}");
    }

    #[test]
    fn pipeline_bad_inputs_fail_with_one_line_and_no_output() {
        let d = tempfile::tempdir().unwrap();
        let p = |name: &str, body: &str| {
            let f = d.path().join(name);
            std::fs::write(&f, body).unwrap();
            f.display().to_string()
        };
        let good_st = p("stages.toml", STAGES);
        let good_run = p("run.jsonl", RUN);
        let bad_depth = p(
            "depth.jsonl",
            &RUN.replacen(r#""parent":"s1","depth":1"#, r#""parent":"s1","depth":3"#, 1),
        );
        let no_emb = p(
            "noemb.jsonl",
            &RUN.replacen(r#""tokens":100,"embedding":[1,0,0,0]"#, r#""tokens":100"#, 1),
        );
        let bad_key = p(
            "key.toml",
            "[post_retrieval]\npolicy = \"scorer\"\nmethod = \"grn\"\nthreshhold = 0.5\n",
        );
        let bad_type = p(
            "type.toml",
            "[pre_synthesis]\npolicy = \"scorer\"\nmethod = \"mmr\"\nk = 2.5\n",
        );
        let missing = d.path().join("absent.jsonl").display().to_string();
        let cases: Vec<(Vec<&str>, String)> = vec![
            (
                vec!["--config", &good_st, "--input", &bad_depth],
                format!("{bad_depth}: line 5: \"depth\" is 3"),
            ),
            (
                vec!["--config", &good_st, "--input", &no_emb],
                format!("{no_emb}: line 3: no \"embedding\""),
            ),
            (
                vec!["--config", &bad_key, "--input", &good_run],
                format!("{bad_key}: [post_retrieval] threshhold: unknown key"),
            ),
            (
                vec!["--config", &bad_type, "--input", &good_run],
                format!("{bad_type}: [pre_synthesis] k: must be an integer >= 0, got float 2.5"),
            ),
            (vec!["--config", &good_st, "--input", &missing], missing.clone()),
            (
                vec!["--config", &good_st, "--input", &good_run, "--format", "yaml"],
                "--format".into(),
            ),
        ];
        for (args, want) in cases {
            let mut a = vec!["pipeline"];
            a.extend(&args);
            let (code, out, err) = run(&a);
            assert_ne!(code, 0, "{args:?}");
            assert!(out.is_empty(), "{args:?}: stdout {out:?}");
            assert_eq!(err.lines().count(), 1, "{args:?}: {err:?}");
            assert!(err.contains(&want), "{args:?}: {err:?} lacks {want:?}");
        }
    }
}
