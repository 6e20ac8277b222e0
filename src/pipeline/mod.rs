//! The stage-aware research driver (marginal-value-pruning.txt Algorithm 1; SPEC §1):
//! decompose the query into subqueries, retrieve for each, expand into new subqueries,
//! and prune at three points — Pre-Retrieval (subqueries), Post-Retrieval (retrieved
//! items against the accumulated context) and Pre-Synthesis (the final context) — each
//! with its own [`Policy`]. The caller supplies the research callbacks ([`Research`]);
//! the driver reports the paper's accounting (App. A.3–A.10).
//!
//! Subqueries are judged when their sibling group is generated (a decision point of
//! App. B.3, so a judge can fall back to the best sibling), against the context at that
//! moment; exploration is breadth-first.
//!
//! The rest of the module: [`replay`] replays a logged research run (`run.jsonl`) through
//! the driver, [`stages`] reads per-stage policies from a `stages.toml`, and
//! [`Report::to_json`] / [`Report::to_table`] render the accounting (`ctxprune pipeline`).
//!
//! ```
//! use ctxprune::pipeline::{run, Item, Node, Pipeline, Policy, Query, Research};
//! use ctxprune::select::{Method, Mode, SelectConfig};
//! struct Toy;
//! impl Research for Toy {
//!     fn decompose(&mut self, _: &Query) -> ctxprune::Result<Vec<Node>> {
//!         Ok(vec![Node::new("a", vec![1.0, 0.0]), Node::new("b", vec![0.9, 0.1])])
//!     }
//!     fn retrieve(&mut self, n: &Node) -> ctxprune::Result<Vec<Item>> {
//!         // One document in the subquery's direction; b's repeats a's almost exactly.
//!         Ok(vec![Item::new(&n.text, n.embedding.clone(), 100.0)])
//!     }
//!     fn expand(&mut self, _: &Node, _: &[Item]) -> ctxprune::Result<Vec<Node>> { Ok(vec![]) }
//! }
//! let p = Pipeline {
//!     post_retrieval: Policy::Scorer(SelectConfig::new(Method::Grn).mode(Mode::Gate).threshold(0.5)),
//!     ..Pipeline::default()
//! };
//! let r = run(&mut Toy, &Query::new("q", vec![1.0, 1.0]), p)?;
//! assert_eq!(r.context.len(), 1);              // b's near-duplicate was pruned
//! assert_eq!(r.post_retrieval.candidates, 2);
//! assert_eq!(r.post_retrieval.token_reduction(), 0.5);
//! # Ok::<(), ctxprune::Error>(())
//! ```

pub mod replay;
mod report;
pub mod stages;

use crate::backend::Engine;
use crate::embeddings::Embeddings;
use crate::error::{Error, Result};
use crate::select::judge::{Candidate, Judge, JudgeContext, Stage};
use crate::select::{Inputs, SelectConfig, Selector};
use std::collections::VecDeque;

/// The root query.
#[derive(Clone, Debug, PartialEq)]
pub struct Query {
    /// Its text.
    pub text: String,
    /// Its embedding.
    pub embedding: Vec<f32>,
}

impl Query {
    /// A query from its text and embedding.
    #[must_use]
    pub fn new(text: &str, embedding: Vec<f32>) -> Self {
        Query {
            text: text.into(),
            embedding,
        }
    }
}

/// A subquery (a node of the research tree).
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    /// The caller's name for it, carried unchanged by the driver (the replay's subquery
    /// ids). By default empty.
    pub id: String,
    /// Its text.
    pub text: String,
    /// Its embedding.
    pub embedding: Vec<f32>,
    /// Tokens it costs to issue (counted in the Pre-Retrieval accounting). By default 1.
    pub tokens: f64,
    /// Depth in the tree (set by the driver: 0 for the query's direct subqueries).
    pub depth: usize,
}

impl Node {
    /// A subquery costing 1 token.
    #[must_use]
    pub fn new(text: &str, embedding: Vec<f32>) -> Self {
        Node {
            id: String::new(),
            text: text.into(),
            embedding,
            tokens: 1.0,
            depth: 0,
        }
    }
}

