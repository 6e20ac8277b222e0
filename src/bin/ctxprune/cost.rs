//! `ctxprune cost`: FLOPs per token, effective token cost, listwise window plans.
//!
//! Every numeric flag takes values that start with `-` (so `--layers -1` reaches the value
//! parser and is refused naming the flag, not taken for an unknown flag). The library
//! names a bad argument by its parameter (`depth`); [`flags`] turns the names that are
//! this command's flags into `--depth`.

use super::print_out;
use clap::Subcommand;
use ctxprune::{Error, Result};
use std::path::PathBuf;

#[derive(Subcommand)]
pub enum CostCmd {
    /// GFLOPs per decoded token from a model's shape (App. G).
    Flops(FlopsArgs),
    /// Effective token cost: input_noncached + alpha input_cached + beta output.
    Etc {
        /// Non-cached input tokens.
        #[arg(long, allow_hyphen_values = true)]
        input_noncached: f64,
        /// Cached input tokens.
        #[arg(long, allow_hyphen_values = true)]
        input_cached: f64,
        /// Output tokens.
        #[arg(long, allow_hyphen_values = true)]
        output: f64,
        /// Weight of cached input.
        #[arg(long, default_value_t = 0.3, allow_hyphen_values = true)]
        alpha: f64,
        /// Weight of output.
        #[arg(long, default_value_t = 5.0, allow_hyphen_values = true)]
        beta: f64,
    },
    /// The sliding-window listwise reranking plan over the top `depth` (at most 100,000
    /// windows).
    Plan {
        /// Reranking depth.
        #[arg(long, allow_hyphen_values = true)]
        depth: usize,
        /// Window size.
        #[arg(long, default_value_t = 20, allow_hyphen_values = true)]
        window: usize,
        /// Stride (at most the window).
        #[arg(long, default_value_t = 10, allow_hyphen_values = true)]
        stride: usize,
    },
}

/// The shape flags; with `--config` only `--experts-active`, `--activation`,
/// `--sliding-layers`/`--window` (which override the file) and `--context` may be given.
#[derive(clap::Args)]
pub struct FlopsArgs {
    /// A HuggingFace config.json (otherwise give the shape flags; --layers, --hidden, --ffn,
    /// --q-heads and --kv-heads cannot be used with it).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Layers (at most 100,000).
    #[arg(long, allow_hyphen_values = true, conflicts_with = "config")]
    pub layers: Option<usize>,
    /// Hidden size d (at most 1,000,000, as every width, head and expert count).
    #[arg(long, allow_hyphen_values = true, conflicts_with = "config")]
    pub hidden: Option<usize>,
    /// FFN / expert size d_ff.
    #[arg(long, allow_hyphen_values = true, conflicts_with = "config")]
    pub ffn: Option<usize>,
    /// Query heads.
    #[arg(long, allow_hyphen_values = true, conflicts_with = "config")]
    pub q_heads: Option<usize>,
    /// Key/value heads (default: the query heads).
    #[arg(long, allow_hyphen_values = true, conflicts_with = "config")]
    pub kv_heads: Option<usize>,
    /// Active experts per token (1 for dense); overrides the config.
    #[arg(long, allow_hyphen_values = true)]
    pub experts_active: Option<usize>,
    /// swiglu or gelu; overrides the config.
    #[arg(long)]
    pub activation: Option<String>,
    /// Context length T (1 to 1,000,000,000).
    #[arg(long, default_value_t = 32_768, allow_hyphen_values = true)]
    pub context: usize,
    /// Number of sliding-window layers (where they sit in the stack does not change the
    /// count); with --window, overrides the config's layer types.
    #[arg(long, allow_hyphen_values = true)]
    pub sliding_layers: Option<usize>,
    /// Sliding window W (1 to 1,000,000,000).
    #[arg(long, allow_hyphen_values = true)]
    pub window: Option<usize>,
}

/// `r` with an [`Error::InvalidArgument`] named by one of `names` (this command's flags,
/// kebab case) renamed to that flag (`token_budget` -> `--token-budget`); every other
/// error as it is. (The inputs a message points to become flags when it is printed:
/// `Error::render(Surface::Cli)`.)
pub(crate) fn flags<T>(r: Result<T>, names: &[&str]) -> Result<T> {
    r.map_err(|e| match e {
        Error::InvalidArgument { name, msg } if names.contains(&name.replace('_', "-").as_str()) => {
            Error::invalid(format!("--{}", name.replace('_', "-")), msg)
        }
        e => e,
    })
}

fn flops(a: FlopsArgs) -> Result<serde_json::Value> {
    use ctxprune::cost::{FlopsOptions, ModelShape};
    const FLAGS: &[&str] = &[
        "layers",
        "hidden",
        "ffn",
        "q-heads",
        "kv-heads",
        "experts-active",
        "activation",
        "context",
        "sliding-layers",
        "window",
    ];
    // Errors from the file name the file and its fields; clap refuses the shape flags
    // beside it.
    let config = a.config.as_deref().map(ModelShape::from_config).transpose()?;
    let opts = FlopsOptions {
        config,
        layers: a.layers,
        hidden: a.hidden,
        ffn: a.ffn,
        q_heads: a.q_heads,
        kv_heads: a.kv_heads,
        experts_active: a.experts_active,
        activation: a.activation.as_deref(),
        sliding_layers: a.sliding_layers,
        window: a.window,
    };
    flags(opts.gflops_json(a.context), FLAGS)
}

/// Runs `ctxprune cost`.
pub fn run(c: CostCmd) -> Result<()> {
    use ctxprune::cost;
    let out = match c {
        CostCmd::Flops(a) => flops(a)?,
        CostCmd::Etc {
            input_noncached,
            input_cached,
            output,
            alpha,
            beta,
        } => {
            let etc = flags(
                cost::effective_token_cost(input_noncached, input_cached, output, alpha, beta),
                &["input-noncached", "input-cached", "output", "alpha", "beta"],
            )?;
            serde_json::json!({ "etc": etc })
        }
        CostCmd::Plan {
            depth,
            window,
            stride,
        } => {
            let (w, dup) = flags(
                cost::window_plan(depth, window, stride),
                &["depth", "window", "stride"],
            )?;
            let w: Vec<[usize; 2]> = w.into_iter().map(|(s, e)| [s, e]).collect();
            serde_json::json!({"windows": w, "duplication": dup})
        }
    };
    print_out(&format!("{out}\n"))
}
