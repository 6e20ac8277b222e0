//! `ctxprune eval`: every budgeted top-k method on built-in seeded problems.

use super::parse_list;
use ctxprune::{Error, Result};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct EvalArgs {
    /// Number of generated problems (each a pool of 10,000 documents).
    #[arg(long, default_value_t = 10)]
    pub problems: usize,
    /// Seed of the first problem.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Oracle budgets, comma-separated.
    #[arg(long, default_value = "25,50,100")]
    pub budgets: String,
    /// Capacities, comma-separated.
    #[arg(long, default_value = "50,100")]
    pub capacities: String,
    /// Draw CE-nCG@k against budget to this PNG.
    #[arg(long)]
    pub plot: Option<PathBuf>,
}

/// Runs `ctxprune eval`.
pub fn run(a: EvalArgs) -> Result<()> {
    let budgets: Vec<usize> = parse_list(&a.budgets, "--budgets")?;
    let capacities: Vec<usize> = parse_list(&a.capacities, "--capacities")?;
    if a.problems == 0 {
        return Err(Error::invalid("--problems", "must be at least 1"));
    }
    if let Some(k) = capacities.iter().find(|&&k| k == 0 || k > 10_000) {
        return Err(Error::invalid(
            "--capacities",
            format!("{k} is outside 1..=10000 (the pool)"),
        ));
    }
    let t = std::time::Instant::now();
    let cells =
        ctxprune::rerank::eval::run(a.problems, a.seed, 10_000, &budgets, &capacities, &mut |p, n| {
            eprintln!("problem {p}/{n} ({:.1} s)", t.elapsed().as_secs_f64());
        })?;
    println!(
        "{} problems, N = 10,000, seeds {}..{}",
        a.problems,
        a.seed,
        a.seed + a.problems as u64 - 1
    );
    println!(
        "{:<20} {:>6} {:>6} {:>10} {:>10}",
        "method", "B", "k", "CE-nCG@k", "nCG@k"
    );
    for &b in &budgets {
        for &k in &capacities {
            let cell: Vec<_> = cells
                .iter()
                .filter(|c| c.budget == b && c.capacity == k)
                .collect();
            for c in &cell {
                println!(
                    "{:<20} {:>6} {:>6} {:>10.4} {:>10.4}",
                    c.method, b, k, c.ce_ncg, c.ncg
                );
            }
            if let Some(best) = cell
                .iter()
                .filter(|c| c.method.starts_with("bagel"))
                .max_by(|x, y| x.ce_ncg.total_cmp(&y.ce_ncg))
            {
                println!(
                    "{:<20} {:>6} {:>6} {:>10.4} {:>10.4}",
                    "bagel(best b0)", b, k, best.ce_ncg, best.ncg
                );
            }
        }
    }
    if let Some(p) = &a.plot {
        ctxprune::rerank::plot::plot(&cells, p)?;
        eprintln!("wrote {}", p.display());
    }
    Ok(())
}
