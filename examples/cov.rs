//! Coverage breakdown (dev aid).
use ctxprune::demo::synthetic_pool;
use ctxprune::select::{select, Inputs, Method, SelectConfig};
use std::time::Instant;
fn main() {
    let p = synthetic_pool(2000, 1024, 20, 2);
    let budget: f64 = p.costs.iter().sum::<f64>() / 10.0;
    let inp = Inputs {
        embeddings: Some(&p.embeddings),
        query: Some(&p.query),
        costs: Some(&p.costs),
        ..Inputs::default()
    };
    let mut buf = vec![0.0f32; 2000 * 2000];
    for _ in 0..5 {
        let t = Instant::now();
        ctxprune::similarity::gram_into(&p.embeddings, ctxprune::similarity::Kernel::Cosine, &mut buf)
            .unwrap();
        let a = t.elapsed().as_secs_f64() * 1e3;
        let t = Instant::now();
        let g = ctxprune::similarity::gram(&p.embeddings, ctxprune::similarity::Kernel::Cosine).unwrap();
        let b = t.elapsed().as_secs_f64() * 1e3;
        let t = Instant::now();
        let s = select(
            &SelectConfig::new(Method::Coverage).k(50).token_budget(budget),
            &inp,
        )
        .unwrap();
        let c = t.elapsed().as_secs_f64() * 1e3;
        println!(
            "gram_into {a:.1} ms, gram {b:.1} ms, coverage select {c:.1} ms ({} picks) {}",
            s.selected.len(),
            g[1]
        );
    }
}
