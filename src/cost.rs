//! Cost accounting (rerank-effective-token-cost.txt §3, App. G; SPEC §4): effective token
//! cost, inference FLOPs per token from a model's shape, the sliding-window listwise
//! reranking plan, and the retrieval metrics NDCG@k and Recall@k.

use crate::error::{Error, Result};
use std::path::Path;

/// `ETC = input_noncached + alpha * input_cached + beta * output` (§3; the paper sweeps
/// alpha in {0.1, 0.3, 0.5} and beta in {3, 5, 7}).
#[must_use]
pub fn effective_token_cost(
    input_noncached: f64,
    input_cached: f64,
    output: f64,
    alpha: f64,
    beta: f64,
) -> f64 {
    input_noncached + alpha * input_cached + beta * output
}

/// Heterogeneous `ETC = ETC_agent + gamma * ETC_reranker` (Eq. 2), `gamma` the reranker's
/// FLOPs per token relative to the agent's.
#[must_use]
pub fn heterogeneous_etc(etc_agent: f64, etc_reranker: f64, gamma: f64) -> f64 {
    etc_agent + gamma * etc_reranker
}

/// MLP activation: the factor `alpha` of Eq. 6.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    /// Gated (SwiGLU / GeGLU): three `d x d_ff` matrices, alpha = 3.
    SwiGlu,
    /// Plain GELU MLP: two matrices, alpha = 2.
    Gelu,
}

impl std::str::FromStr for Activation {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "swiglu" => Ok(Activation::SwiGlu),
            "gelu" => Ok(Activation::Gelu),
            _ => Err(Error::invalid(
                "activation",
                format!("unknown activation '{s}' (swiglu, gelu)"),
            )),
        }
    }
}

/// A decoder's shape, as App. G's Table 12 lists it.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelShape {
    /// Hidden size `d`.
    pub hidden: usize,
    /// FFN or expert size `d_ff`.
    pub ffn: usize,
    /// Query heads `n_q`.
    pub q_heads: usize,
    /// Key/value heads `n_kv`.
    pub kv_heads: usize,
    /// Active experts per token `k` (1 for dense models).
    pub experts_active: usize,
    /// MLP activation.
    pub activation: Activation,
    /// Per layer: `None` for full attention, `Some(W)` for a sliding window of `W`.
    pub layers: Vec<Option<usize>>,
}

impl ModelShape {
    /// Reads a HuggingFace `config.json`: `num_hidden_layers`, `hidden_size`,
    /// `intermediate_size`, `num_attention_heads`, `num_key_value_heads` (default: the
    /// query heads), `num_experts_per_tok` / `experts_per_token` (default 1), `hidden_act`
    /// (`silu`/`swiglu` -> SwiGLU, `gelu*` -> GELU) and `layer_types` with `sliding_window`
    /// (default: every layer full attention).
    pub fn from_config(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        let v: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| Error::format(path, format!("invalid JSON: {e}")))?;
        let get = |k: &str| v.get(k).and_then(serde_json::Value::as_u64).map(|x| x as usize);
        let need = |k: &str| {
            get(k).ok_or_else(|| Error::format(path, format!("missing \"{k}\" (a positive integer)")))
        };
        let layers_n = need("num_hidden_layers")?;
        let q_heads = need("num_attention_heads")?;
        // Gemma-family MLPs are gated GELU (GeGLU): three matrices like SwiGLU.
        let gemma = v
            .get("model_type")
            .and_then(|m| m.as_str())
            .is_some_and(|m| m.starts_with("gemma"));
        let act = v
            .get("hidden_act")
            .or_else(|| v.get("hidden_activation"))
            .and_then(|a| a.as_str())
            .unwrap_or("silu");
        let activation = match act {
            "silu" | "swiglu" | "swish" => Activation::SwiGlu,
            a if a.starts_with("gelu") && gemma => Activation::SwiGlu,
            a if a.starts_with("gelu") => Activation::Gelu,
            a => {
                return Err(Error::format(
                    path,
                    format!("hidden_act '{a}' is not one of silu, swiglu, gelu*"),
                ))
            }
        };
        let window = get("sliding_window");
        let layers = match v.get("layer_types").and_then(|l| l.as_array()) {
            Some(types) => types
                .iter()
                .enumerate()
                .map(|(i, t)| match t.as_str() {
                    Some("full_attention") => Ok(None),
                    Some("sliding_attention") => window.map(Some).ok_or_else(|| {
                        Error::format(path, "layer_types has sliding layers but no \"sliding_window\"")
                    }),
                    _ => Err(Error::format(
                        path,
                        format!("layer_types[{i}] is not full_attention or sliding_attention"),
                    )),
                })
                .collect::<Result<Vec<_>>>()?,
            None => vec![None; layers_n],
        };
        if layers.len() != layers_n {
            return Err(Error::format(
                path,
                format!("{} layer_types for {layers_n} layers", layers.len()),
            ));
        }
        let shape = ModelShape {
            hidden: need("hidden_size")?,
            // MoE configs that give the expert width separately (Qwen-MoE style).
            ffn: match get("moe_intermediate_size") {
                Some(f) if get("num_experts_per_tok").is_some() => f,
                _ => need("intermediate_size")?,
            },
            q_heads,
            kv_heads: get("num_key_value_heads").unwrap_or(q_heads),
            experts_active: get("num_experts_per_tok")
                .or_else(|| get("experts_per_token"))
                .unwrap_or(1),
            activation,
            layers,
        };
        shape.validate()?;
        Ok(shape)
    }

    /// Checks every size is positive and `n_kv <= n_q`.
    pub fn validate(&self) -> Result<()> {
        for (name, v) in [
            ("hidden", self.hidden),
            ("ffn", self.ffn),
            ("q-heads", self.q_heads),
            ("kv-heads", self.kv_heads),
            ("experts-active", self.experts_active),
            ("layers", self.layers.len()),
        ] {
            if v == 0 {
                return Err(Error::invalid(name, "must be positive"));
            }
        }
        if self.kv_heads > self.q_heads {
            return Err(Error::invalid(
                "kv-heads",
                format!("{} exceeds the {} query heads", self.kv_heads, self.q_heads),
            ));
        }
        if let Some(i) = self.layers.iter().position(|w| *w == Some(0)) {
            return Err(Error::invalid(
                format!("layer {i}"),
                "sliding window must be positive",
            ));
        }
        Ok(())
    }

    /// FLOPs per decoded token of every layer at context `t` (App. G, Eq. 3–7):
    /// `4 d² (1 + n_kv/n_q) + 2 d T_eff + 2 k alpha d d_ff`, `T_eff = W` on sliding layers.
    #[must_use]
    pub fn flops_per_layer(&self, t: usize) -> Vec<f64> {
        let d = self.hidden as f64;
        let r = self.kv_heads as f64 / self.q_heads as f64;
        let alpha = match self.activation {
            Activation::SwiGlu => 3.0,
            Activation::Gelu => 2.0,
        };
        let proj = 4.0 * d * d * (1.0 + r);
        let mlp = 2.0 * self.experts_active as f64 * alpha * d * self.ffn as f64;
        self.layers
            .iter()
            .map(|w| proj + 2.0 * d * w.map_or(t, |w| w.min(t)) as f64 + mlp)
            .collect()
    }

    /// GFLOPs per decoded token at context `t`.
    #[must_use]
    pub fn gflops_per_token(&self, t: usize) -> f64 {
        self.flops_per_layer(t).iter().sum::<f64>() / 1e9
    }
}

