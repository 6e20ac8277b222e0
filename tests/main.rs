//! The one integration-test binary: every scorer against a slow evaluation of its
//! definition, the loaders, the CLI contract, and the backend harness.

mod attention;
mod attention_segment;
mod backend;
#[cfg(feature = "cli")]
mod cli;
#[cfg(feature = "cli")]
mod cli_bad_inputs;
#[cfg(feature = "cli")]
mod cli_cost;
#[cfg(feature = "cli")]
mod cli_mask;
#[cfg(feature = "cli")]
mod cli_paths;
#[cfg(feature = "embed")]
mod controller;
mod cost;
mod duplicates;
#[cfg(feature = "embed")]
mod embed;
#[cfg(feature = "cuda-emu")]
mod emulator;
mod fast_paths;
mod files;
mod fuzz_regressions;
#[cfg(feature = "http")]
mod http;
mod io;
mod mask;
mod mask_policies;
mod pipeline;
mod pipeline_replay;
mod probe;
mod properties;
mod rerank;
mod rerank_auto;
mod rerank_beyond;
mod rerank_eval_set;
mod rerank_evidence;
mod rerank_feedback;
mod rerank_precision;
mod scorers;
#[cfg(feature = "serve")]
mod serve;
#[cfg(feature = "serve")]
mod serve_attention;
#[cfg(feature = "serve")]
mod serve_hostile;
#[cfg(all(feature = "serve", feature = "cli"))]
mod serve_local;
#[cfg(all(feature = "serve", feature = "cli"))]
mod serve_replicas;
#[cfg(feature = "embed")]
mod sizes;
mod slow;

use ctxprune::rng::Rng;
use ctxprune::Embeddings;

/// Seeded random pool: Gaussian rows, a query near a few rows, integer costs in [1, 50].
/// Rows and query are unit-normalised (in f64, rounded once to f32), so the slow f64
/// definitions and the crate read the same unit embeddings (SPEC: cosines are computed
/// on unit-normalised embeddings).
pub fn problem(n: usize, d: usize, seed: u64) -> (Embeddings, Vec<f32>, Vec<f64>) {
    let (e, q, c) = raw_problem(n, d, seed);
    let mut e = e;
    e.normalize().unwrap();
    (e, unit(&q), c)
}

/// A vector unit-normalised the way the crate does it.
pub fn unit(v: &[f32]) -> Vec<f32> {
    ctxprune::embeddings::unit_vector(v, "test").unwrap()
}

/// [`problem`] before normalisation.
pub fn raw_problem(n: usize, d: usize, seed: u64) -> (Embeddings, Vec<f32>, Vec<f64>) {
    let mut rng = Rng::new(seed);
    let data: Vec<f32> = (0..n * d).map(|_| rng.normal() as f32).collect();
    let e = Embeddings::new(n, d, data, "random").unwrap();
    let mut q = vec![0.0f32; d];
    for _ in 0..3 {
        let r = rng.below(n);
        q.iter_mut().zip(e.row(r)).for_each(|(a, &b)| *a += b);
    }
    q.iter_mut().for_each(|a| *a += 0.3 * rng.normal() as f32);
    let costs = (0..n).map(|_| 1.0 + rng.below(50) as f64).collect();
    (e, q, costs)
}

/// Asserts two gain lists agree element by element, naming the first that does not.
pub fn assert_close(what: &str, got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(
        got.len(),
        want.len(),
        "{what}: {} values vs {} expected",
        got.len(),
        want.len()
    );
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol * (1.0 + w.abs()),
            "{what}: element {i}: got {g}, expected {w} (tol {tol})"
        );
    }
}
