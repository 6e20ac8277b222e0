//! `ctxprune eval`: every budgeted top-k method on built-in seeded problems.
//!
//! Every argument is checked, and the `--plot` file created, before any work; the PNG is
//! written and synced before the table goes to stdout, so a failure leaves stdout empty.

use super::cost::flags;
use super::parse_list;
use super::print_out;
use ctxprune::rerank::{eval, plot};
use ctxprune::{Error, Result};
use std::fmt::Write;
use std::path::PathBuf;

/// Documents per generated problem.
const POOL: usize = 10_000;

#[derive(clap::Args)]
pub struct EvalArgs {
    /// Number of generated problems (each a pool of 10,000 documents).
    #[arg(long, default_value_t = 10, allow_hyphen_values = true)]
    pub problems: usize,
    /// Seed of the first problem (problem i uses seed + i).
    #[arg(long, default_value_t = 1, allow_hyphen_values = true)]
    pub seed: u64,
    /// Oracle budgets, comma-separated, each in 0..=10000 (the pool).
    #[arg(long, default_value = "25,50,100", allow_hyphen_values = true)]
    pub budgets: String,
    /// Capacities, comma-separated, each in 1..=10000.
    #[arg(long, default_value = "50,100", allow_hyphen_values = true)]
    pub capacities: String,
    /// Draw CE-nCG@k against budget to this PNG.
    #[arg(long)]
    pub plot: Option<PathBuf>,
}

/// Runs `ctxprune eval`.
pub fn run(a: EvalArgs) -> Result<()> {
    let budgets: Vec<usize> = parse_list(&a.budgets, "--budgets")?;
    let capacities: Vec<usize> = parse_list(&a.capacities, "--capacities")?;
    let names = ["problems", "seed", "budgets", "capacities"];
    flags(
        eval::check(a.problems, a.seed, POOL, &budgets, &capacities),
        &names,
    )?;
    let seeds = flags(eval::seeds(a.seed, a.problems), &names)?;
    let mut png = match &a.plot {
        Some(p) => Some((p, std::fs::File::create(p).map_err(|e| Error::io(p, e))?)),
        None => None,
    };
    // A progress line whenever 5 s have passed since the start or the last line: budgets
    // in the thousands take seconds per method (O(B² N)).
    let t = std::time::Instant::now();
    let mut said = 0.0;
    let cells = flags(
        eval::run_steps(a.problems, a.seed, POOL, &budgets, &capacities, &mut |s| {
            let now = t.elapsed().as_secs_f64();
            if now - said >= 5.0 {
                said = now;
                eprintln!(
                    "problem {}/{}: {}/{} runs done, last {} B = {} k = {} ({now:.1} s)",
                    s.problem, s.problems, s.run, s.runs, s.method, s.budget, s.capacity
                );
            }
        }),
        &names,
    )?;
    if let Some((p, f)) = png.as_mut() {
        plot::write(f, p, &plot::render(&cells)?)?;
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} problems, N = 10,000, seeds {}..{}",
        a.problems,
        seeds.start(),
        seeds.end()
    );
    let _ = writeln!(
        out,
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
                let _ = writeln!(
                    out,
                    "{:<20} {:>6} {:>6} {:>10.4} {:>10.4}",
                    c.method, b, k, c.ce_ncg, c.ncg
                );
            }
            if let Some(best) = cell
                .iter()
                .filter(|c| c.method.starts_with("bagel"))
                .max_by(|x, y| x.ce_ncg.total_cmp(&y.ce_ncg))
            {
                let _ = writeln!(
                    out,
                    "{:<20} {:>6} {:>6} {:>10.4} {:>10.4}",
                    "bagel(best b0)", b, k, best.ce_ncg, best.ncg
                );
            }
        }
    }
    print_out(&out)?;
    if let Some((p, _)) = png {
        eprintln!("wrote {}", p.display());
    }
    Ok(())
}
