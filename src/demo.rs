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
            let mut cfg = SelectConfig::new(m).mode(mode);
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
                "cpu",
                s.stop.map_or_else(
                    || format!("tau = {}", s.threshold.unwrap_or(f64::NAN)),
                    |st| st.as_str().to_string()
                )
            );
        }
    }
    Ok(out)
}
