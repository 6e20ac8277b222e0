//! Cost accounting (rerank-effective-token-cost.txt §3, App. G; SPEC §4): effective token
//! cost, inference FLOPs per token from a model's shape, the sliding-window listwise
//! reranking plan, and the retrieval metrics NDCG@k and Recall@k.

use crate::error::{Error, Result};
use std::path::Path;

use crate::limits::{check as in_range, size};
pub use crate::limits::{MAX_LAYERS, MAX_TOKENS, MAX_WIDTH, MAX_WINDOWS};

/// `v` for a message: plain decimals for ordinary magnitudes, else scientific notation
/// (Rust prints 1e308 with 309 digits).
fn num(v: f64) -> String {
    if v == 0.0 || !v.is_finite() || (1e-4..1e15).contains(&v.abs()) {
        format!("{v}")
    } else {
        format!("{v:e}")
    }
}

/// Checks that every named value is finite and `>= 0`, then that `value`, computed from
/// them as `formula` says, is finite (an error named `what` that lists the inputs).
fn finite(inputs: &[(&str, f64)], what: &str, formula: &str, value: f64) -> Result<f64> {
    for &(name, v) in inputs {
        if !(v.is_finite() && v >= 0.0) {
            return Err(Error::invalid(
                name,
                format!("must be finite and >= 0, got {}", num(v)),
            ));
        }
    }
    if !value.is_finite() {
        let args: Vec<String> = inputs.iter().map(|&(n, v)| format!("{n} = {}", num(v))).collect();
        return Err(Error::invalid(
            what,
            format!("{formula} is not a finite number for {}", args.join(", ")),
        ));
    }
    Ok(value)
}

/// `ETC = input_noncached + alpha * input_cached + beta * output` (§3; the paper sweeps
/// alpha in {0.1, 0.3, 0.5} and beta in {3, 5, 7}). Every input must be finite and
/// `>= 0` and the result finite; errors name `input_noncached`, `input_cached`, `output`,
/// `alpha`, `beta` or (a result that overflows f64, listing the inputs) `etc`.
///
/// ```
/// use ctxprune::cost::effective_token_cost;
/// // 1,200 fresh input tokens, 8,000 cached at a tenth of the price, 350 output at 5x.
/// let etc = effective_token_cost(1200.0, 8000.0, 350.0, 0.1, 5.0)?;
/// assert_eq!(etc, 1200.0 + 800.0 + 1750.0);
/// assert!(effective_token_cost(-1.0, 0.0, 0.0, 0.1, 5.0).is_err()); // names input_noncached
/// # Ok::<(), ctxprune::Error>(())
/// ```
pub fn effective_token_cost(
    input_noncached: f64,
    input_cached: f64,
    output: f64,
    alpha: f64,
    beta: f64,
) -> Result<f64> {
    finite(
        &[
            ("input_noncached", input_noncached),
            ("input_cached", input_cached),
            ("output", output),
            ("alpha", alpha),
            ("beta", beta),
        ],
        "etc",
        "input_noncached + alpha * input_cached + beta * output",
        input_noncached + alpha * input_cached + beta * output,
    )
}

/// Heterogeneous `ETC = ETC_agent + gamma * ETC_reranker` (Eq. 2), `gamma` the reranker's
/// FLOPs per token relative to the agent's. Checked like [`effective_token_cost`]; errors
/// name `etc_agent`, `etc_reranker`, `gamma` or (a result that overflows) `etc`.
pub fn heterogeneous_etc(etc_agent: f64, etc_reranker: f64, gamma: f64) -> Result<f64> {
    finite(
        &[
            ("etc_agent", etc_agent),
            ("etc_reranker", etc_reranker),
            ("gamma", gamma),
        ],
        "etc",
        "etc_agent + gamma * etc_reranker",
        etc_agent + gamma * etc_reranker,
    )
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

/// FLOPs per decoded token, checked ([`ModelShape::flops`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Flops {
    /// Per layer, in FLOPs.
    pub per_layer: Vec<f64>,
    /// Their sum, in FLOPs.
    pub total: f64,
}