/// A retrieved context item.
#[derive(Clone, Debug, PartialEq)]
pub struct Item {
    /// The caller's name for it, carried unchanged into the context (the replay's item
    /// ids). By default empty.
    pub id: String,
    /// Its text.
    pub text: String,
    /// Its embedding.
    pub embedding: Vec<f32>,
    /// Its token count (> 0).
    pub tokens: f64,
}

impl Item {
    /// An item from its text, embedding and token count.
    #[must_use]
    pub fn new(text: &str, embedding: Vec<f32>, tokens: f64) -> Self {
        Item {
            id: String::new(),
            text: text.into(),
            embedding,
            tokens,
        }
    }
}

/// The caller's research loop: decomposition, retrieval, expansion.
pub trait Research {
    /// The query's first subqueries.
    fn decompose(&mut self, query: &Query) -> Result<Vec<Node>>;
    /// Items retrieved for a subquery.
    fn retrieve(&mut self, node: &Node) -> Result<Vec<Item>>;
    /// New subqueries spawned by a subquery's kept items.
    fn expand(&mut self, node: &Node, kept: &[Item]) -> Result<Vec<Node>>;
    /// Told of each subquery the Pre-Retrieval policy prunes (it is never retrieved). By
    /// default nothing happens; a caller that traces the run records it.
    fn pruned(&mut self, node: &Node) {
        let _ = node;
    }
}

/// What a stage does.
#[derive(Default)]
pub enum Policy {
    /// Keep everything.
    #[default]
    Off,
    /// A marginal-value scorer. Pre-/Post-Retrieval score candidates against the context
    /// (`Mode::Gate` keeps `V >= tau`; `Mode::Greedy` selects under the config's budgets
    /// with the context retained). Pre-Synthesis runs the config on the final context
    /// alone (greedy: budgeted selection; gate: `V(c | {}) >= tau`).
    Scorer(SelectConfig),
    /// A caller's value model: keep candidates with value >= `tau`; with
    /// `keep_best_if_none`, keep the best one when none passes (App. B.3).
    Judge {
        /// The model.
        judge: Box<dyn Judge>,
        /// The keep threshold.
        tau: f64,
        /// Keep the best candidate of a decision when none passes.
        keep_best_if_none: bool,
    },
}

/// The three stages' policies and a bound on exploration.
pub struct Pipeline {
    /// Applied to each group of new subqueries.
    pub pre_retrieval: Policy,
    /// Applied to each subquery's retrieved items.
    pub post_retrieval: Policy,
    /// Applied once to the accumulated context.
    pub pre_synthesis: Policy,
    /// Most subqueries retrieved before exploration stops. By default 64.
    pub max_nodes: usize,
    /// The engine the scorer policies select on (`ctxprune pipeline --backend`). By
    /// default the CPU; every backend keeps the same candidates.
    pub engine: Engine,
}

impl Default for Pipeline {
    fn default() -> Self {
        Pipeline {
            pre_retrieval: Policy::Off,
            post_retrieval: Policy::Off,
            pre_synthesis: Policy::Off,
            max_nodes: 64,
            engine: Engine::cpu(),
        }
    }
}

/// Items and tokens seen and kept by one stage (App. A accounting).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StageReport {
    /// Candidates the stage judged.
    pub candidates: usize,
    /// Candidates it kept.
    pub kept: usize,
    /// Tokens of the candidates.
    pub tokens_in: f64,
    /// Tokens of the kept candidates.
    pub tokens_kept: f64,
}

impl StageReport {
    /// Fraction of candidates removed (0 when there were none).
    #[must_use]
    pub fn pruning_ratio(&self) -> f64 {
        if self.candidates == 0 {
            0.0
        } else {
            1.0 - self.kept as f64 / self.candidates as f64
        }
    }

    /// Fraction of candidate tokens removed (0 when there were none).
    #[must_use]
    pub fn token_reduction(&self) -> f64 {
        if self.tokens_in == 0.0 {
            0.0
        } else {
            1.0 - self.tokens_kept / self.tokens_in
        }
    }

