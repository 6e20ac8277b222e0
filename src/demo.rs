//! The built-in, seeded synthetic pool behind `ctxprune demo`, also used by the benches
//! and tests: clustered unit embeddings with a query near a few clusters, topic-word texts
//! (so the lexical scorer has something to read) and token costs from the texts' lengths.

use crate::embeddings::Embeddings;
use crate::error::Result;
use crate::rng::Rng;
use crate::select::{select, Inputs, Method, Mode, SelectConfig};
use std::fmt::Write as _;

/// A synthetic retrieval pool.
#[derive(Clone, Debug)]
pub struct Pool {
    /// `n × d` embeddings (not normalised; rows have random norms around 1).
    pub embeddings: Embeddings,
    /// The query embedding.
    pub query: Vec<f32>,
    /// One text per row.
    pub texts: Vec<String>,
    /// The query text.
    pub query_text: String,
    /// Token cost of every row (its word count).
    pub costs: Vec<f64>,
}

const WORDS: [&str; 24] = [
    "retrieval",
    "context",
    "agent",
    "token",
    "budget",
    "query",
    "evidence",
    "report",
    "synthesis",
    "cluster",
    "kernel",
    "gradient",
    "latency",
    "cache",
    "reranker",
    "document",
    "citation",
    "source",
    "summary",
    "search",
    "prune",
    "memory",
    "diversity",
    "coverage",
];

/// A seeded pool of `n` items in `d` dimensions drawn around `clusters` centres. The
/// query lies between the first two centres; a third of the rows are near-duplicates of
/// an earlier row (what retrieval returns in practice).
#[must_use]
pub fn synthetic_pool(n: usize, d: usize, clusters: usize, seed: u64) -> Pool {
    let mut rng = Rng::new(seed);
    let clusters = clusters.max(1);
    let centres: Vec<Vec<f64>> = (0..clusters)
        .map(|_| unit((0..d).map(|_| rng.normal()).collect()))
        .collect();
    let mut data = Vec::with_capacity(n * d);
    let mut texts = Vec::with_capacity(n);
    let mut costs = Vec::with_capacity(n);
    for i in 0..n {
        let row: Vec<f64> = if i > 0 && rng.uniform() < 0.33 {
            let src = rng.below(i);
            let base = &data[src * d..(src + 1) * d];
            base.iter()
                .map(|&v: &f32| f64::from(v) + 0.05 * rng.normal() / (d as f64).sqrt())
                .collect()
        } else {
            let c = rng.below(clusters);
            let spread = 0.6 + 0.4 * rng.uniform();
            let scale = 0.8 + 0.4 * rng.uniform();
            centres[c]
                .iter()
                .map(|&m| scale * (m + spread * rng.normal() / (d as f64).sqrt()))
                .collect()
        };
        data.extend(row.iter().map(|&v| v as f32));
        let topic = i % clusters;
        let len = 20 + rng.below(180);
        let text: Vec<&str> = (0..len)
            .map(|_| {
                if rng.uniform() < 0.5 {
                    WORDS[(topic * 3 + rng.below(3)) % WORDS.len()]
                } else {
                    WORDS[rng.below(WORDS.len())]
                }
            })
            .collect();
        costs.push(len as f64);
        texts.push(text.join(" "));
    }
    let q: Vec<f64> = (0..d)
        .map(|k| centres[0][k] + centres[clusters.min(2) - 1][k] + 0.5 * rng.normal() / (d as f64).sqrt())
        .collect();
    let embeddings = match Embeddings::new(n, d, data, "synthetic") {
        Ok(e) => e,
        Err(e) => unreachable!("generator produced an invalid matrix: {e}"),
    };
    Pool {
        embeddings,
        query: unit(q).into_iter().map(|v| v as f32).collect(),
        texts,
        query_text: format!("{} {} {} {}", WORDS[0], WORDS[1], WORDS[3], WORDS[4]),
        costs,
    }
}

fn unit(v: Vec<f64>) -> Vec<f64> {
    let n = v.iter().map(|x| x * x).sum::<f64>().sqrt().max(1e-300);
    v.into_iter().map(|x| x / n).collect()
}

