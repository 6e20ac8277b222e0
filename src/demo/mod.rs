//! `ctxprune demo`: every capability on the built-in seeded data ([`data`]), printed as
//! tables.

pub mod data;

pub use data::{synthetic_pool, Synthetic};

use crate::backend::Engine;
use crate::error::Result;
use crate::pool::Pool;
use crate::rng::Rng;
use crate::select::{Method, Mode, Request, SelectConfig, Selector};
use std::fmt::Write as _;

/// Runs every capability on `engine` over the built-in data and returns the tables
/// `ctxprune demo` prints.
pub fn run(engine: &Engine) -> Result<String> {
    let (n, d) = (2000, 384);
    let pool = synthetic_pool(n, d, 12, 2026);
    let resident = Pool::from_embeddings(engine, &pool.embeddings)?;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "ctxprune demo: seeded synthetic pool, {n} items, d = {d}, 12 topics"
    );
    let _ = writeln!(
        out,
        "backend: {}{}",
        engine.describe(),
        engine
            .fallback_reason()
            .map_or(String::new(), |r| format!(" (auto fell back: {r})"))
    );
    let total: f64 = pool.costs.iter().sum();
    let _ = writeln!(out, "pool: {n} items, {total:.0} tokens; greedy: k <= 20, token budget 3000; gate: the default tau, 5 retained\n");
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
    let mut empty = Vec::new();
    for m in Method::ALL {
        for mode in [Mode::Greedy, Mode::Gate] {
            let mut cfg = SelectConfig::new(m).mode(mode);
            let req = Request {
                query: Some(&pool.query),
                texts: Some(&pool.texts),
                query_text: Some(&pool.query_text),
                costs: Some(&pool.costs),
                retained: if mode == Mode::Gate { &retained } else { &[] },
                cancel: None,
            };
            cfg = match mode {
                Mode::Greedy => cfg.k(20).token_budget(3000.0),
                Mode::Gate if m == Method::Hybrid => cfg.threshold(0.3),
                Mode::Gate => cfg,
            };
            let t = std::time::Instant::now();
            let s = Selector::new(engine, cfg)?.select(&resident, &req)?;
            let ms = t.elapsed().as_secs_f64() * 1e3;
            if s.selected.is_empty() {
                if let Some(note) = s.notes.iter().find(|n| n.starts_with("nothing")) {
                    empty.push(format!("note: {} {}: {note}", m.name(), mode.name()));
                }
            }
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
    for e in &empty {
        let _ = writeln!(out, "{e}");
    }
    pipeline_section(&pool, &mut out)?;
    replay_section(&mut out)?;
    rerank_section(engine, &mut out)?;
    mask_section(&mut out)?;
    attention_section(engine, &mut out)?;
    cost_section(&mut out)?;
    Ok(out)
}

/// Observation masking on a seeded 40-turn OpenAI-format trajectory.
fn mask_section(out: &mut String) -> Result<()> {
    use crate::mask::masker::{MaskConfig, Masker};
    use crate::mask::{Format, Trajectory};
    let doc = data::trajectory(40, 9);
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
        let mut traj = Trajectory::parse(&doc, Some(Format::OpenAi))?;
        let s = Masker::new(cfg, counter.clone())?.mask(&mut traj);
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

/// App. E.3: attention mass by turn and role on seeded synthetic Q/K (Gaussian, so the
/// shares follow the spans' sizes; real dumps come through `ctxprune attention mass`).
fn attention_section(engine: &Engine, out: &mut String) -> Result<()> {
    use crate::attention::{mass, synthetic, Role};
    let (n, turns) = (4096, 12);
    let (qk, seg) = synthetic(n, 2, 8, 2, 64, turns, 11)?;
    let t = std::time::Instant::now();
    let m = mass(engine, &qk, &seg)?;
    let ms = t.elapsed().as_secs_f64() * 1e3;
    let _ = writeln!(
        out,
        "\nattention mass (App. E.3): synthetic {turns}-turn trajectory, N = {n}, 2 layers, 8 heads over 2, d = 64: {ms:.1} ms on {}",
        m.backend
    );
    let _ = writeln!(
        out,
        "{:<6} {:>5} {:>14} {:>16} {:>10} {:>11}",
        "step", "turn", "past reasoning", "past observation", "own turn", "unassigned"
    );
    for (r, st) in m.steps.iter().enumerate().filter(|(r, _)| r % 4 == 3) {
        let past = |role: Role| {
            st.s.iter()
                .take(st.turn)
                .map(|row| row[role.index()])
                .sum::<f64>()
        };
        let own: f64 = st.s.get(st.turn).map_or(0.0, |row| row.iter().sum());
        let _ = writeln!(
            out,
            "{r:<6} {:>5} {:>14.4} {:>16.4} {:>10.4} {:>11.4}",
            st.turn,
            past(Role::Reasoning),
            past(Role::Observation),
            own,
            st.unassigned
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

/// Budgeted top-k on `ctxprune eval`'s diffuse problems ([`crate::rerank::eval`]).
fn rerank_section(engine: &Engine, out: &mut String) -> Result<()> {
    use crate::rerank::eval::{generate_mode, Mode as EvalMode};
    use crate::rerank::{
        metrics::ncg, KernelChoice, Method as R, Precomputed, Prior, RerankConfig, Reranker,
    };
    // `ctxprune eval`'s diffuse problems (relevance spread over the query's two topics and a
    // far one, a noisy MIPS order): there the methods part, as eval's table shows.
    let (n, d, budget, cap, problems) = (10_000, 64, 50, 50, 3);
    let probs = (0..problems)
        .map(|i| generate_mode(n, d, 2026 + i as u64, EvalMode::Diffuse))
        .collect::<Result<Vec<_>>>()?;
    let _ = writeln!(
        out,
        "\nbudgeted top-k: {problems} of eval's diffuse problems ({n} documents, d = {d}, relevance over the query's two topics and a far one), B = {budget}, k = {cap}"
    );
    let _ = writeln!(
        out,
        "{:<27} {:>10} {:>6} {:>9} {:>9}  {:<8}",
        "method", "CE-nCG@k", "docs", "requests", "time ms", "backend"
    );
    // The paper's methods, then BoundaryMORPH with 8 documents per oracle request and with
    // the adaptive prior (issue 15).
    let runs = [
        (R::SingleStage, 1, Prior::Mips, "single-stage (MIPS top-B)"),
        (R::Rgs, 1, Prior::Mips, "rgs"),
        (R::Bagel, 1, Prior::Zero, "bagel"),
        (R::BoundaryMorph, 1, Prior::Mips, "boundary-morph"),
        (R::BoundaryMorph, 1, Prior::Zero, "boundary-morph, zero prior"),
        (R::BoundaryMorph, 8, Prior::Mips, "boundary-morph q=8"),
    ];
    for (m, batch, prior, name) in runs {
        let (mut q, mut docs, mut rounds, mut ms, mut backend) = (0.0, 0, 0, 0.0, "cpu");
        for p in &probs {
            let pool = Pool::new(engine, p.pool.embeddings().clone())?;
            let mut o = Precomputed::new(p.oracle.clone(), budget)?;
            let mut cfg = RerankConfig::new(m, budget, cap);
            cfg.batch = batch;
            cfg.prior = prior;
            cfg.kernel = KernelChoice::Fixed(p.kernel);
            let t = std::time::Instant::now();
            let r = Reranker::new(engine, cfg)?.rerank(&pool, &p.query, &mut o)?;
            ms += t.elapsed().as_secs_f64() * 1e3 / problems as f64;
            q += ncg(&r.selected, &p.oracle) / problems as f64;
            docs = r.scored.len();
            rounds = r.rounds;
            backend = r.backend.name();
        }
        let _ = writeln!(
            out,
            "{name:<27} {q:>10.3} {docs:>6} {rounds:>9} {ms:>9.1}  {backend:<8}"
        );
    }
    let _ = writeln!(
        out,
        "(CE-nCG@k: the oracle's gain of the k chosen, 1 = the best k of the pool; the MIPS top-B misses the far topic the others find)"
    );
    Ok(())
}

/// Algorithm 1 on the synthetic pool with pruning at different stages.
fn pipeline_section(pool: &Synthetic, out: &mut String) -> Result<()> {
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
        let mut r = data::PoolResearch {
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

/// A logged research run ([`data::research_log`]) replayed under one-, two- and
/// three-stage policies, as `ctxprune pipeline` replays a run.jsonl.
fn replay_section(out: &mut String) -> Result<()> {
    use crate::pipeline::replay::RunLog;
    use crate::pipeline::{Pipeline, Policy};
    let log = RunLog::parse(
        &data::research_log(32, 17),
        std::path::Path::new("built-in research log"),
        None,
    )?;
    let _ = writeln!(
        out,
        "\npipeline replay: a logged run, {} subqueries to depth 2, {} items, d = {}",
        log.subqueries().len(),
        log.items().len(),
        log.dim()
    );
    let _ = writeln!(
        out,
        "{:<38} {:>6} {:>7} {:>12} {:>11} {:>9} {:>12}",
        "policy", "nodes", "pruned", "retrieved tk", "context tk", "final tk", "vs baseline"
    );
    let gate = |m: Method, tau: f64| Policy::Scorer(SelectConfig::new(m).mode(Mode::Gate).threshold(tau));
    let synth = || Policy::Scorer(SelectConfig::new(Method::Mmr).k(8));
    let configs: Vec<(&str, Pipeline)> = vec![
        ("no pruning (baseline)", Pipeline::default()),
        (
            "1-stage: post-retrieval GRN gate 0.5",
            Pipeline {
                post_retrieval: gate(Method::Grn, 0.5),
                ..Pipeline::default()
            },
        ),
        (
            "2-stage: + pre-synthesis MMR k = 8",
            Pipeline {
                post_retrieval: gate(Method::Grn, 0.5),
                pre_synthesis: synth(),
                ..Pipeline::default()
            },
        ),
        (
            "3-stage: + pre-retrieval GRN gate 0.5",
            Pipeline {
                pre_retrieval: gate(Method::Grn, 0.5),
                post_retrieval: gate(Method::Grn, 0.5),
                pre_synthesis: synth(),
                ..Pipeline::default()
            },
        ),
    ];
    let mut baseline = None;
    for (name, p) in configs {
        let r = log.replay(p)?.report;
        let fin = r.context_tokens();
        let base = *baseline.get_or_insert(fin);
        let _ = writeln!(
            out,
            "{:<38} {:>6} {:>7} {:>12.0} {:>11.0} {:>9.0} {:>11.1}%",
            name,
            r.nodes_explored,
            r.nodes_pruned,
            r.post_retrieval.tokens_in,
            r.pre_synthesis.tokens_in,
            fin,
            if base > 0.0 {
                100.0 * (1.0 - fin / base)
            } else {
                0.0
            }
        );
    }
    Ok(())
}
