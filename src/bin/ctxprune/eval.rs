//! `ctxprune eval`: every budgeted top-k method on built-in seeded problems, and on a
//! problem set from a file (`--set`).
//!
//! Every argument is checked, and the `--plot` file created, before any work; the PNG is
//! written and synced before the table goes to stdout, so a failure leaves stdout empty.

use super::cost::flags;
use super::parse_list;
use super::print_out;
use ctxprune::rerank::eval_set::ProblemSet;
use ctxprune::rerank::{eval, plot};
use ctxprune::{Error, Result};
use std::fmt::Write;
use std::path::PathBuf;

/// Documents per generated problem.
const POOL: usize = 10_000;

#[derive(clap::Args)]
pub struct EvalArgs {
    /// Number of generated problems per mode (each a pool of 10,000 documents). By
    /// default 10; a set runs every problem it holds.
    #[arg(long, allow_hyphen_values = true)]
    pub problems: Option<usize>,
    /// Seed of the first problem (problem i uses seed + i).
    #[arg(long, default_value_t = 1, allow_hyphen_values = true)]
    pub seed: u64,
    /// Oracle budgets, comma-separated, each in 0..=10000 (the pool).
    #[arg(long, default_value = "25,50,100", allow_hyphen_values = true)]
    pub budgets: String,
    /// Capacities, comma-separated, each in 1..=10000.
    #[arg(long, default_value = "50,100", allow_hyphen_values = true)]
    pub capacities: String,
    /// Problem modes, comma-separated: diffuse (the query's two topics and a far one)
    /// and trap (the relevant mass far from the MIPS top); each mode has its own problems.
    /// Default: both, or none with --set.
    #[arg(long)]
    pub modes: Option<String>,
    /// A problem set file (safetensors: real pools with graded labels, built for example
    /// by benches/realtext.py), run beside the modes: every problem in it, at each --noise.
    #[arg(long)]
    pub set: Option<PathBuf>,
    /// With --set: the simulated cross-encoder's noise levels, comma-separated (its score
    /// is clamp(label / top label + noise · N(0, 1), 0, 1)). By default 0.1.
    #[arg(long, allow_hyphen_values = true)]
    pub noise: Option<String>,
    /// With --set: run every problem this many times, each with fresh cross-encoder noise
    /// (draw d of problem i uses seed + d·Q + i, Q the set's problems); a cell's mean and
    /// win counts are then over problems × draws. By default 1.
    #[arg(long, allow_hyphen_values = true)]
    pub draws: Option<usize>,
    /// A token capacity T for every run (each document has a token count): the columns are
    /// then token-normalised nCG (see docs/rerank.md).
    #[arg(long, allow_hyphen_values = true)]
    pub token_capacity: Option<u64>,
    /// Skip App. E.1's multimodal mass of each problem (and its correlation with
    /// BoundaryMORPH's advantage).
    #[arg(long)]
    pub no_peaks: bool,
    /// Draw CE-nCG@k against budget (the first mode) to this PNG.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// The precision of the pool copy kernel rows are read from, for every method that
    /// reads them (all but single-stage): f32 (default), bf16 or f16.
    #[arg(long, default_value = "f32")]
    pub row_precision: String,
}