/// Runs every scorer in both modes on the built-in pool and returns the table `ctxprune
/// demo` prints.
pub fn run() -> Result<String> {
    let (n, d) = (2000, 384);
    let pool = synthetic_pool(n, d, 12, 2026);
    let backend = crate::backend::Backend::auto();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "ctxprune demo: seeded synthetic pool, {n} items, d = {d}, 12 topics"
    );
    let _ = writeln!(
        out,
        "backend: {}{}",
        backend.backend.name(),
        backend
            .reason
            .as_ref()
            .map_or(String::new(), |r| format!(" ({r})"))
    );
    let total: f64 = pool.costs.iter().sum();
    let _ = writeln!(out, "pool: {n} items, {total:.0} tokens; greedy: k <= 20, token budget 3000; gate: paper tau, 5 retained\n");
    let _ = writeln!(
        out,
        "{:<10} {:<7} {:>6} {:>8} {:>10} {:>9}  {:<8} stopped by",
        "method", "mode", "kept", "tokens", "token %", "time ms", "backend"
    );
    // Retained context for the gate: the five rows most relevant to the query.
    let mut rel: Vec<(usize, f64)> = (0..n)
        .map(|i| (i, crate::backend::cpu::dot(pool.embeddings.row(i), &pool.query)))
        .collect();
    rel.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    let retained: Vec<usize> = rel[..5].iter().map(|r| r.0).collect();
    for m in Method::ALL {
        for mode in [Mode::Greedy, Mode::Gate] {
            let mut cfg = SelectConfig::new(m).mode(mode).backend(backend.backend.clone());
            let inp = Inputs {
                embeddings: Some(&pool.embeddings),
                query: Some(&pool.query),
                texts: Some(&pool.texts),
                query_text: Some(&pool.query_text),
                costs: Some(&pool.costs),
                retained: if mode == Mode::Gate { &retained } else { &[] },
            };
            cfg = match mode {
                Mode::Greedy => cfg.k(20).token_budget(3000.0),
                Mode::Gate if m == Method::Hybrid => cfg.threshold(0.3),
                Mode::Gate => cfg,
            };
            let t = std::time::Instant::now();
            let s = select(&cfg, &inp)?;
            let ms = t.elapsed().as_secs_f64() * 1e3;
            let _ = writeln!(
                out,
                "{:<10} {:<7} {:>6} {:>8.0} {:>9.1}% {:>9.2}  {:<8} {}",
                m.name(),
                mode.name(),
                s.selected.len(),
                s.tokens_selected,
                100.0 * s.tokens_selected / total,
                ms,
                s.backend.name(),
                s.stop.map_or_else(
                    || format!("tau = {}", s.threshold.unwrap_or(f64::NAN)),
                    |st| st.as_str().to_string()
                )
            );
        }
    }
    pipeline_section(&pool, &mut out)?;
    rerank_section(&pool, &backend.backend, &mut out)?;
    mask_section(&mut out)?;
    cost_section(&mut out)?;
    Ok(out)
}

/// Observation masking on a seeded 40-turn OpenAI-format trajectory.
fn mask_section(out: &mut String) -> Result<()> {
    use crate::mask::masker::{MaskConfig, Masker};
    use crate::mask::{Format, Trajectory};
    let mut rng = Rng::new(9);
    let mut msgs = vec![serde_json::json!({"role": "user", "content": "research the topic"})];
    for t in 0..40 {
        let id = format!("call{t}");
        msgs.push(serde_json::json!({"role": "assistant", "tool_calls": [{"id": id, "type": "function",
            "function": {"name": if t % 3 == 0 { "open" } else { "search" }, "arguments": format!("{{\"q\":\"step {t}\"}}")}}]}));
        let body: Vec<&str> = (0..200 + rng.below(600))
            .map(|_| WORDS[rng.below(WORDS.len())])
            .collect();
        let mut tool = serde_json::json!({"role": "tool", "tool_call_id": id, "content": body.join(" ")});
        if t % 11 == 5 {
            tool["is_error"] = true.into();
        }
        msgs.push(tool);
    }
    let doc = serde_json::Value::Array(msgs).to_string();
    let counter = crate::tokens::counter("o200k_base")?;
    let _ = writeln!(
        out,
        "\nobservation masking: 40-turn trajectory, o200k_base token counts"
    );
    let _ = writeln!(
        out,
        "{:<28} {:>7} {:>7} {:>12} {:>12} {:>14}",
        "masker", "masked", "kept", "tokens", "after", "rolling input"
    );
    for (name, cfg) in [
        ("paper rule (K = 5)", MaskConfig::default()),
        (
            "K = 10, step 5",
            MaskConfig {
                window: 10,
                step: 5,
                ..MaskConfig::default()
            },
        ),
        (
            "K = 5, keep 'open' pages",
            MaskConfig {
                tools_keep: vec!["open".into()],
                ..MaskConfig::default()
            },
        ),
    ] {
        let mut traj = Trajectory::parse(&doc, Format::OpenAi)?;
        let s = Masker::new(cfg, counter.as_ref()).mask(&mut traj);
        let _ = writeln!(
            out,
            "{:<28} {:>7} {:>7} {:>12} {:>12} {:>14}",
            name,
            s.observations_masked,
            s.observations_kept,
            s.tokens_before,
            s.tokens_after,
            s.rolling_input_tokens
        );
    }
    Ok(())
}