/// At most 60 characters of a JSON value, for an error message.
fn shown(v: &serde_json::Value) -> String {
    let s = v.to_string();
    match s.char_indices().nth(60) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s,
    }
}

impl ModelShape {
    /// A dense SwiGLU model with full attention on every layer. `layers` is checked against
    /// [`MAX_LAYERS`] before anything is allocated, then the shape is [`validate`]d; errors
    /// name `layers`, `hidden`, `ffn`, `q_heads` or `kv_heads`.
    ///
    /// [`validate`]: ModelShape::validate
    pub fn dense(layers: usize, hidden: usize, ffn: usize, q_heads: usize, kv_heads: usize) -> Result<Self> {
        let layers = size("layers", layers, MAX_LAYERS)?;
        let shape = ModelShape {
            hidden,
            ffn,
            q_heads,
            kv_heads,
            experts_active: 1,
            activation: Activation::SwiGlu,
            layers: vec![None; layers],
        };
        shape.validate()?;
        Ok(shape)
    }

    /// Reads a HuggingFace `config.json` with [`ModelShape::from_json`].
    pub fn from_config(path: &Path) -> Result<Self> {
        let text = crate::io::file::read_text(path, crate::limits::CONFIG_FILE_BYTES)?;
        Self::from_json(&text, path)
    }