/// The sliding-window listwise plan (§3): windows of `window` over the top `depth`,
/// processed back to front with `stride`; returns the `[start, end)` windows in
/// processing order and the duplication factor (documents fed / depth).
pub fn window_plan(depth: usize, window: usize, stride: usize) -> Result<(Vec<(usize, usize)>, f64)> {
    if depth == 0 {
        return Err(Error::invalid("depth", "must be positive"));
    }
    if window == 0 || stride == 0 || stride > window {
        return Err(Error::invalid(
            "window",
            format!("need 0 < stride <= window, got window {window}, stride {stride}"),
        ));
    }
    let mut out = Vec::new();
    let mut end = depth;
    loop {
        let start = end.saturating_sub(window);
        out.push((start, end));
        if start == 0 {
            break;
        }
        end -= stride;
    }
    let fed: usize = out.iter().map(|(s, e)| e - s).sum();
    Ok((out, fed as f64 / depth as f64))
}

/// A ranking with repeated documents counted once (first occurrence).
fn dedup(ranking: &[usize]) -> Vec<usize> {
    let mut seen = std::collections::HashSet::new();
    ranking.iter().copied().filter(|d| seen.insert(*d)).collect()
}

/// NDCG@k of a ranking against graded gains (`gain[doc]`), with linear gains and
/// `log2(rank + 1)` discounts as trec_eval computes it; repeated documents count once;
/// 0 when no document has gain.
#[must_use]
pub fn ndcg_at_k(ranking: &[usize], gain: &[f64], k: usize) -> f64 {
    let dcg = |g: &mut dyn Iterator<Item = f64>| -> f64 {
        g.take(k)
            .enumerate()
            .map(|(i, x)| x / ((i + 2) as f64).log2())
            .sum()
    };
    let got = dcg(&mut dedup(ranking)
        .into_iter()
        .map(|d| gain.get(d).copied().unwrap_or(0.0)));
    let mut ideal = gain.to_vec();
    ideal.sort_by(|a, b| b.total_cmp(a));
    let best = dcg(&mut ideal.into_iter());
    if best <= 0.0 {
        0.0
    } else {
        got / best
    }
}

/// Recall@k: relevant documents (gain > 0) in the top `k` (repeats counted once), over all
/// relevant ones; 0 when none is relevant.
#[must_use]
pub fn recall_at_k(ranking: &[usize], gain: &[f64], k: usize) -> f64 {
    let rel = gain.iter().filter(|&&g| g > 0.0).count();
    if rel == 0 {
        return 0.0;
    }
    let hit = dedup(ranking)
        .into_iter()
        .take(k)
        .filter(|&d| gain.get(d).is_some_and(|&g| g > 0.0))
        .count();
    hit as f64 / rel as f64
}
