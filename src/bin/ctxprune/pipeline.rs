//! `ctxprune pipeline`: replay a logged research run under per-stage policies and print
//! the paper's accounting (App. A) as a table or as one JSON object.

use ctxprune::pipeline::replay::RunLog;
use ctxprune::pipeline::stages::Stages;
use ctxprune::Result;
use std::path::PathBuf;

#[derive(clap::Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct PipelineArgs {
    /// `train`: train the learned controller on logged decisions.
    #[command(subcommand)]
    pub cmd: Option<PipelineCmd>,
    /// Per-stage policies (TOML: max_nodes, [pre_retrieval], [post_retrieval],
    /// [pre_synthesis]; see docs/pipeline.md).
    #[arg(long, required = true)]
    pub config: Option<PathBuf>,
    /// The logged run: JSON lines of type query, subquery and item (see docs/pipeline.md).
    #[arg(long, required = true)]
    pub input: Option<PathBuf>,
    /// table or json.
    #[arg(long, default_value = "table", value_parser = ["table", "json"])]
    pub format: String,
    /// A sentence-transformers directory that embeds the records without an "embedding"
    /// (the query, subqueries and items, by their "text").
    #[cfg(feature = "embed")]
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// Where the scorer policies select: auto, cpu or cuda (every backend keeps the same
    /// candidates; the CTXPRUNE_BACKEND variable, cpu, cuda or auto, overrides auto).
    #[arg(long, default_value = "auto")]
    pub backend: String,
}

/// What `ctxprune pipeline` does besides replaying.
#[derive(clap::Subcommand)]
pub enum PipelineCmd {
    /// Train the learned pre-retrieval controller (App. B.3) with AdamW on logged judge
    /// decisions; writes one safetensors file and prints a JSON summary.
    #[cfg(feature = "embed")]
    Train(super::train::TrainArgs),
}

/// Runs `ctxprune pipeline`.
pub fn run(a: PipelineArgs) -> Result<()> {
    #[cfg(feature = "embed")]
    if let Some(PipelineCmd::Train(t)) = a.cmd {
        return super::train::run(t);
    }
    let (Some(config), Some(input)) = (&a.config, &a.input) else {
        return Err(ctxprune::Error::invalid("--config", "give --config and --input"));
    };
    let stages = Stages::load(config)?;
    #[cfg(feature = "embed")]
    let log = match &a.model {
        Some(dir) => {
            let enc = super::embed::load(dir)?;
            let f = |t: &[&str]| super::embed::encode(&enc, t, 32, false);
            RunLog::load(input, Some(&f))?
        }
        None => RunLog::load(input, None)?,
    };
    #[cfg(not(feature = "embed"))]
    let log = RunLog::load(input, None)?;
    stages.check_dim(log.dim())?;
    let opened = super::open_engine(&a.backend)?;
    opened.print_note();
    let mut pipeline = stages.pipeline();
    pipeline.engine = opened.engine;
    let out = log.replay(pipeline)?;
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
