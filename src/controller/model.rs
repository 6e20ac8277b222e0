//! The controller as a candle-nn module: standardisation, a trunk of Linear + ReLU layers,
//! a regression head and a classification head (App. B.3), and its one-file safetensors
//! form.

use super::candle_error;
use crate::error::{Error, Result};
use crate::select::judge::{
    Candidate, Judge, JudgeContext, LearnedController, CONTROLLER_FORMAT, STRUCTURAL_FEATURES,
};
use candle_core::{Device, Tensor};
use candle_nn::{Linear, Module};
use std::collections::BTreeMap;
use std::path::Path;

/// What a controller file says about itself besides its weights (its `__metadata__`).
#[derive(Clone, Debug, PartialEq)]
pub struct ModelInfo {
    /// Width of the state and candidate embeddings; the network takes `2 D + 3` features.
    pub embedding_dim: usize,
    /// Widths of the trunk's hidden layers.
    pub hidden: Vec<usize>,
    /// The frozen encoder the embeddings came from (a name or directory; empty when the
    /// log carried embeddings).
    pub encoder: String,
    /// The keep threshold: a candidate is kept when `p_keep >= tau`.
    pub tau: f64,
    /// How it was trained (`epochs=..,best_epoch=..,seed=..,...`; empty when unknown).
    pub trained: String,
}

impl ModelInfo {
    /// The number of input features.
    #[must_use]
    pub fn width(&self) -> usize {
        2 * self.embedding_dim + STRUCTURAL_FEATURES
    }
}

/// The controller's two outputs for one candidate, as the network computes them (f32).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Prediction {
    /// Predicted utility `g(x)` (regression head).
    pub utility: f32,
    /// The classification head's logit; `p_keep = sigmoid(logit)`.
    pub logit: f32,
}

impl Prediction {
    /// `p_keep(x) = 1 / (1 + e^-logit)`, computed in f64 as [`LearnedController`] does.
    #[must_use]
    pub fn p_keep(&self) -> f64 {
        1.0 / (1.0 + (-f64::from(self.logit)).exp())
    }
}

/// Host copies of every parameter: dense layers in order (trunk, `reg`, `cls`) as
/// `(weight [out × in] row-major, bias [out])`, and the standardisation.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Weights {
    pub layers: Vec<(Vec<f32>, Vec<f32>)>,
    pub mean: Vec<f32>,
    pub std: Vec<f32>,
}

/// The network on candle tensors. Training builds it over its `Var`s; a finished model
/// builds it from [`Weights`].
pub(crate) struct Net {
    trunk: Vec<Linear>,
    reg: Linear,
    cls: Linear,
    mean: Tensor,
    std: Tensor,
}

impl Net {
    /// `params` are `[trunk.0.weight, trunk.0.bias, ..., reg.weight, reg.bias,
    /// cls.weight, cls.bias]`; `mean` and `std` have shape `[width]`.
    pub fn new(params: &[Tensor], mean: Tensor, std: Tensor) -> Result<Self> {
        let mut layers: Vec<Linear> = params
            .chunks_exact(2)
            .map(|p| Linear::new(p[0].clone(), Some(p[1].clone())))
            .collect();
        let (Some(cls), Some(reg)) = (layers.pop(), layers.pop()) else {
            return Err(Error::invalid(
                "controller weights",
                "need at least the reg and cls heads",
            ));
        };
        Ok(Net {
            trunk: layers,
            reg,
            cls,
            mean,
            std,
        })
    }

    /// `(utility [B], logit [B])` of features `x` `[B, width]`.
    pub fn heads(&self, x: &Tensor) -> candle_core::Result<(Tensor, Tensor)> {
        let mut h = x.broadcast_sub(&self.mean)?.broadcast_div(&self.std)?;
        for l in &self.trunk {
            h = l.forward(&h)?.relu()?;
        }
        Ok((
            self.reg.forward(&h)?.squeeze(1)?,
            self.cls.forward(&h)?.squeeze(1)?,
        ))
    }
}

/// The learned pre-retrieval controller (marginal-value-pruning.txt App. B.3) on
/// candle-nn: features `[state mean, candidate, depth, order, retained]` (exactly
/// [`LearnedController::features`]), standardised by the training split's mean and
/// standard deviation, a trunk of `Linear` + ReLU layers, a regression head (utility)
/// and a classification head (keep logit). Trained by [`super::train`]; saved and
/// loaded as one safetensors file that [`LearnedController`] (plain Rust, no candle)
/// also reads.
///
/// Runs on the CPU. Forward passes are deterministic: candle's CPU matmul (the `gemm`
/// crate) splits work across threads by output blocks, never along the summed
/// dimension, so the thread count does not change a result. The same input batch gives
/// the same bits; a row scored in a batch of a different size may round differently in
/// the last place (the kernel's blocking follows the matrix shape).
pub struct ControllerModel {
    net: Net,
    weights: Weights,
    info: ModelInfo,
}

impl std::fmt::Debug for ControllerModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControllerModel")
            .field("info", &self.info)
            .finish_non_exhaustive()
    }
}

