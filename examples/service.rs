//! The service API in one file: an engine opened once, a pool made resident once, a
//! selector and a reranker checked once, then requests from many threads.
//! `cargo run --release --example service`
use ctxprune::rerank::{Method as RerankMethod, Precomputed, RerankConfig, Reranker};
use ctxprune::select::{Method, Request, SelectConfig, Selector};
use ctxprune::{demo::synthetic_pool, Engine, ErrorKind, Pool};

fn main() -> ctxprune::Result<()> {
    // Once per process: CUDA when usable, else the CPU (with the reason kept).
    let engine = Engine::auto();
    println!("engine: {}", engine.describe());
    if let Some(why) = engine.fallback_reason() {
        println!("  (auto fell back to the CPU: {why})");
    }
    // Once per corpus: rows normalised and made resident where the engine computes.
    let data = synthetic_pool(5_000, 384, 20, 1);
    let pool = Pool::new(&engine, data.embeddings.clone())?;
    // Once per configuration: checked here, not per request.
    let mmr = Selector::new(&engine, SelectConfig::new(Method::Mmr).k(10).lambda(0.5))?;
    let dpp = Selector::new(&engine, SelectConfig::new(Method::Dpp).token_budget(2_000.0))?;
    let bm = Reranker::new(&engine, RerankConfig::new(RerankMethod::BoundaryMorph, 50, 10))?;

    // Per request, from any thread: `Engine`, `Pool`, `Selector` and `Reranker` are
    // `Clone + Send + Sync`.
    std::thread::scope(|s| {
        for t in 0..4 {
            let (pool, mmr, dpp, bm, data) = (&pool, &mmr, &dpp, &bm, &data);
            s.spawn(move || -> ctxprune::Result<()> {
                let q: Vec<f32> = data.query.iter().map(|&v| v + 0.01 * t as f32).collect();
                let req = Request {
                    query: Some(&q),
                    costs: Some(&data.costs),
                    ..Request::default()
                };
                let a = mmr.select(pool, &req)?;
                let b = dpp.select(pool, &req)?;
                // The oracle is the caller's: here precomputed scores; an HTTP reranker
                // (TEI, Cohere-style) plugs in the same way.
                let scores: Vec<f64> = (0..pool.len()).map(|i| 1.0 / (1.0 + i as f64)).collect();
                let r = bm.rerank(pool, &q, &mut Precomputed::new(scores, 50)?)?;
                println!(
                    "thread {t}: mmr {:?}, dpp {} items ({:.0} tokens), boundary-morph top-3 {:?} after {} calls, on {}",
                    a.selected,
                    b.selected.len(),
                    b.tokens_selected,
                    &r.selected[..3],
                    r.scored.len(),
                    a.backend.name()
                );
                Ok(())
            });
        }
    });

    // Errors a service branches on.
    let bad = mmr.select(&pool, &Request::default()).unwrap_err();
    assert_eq!(bad.kind(), ErrorKind::InvalidInput);
    println!("a request without a query: {bad}");
    Ok(())
}