    fn add(&mut self, tokens: &[f64], kept: &[usize]) {
        self.candidates += tokens.len();
        self.kept += kept.len();
        self.tokens_in += tokens.iter().sum::<f64>();
        self.tokens_kept += kept.iter().map(|&i| tokens[i]).sum::<f64>();
    }
}

/// The outcome of a run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Report {
    /// Subqueries retrieved.
    pub nodes_explored: usize,
    /// Subqueries pruned before retrieval.
    pub nodes_pruned: usize,
    /// True when `max_nodes` stopped exploration with subqueries still queued.
    pub truncated: bool,
    /// Pre-Retrieval accounting (candidates are subqueries).
    pub pre_retrieval: StageReport,
    /// Post-Retrieval accounting (candidates are retrieved items).
    pub post_retrieval: StageReport,
    /// Pre-Synthesis accounting (candidates are the accumulated context).
    pub pre_synthesis: StageReport,
    /// The context handed to synthesis, in the order it was accumulated or selected.
    pub context: Vec<Item>,
}

/// Runs Algorithm 1 with `p`'s policies over the caller's research loop.
pub fn run(r: &mut dyn Research, q: &Query, mut p: Pipeline) -> Result<Report> {
    let mut rep = Report::default();
    let mut ctx: Vec<Item> = Vec::new();
    let mut queue: VecDeque<Node> = VecDeque::new();
    let first = r.decompose(q)?;
    let engine = p.engine.clone();
    let engine = &engine;
    enqueue(
        r,
        engine,
        &mut p.pre_retrieval,
        q,
        &ctx,
        first,
        0,
        &mut queue,
        &mut rep,
    )?;
    while let Some(node) = queue.pop_front() {
        if rep.nodes_explored >= p.max_nodes {
            rep.truncated = true;
            break;
        }
        rep.nodes_explored += 1;
        let items = r.retrieve(&node)?;
        for (i, it) in items.iter().enumerate() {
            if !(it.tokens.is_finite() && it.tokens > 0.0) {
                return Err(Error::invalid(
                    format!("item {i} of '{}'", node.text),
                    format!("tokens must be > 0, got {}", it.tokens),
                ));
            }
        }
        let tokens: Vec<f64> = items.iter().map(|i| i.tokens).collect();
        let kept = decide(
            engine,
            &mut p.post_retrieval,
            Stage::PostRetrieval,
            q,
            &ctx,
            &items_as_cands(&items, node.depth),
        )?;
        rep.post_retrieval.add(&tokens, &kept);
        let kept_items: Vec<Item> = kept.iter().map(|&i| items[i].clone()).collect();
        ctx.extend(kept_items.iter().cloned());
        let children = r.expand(&node, &kept_items)?;
        enqueue(
            r,
            engine,
            &mut p.pre_retrieval,
            q,
            &ctx,
            children,
            node.depth + 1,
            &mut queue,
            &mut rep,
        )?;
    }
    let tokens: Vec<f64> = ctx.iter().map(|i| i.tokens).collect();
    let kept = decide(
        engine,
        &mut p.pre_synthesis,
        Stage::PreSynthesis,
        q,
        &[],
        &items_as_cands(&ctx, 0),
    )?;
    rep.pre_synthesis.add(&tokens, &kept);
    rep.context = kept.iter().map(|&i| ctx[i].clone()).collect();
    Ok(rep)
}

/// A candidate as the scorers see it: text, embedding, tokens, tree position.
struct Cand<'a> {
    text: &'a str,
    embedding: &'a [f32],
    tokens: f64,
    depth: usize,
}

fn items_as_cands(items: &[Item], depth: usize) -> Vec<Cand<'_>> {
    items
        .iter()
        .map(|i| Cand {
            text: &i.text,
            embedding: &i.embedding,
            tokens: i.tokens,
            depth,
        })
        .collect()
}