/// Runs `ctxprune eval`.
pub fn run(a: EvalArgs) -> Result<()> {
    let budgets: Vec<usize> = parse_list(&a.budgets, "--budgets")?;
    let capacities: Vec<usize> = parse_list(&a.capacities, "--capacities")?;
    let names = [
        "problems",
        "seed",
        "budgets",
        "capacities",
        "modes",
        "token-capacity",
        "row-precision",
        "noise",
        "draws",
        "set",
    ];
    let row_precision: ctxprune::rerank::RowPrecision = flags(a.row_precision.parse(), &names)?;
    // The generated modes run when named, or by default without a set; a flag that only
    // they read, given when none runs, is an error rather than ignored (and --noise
    // without a set likewise).
    let mode_list = match (&a.modes, &a.set) {
        (Some(m), _) => Some(m.as_str()),
        (None, None) => Some("diffuse,trap"),
        (None, Some(_)) => None,
    };
    let mut modes: Vec<eval::Mode> = Vec::new();
    for m in mode_list.into_iter().flat_map(|l| l.split(',')) {
        let m: eval::Mode = flags(m.trim().parse(), &names)?;
        if modes.contains(&m) {
            return Err(Error::invalid("--modes", format!("'{}' is repeated", m.name())));
        }
        modes.push(m);
    }
    if modes.is_empty() && a.problems.is_some() {
        return Err(Error::invalid(
            "--problems",
            "applies to the generated modes (--modes); a set runs every problem it holds",
        ));
    }
    if a.set.is_none() {
        if let Some(flag) = [("--noise", a.noise.is_some()), ("--draws", a.draws.is_some())]
            .iter()
            .find_map(|&(f, given)| given.then_some(f))
        {
            return Err(Error::invalid(flag, "applies to a problem set (--set)"));
        }
    }
    let draws = a.draws.unwrap_or(1);
    let problems = a.problems.unwrap_or(10);
    let noise = a.noise.as_deref().unwrap_or("0.1");
    let noises: Vec<f64> = parse_list(noise, "--noise")?;
    if !modes.is_empty() {
        flags(eval::check(problems, a.seed, POOL, &budgets, &capacities), &names)?;
    }
    if a.token_capacity == Some(0) {
        return Err(Error::invalid("--token-capacity", "must be at least 1"));
    }
    let set = match &a.set {
        Some(p) => Some(ProblemSet::load(p)?),
        None => None,
    };
    let grid = eval::Grid {
        budgets: budgets.clone(),
        capacities: capacities.clone(),
        token_capacity: a.token_capacity,
        row_precision,
        peaks: !a.no_peaks,
    };
    if let Some(s) = &set {
        flags(eval::check_set(s, &noises, a.seed, draws, &grid), &names)?;
    }
    let mut png = match &a.plot {
        Some(p) => Some((p, std::fs::File::create(p).map_err(|e| Error::io(p, e))?)),
        None => None,
    };
    // A progress line whenever 5 s have passed since the start or the last line: budgets
    // in the thousands take seconds per method (O(B² N)).
    let t = std::time::Instant::now();
    let mut said = 0.0;
    let mut progress = |s: &eval::Step| {
        let now = t.elapsed().as_secs_f64();
        if now - said >= 5.0 {
            said = now;
            eprintln!(
                "problem {}/{}: {}/{} runs done, last {} B = {} k = {} ({now:.1} s)",
                s.problem, s.problems, s.run, s.runs, s.method, s.budget, s.capacity
            );
        }
    };
    let mut out = eval::Outcome {
        cells: Vec::new(),
        groups: Vec::new(),
        multimodal_mass: Vec::new(),
    };
    let mut heads = String::new();
    if !modes.is_empty() {
        let spec = eval::Spec {
            problems,
            seed: a.seed,
            n: POOL,
            budgets: budgets.clone(),
            capacities: capacities.clone(),
            modes: modes.clone(),
            token_capacity: a.token_capacity,
        };
        let o = flags(
            eval::run_spec_in(&spec, row_precision, !a.no_peaks, &mut progress),
            &names,
        )?;
        out.cells.extend(o.cells);
        out.groups.extend(o.groups);
        out.multimodal_mass.extend(o.multimodal_mass);
        // Checked with the modes' other arguments above (only when modes run).
        let seeds = flags(eval::seeds(a.seed, problems), &names)?;
        let _ = writeln!(
            heads,
            "{} problems per mode, N = 10,000, seeds {}..{}{}",
            problems,
            seeds.start(),
            seeds.end(),
            a.token_capacity
                .map(|t| format!(", token capacity {t}"))
                .unwrap_or_default()
        );
    }
    if let Some(s) = &set {
        let o = flags(
            eval::run_set(s, &noises, a.seed, draws, &grid, &mut progress),
            &names,
        )?;
        out.cells.extend(o.cells);
        out.groups.extend(o.groups);
        out.multimodal_mass.extend(o.multimodal_mass);
        let set_seeds = flags(eval::seeds(a.seed, s.len() * draws), &names)?;
        let _ = writeln!(
            heads,
            "set {}: {} problems{}, N = {}, simulated cross-encoder noise {}, seeds {}..{}{}",
            s.name(),
            s.len(),
            if draws > 1 {
                format!(" x {draws} draws of the noise")
            } else {
                String::new()
            },
            s.pool_size(),
            noise,
            set_seeds.start(),
            set_seeds.end(),
            a.token_capacity
                .map(|t| format!(", token capacity {t}"))
                .unwrap_or_default()
        );
    }
    let cells = &out.cells;
    if let Some((p, f)) = png.as_mut() {
        let first: Vec<_> = cells.iter().filter(|c| c.set == out.groups[0]).cloned().collect();
        plot::write(f, p, &plot::render(&first)?)?;
    }
    let (ce, g) = match a.token_capacity {
        None => ("CE-nCG@k", "nCG@k"),
        Some(_) => ("CE-nCG_T", "nCG_T"),
    };
    let width = out.groups.iter().map(String::len).max().unwrap_or(0).max(8);
    let mut o = heads;
    let _ = writeln!(
        o,
        "{:<width$} {:<21} {:>6} {:>6} {:>10} {:>10} {:>7} {:>6} {:>9} {:>9}",
        "set", "method", "B", "k", ce, g, "calls", "alpha", "vs bm", "switched"
    );
    let row = |o: &mut String, c: &eval::Cell, name: &str, bm: Option<&eval::Cell>| {
        let _ = writeln!(
            o,
            "{:<width$} {:<21} {:>6} {:>6} {:>10.4} {:>10.4} {:>7.1} {:>6} {:>9} {:>9}",
            c.set,
            name,
            c.budget,
            c.capacity,
            c.ce_ncg,
            c.ncg,
            c.rounds,
            c.alpha.map_or_else(String::new, |a| format!("{a:.3}")),
            bm.map_or_else(String::new, |b| wins(c, b)),
            c.switched
                .map_or_else(String::new, |s| format!("{s}/{}", c.per_problem.len()))
        );
    };
    for grp in &out.groups {
        for &b in &budgets {
            for &k in &capacities {
                let cell = cell_of(cells, grp, b, k);
                let bm = cell.iter().copied().find(|c| c.method == "boundary-morph");
                for c in &cell {
                    row(&mut o, c, &c.method, bm);
                }
                if let Some(best) = best_bagel(&cell) {
                    row(&mut o, best, "bagel(best b0)", bm);
                }
            }
        }
    }
    if !a.no_peaks {
        // App. E.1 / §5.3: per problem, multimodal mass against BoundaryMORPH's CE-nCG
        // advantage over BAGEL (the beta0 best in the cell), at each (B, k).
        for (gi, grp) in out.groups.iter().enumerate() {
            let mm = &out.multimodal_mass[gi];
            let mean = mm.iter().sum::<f64>() / mm.len().max(1) as f64;
            let _ = writeln!(o, "{grp}: multimodal mass mean {mean:.4}");
            for &b in &budgets {
                for &k in &capacities {
                    let cell = cell_of(cells, grp, b, k);
                    let (Some(bm), Some(bg)) = (
                        cell.iter().find(|c| c.method == "boundary-morph"),
                        best_bagel(&cell),
                    ) else {
                        continue;
                    };
                    let adv: Vec<f64> = bm
                        .per_problem
                        .iter()
                        .zip(&bg.per_problem)
                        .map(|(x, y)| x - y)
                        .collect();
                    let rho =
                        eval::spearman(mm, &adv).map_or_else(|| "n/a".to_string(), |r| format!("{r:+.3}"));
                    let _ = writeln!(
                        o,
                        "{grp}: B = {b} k = {k}: Spearman rho(multimodal mass, boundary-morph - {}) = {rho}",
                        bg.method
                    );
                }
            }
        }
    }
    print_out(&o)?;
    if let Some((p, _)) = png {
        eprintln!("wrote {}", p.display());
    }
    Ok(())
}