impl ControllerModel {
    /// A model from host weights (checked by the caller: shapes follow `info`).
    pub(crate) fn from_weights(weights: Weights, info: ModelInfo) -> Result<Self> {
        let dev = Device::Cpu;
        let width = info.width();
        if weights.layers.len() != info.hidden.len() + 2
            || weights.mean.len() != width
            || weights.std.len() != width
        {
            return Err(Error::invalid(
                "controller weights",
                format!(
                    "{} layers and {}/{} standardisation values for hidden {:?} and {width} features",
                    weights.layers.len(),
                    weights.mean.len(),
                    weights.std.len(),
                    info.hidden
                ),
            ));
        }
        let mut params = Vec::with_capacity(weights.layers.len() * 2);
        let mut inp = width;
        for (i, (w, b)) in weights.layers.iter().enumerate() {
            let out = info.hidden.get(i).copied().unwrap_or(1);
            if b.len() != out || w.len() != out * inp {
                return Err(Error::invalid(
                    "controller weights",
                    format!(
                        "layer {i}: {} weights and {} biases for {out} x {inp}",
                        w.len(),
                        b.len()
                    ),
                ));
            }
            params.push(Tensor::from_slice(w, (out, inp), &dev).map_err(candle_error)?);
            params.push(Tensor::from_slice(b, out, &dev).map_err(candle_error)?);
            // Both heads read the last trunk layer.
            if i < info.hidden.len() {
                inp = out;
            }
        }
        let vec = |v: &[f32]| Tensor::from_slice(v, v.len(), &dev).map_err(candle_error);
        let net = Net::new(&params, vec(&weights.mean)?, vec(&weights.std)?)?;
        Ok(ControllerModel { net, weights, info })
    }

    /// Loads a controller file (layout in [`LearnedController`]'s docs; the
    /// [`crate::controller`] module describes the metadata).
    pub fn load(path: &Path) -> Result<Self> {
        Self::from_safetensors(&crate::io::safetensors_header::read(path)?, path)
    }

    /// Parses a controller held in memory; `path` names it in errors. The file is read
    /// and checked by [`LearnedController::from_safetensors`] (so both read exactly the
    /// same files), then moved onto candle. Without `input.mean` / `input.std` the
    /// features are used as they are; without metadata `tau` is 0.5.
    pub fn from_safetensors(bytes: &[u8], path: &Path) -> Result<Self> {
        // The header through the one JSON reader first: a tensor named twice is an error.
        crate::io::safetensors_header::check(path, bytes)?;
        Self::from_learned(&LearnedController::from_safetensors(bytes, path)?)
            .map_err(|e| Error::format(path, e.to_string()))
    }

    /// The same network as `c`, on candle.
    pub fn from_learned(c: &LearnedController) -> Result<Self> {
        let width = c.input_width();
        if width < STRUCTURAL_FEATURES || (width - STRUCTURAL_FEATURES) % 2 == 1 {
            return Err(Error::invalid(
                "controller",
                format!("takes {width} features; the feature layout needs 2 x embedding_dim + {STRUCTURAL_FEATURES}"),
            ));
        }
        let (layers, norm) = c.parts();
        let hidden: Vec<usize> = layers[..layers.len() - 2].iter().map(|l| l.2).collect();
        let (mean, std) = match norm {
            Some((m, s)) => (m.to_vec(), s.to_vec()),
            None => (vec![0.0; width], vec![1.0; width]),
        };
        let meta = c.metadata();
        let tau = match meta.get("tau") {
            None => 0.5,
            Some(t) => t
                .parse()
                .ok()
                .filter(|t: &f64| (0.0..=1.0).contains(t))
                .ok_or_else(|| {
                    Error::invalid(
                        "controller metadata tau",
                        format!("'{t}' is not a number in [0, 1]"),
                    )
                })?,
        };
        let info = ModelInfo {
            embedding_dim: (width - STRUCTURAL_FEATURES) / 2,
            hidden,
            encoder: meta.get("encoder").cloned().unwrap_or_default(),
            tau,
            trained: meta.get("trained").cloned().unwrap_or_default(),
        };
        let weights = Weights {
            layers: layers.iter().map(|l| (l.0.to_vec(), l.1.to_vec())).collect(),
            mean,
            std,
        };
        Self::from_weights(weights, info)
    }

    /// What the file says about the model.
    #[must_use]
    pub fn info(&self) -> &ModelInfo {
        &self.info
    }

    /// The number of input features.
    #[must_use]
    pub fn input_width(&self) -> usize {
        self.info.width()
    }

    /// The candle network's outputs for `x` `[B, width]`: `(utility [B], logit [B])`.
    pub fn heads(&self, x: &Tensor) -> Result<(Tensor, Tensor)> {
        self.net.heads(x).map_err(candle_error)
    }

