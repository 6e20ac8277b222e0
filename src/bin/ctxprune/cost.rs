//! `ctxprune cost`: FLOPs per token, effective token cost, listwise window plans.

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
        #[arg(long)]
        input_noncached: f64,
        /// Cached input tokens.
        #[arg(long)]
        input_cached: f64,
        /// Output tokens.
        #[arg(long)]
        output: f64,
        /// Weight of cached input.
        #[arg(long, default_value_t = 0.3)]
        alpha: f64,
        /// Weight of output.
        #[arg(long, default_value_t = 5.0)]
        beta: f64,
    },
    /// The sliding-window listwise reranking plan over the top `depth`.
    Plan {
        /// Reranking depth.
        #[arg(long)]
        depth: usize,
        /// Window size.
        #[arg(long, default_value_t = 20)]
        window: usize,
        /// Stride.
        #[arg(long, default_value_t = 10)]
        stride: usize,
    },
}

#[derive(clap::Args)]
pub struct FlopsArgs {
    /// A HuggingFace config.json (otherwise give the shape flags).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Layers.
    #[arg(long)]
    pub layers: Option<usize>,
    /// Hidden size d.
    #[arg(long)]
    pub hidden: Option<usize>,
    /// FFN / expert size d_ff.
    #[arg(long)]
    pub ffn: Option<usize>,
    /// Query heads.
    #[arg(long)]
    pub q_heads: Option<usize>,
    /// Key/value heads.
    #[arg(long)]
    pub kv_heads: Option<usize>,
    /// Active experts per token (1 for dense).
    #[arg(long)]
    pub experts_active: Option<usize>,
    /// swiglu or gelu.
    #[arg(long)]
    pub activation: Option<String>,
    /// Context length T.
    #[arg(long, default_value_t = 32_768)]
    pub context: usize,
    /// Number of sliding-window layers (where they sit in the stack does not change the count).
    #[arg(long)]
    pub sliding_layers: Option<usize>,
    /// Sliding window W.
    #[arg(long)]
    pub window: Option<usize>,
}

/// Runs `ctxprune cost`.
pub fn run(c: CostCmd) -> Result<()> {
    use ctxprune::cost;
    let out = match c {
        CostCmd::Flops(a) => {
            let mut shape = match &a.config {
                Some(p) => cost::ModelShape::from_config(p)?,
                None => {
                    let need = |v: Option<usize>, f: &str| {
                        v.ok_or_else(|| Error::invalid(f, "required without --config"))
                    };
                    let layers = need(a.layers, "--layers")?;
                    let q = need(a.q_heads, "--q-heads")?;
                    cost::ModelShape {
                        hidden: need(a.hidden, "--hidden")?,
                        ffn: need(a.ffn, "--ffn")?,
                        q_heads: q,
                        kv_heads: a.kv_heads.unwrap_or(q),
                        experts_active: 1,
                        activation: cost::Activation::SwiGlu,
                        layers: vec![None; layers],
                    }
                }
            };
            if let Some(k) = a.experts_active {
                shape.experts_active = k;
            }
            if let Some(act) = &a.activation {
                shape.activation = act.parse()?;
            }
            match (a.sliding_layers, a.window) {
                (Some(n), Some(w)) => {
                    if n > shape.layers.len() {
                        return Err(Error::invalid(
                            "--sliding-layers",
                            format!("{n} exceeds the {} layers", shape.layers.len()),
                        ));
                    }
                    let l = shape.layers.len();
                    shape
                        .layers
                        .iter_mut()
                        .enumerate()
                        .for_each(|(i, x)| *x = if i >= l - n { Some(w) } else { None });
                }
                (None, None) => {}
                _ => {
                    return Err(Error::invalid(
                        "--sliding-layers",
                        "give --sliding-layers and --window together",
                    ))
                }
            }
            shape.validate()?;
            let per: Vec<f64> = shape.flops_per_layer(a.context).iter().map(|f| f / 1e9).collect();
            serde_json::json!({"gflops_per_token": shape.gflops_per_token(a.context), "per_layer": per})
        }
        CostCmd::Etc {
            input_noncached,
            input_cached,
            output,
            alpha,
            beta,
        } => {
            for (n, v) in [
                ("--input-noncached", input_noncached),
                ("--input-cached", input_cached),
                ("--output", output),
                ("--alpha", alpha),
                ("--beta", beta),
            ] {
                if !(v.is_finite() && v >= 0.0) {
                    return Err(Error::invalid(n, format!("must be finite and >= 0, got {v}")));
                }
            }
            serde_json::json!({"etc": cost::effective_token_cost(input_noncached, input_cached, output, alpha, beta)})
        }
        CostCmd::Plan {
            depth,
            window,
            stride,
        } => {
            let (w, dup) = cost::window_plan(depth, window, stride)?;
            let w: Vec<[usize; 2]> = w.into_iter().map(|(s, e)| [s, e]).collect();
            serde_json::json!({"windows": w, "duplication": dup})
        }
    };
    println!("{out}");
    Ok(())
}
