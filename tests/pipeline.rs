//! The stage-aware driver (Algorithm 1) against an independent replay with the slow
//! definitions, judges at each stage, and the learned controller's forward pass against
//! a hand evaluation.

use crate::slow::{self, Problem};
use ctxprune::pipeline::{run, Item, Node, Pipeline, Policy, Query, Research};
use ctxprune::rng::Rng;
use ctxprune::select::judge::{Candidate, Judge, JudgeContext, LearnedController};
use ctxprune::select::{Method, Mode, SelectConfig};
use ctxprune::{Embeddings, Result};
use std::collections::VecDeque;
use std::path::Path;

/// A seeded research tree: 3 subqueries, 2 children each down to depth 2, 4 items per
/// retrieval of which some repeat earlier items.
struct Toy {
    rng: Rng,
    d: usize,
    seen: Vec<Vec<f32>>,
    retrieved: Vec<String>,
}

impl Toy {
    fn new(seed: u64) -> Self {
        Toy {
            rng: Rng::new(seed),
            d: 64,
            seen: vec![],
            retrieved: vec![],
        }
    }
    fn vec(&mut self) -> Vec<f32> {
        let v: Vec<f32> = (0..self.d).map(|_| self.rng.normal() as f32).collect();
        crate::unit(&v)
    }
}

impl Research for Toy {
    fn decompose(&mut self, _: &Query) -> Result<Vec<Node>> {
        Ok((0..3).map(|i| Node::new(&format!("s{i}"), self.vec())).collect())
    }
    fn retrieve(&mut self, n: &Node) -> Result<Vec<Item>> {
        self.retrieved.push(n.text.clone());
        let mut out = vec![];
        for k in 0..4 {
            let e = if k == 3 && !self.seen.is_empty() {
                let j = self.rng.below(self.seen.len());
                self.seen[j].clone()
            } else {
                self.vec()
            };
            self.seen.push(e.clone());
            out.push(Item::new(&format!("{} item {k}", n.text), e, 10.0 + k as f64));
        }
        Ok(out)
    }
    fn expand(&mut self, n: &Node, _: &[Item]) -> Result<Vec<Node>> {
        if n.depth >= 2 {
            return Ok(vec![]);
        }
        Ok((0..2)
            .map(|i| Node::new(&format!("{}.{i}", n.text), self.vec()))
            .collect())
    }
}

fn query() -> Query {
    Query::new(
        "root",
        (0..64).map(|i| ((i * 7 % 11) as f32 - 5.0) / 5.0).collect(),
    )
}

#[test]
fn without_pruning_everything_is_explored_and_counted() {
    let mut t = Toy::new(1);
    let r = run(&mut t, &query(), Pipeline::default()).unwrap();
    assert_eq!(r.nodes_explored, 3 + 6 + 12);
    assert_eq!(r.nodes_pruned, 0);
    assert_eq!(r.post_retrieval.candidates, 21 * 4);
    assert_eq!(r.context.len(), 84);
    assert_eq!(r.post_retrieval.tokens_in, 21.0 * (10.0 + 11.0 + 12.0 + 13.0));
    assert_eq!(r.pre_synthesis.pruning_ratio(), 0.0);
    assert_eq!(t.retrieved.len(), 21);
}