    /// Parses the text of a HuggingFace `config.json` (`path` names it in errors; a leading
    /// UTF-8 byte-order mark is skipped): `num_hidden_layers`, `hidden_size`,
    /// `intermediate_size` (`moe_intermediate_size` when `num_experts_per_tok` is given),
    /// `num_attention_heads`, `num_key_value_heads` (default: the query heads),
    /// `num_experts_per_tok` / `experts_per_token` (default 1), `hidden_act` /
    /// `hidden_activation` (`silu`/`swiglu`/`swish` -> SwiGLU, `gelu*` -> GELU, gated for
    /// `model_type` gemma*; default silu) and `layer_types` with `sliding_window` (default:
    /// every layer full attention). A key set to `null` counts as absent; a repeated key is
    /// an error. Sizes must be integers in `1..=`[`MAX_LAYERS`] (layers), [`MAX_WIDTH`]
    /// (widths, heads, experts) or [`MAX_TOKENS`] (`sliding_window`). A `sliding_window`
    /// without `layer_types` (and without `"use_sliding_window": false`) is refused: which
    /// layers slide differs by model family. Every error names the file and the field; no
    /// input panics.
    pub fn from_json(text: &str, path: &Path) -> Result<Self> {
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let bad = |msg: String| Error::format(path, msg);
        let doc = crate::io::json::value_str(text).map_err(|e| bad(format!("invalid JSON: {e}")))?;
        let serde_json::Value::Object(obj) = doc else {
            return Err(bad(format!(
                "expected a JSON object, got {}",
                crate::io::json_type(&doc)
            )));
        };
        let get = |k: &str| obj.get(k).filter(|x| !x.is_null());
        let int = |k: &str, max: usize| -> Result<Option<usize>> {
            let Some(x) = get(k) else { return Ok(None) };
            let n = x
                .as_u64()
                .ok_or_else(|| bad(format!("\"{k}\" is not a positive integer: {}", shown(x))))?;
            in_range(n, max)
                .map(Some)
                .map_err(|m| bad(format!("\"{k}\" {m}")))
        };
        let need = |k: &str, max: usize| -> Result<usize> {
            int(k, max)?.ok_or_else(|| bad(format!("missing \"{k}\" (a positive integer)")))
        };
        let string = |k: &str| -> Result<Option<&str>> {
            let Some(x) = get(k) else { return Ok(None) };
            x.as_str()
                .map(Some)
                .ok_or_else(|| bad(format!("\"{k}\" is not a string: {}", shown(x))))
        };
        let layers_n = need("num_hidden_layers", MAX_LAYERS)?;
        let hidden = need("hidden_size", MAX_WIDTH)?;
        let q_heads = need("num_attention_heads", MAX_WIDTH)?;
        let kv_heads = int("num_key_value_heads", MAX_WIDTH)?.unwrap_or(q_heads);
        if kv_heads > q_heads {
            return Err(bad(format!(
                "\"num_key_value_heads\" = {kv_heads} exceeds \"num_attention_heads\" = {q_heads}"
            )));
        }
        let experts = match int("num_experts_per_tok", MAX_WIDTH)? {
            Some(k) => Some(k),
            None => int("experts_per_token", MAX_WIDTH)?,
        };
        // MoE configs that give the expert width separately (Qwen-MoE style).
        let ffn = match (int("moe_intermediate_size", MAX_WIDTH)?, experts) {
            (Some(f), Some(_)) => f,
            _ => need("intermediate_size", MAX_WIDTH)?,
        };
        // Gemma-family MLPs are gated GELU (GeGLU): three matrices like SwiGLU.
        let gemma = string("model_type")?.is_some_and(|m| m.starts_with("gemma"));
        let (act_key, act) = match string("hidden_act")? {
            Some(a) => ("hidden_act", a),
            None => (
                "hidden_activation",
                string("hidden_activation")?.unwrap_or("silu"),
            ),
        };
        let activation = match act {
            "silu" | "swiglu" | "swish" => Activation::SwiGlu,
            a if a.starts_with("gelu") && gemma => Activation::SwiGlu,
            a if a.starts_with("gelu") => Activation::Gelu,
            a => {
                return Err(bad(format!(
                    "\"{act_key}\" is \"{a}\", not one of silu, swiglu, swish, gelu*"
                )))
            }
        };
        let window = int("sliding_window", MAX_TOKENS)?;
        let use_window = match get("use_sliding_window") {
            None => None,
            Some(x) => Some(x.as_bool().ok_or_else(|| {
                bad(format!(
                    "\"use_sliding_window\" is not true or false: {}",
                    shown(x)
                ))
            })?),
        };
        let layers = match get("layer_types") {
            Some(t) => {
                let types = t
                    .as_array()
                    .ok_or_else(|| bad(format!("\"layer_types\" is not an array: {}", shown(t))))?;
                if types.len() != layers_n {
                    return Err(bad(format!(
                        "\"layer_types\" has {} entries for \"num_hidden_layers\" = {layers_n}",
                        types.len()
                    )));
                }
                types
                    .iter()
                    .enumerate()
                    .map(|(i, t)| match t.as_str() {
                        Some("full_attention") => Ok(None),
                        Some("sliding_attention") => window.map(Some).ok_or_else(|| {
                            bad(format!(
                                "\"layer_types\"[{i}] is sliding_attention but \"sliding_window\" is not given"
                            ))
                        }),
                        _ => Err(bad(format!(
                            "\"layer_types\"[{i}] is not \"full_attention\" or \"sliding_attention\": {}",
                            shown(t)
                        ))),
                    })
                    .collect::<Result<Vec<_>>>()?
            }
            None => {
                if let (Some(w), true) = (window, use_window != Some(false)) {
                    return Err(bad(format!(
                        "\"sliding_window\" = {w} but no \"layer_types\" says which layers slide \
                         (it differs by model family): add \"layer_types\", or \"use_sliding_window\": false"
                    )));
                }
                vec![None; layers_n]
            }
        };
        let shape = ModelShape {
            hidden,
            ffn,
            q_heads,
            kv_heads,
            experts_active: experts.unwrap_or(1),
            activation,
            layers,
        };
        // Every field was checked above, under its name in the file.
        shape.validate()?;
        Ok(shape)
    }