/// App. G's FLOPs per token and the listwise plan.
fn cost_section(out: &mut String) -> Result<()> {
    use crate::cost::{window_plan, Activation, ModelShape};
    let qwen = ModelShape {
        hidden: 1024,
        ffn: 3072,
        q_heads: 16,
        kv_heads: 8,
        experts_active: 1,
        activation: Activation::SwiGlu,
        layers: vec![None; 28],
    };
    let oss = ModelShape {
        hidden: 2880,
        ffn: 2880,
        q_heads: 64,
        kv_heads: 8,
        experts_active: 4,
        activation: Activation::SwiGlu,
        layers: (0..24)
            .map(|i| if i % 2 == 0 { Some(128) } else { None })
            .collect(),
    };
    let (fq, fo) = (qwen.gflops_per_token(32_768), oss.gflops_per_token(32_768));
    let (w, dup) = window_plan(50, 20, 10)?;
    let _ = writeln!(out, "\ncost (App. G, T = 32,768): qwen3-reranker-0.6b {fq:.2} GFLOPs/token, gpt-oss-20b {fo:.2} (App. G prints 7.96), gamma {:.3}", fq / fo);
    let _ = writeln!(
        out,
        "listwise plan, depth 50, window 20, stride 10: {} windows {:?}, duplication {dup:.1}",
        w.len(),
        w
    );
    Ok(())
}

/// Budgeted top-k on the synthetic pool: the pool sorted by a noisy MIPS score, an oracle
/// whose relevance has two modes (near the query, and around a far cluster centre).
fn rerank_section(pool: &Pool, backend: &crate::backend::Backend, out: &mut String) -> Result<()> {
    use crate::rerank::{metrics::ncg, rerank, DenseKernel, Method as R, Precomputed, RerankConfig};
    use crate::similarity::{Kernel, KernelKind};
    let e = &pool.embeddings;
    let n = e.rows();
    let mut rng = Rng::new(5);
    let inv = e.inv_norms()?;
    let cosq: Vec<f64> = (0..n)
        .map(|i| crate::backend::cpu::dot(e.row(i), &pool.query) * inv[i])
        .collect();
    // A far mode: the row least similar to the query.
    let far = (0..n).fold(0, |b, i| if cosq[i] < cosq[b] { i } else { b });
    let oracle: Vec<f64> = (0..n)
        .map(|i| {
            let c_far = crate::backend::cpu::dot(e.row(i), e.row(far)) * inv[i] * inv[far];
            let near = 1.0 / (1.0 + (-10.0 * (cosq[i] - 0.3)).exp());
            (0.6 * near).max((6.0 * (c_far - 1.0)).exp()).clamp(0.0, 1.0)
        })
        .collect();
    let mut order: Vec<usize> = (0..n).collect();
    let mips: Vec<f64> = cosq.iter().map(|c| c + 0.1 * rng.normal()).collect();
    order.sort_by(|&a, &b| mips[b].total_cmp(&mips[a]).then(a.cmp(&b)));
    let sorted = e.select_rows(&order)?;
    let scores: Vec<f64> = order.iter().map(|&i| oracle[i]).collect();
    let kernel = Kernel::with_median_heuristic(KernelKind::Vmf, &sorted)?;
    let dk = DenseKernel::build_on(&sorted, &pool.query, kernel, backend)?;
    let (budget, cap) = (60, 20);
    let _ = writeln!(
        out,
        "\nbudgeted top-k: pool of {n} in noisy MIPS order, oracle with two relevance modes, B = {budget}, k = {cap}"
    );
    let _ = writeln!(
        out,
        "{:<16} {:>10} {:>10} {:>9}",
        "method", "CE-nCG@k", "calls", "time ms"
    );
    for m in [R::SingleStage, R::Bagel, R::Rgs, R::BoundaryMorph] {
        let mut o = Precomputed::new(scores.clone(), budget)?;
        let t = std::time::Instant::now();
        let mut cfg = RerankConfig::new(m, budget, cap);
        cfg.backend = backend.clone();
        let r = rerank(&cfg, &dk, &mut o)?;
        let ms = t.elapsed().as_secs_f64() * 1e3;
        let _ = writeln!(
            out,
            "{:<16} {:>10.3} {:>10} {:>9.1}",
            m.name(),
            ncg(&r.selected, &scores),
            r.scored.len(),
            ms
        );
    }
    Ok(())
}