/// `+W -L`: the problems on which `c`'s CE-nCG is above and below `bm`'s (equal ones are
/// neither); empty for BoundaryMORPH's own row.
fn wins(c: &eval::Cell, bm: &eval::Cell) -> String {
    if std::ptr::eq(c, bm) {
        return String::new();
    }
    let (mut w, mut l) = (0, 0);
    for (x, y) in c.per_problem.iter().zip(&bm.per_problem) {
        match x.total_cmp(y) {
            std::cmp::Ordering::Greater => w += 1,
            std::cmp::Ordering::Less => l += 1,
            std::cmp::Ordering::Equal => {}
        }
    }
    format!("+{w} -{l}")
}

/// The cells of one (group, budget, capacity), in method order.
fn cell_of<'c>(cells: &'c [eval::Cell], set: &str, b: usize, k: usize) -> Vec<&'c eval::Cell> {
    cells
        .iter()
        .filter(|c| c.set == set && c.budget == b && c.capacity == k)
        .collect()
}

/// The BAGEL variant with the best mean CE-nCG in a cell (ties to the first).
fn best_bagel<'c>(cell: &[&'c eval::Cell]) -> Option<&'c eval::Cell> {
    cell.iter()
        .copied()
        .filter(|c| c.method.starts_with("bagel"))
        .fold(None, |b: Option<&eval::Cell>, c| match b {
            Some(x) if x.ce_ncg >= c.ce_ncg => Some(x),
            _ => Some(c),
        })
}