    /// Checks every size is in range (`1..=`[`MAX_LAYERS`] layers, `1..=`[`MAX_WIDTH`] for
    /// the widths, heads and experts, sliding windows in `1..=`[`MAX_TOKENS`]) and
    /// `n_kv <= n_q`; errors name `layers`, `hidden`, `ffn`, `q_heads`, `kv_heads`,
    /// `experts-active` or `window`.
    pub fn validate(&self) -> Result<()> {
        size("layers", self.layers.len(), MAX_LAYERS)?;
        for (name, v) in [
            ("hidden", self.hidden),
            ("ffn", self.ffn),
            ("q_heads", self.q_heads),
            ("kv_heads", self.kv_heads),
            ("experts_active", self.experts_active),
        ] {
            size(name, v, MAX_WIDTH)?;
        }
        if self.kv_heads > self.q_heads {
            return Err(Error::invalid(
                "kv_heads",
                format!("{} exceeds the {} query heads", self.kv_heads, self.q_heads),
            ));
        }
        for (i, w) in self.layers.iter().enumerate() {
            if let Some(w) = *w {
                in_range(w as u64, MAX_TOKENS)
                    .map_err(|m| Error::invalid("window", format!("layer {i}: {m}")))?;
            }
        }
        Ok(())
    }

    /// Makes the last `n` layers slide with window `w` and the others full attention (where
    /// the sliding layers sit does not change the count). Errors name `sliding_layers` or
    /// `window`.
    pub fn set_sliding(&mut self, n: usize, w: usize) -> Result<()> {
        let l = self.layers.len();
        if n > l {
            return Err(Error::invalid(
                "sliding_layers",
                format!("{n} exceeds the {l} layers"),
            ));
        }
        size("window", w, MAX_TOKENS)?;
        for (i, x) in self.layers.iter_mut().enumerate() {
            *x = (i >= l - n).then_some(w);
        }
        Ok(())
    }

    /// FLOPs per decoded token of every layer at context `t` (App. G, Eq. 3–7):
    /// `4 d² (1 + n_kv/n_q) + 2 d T_eff + 2 k alpha d d_ff`, `T_eff = W` on sliding layers.
    /// The formula only: sizes are not checked (see [`ModelShape::flops`]).
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

    /// GFLOPs per decoded token at context `t` (unchecked, as [`flops_per_layer`]).
    ///
    /// [`flops_per_layer`]: ModelShape::flops_per_layer
    #[must_use]
    pub fn gflops_per_token(&self, t: usize) -> f64 {
        self.flops_per_layer(t).iter().sum::<f64>() / 1e9
    }

    /// [`flops_per_layer`] and their sum, checked: the shape is [`validate`]d, `context`
    /// must be in `1..=`[`MAX_TOKENS`] (error names `context`), and every result is finite.
    ///
    /// [`flops_per_layer`]: ModelShape::flops_per_layer
    /// [`validate`]: ModelShape::validate
    pub fn flops(&self, context: usize) -> Result<Flops> {
        self.validate()?;
        let t = size("context", context, MAX_TOKENS)?;
        let per_layer = self.flops_per_layer(t);
        let total: f64 = per_layer.iter().sum();
        if !total.is_finite() || per_layer.iter().any(|f| !f.is_finite()) {
            return Err(Error::invalid(
                "context",
                format!("FLOPs per token at context {t} are not a finite number"),
            ));
        }
        Ok(Flops { per_layer, total })
    }
}

/// A FLOPs-per-token question by name, as the CLI, the Python package and the server ask
/// it: a shape from a config (already read) or from the sizes, then the overrides.
/// Errors name the option (`layers`, `q_heads`, `sliding_layers`, ...); sizes beside a
/// config are an error naming the first one given.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FlopsOptions<'a> {
    /// A shape read from a config.json; the size options must then be `None`.
    pub config: Option<ModelShape>,
    /// Layers.
    pub layers: Option<usize>,
    /// Hidden size.
    pub hidden: Option<usize>,
    /// FFN / expert size.
    pub ffn: Option<usize>,
    /// Query heads.
    pub q_heads: Option<usize>,
    /// Key/value heads (default: the query heads).
    pub kv_heads: Option<usize>,
    /// Active experts per token; overrides the config.
    pub experts_active: Option<usize>,
    /// `swiglu` or `gelu`; overrides the config.
    pub activation: Option<&'a str>,
    /// Sliding-window layers (with `window`); overrides the config.
    pub sliding_layers: Option<usize>,
    /// Sliding window (with `sliding_layers`).
    pub window: Option<usize>,
}