#[test]
fn post_retrieval_grn_gate_matches_a_replay_with_the_slow_definition() {
    let tau = 0.6;
    let mut t = Toy::new(2);
    let p = Pipeline {
        post_retrieval: Policy::Scorer(SelectConfig::new(Method::Grn).mode(Mode::Gate).threshold(tau)),
        pre_synthesis: Policy::Scorer(SelectConfig::new(Method::Mmr).k(5)),
        ..Pipeline::default()
    };
    let r = run(&mut t, &query(), p).unwrap();
    // Replay Algorithm 1 breadth-first on a fresh copy of the same seeded tree.
    let mut t2 = Toy::new(2);
    let q = query();
    let mut ctx: Vec<Item> = vec![];
    let mut queue: VecDeque<Node> = t2.decompose(&q).unwrap().into();
    let (mut cands, mut kept_n) = (0, 0);
    while let Some(n) = queue.pop_front() {
        let items = t2.retrieve(&n).unwrap();
        let rows: Vec<&[f32]> = ctx.iter().chain(&items).map(|i| i.embedding.as_slice()).collect();
        let e = Embeddings::from_rows(&rows, "replay").unwrap();
        let p = Problem {
            e: &e,
            q: None,
            costs: None,
        };
        let c: Vec<usize> = (0..ctx.len()).collect();
        let kept: Vec<Item> = items
            .iter()
            .enumerate()
            .filter(|(k, _)| p.grn(ctx.len() + k, &c) >= tau)
            .map(|(_, i)| i.clone())
            .collect();
        cands += items.len();
        kept_n += kept.len();
        ctx.extend(kept.iter().cloned());
        let depth = n.depth;
        let mut kids = t2.expand(&n, &kept).unwrap();
        kids.iter_mut().for_each(|k| k.depth = depth + 1);
        queue.extend(kids);
    }
    assert_eq!(
        (r.post_retrieval.candidates, r.post_retrieval.kept),
        (cands, kept_n)
    );
    assert!(kept_n < cands, "the repeated items must be pruned");
    // Pre-synthesis: MMR k=5 over the accumulated context, from scratch.
    let rows: Vec<&[f32]> = ctx.iter().map(|i| i.embedding.as_slice()).collect();
    let e = Embeddings::from_rows(&rows, "ctx").unwrap();
    let p = Problem {
        e: &e,
        q: Some(&q.embedding),
        costs: None,
    };
    let (want, _) = slow::greedy(
        ctx.len(),
        &|x, c| p.mmr(ctxprune::select::presets::DEFAULT_MMR_LAMBDA, x, c),
        &[],
        Some(5),
        None,
        None,
        None,
        slow::StopRule::None,
    );
    let want: Vec<Item> = want.into_iter().map(|i| ctx[i].clone()).collect();
    assert_eq!(r.context, want);
    // MMR runs to k = 5 (SPEC §1, revised): its scores rank, they are not gains.
    assert_eq!(want.len(), 5.min(ctx.len()));
    assert_eq!(r.pre_synthesis.kept, want.len());
    assert!(r.pre_synthesis.token_reduction() > 0.0);
}

/// Rejects subqueries whose text ends in "1"; counts calls.
struct Picky {
    calls: usize,
}

impl Judge for Picky {
    fn values(&mut self, _: &JudgeContext<'_>, c: &[Candidate<'_>]) -> Result<Vec<f64>> {
        self.calls += 1;
        Ok(c.iter()
            .map(|c| if c.text.ends_with('1') { 0.0 } else { 1.0 })
            .collect())
    }
}

#[test]
fn a_pre_retrieval_judge_stops_branches_before_retrieval() {
    let mut t = Toy::new(3);
    let p = Pipeline {
        pre_retrieval: Policy::Judge {
            judge: Box::new(Picky { calls: 0 }),
            tau: 0.5,
            keep_best_if_none: false,
        },
        ..Pipeline::default()
    };
    let r = run(&mut t, &query(), p).unwrap();
    assert!(t.retrieved.iter().all(|s| !s.ends_with('1')), "{:?}", t.retrieved);
    // s0, s2; each has children .0 (kept) and .1 (pruned); grandchildren likewise.
    assert_eq!(r.nodes_explored, 2 + 2 + 2);
    assert_eq!(r.nodes_pruned, 1 + 2 + 2);
    assert_eq!(r.pre_retrieval.candidates, 3 + 4 + 4);
    // A judge that keeps nothing, with the fallback: one branch per decision survives.
    struct Never;
    impl Judge for Never {
        fn values(&mut self, _: &JudgeContext<'_>, c: &[Candidate<'_>]) -> Result<Vec<f64>> {
            Ok(c.iter().map(|c| c.order as f64 * 0.1).collect())
        }
    }
    let mut t = Toy::new(3);
    let p = Pipeline {
        pre_retrieval: Policy::Judge {
            judge: Box::new(Never),
            tau: 10.0,
            keep_best_if_none: true,
        },
        max_nodes: 2,
        ..Pipeline::default()
    };
    let r = run(&mut t, &query(), p).unwrap();
    assert_eq!(t.retrieved, vec!["s2".to_string(), "s2.1".to_string()]);
    assert!(r.truncated);
}

