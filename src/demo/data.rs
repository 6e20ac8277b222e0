//! The demo's seeded data: a synthetic retrieval pool (clustered embeddings, topic-word
//! texts, token costs), a tool-calling trajectory, a two-mode oracle in noisy MIPS order,
//! and a research loop over the pool. Used by `ctxprune demo`, the benches and tests;
//! the printing is in the parent module.

use crate::embeddings::Embeddings;
use crate::error::Result;
use crate::rng::Rng;

/// A synthetic retrieval pool.
#[derive(Clone, Debug)]
pub struct Synthetic {
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
pub fn synthetic_pool(n: usize, d: usize, clusters: usize, seed: u64) -> Synthetic {
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
    Synthetic {
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

/// A seeded OpenAI-format trajectory: a user message and `turns` tool-calling turns
/// (`open` every third turn, else `search`), observations of 200–800 topic words, every
/// 11th turn's observation an error.
#[must_use]
pub fn trajectory(turns: usize, seed: u64) -> String {
    let mut rng = Rng::new(seed);
    let mut msgs = vec![serde_json::json!({"role": "user", "content": "research the topic"})];
    for t in 0..turns {
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
    serde_json::Value::Array(msgs).to_string()
}

/// A research loop over the synthetic pool: subqueries are perturbed copies of the query,
/// retrieval returns the 8 rows most similar to a subquery, and each subquery spawns two
/// children down to depth 2 (3 + 6 + 12 = 21 nodes).
pub struct PoolResearch<'a> {
    /// The pool retrieved from.
    pub pool: &'a Synthetic,
    /// The generator of subquery perturbations.
    pub rng: Rng,
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

/// Writes a seeded synthetic pool of `n` rows in `d` dimensions as `.npy` files under
/// `dir` (created): `emb.npy` (`n × d` f32), `query.npy` (`1 × d`), `costs.npy` (`n`
/// token costs) and `scores.npy` (`n` oracle scores in `[0, 1]`, `(1 + cos(x, q)) / 2`
/// with the rows taken as MIPS-ordered). What CLI measurements and the GPU check read.
pub fn write_pool(dir: &std::path::Path, n: usize, d: usize, seed: u64) -> Result<()> {
    use crate::io::{write_npy_f32, write_npy_f32_vec};
    std::fs::create_dir_all(dir).map_err(|e| crate::Error::io(dir, e))?;
    let p = synthetic_pool(n, d, 50, seed);
    write_npy_f32(&dir.join("emb.npy"), n, d, p.embeddings.as_slice())?;
    write_npy_f32(&dir.join("query.npy"), 1, d, &p.query)?;
    let costs: Vec<f32> = p.costs.iter().map(|&c| c as f32).collect();
    write_npy_f32_vec(&dir.join("costs.npy"), &costs)?;
    let inv = p.embeddings.inv_norms()?;
    let scores: Vec<f32> = (0..n)
        .map(|i| {
            ((1.0 + crate::backend::cpu::dot(p.embeddings.row(i), &p.query) * inv[i]) / 2.0).clamp(0.0, 1.0)
                as f32
        })
        .collect();
    write_npy_f32_vec(&dir.join("scores.npy"), &scores)
}

/// A seeded logged research run in the `run.jsonl` format of
/// [`crate::pipeline::replay`]: a query over six topics in `d` dimensions, six first-level
/// subqueries (one per topic), two children each (the second re-asks a neighbouring
/// topic), a grandchild under the first three first children; three or four items per
/// subquery of 80–400 tokens, about a quarter of them near-duplicates of an earlier item.
#[must_use]
pub fn research_log(d: usize, seed: u64) -> String {
    let mut rng = Rng::new(seed);
    let d = d.max(2);
    let noisy = |base: &[f64], scale: f64, rng: &mut Rng| -> Vec<f64> {
        unit(
            base.iter()
                .map(|&b| b + scale * rng.normal() / (d as f64).sqrt())
                .collect(),
        )
    };
    let topics: Vec<Vec<f64>> = (0..6)
        .map(|_| unit((0..d).map(|_| rng.normal()).collect()))
        .collect();
    let sum: Vec<f64> = (0..d).map(|j| topics.iter().map(|t| t[j]).sum()).collect();
    let f32s = |v: &[f64]| -> Vec<f32> { v.iter().map(|&x| x as f32).collect() };
    let mut lines = vec![serde_json::json!({"type": "query",
        "text": "how do retrieval agents keep their context small", "embedding": f32s(&unit(sum))})];
    let mut seen: Vec<Vec<f64>> = Vec::new();
    let mut emit_items =
        |lines: &mut Vec<serde_json::Value>, id: &str, base: &[f64], n: usize, rng: &mut Rng| {
            for k in 0..n {
                let e = if !seen.is_empty() && rng.uniform() < 0.25 {
                    let src = seen[rng.below(seen.len())].clone();
                    noisy(&src, 0.05, rng)
                } else {
                    noisy(base, 1.2, rng)
                };
                seen.push(e.clone());
                let words: Vec<&str> = (0..6).map(|_| WORDS[rng.below(WORDS.len())]).collect();
                lines.push(serde_json::json!({"type": "item", "subquery": id,
                "text": format!("{id} result {k}: {}", words.join(" ")),
                "tokens": 80 + rng.below(320), "embedding": f32s(&e)}));
            }
        };
    let sub =
        |lines: &mut Vec<serde_json::Value>, id: &str, parent: Option<&str>, depth: usize, e: &[f64]| {
            lines.push(
                serde_json::json!({"type": "subquery", "id": id, "parent": parent, "depth": depth,
            "text": format!("subquery {id}"), "tokens": 12 + 2 * depth, "embedding": f32s(e)}),
            );
        };
    for (i, t) in topics.iter().enumerate() {
        let id = format!("s{}", i + 1);
        let e = noisy(t, 0.3, &mut rng);
        sub(&mut lines, &id, None, 0, &e);
        emit_items(&mut lines, &id, t, 4, &mut rng);
        for c in 1..=2 {
            let cid = format!("{id}.{c}");
            let base = if c == 1 {
                t.clone()
            } else {
                topics[(i + 1) % 6].clone()
            };
            let ce = noisy(&base, if c == 1 { 0.8 } else { 0.1 }, &mut rng);
            sub(&mut lines, &cid, Some(&id), 1, &ce);
            emit_items(&mut lines, &cid, &ce, 3, &mut rng);
            if c == 1 && i < 3 {
                let gid = format!("{cid}.1");
                let ge = noisy(&ce, 0.8, &mut rng);
                sub(&mut lines, &gid, Some(&cid), 2, &ge);
                emit_items(&mut lines, &gid, &ge, 3, &mut rng);
            }
        }
    }
    let mut out = String::new();
    for l in lines {
        out.push_str(&l.to_string());
        out.push('\n');
    }
    out
}
