//! `ctxprune probe`: the SNR regression probe of observation-masking.txt §5.2 / App. D on
//! a directory of No-CM trajectories and a labels file.

use ctxprune::probe::{self, Options};
use ctxprune::{Error, Result};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct ProbeArgs {
    /// Directory of No-CM trajectories (OpenAI or Anthropic message JSON).
    #[arg(long)]
    pub trajectories: PathBuf,
    /// labels.jsonl: {"id", "trajectory" (relative to --trajectories), "rescued",
    /// optional "gold" and "cited" URL lists} per line.
    #[arg(long)]
    pub labels: PathBuf,
    /// Write the scatter plot (PCA1 vs min–max fitted SNR) as a PNG.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Write everything (per-prefix rows included) as JSON.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Prefixes sampled per trajectory (K).
    #[arg(long, default_value_t = 8, allow_negative_numbers = true)]
    pub prefixes: usize,
    /// Query-grouped folds of the ridge CV and the AUC.
    #[arg(long, default_value_t = 5, allow_negative_numbers = true)]
    pub folds: usize,
    /// Seed of the prefix sample.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    pub seed: u64,
    /// Search tool names, comma-separated.
    #[arg(long, default_value = probe::features::DEFAULT_SEARCH_TOOLS)]
    pub search_tools: String,
    /// Open tool names, comma-separated (URLs in their arguments count as observed).
    #[arg(long, default_value = probe::features::DEFAULT_OPEN_TOOLS)]
    pub open_tools: String,
    /// o200k_base, cl100k_base, approx, or a tokenizer.json.
    #[arg(long, default_value = "o200k_base", value_hint = clap::ValueHint::FilePath)]
    pub tokenizer: String,
}

/// A comma-separated list of names; an empty one is an error naming `flag`.
fn names(s: &str, flag: &str) -> Result<Vec<String>> {
    let v: Vec<String> = s
        .split(',')
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty())
        .collect();
    if v.is_empty() {
        return Err(Error::invalid(flag, "names no tool"));
    }
    Ok(v)
}

/// The library names an option (`prefixes`, `folds`, `tokenizer`, `trajectories`); the
/// CLI names its flag.
fn flag(e: Error) -> Error {
    match e {
        Error::InvalidArgument { name, msg }
            if matches!(name.as_str(), "prefixes" | "folds" | "tokenizer" | "trajectories") =>
        {
            Error::invalid(format!("--{name}"), msg)
        }
        e => e,
    }
}

/// Runs `ctxprune probe`.
pub fn run(a: ProbeArgs) -> Result<()> {
    let opts = Options {
        prefixes: a.prefixes,
        folds: a.folds,
        seed: a.seed,
        search_tools: names(&a.search_tools, "--search-tools")?,
        open_tools: names(&a.open_tools, "--open-tools")?,
    };
    let counter = ctxprune::tokens::counter(&a.tokenizer).map_err(flag)?;
    let report = probe::probe(&a.trajectories, &a.labels, &opts, counter.as_ref()).map_err(flag)?;
    // Everything is computed before anything is written.
    if let Some(p) = &a.plot {
        probe::scatter(p, &report)?;
    }
    if let Some(p) = &a.json {
        let s = serde_json::to_string_pretty(&report).map_err(|e| Error::invalid("json", e.to_string()))?;
        std::fs::write(p, s + "\n").map_err(|e| Error::io(p, e))?;
    }
    let mut out = report.summary();
    if let Some(p) = &a.plot {
        out.push_str(&format!("wrote {}\n", p.display()));
    }
    if let Some(p) = &a.json {
        out.push_str(&format!("wrote {}\n", p.display()));
    }
    super::print_out(&out)
}