/// A research loop over the synthetic pool: subqueries are perturbed copies of the query,
/// retrieval returns the 8 rows most similar to a subquery, and each subquery spawns two
/// children down to depth 2 (3 + 6 + 12 = 21 nodes).
struct PoolResearch<'a> {
    pool: &'a Pool,
    rng: Rng,
}

impl PoolResearch<'_> {
    fn jitter(&mut self, v: &[f32], scale: f64) -> Vec<f32> {
        let d = v.len() as f64;
        v.iter()
            .map(|&x| x + (scale * self.rng.normal() / d.sqrt()) as f32)
            .collect()
    }
}

impl crate::pipeline::Research for PoolResearch<'_> {
    fn decompose(&mut self, q: &crate::pipeline::Query) -> Result<Vec<crate::pipeline::Node>> {
        Ok((0..3)
            .map(|i| crate::pipeline::Node::new(&format!("q.{i}"), self.jitter(&q.embedding, 1.0)))
            .collect())
    }
    fn retrieve(&mut self, n: &crate::pipeline::Node) -> Result<Vec<crate::pipeline::Item>> {
        let e = &self.pool.embeddings;
        let mut sims: Vec<(usize, f64)> = (0..e.rows())
            .map(|i| (i, crate::backend::cpu::dot(e.row(i), &n.embedding)))
            .collect();
        sims.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        Ok(sims[..8]
            .iter()
            .map(|&(i, _)| {
                crate::pipeline::Item::new(&self.pool.texts[i], e.row(i).to_vec(), self.pool.costs[i])
            })
            .collect())
    }
    fn expand(
        &mut self,
        n: &crate::pipeline::Node,
        _: &[crate::pipeline::Item],
    ) -> Result<Vec<crate::pipeline::Node>> {
        if n.depth >= 2 {
            return Ok(Vec::new());
        }
        Ok((0..2)
            .map(|i| crate::pipeline::Node::new(&format!("{}.{i}", n.text), self.jitter(&n.embedding, 0.8)))
            .collect())
    }
}

/// Algorithm 1 on the synthetic pool with pruning at different stages.
fn pipeline_section(pool: &Pool, out: &mut String) -> Result<()> {
    use crate::pipeline::{run, Pipeline, Policy, Query};
    let _ = writeln!(
        out,
        "\nstage-aware pipeline (Algorithm 1): 21-node research tree, 8 items per retrieval"
    );
    let _ = writeln!(
        out,
        "{:<34} {:>6} {:>7} {:>12} {:>9} {:>9}",
        "configuration", "nodes", "pruned", "retrieved tk", "post keep", "final tk"
    );
    let q = Query::new(&pool.query_text, pool.query.clone());
    let gate = |m: Method, tau: f64| Policy::Scorer(SelectConfig::new(m).mode(Mode::Gate).threshold(tau));
    let configs: Vec<(&str, Pipeline)> = vec![
        ("no pruning", Pipeline::default()),
        (
            "post-retrieval GRN gate (tau 0.5)",
            Pipeline {
                post_retrieval: gate(Method::Grn, 0.5),
                ..Pipeline::default()
            },
        ),
        (
            "+ pre-retrieval GRN 0.8, FL 800 tk",
            Pipeline {
                pre_retrieval: gate(Method::Grn, 0.8),
                post_retrieval: gate(Method::Grn, 0.5),
                pre_synthesis: Policy::Scorer(SelectConfig::new(Method::Coverage).token_budget(800.0)),
                ..Pipeline::default()
            },
        ),
    ];
    for (name, p) in configs {
        let mut r = PoolResearch {
            pool,
            rng: Rng::new(11),
        };
        let rep = run(&mut r, &q, p)?;
        let _ = writeln!(
            out,
            "{:<34} {:>6} {:>7} {:>12.0} {:>8.0}% {:>9.0}",
            name,
            rep.nodes_explored,
            rep.nodes_pruned,
            rep.post_retrieval.tokens_in,
            100.0 * (1.0 - rep.post_retrieval.pruning_ratio()),
            rep.pre_synthesis.tokens_kept
        );
    }
    Ok(())
}