#[allow(clippy::too_many_arguments)]
fn enqueue(
    r: &mut dyn Research,
    engine: &Engine,
    pol: &mut Policy,
    q: &Query,
    ctx: &[Item],
    mut nodes: Vec<Node>,
    depth: usize,
    queue: &mut VecDeque<Node>,
    rep: &mut Report,
) -> Result<()> {
    nodes.iter_mut().for_each(|n| n.depth = depth);
    let cands: Vec<Cand<'_>> = nodes
        .iter()
        .map(|n| Cand {
            text: &n.text,
            embedding: &n.embedding,
            tokens: n.tokens,
            depth,
        })
        .collect();
    let kept = decide(engine, pol, Stage::PreRetrieval, q, ctx, &cands)?;
    let tokens: Vec<f64> = nodes.iter().map(|n| n.tokens).collect();
    rep.pre_retrieval.add(&tokens, &kept);
    rep.nodes_pruned += nodes.len() - kept.len();
    let mut keep = vec![false; nodes.len()];
    kept.iter().for_each(|&i| keep[i] = true);
    nodes
        .iter()
        .zip(&keep)
        .filter(|(_, k)| !**k)
        .for_each(|(n, _)| r.pruned(n));
    queue.extend(nodes.into_iter().zip(keep).filter(|(_, k)| *k).map(|(n, _)| n));
    Ok(())
}

/// Indices of `cands` the policy keeps, in the order it keeps them.
fn decide(
    engine: &Engine,
    pol: &mut Policy,
    stage: Stage,
    q: &Query,
    ctx: &[Item],
    cands: &[Cand<'_>],
) -> Result<Vec<usize>> {
    if cands.is_empty() {
        return Ok(Vec::new());
    }
    match pol {
        Policy::Off => Ok((0..cands.len()).collect()),
        Policy::Judge {
            judge,
            tau,
            keep_best_if_none,
        } => {
            let retained: Vec<&[f32]> = ctx.iter().map(|i| i.embedding.as_slice()).collect();
            let jc = JudgeContext {
                stage,
                query_text: &q.text,
                query: &q.embedding,
                retained: &retained,
            };
            let jcands: Vec<Candidate<'_>> = cands
                .iter()
                .enumerate()
                .map(|(k, c)| Candidate {
                    text: c.text,
                    embedding: c.embedding,
                    depth: c.depth,
                    order: k,
                })
                .collect();
            let v = judge.values(&jc, &jcands)?;
            if v.len() != cands.len() {
                return Err(Error::invalid(
                    "judge",
                    format!("returned {} values for {} candidates", v.len(), cands.len()),
                ));
            }
            if let Some(i) = v.iter().position(|x| !x.is_finite()) {
                return Err(Error::invalid(
                    format!("judge value {i}"),
                    format!("must be finite, got {}", v[i]),
                ));
            }
            let mut kept: Vec<usize> = (0..v.len()).filter(|&i| v[i] >= *tau).collect();
            if kept.is_empty() && *keep_best_if_none {
                let best = (0..v.len()).fold(0, |b, i| if v[i] > v[b] { i } else { b });
                kept.push(best);
            }
            Ok(kept)
        }
        Policy::Scorer(cfg) => {
            // Pool = context (retained) then candidates, except at Pre-Synthesis where the
            // context itself is the pool.
            let rows: Vec<&[f32]> = ctx
                .iter()
                .map(|i| i.embedding.as_slice())
                .chain(cands.iter().map(|c| c.embedding))
                .collect();
            let e = Embeddings::from_rows(&rows, format!("{} candidates", stage.name()))?;
            e.check_dim(q.embedding.len(), "query vs candidates")?;
            let texts: Vec<String> = ctx
                .iter()
                .map(|i| i.text.clone())
                .chain(cands.iter().map(|c| c.text.to_string()))
                .collect();
            let costs: Vec<f64> = ctx
                .iter()
                .map(|i| i.tokens)
                .chain(cands.iter().map(|c| c.tokens))
                .collect();
            let retained: Vec<usize> = (0..ctx.len()).collect();
            let inp = Inputs {
                embeddings: Some(&e),
                query: Some(&q.embedding),
                texts: Some(&texts),
                query_text: Some(&q.text),
                costs: Some(&costs),
                retained: &retained,
                cancel: None,
            };
            let sel = Selector::new(engine, cfg.clone())?.select_inputs(&inp)?;
            Ok(sel.selected.into_iter().map(|i| i - ctx.len()).collect())
        }
    }
}