    /// Predictions for `rows` feature vectors laid out row after row in `features`.
    pub fn predict(&self, features: &[f32], rows: usize) -> Result<Vec<Prediction>> {
        let w = self.input_width();
        if features.len() != rows * w {
            return Err(Error::DimensionMismatch {
                what: format!("controller features ({rows} rows)"),
                expected: rows * w,
                got: features.len(),
            });
        }
        if rows == 0 {
            return Ok(Vec::new());
        }
        let x = Tensor::from_slice(features, (rows, w), &Device::Cpu).map_err(candle_error)?;
        predictions(&self.net, &x)
    }

    /// The safetensors bytes: the weights, `input.mean` / `input.std`, and the metadata.
    /// The same model always gives the same bytes.
    #[must_use]
    pub fn to_safetensors(&self) -> Vec<u8> {
        let i = &self.info;
        let mut tensors: Vec<(String, Vec<usize>, &[f32])> = Vec::new();
        let mut inp = i.width();
        let n = self.weights.layers.len();
        for (k, (w, b)) in self.weights.layers.iter().enumerate() {
            let name = match k {
                _ if k == n - 2 => "reg".to_string(),
                _ if k == n - 1 => "cls".to_string(),
                _ => format!("trunk.{k}"),
            };
            tensors.push((format!("{name}.weight"), vec![b.len(), inp], w));
            tensors.push((format!("{name}.bias"), vec![b.len()], b));
            if k < n - 2 {
                inp = b.len();
            }
        }
        let width = i.width();
        tensors.push(("input.mean".into(), vec![width], &self.weights.mean));
        tensors.push(("input.std".into(), vec![width], &self.weights.std));
        let hidden: Vec<String> = i.hidden.iter().map(ToString::to_string).collect();
        let meta: BTreeMap<String, String> = [
            ("format", CONTROLLER_FORMAT.to_string()),
            ("features", LearnedController::feature_layout(i.embedding_dim)),
            ("embedding_dim", i.embedding_dim.to_string()),
            ("hidden", hidden.join(",")),
            ("encoder", i.encoder.clone()),
            ("tau", i.tau.to_string()),
            ("trained", i.trained.clone()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        safetensors_bytes(tensors, &meta)
    }

    /// Writes [`ControllerModel::to_safetensors`] to `path`.
    pub fn save(&self, path: &Path) -> Result<()> {
        std::fs::write(path, self.to_safetensors()).map_err(|e| Error::io(path, e))
    }
}

impl Module for ControllerModel {
    /// `[B, 2]`: column 0 the utility, column 1 the keep logit.
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let (u, z) = self.net.heads(x)?;
        Tensor::stack(&[u, z], 1)
    }
}

impl Judge for ControllerModel {
    /// `p_keep` of every candidate, scored in one batch.
    fn values(&mut self, ctx: &JudgeContext<'_>, candidates: &[Candidate<'_>]) -> Result<Vec<f64>> {
        let w = self.input_width();
        let mut x = Vec::with_capacity(candidates.len() * w);
        for c in candidates {
            let f = LearnedController::features(ctx, c)?;
            if f.len() != w {
                return Err(Error::DimensionMismatch {
                    what: "controller features".into(),
                    expected: w,
                    got: f.len(),
                });
            }
            x.extend(f);
        }
        Ok(self
            .predict(&x, candidates.len())?
            .iter()
            .map(Prediction::p_keep)
            .collect())
    }
}

/// The network's predictions for `x` `[B, width]`.
pub(crate) fn predictions(net: &Net, x: &Tensor) -> Result<Vec<Prediction>> {
    let (u, z) = net.heads(x).map_err(candle_error)?;
    let u = u.to_vec1::<f32>().map_err(candle_error)?;
    let z = z.to_vec1::<f32>().map_err(candle_error)?;
    Ok(u.into_iter()
        .zip(z)
        .map(|(utility, logit)| Prediction { utility, logit })
        .collect())
}

/// A safetensors file of F32 tensors with `meta` as `__metadata__`. Written here rather
/// than by `safetensors::serialize`, which takes the metadata as a `HashMap` and so
/// writes its keys in a different order in every process: here the keys are sorted and
/// the tensors ordered by name, so the same model is the same bytes.
fn safetensors_bytes(
    mut tensors: Vec<(String, Vec<usize>, &[f32])>,
    meta: &BTreeMap<String, String>,
) -> Vec<u8> {
    tensors.sort_by(|a, b| a.0.cmp(&b.0));
    let mut header = serde_json::Map::new();
    header.insert("__metadata__".into(), serde_json::json!(meta));
    let mut offset = 0usize;
    for (name, shape, data) in &tensors {
        let end = offset + data.len() * 4;
        header.insert(
            name.clone(),
            serde_json::json!({"dtype": "F32", "shape": shape, "data_offsets": [offset, end]}),
        );
        offset = end;
    }
    let mut h = serde_json::Value::Object(header).to_string().into_bytes();
    // The data starts 8-aligned, as the format's own writer keeps it.
    h.resize(h.len().next_multiple_of(8), b' ');
    let mut out = Vec::with_capacity(8 + h.len() + offset);
    out.extend((h.len() as u64).to_le_bytes());
    out.extend(h);
    for (_, _, data) in &tensors {
        out.extend(data.iter().flat_map(|v| v.to_le_bytes()));
    }
    out
}
