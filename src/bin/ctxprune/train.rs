//! Training the learned controller (App. B.3) on a decisions log: `ctxprune pipeline
//! train`.

use ctxprune::controller::{load_decisions, train, TrainConfig};
use ctxprune::Result;
use std::path::PathBuf;

/// Flags of the controller's training.
#[derive(clap::Args)]
pub struct TrainArgs {
    /// The decisions log (JSON lines: run, depth, order, retained, state_embedding,
    /// candidate_embedding, keep, optional utility).
    #[arg(long)]
    pub log: PathBuf,
    /// Where to write the controller (.safetensors: weights, standardisation, feature
    /// layout).
    #[arg(long)]
    pub out: PathBuf,
    /// Seeds the split by run, the initialisation and the batch order.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Hidden layer widths, comma-separated (one layer each).
    #[arg(long, default_value = "64")]
    pub hidden: String,
    /// Most epochs.
    #[arg(long, default_value_t = 200)]
    pub epochs: usize,
    /// AdamW learning rate.
    #[arg(long, default_value_t = 1e-3)]
    pub lr: f64,
    /// AdamW weight decay (weight matrices only).
    #[arg(long, default_value_t = 1e-2)]
    pub weight_decay: f64,
    /// Decisions per mini-batch.
    #[arg(long, default_value_t = 32)]
    pub batch_size: usize,
    /// Stop after this many epochs without a lower held-out loss (the best epoch's
    /// weights are kept).
    #[arg(long, default_value_t = 10)]
    pub patience: usize,
    /// Fraction of runs held out (a run is never on both sides).
    #[arg(long, default_value_t = 0.2)]
    pub holdout: f64,
    /// Keep threshold stored in the file (p_keep >= tau) and used for the accuracy.
    #[arg(long, default_value_t = 0.5)]
    pub tau: f64,
    /// A sentence-transformers directory that embeds the decisions logged as text
    /// (query, retained_texts, candidate); its path is stored in the file as the encoder.
    #[arg(long)]
    pub model: Option<PathBuf>,
}

/// Trains, writes `--out`, and prints one JSON object: the split, the best epoch, and
/// the held-out accuracy at tau, BCE and MSE.
pub fn run(a: TrainArgs) -> Result<()> {
    let hidden: Vec<usize> = if a.hidden.trim().is_empty() {
        Vec::new()
    } else {
        crate::parse_list(&a.hidden, "--hidden")?
    };
    let cfg = TrainConfig {
        hidden,
        epochs: a.epochs,
        lr: a.lr,
        weight_decay: a.weight_decay,
        batch_size: a.batch_size,
        patience: a.patience,
        holdout: a.holdout,
        seed: a.seed,
        tau: a.tau,
        ..TrainConfig::default()
    };
    // Sizes and settings before the log is read (or embedded).
    cfg.check()?;
    // The log's embeddings are used as they are; decisions logged as text are embedded by
    // --model (frozen: the controller's features come from it at inference too).
    let (decisions, cfg) = match &a.model {
        Some(dir) => {
            let enc = super::embed::load(dir)?;
            let f = |t: &[&str]| super::embed::encode(&enc, t, 32, false);
            let d = load_decisions(&a.log, Some(&f))?;
            let cfg = TrainConfig {
                encoder: dir.display().to_string(),
                ..cfg
            };
            (d, cfg)
        }
        None => (load_decisions(&a.log, None)?, cfg),
    };
    let t = train(&decisions, &cfg)?;
    t.model.save(&a.out)?;
    let r = &t.report;
    let metrics = |m: &ctxprune::controller::Metrics| {
        serde_json::json!({
            "rows": m.rows,
            "accuracy": m.accuracy,
            "bce": m.bce,
            "mse": m.mse,
        })
    };
    let mut train_m = metrics(&r.train);
    train_m["runs"] = r.split.train_runs.len().into();
    let mut held_m = metrics(&r.heldout);
    held_m["runs"] = r.split.heldout_runs.len().into();
    held_m["run_names"] = r.split.heldout_runs.clone().into();
    let out = serde_json::json!({
        "out": a.out.display().to_string(),
        "features": ctxprune::select::judge::LearnedController::feature_layout(
            t.model.info().embedding_dim
        ),
        "hidden": t.model.info().hidden,
        "seed": a.seed,
        "tau": a.tau,
        "epochs_run": r.epochs_run,
        "best_epoch": r.best_epoch,
        "train": train_m,
        "heldout": held_m,
    });
    crate::print_out(&format!("{out}\n"))
}