/// Writes a controller's tensors to `dir/controller.safetensors`.
pub fn write_controller(dir: &Path, layers: &[(&str, Vec<usize>, Vec<f32>)]) -> std::path::PathBuf {
    use safetensors::{serialize, tensor::TensorView, Dtype};
    let bytes: Vec<(String, Vec<u8>, Vec<usize>)> = layers
        .iter()
        .map(|(n, s, v)| {
            (
                n.to_string(),
                v.iter().flat_map(|x| x.to_le_bytes()).collect(),
                s.clone(),
            )
        })
        .collect();
    let views: Vec<(String, TensorView<'_>)> = bytes
        .iter()
        .map(|(n, b, s)| (n.clone(), TensorView::new(Dtype::F32, s.clone(), b).unwrap()))
        .collect();
    let p = dir.join("controller.safetensors");
    std::fs::write(&p, serialize(views, None).unwrap()).unwrap();
    p
}

#[test]
fn learned_controller_forward_matches_a_hand_evaluation() {
    // Embeddings of width 2: features = 2 (state) + 2 (candidate) + 3 structural = 7.
    let mut rng = Rng::new(9);
    let mut r = |n: usize| -> Vec<f32> { (0..n).map(|_| rng.normal() as f32 * 0.5).collect() };
    let (w0, b0, w1, b1, wr, br, wc, bc) = (r(5 * 7), r(5), r(3 * 5), r(3), r(3), r(1), r(3), r(1));
    let dir = tempfile::tempdir().unwrap();
    let path = write_controller(
        dir.path(),
        &[
            ("trunk.0.weight", vec![5, 7], w0.clone()),
            ("trunk.0.bias", vec![5], b0.clone()),
            ("trunk.1.weight", vec![3, 5], w1.clone()),
            ("trunk.1.bias", vec![3], b1.clone()),
            ("reg.weight", vec![1, 3], wr.clone()),
            ("reg.bias", vec![1], br.clone()),
            ("cls.weight", vec![1, 3], wc.clone()),
            ("cls.bias", vec![1], bc.clone()),
        ],
    );
    let mut c = LearnedController::load(&path).unwrap();
    assert_eq!(c.input_width(), 7);
    let q = [1.0f32, 0.0];
    let ret = [0.0f32, 1.0];
    let retained: Vec<&[f32]> = vec![&ret];
    let ctx = JudgeContext {
        stage: ctxprune::select::judge::Stage::PreRetrieval,
        query_text: "q",
        query: &q,
        retained: &retained,
    };
    let emb = [0.3f32, -0.7];
    let cand = Candidate {
        text: "x",
        embedding: &emb,
        depth: 2,
        order: 1,
    };
    let f = LearnedController::features(&ctx, &cand).unwrap();
    assert_eq!(f, vec![0.5, 0.5, 0.3, -0.7, 2.0, 1.0, 1.0]);
    let dense = |w: &[f32], b: &[f32], x: &[f64], out: usize, relu: bool| -> Vec<f64> {
        (0..out)
            .map(|o| {
                let v = f64::from(b[o])
                    + (0..x.len())
                        .map(|i| f64::from(w[o * x.len() + i]) * x[i])
                        .sum::<f64>();
                if relu {
                    v.max(0.0)
                } else {
                    v
                }
            })
            .collect()
    };
    let x: Vec<f64> = f.iter().map(|&v| f64::from(v)).collect();
    let h = dense(&w1, &b1, &dense(&w0, &b0, &x, 5, true), 3, true);
    let util = dense(&wr, &br, &h, 1, false)[0];
    let p = 1.0 / (1.0 + (-dense(&wc, &bc, &h, 1, false)[0]).exp());
    let out = c.forward(&f).unwrap();
    assert!((out.utility - util).abs() < 1e-5, "{} vs {util}", out.utility);
    assert!((out.p_keep - p).abs() < 1e-6, "{} vs {p}", out.p_keep);
    assert_eq!(c.values(&ctx, &[cand]).unwrap(), vec![out.p_keep]);
    assert!(c
        .forward(&f[..6])
        .unwrap_err()
        .to_string()
        .contains("dimension mismatch"));
    // Malformed weights name the tensor.
    let bad = write_controller(
        dir.path(),
        &[
            ("trunk.0.weight", vec![5, 7], w0),
            ("trunk.0.bias", vec![4], b0[..4].to_vec()),
        ],
    );
    let e = LearnedController::load(&bad).unwrap_err().to_string();
    assert!(e.contains("trunk.0"), "{e}");
    let missing = write_controller(
        dir.path(),
        &[("reg.weight", vec![1, 3], wr), ("reg.bias", vec![1], br)],
    );
    assert!(LearnedController::load(&missing)
        .unwrap_err()
        .to_string()
        .contains("cls.weight"));
}
