//! `ctxprune pipeline`: replay a logged research run under per-stage policies and print
//! the paper's accounting (App. A) as a table or as one JSON object.

use ctxprune::pipeline::replay::RunLog;
use ctxprune::pipeline::stages::Stages;
use ctxprune::Result;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct PipelineArgs {
    /// Per-stage policies (TOML: max_nodes, [pre_retrieval], [post_retrieval],
    /// [pre_synthesis]; see the README).
    #[arg(long)]
    pub config: PathBuf,
    /// The logged run: JSON lines of type query, subquery and item (see the README).
    #[arg(long)]
    pub input: PathBuf,
    /// table or json.
    #[arg(long, default_value = "table", value_parser = ["table", "json"])]
    pub format: String,
    /// A sentence-transformers directory that embeds the records without an "embedding"
    /// (the query, subqueries and items, by their "text").
    #[cfg(feature = "embed")]
    #[arg(long)]
    pub model: Option<PathBuf>,
}

/// Runs `ctxprune pipeline`.
pub fn run(a: PipelineArgs) -> Result<()> {
    let stages = Stages::load(&a.config)?;
    #[cfg(feature = "embed")]
    let log = match &a.model {
        Some(dir) => {
            let enc = super::embed::load(dir)?;
            let f = |t: &[&str]| super::embed::encode(&enc, t, 32, false);
            RunLog::load(&a.input, Some(&f))?
        }
        None => RunLog::load(&a.input, None)?,
    };
    #[cfg(not(feature = "embed"))]
    let log = RunLog::load(&a.input, None)?;
    stages.check_dim(log.dim())?;
    let out = log.replay(stages.pipeline())?;
    let text = if a.format == "json" {
        let mut v = out.report.to_json();
        let mut policies = serde_json::Map::new();
        for (name, s) in stages.stages() {
            policies.insert(name.into(), s.description.clone().into());
        }
        v["max_nodes"] = stages.max_nodes.into();
        v["policies"] = policies.into();
        v["trace"] = out.trace.to_json();
        format!("{v}\n")
    } else {
        let mut t = format!(
            "{} subqueries, {} items, d = {}; max_nodes {}\n",
            log.subqueries().len(),
            log.items().len(),
            log.dim(),
            stages.max_nodes
        );
        for (name, s) in stages.stages() {
            t.push_str(&format!("{name:<15} {}\n", s.description));
        }
        t.push('\n');
        t.push_str(&out.report.to_table());
        t
    };
    super::print_out(&text)
}