impl FlopsOptions<'_> {
    /// The shape these options describe.
    pub fn shape(&self) -> Result<ModelShape> {
        let sizes = [
            ("layers", self.layers),
            ("hidden", self.hidden),
            ("ffn", self.ffn),
            ("q_heads", self.q_heads),
            ("kv_heads", self.kv_heads),
        ];
        let mut shape = match &self.config {
            Some(c) => {
                if let Some((name, _)) = sizes.iter().find(|s| s.1.is_some()) {
                    return Err(Error::invalid(
                        *name,
                        "cannot be given with a config (it sets the shape)",
                    ));
                }
                c.clone()
            }
            None => {
                let need = |v: Option<usize>, name: &str| {
                    v.ok_or_else(|| Error::invalid(name, "required without a config"))
                };
                let (layers, hidden, ffn, q) = (
                    need(self.layers, "layers")?,
                    need(self.hidden, "hidden")?,
                    need(self.ffn, "ffn")?,
                    need(self.q_heads, "q_heads")?,
                );
                ModelShape::dense(layers, hidden, ffn, q, self.kv_heads.unwrap_or(q))?
            }
        };
        if let Some(k) = self.experts_active {
            shape.experts_active = k;
        }
        if let Some(a) = self.activation {
            shape.activation = a.parse()?;
        }
        match (self.sliding_layers, self.window) {
            (Some(n), Some(w)) => shape.set_sliding(n, w)?,
            (None, None) => {}
            (Some(_), None) => return Err(Error::invalid("sliding_layers", "needs window")),
            (None, Some(_)) => return Err(Error::invalid("window", "needs sliding-layers")),
        }
        shape.validate()?;
        Ok(shape)
    }

    /// The FLOPs per decoded token at `context` as `{"gflops_per_token", "per_layer"}`
    /// (GFLOPs), the CLI's and the server's answer.
    pub fn gflops_json(&self, context: usize) -> Result<serde_json::Value> {
        let f = self.shape()?.flops(context)?;
        let per: Vec<f64> = f.per_layer.iter().map(|f| f / 1e9).collect();
        Ok(serde_json::json!({"gflops_per_token": f.total / 1e9, "per_layer": per}))
    }
}

/// The sliding-window listwise plan (§3): windows of `window` over the top `depth`,
/// processed back to front with `stride`; returns the `[start, end)` windows in
/// processing order and the duplication factor (documents fed / depth). The number of
/// windows, `1 + ceil((depth - window) / stride)` when `depth > window`, is computed first
/// and must be at most [`MAX_WINDOWS`] (error names `depth`); `0 < stride <= window`
/// (a larger stride would skip documents; errors name `window` or `stride`).
pub fn window_plan(depth: usize, window: usize, stride: usize) -> Result<(Vec<(usize, usize)>, f64)> {
    for (name, v) in [("depth", depth), ("window", window), ("stride", stride)] {
        if v == 0 {
            return Err(Error::invalid(name, "must be positive"));
        }
    }
    if stride > window {
        return Err(Error::invalid(
            "stride",
            format!("{stride} exceeds the window {window} (the documents between windows would never be reranked)"),
        ));
    }
    let count = match depth.checked_sub(window) {
        None | Some(0) => Some(1),
        Some(rest) => rest.div_ceil(stride).checked_add(1),
    };
    let count = match count {
        Some(c) if c <= MAX_WINDOWS => c,
        c => {
            let need = c.map_or_else(|| "more than usize::MAX".to_string(), |c| c.to_string());
            return Err(Error::invalid(
                "depth",
                format!(
                    "{depth} with window {window} and stride {stride} needs {need} windows, more than the {MAX_WINDOWS} allowed"
                ),
            ));
        }
    };
    let mut out = Vec::with_capacity(count);
    let mut end = depth;
    loop {
        let start = end.saturating_sub(window);
        out.push((start, end));
        if start == 0 {
            break;
        }
        // start > 0, so end > window >= stride.
        end -= stride;
    }
    debug_assert_eq!(out.len(), count);
    // At most MAX_WINDOWS terms below 2^64 each: u128 cannot overflow.
    let fed: u128 = out.iter().map(|&(s, e)| (e - s) as u128).sum();
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
