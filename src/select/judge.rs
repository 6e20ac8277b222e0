//! Plug-in value models (marginal-value-pruning.txt §B.2–B.3; SPEC §1): the crate calls no
//! LLM. A caller wraps its judge (an LLM prompt, a learned model, a rule) in [`Judge`] and
//! hands it to the stage-aware pipeline at any stage. [`LearnedController`] is the paper's
//! learned pre-retrieval controller, inference only: a two-head MLP over frozen encoder
//! features plus structural features, weights from safetensors.

use crate::error::{Error, Result};
use std::collections::BTreeMap;
use std::path::Path;

/// Which pruning point is asking (Algorithm 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Stage {
    /// Candidate subqueries, before search.
    PreRetrieval,
    /// Retrieved items, against the accumulated context.
    PostRetrieval,
    /// The final context, before report generation.
    PreSynthesis,
}

impl Stage {
    /// A short name for reports.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Stage::PreRetrieval => "pre_retrieval",
            Stage::PostRetrieval => "post_retrieval",
            Stage::PreSynthesis => "pre_synthesis",
        }
    }
}

/// One thing a judge is asked about: a subquery or a retrieved item.
#[derive(Clone, Copy, Debug)]
pub struct Candidate<'a> {
    /// Its text.
    pub text: &'a str,
    /// Its embedding (from the caller's frozen encoder).
    pub embedding: &'a [f32],
    /// Depth in the research tree (0 for the root's children).
    pub depth: usize,
    /// Position among its siblings.
    pub order: usize,
}

/// What a judge sees of the research state.
#[derive(Clone, Copy, Debug)]
pub struct JudgeContext<'a> {
    /// The stage asking.
    pub stage: Stage,
    /// The root query's text.
    pub query_text: &'a str,
    /// The root query's embedding.
    pub query: &'a [f32],
    /// Embeddings of the items retained so far, in the order they were added.
    pub retained: &'a [&'a [f32]],
}

/// A value model: one value per candidate, larger meaning more worth keeping. The
/// pipeline keeps candidates whose value is at least its threshold.
pub trait Judge: Send {
    /// Values of `candidates` in `ctx`; must return exactly one finite value each.
    fn values(&mut self, ctx: &JudgeContext<'_>, candidates: &[Candidate<'_>]) -> Result<Vec<f64>>;
}

/// One dense layer `y = W x + b`, `W` row-major `out × in`.
#[derive(Clone, Debug, PartialEq)]
struct Dense {
    w: Vec<f32>,
    b: Vec<f32>,
    out: usize,
    inp: usize,
}

impl Dense {
    fn forward(&self, x: &[f32]) -> Vec<f32> {
        (0..self.out)
            .map(|o| {
                let row = &self.w[o * self.inp..(o + 1) * self.inp];
                (crate::backend::cpu::dot(row, x) + f64::from(self.b[o])) as f32
            })
            .collect()
    }
}

/// The learned pre-retrieval controller (§B.3): features are
/// `[state embedding, candidate embedding, depth, order, retained count]`, a trunk of
/// dense ReLU layers, then a regression head (predicted utility `g`) and a
/// classification head (`p_keep = sigmoid(logit)`). The state embedding is the mean of
/// the retained embeddings and the query (the caller's encoder already ran).
///
/// Safetensors layout (F32): `trunk.{i}.weight` `[out, in]` and `trunk.{i}.bias` `[out]`
/// for i = 0, 1, ...; `reg.weight` `[1, h]`, `reg.bias` `[1]`; `cls.weight` `[1, h]`,
/// `cls.bias` `[1]`. Optional `input.mean` and `input.std` `[width]` standardise the
/// features first (`(x - mean) / std`, in f32); a file without them feeds the features
/// as they are. Optional `__metadata__` (what `ctxprune pipeline train` writes, see the
/// `controller` module): when it has `format` it must be [`CONTROLLER_FORMAT`], when it
/// has `features` it must be [`LearnedController::feature_layout`] of the network's
/// width, when it has `embedding_dim` it must agree, so a file made for another feature
/// function is refused rather than fed the wrong features.
#[derive(Clone, Debug, PartialEq)]
pub struct LearnedController {
    trunk: Vec<Dense>,
    reg: Dense,
    cls: Dense,
    /// `input.mean` and `input.std`, when the file has them.
    standardize: Option<(Vec<f32>, Vec<f32>)>,
    metadata: BTreeMap<String, String>,
}

/// The `format` a controller file's metadata names (`ctxprune-controller/1`).
pub const CONTROLLER_FORMAT: &str = "ctxprune-controller/1";

/// The number of structural features after the two embeddings: depth, order, retained.
pub const STRUCTURAL_FEATURES: usize = 3;

/// The controller's two outputs for one candidate.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ControllerOutput {
    /// Predicted utility `g^(x)`.
    pub utility: f64,
    /// Keep probability `p_keep(x)`.
    pub p_keep: f64,
}

impl LearnedController {
    /// Loads the weights from a safetensors file (layout in the type's docs).
    pub fn load(path: &Path) -> Result<Self> {
        Self::from_safetensors(&crate::io::safetensors_header::read(path)?, path)
    }

    /// Parses weights from safetensors bytes; `path` names them in errors. The header
    /// goes through the one JSON reader first (a tensor named twice is an error).
    pub fn from_safetensors(bytes: &[u8], path: &Path) -> Result<Self> {
        crate::io::safetensors_header::check(path, bytes)?;
        let st = safetensors::SafeTensors::deserialize(bytes)
            .map_err(|e| Error::format(path, format!("not a valid safetensors file: {e}")))?;
        let get = |t: &str| -> Result<(Vec<usize>, Vec<f32>)> {
            let v = st
                .tensor(t)
                .map_err(|_| Error::format(path, format!("missing tensor '{t}'")))?;
            if v.dtype() != safetensors::Dtype::F32 {
                return Err(Error::format(
                    path,
                    format!("tensor '{t}' is {:?}, expected F32", v.dtype()),
                ));
            }
            let data: Vec<f32> = v
                .data()
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            if let Some(i) = data.iter().position(|x| !x.is_finite()) {
                return Err(Error::format(
                    path,
                    format!("tensor '{t}' element {i} is not finite"),
                ));
            }
            Ok((v.shape().to_vec(), data))
        };
        let layer = |name: &str| -> Result<Dense> {
            let (ws, w) = get(&format!("{name}.weight"))?;
            let (bs, b) = get(&format!("{name}.bias"))?;
            if ws.len() != 2 || bs != [ws[0]] {
                return Err(Error::format(
                    path,
                    format!("layer '{name}': weight {ws:?} and bias {bs:?} do not form a dense layer"),
                ));
            }
            Ok(Dense {
                w,
                b,
                out: ws[0],
                inp: ws[1],
            })
        };
        let names = st.names();
        let mut trunk = Vec::new();
        while names.contains(&format!("trunk.{}.weight", trunk.len()).as_str()) {
            trunk.push(layer(&format!("trunk.{}", trunk.len()))?);
        }
        let (reg, cls) = (layer("reg")?, layer("cls")?);
        let mut width = trunk.first().map(|l| l.inp);
        for (i, l) in trunk.iter().enumerate() {
            if width != Some(l.inp) {
                return Err(Error::format(
                    path,
                    format!("trunk.{i} takes {} inputs, previous layer gives {width:?}", l.inp),
                ));
            }
            width = Some(l.out);
        }
        for (name, h) in [("reg", &reg), ("cls", &cls)] {
            if h.out != 1 || width.is_some_and(|w| w != h.inp) {
                return Err(Error::format(
                    path,
                    format!("head '{name}' must map {width:?} features to 1 output"),
                ));
            }
        }
        let input_width = trunk.first().map_or(reg.inp, |l| l.inp);
        let standardize = match (names.contains(&"input.mean"), names.contains(&"input.std")) {
            (false, false) => None,
            (true, true) => {
                let (ms, mean) = get("input.mean")?;
                let (ss, std) = get("input.std")?;
                for (t, shape) in [("input.mean", &ms), ("input.std", &ss)] {
                    if shape.as_slice() != [input_width] {
                        return Err(Error::format(
                            path,
                            format!("tensor '{t}' has shape {shape:?}, the network takes [{input_width}]"),
                        ));
                    }
                }
                if let Some(i) = std.iter().position(|&s| s <= 0.0) {
                    return Err(Error::format(
                        path,
                        format!("tensor 'input.std' element {i} is {}, must be positive", std[i]),
                    ));
                }
                Some((mean, std))
            }
            (m, _) => {
                let (has, lacks) = if m {
                    ("input.mean", "input.std")
                } else {
                    ("input.std", "input.mean")
                };
                return Err(Error::format(
                    path,
                    format!("has tensor '{has}' but not '{lacks}': give both or neither"),
                ));
            }
        };
        // The header parsed above, so its metadata reads too; an absent block is no metadata.
        let (_, header) = safetensors::SafeTensors::read_metadata(bytes)
            .map_err(|e| Error::format(path, format!("not a valid safetensors file: {e}")))?;
        let metadata: BTreeMap<String, String> = header
            .metadata()
            .clone()
            .map(|m| m.into_iter().collect())
            .unwrap_or_default();
        check_metadata(&metadata, input_width, path)?;
        Ok(LearnedController {
            trunk,
            reg,
            cls,
            standardize,
            metadata,
        })
    }

    /// The feature layout [`LearnedController::features`] computes for embeddings of
    /// width `embedding_dim`, as a controller file's metadata names it:
    /// `state_mean:D,candidate:D,depth,order,retained` (`2 D + 3` features).
    #[must_use]
    pub fn feature_layout(embedding_dim: usize) -> String {
        format!("state_mean:{embedding_dim},candidate:{embedding_dim},depth,order,retained")
    }

    /// The file's `__metadata__` (empty when it had none).
    #[must_use]
    pub fn metadata(&self) -> &BTreeMap<String, String> {
        &self.metadata
    }

    /// The keep threshold the file was trained for (metadata `tau`), when it names one.
    #[must_use]
    pub fn tau(&self) -> Option<f64> {
        self.metadata.get("tau").and_then(|t| t.parse().ok())
    }

    /// Layers in file order (trunk layers, then `reg`, then `cls`) as
    /// `(weight [out × in] row-major, bias, out, in)`, and the standardisation: what the
    /// candle module of the `controller` module is built from.
    #[cfg(feature = "embed")]
    #[allow(clippy::type_complexity)]
    pub(crate) fn parts(&self) -> (Vec<(&[f32], &[f32], usize, usize)>, Option<(&[f32], &[f32])>) {
        let layers = self
            .trunk
            .iter()
            .chain([&self.reg, &self.cls])
            .map(|l| (l.w.as_slice(), l.b.as_slice(), l.out, l.inp))
            .collect();
        let norm = self
            .standardize
            .as_ref()
            .map(|(m, s)| (m.as_slice(), s.as_slice()));
        (layers, norm)
    }

    /// Number of input features the network expects.
    #[must_use]
    pub fn input_width(&self) -> usize {
        self.trunk.first().map_or(self.reg.inp, |l| l.inp)
    }

    /// Runs the network on one feature vector.
    pub fn forward(&self, features: &[f32]) -> Result<ControllerOutput> {
        if features.len() != self.input_width() {
            return Err(Error::DimensionMismatch {
                what: "controller features".into(),
                expected: self.input_width(),
                got: features.len(),
            });
        }
        let mut h = features.to_vec();
        if let Some((mean, std)) = &self.standardize {
            h.iter_mut()
                .zip(mean.iter().zip(std))
                .for_each(|(x, (m, s))| *x = (*x - m) / s);
        }
        for l in &self.trunk {
            h = l.forward(&h).into_iter().map(|v| v.max(0.0)).collect();
        }
        let utility = f64::from(self.reg.forward(&h)[0]);
        let logit = f64::from(self.cls.forward(&h)[0]);
        Ok(ControllerOutput {
            utility,
            p_keep: 1.0 / (1.0 + (-logit).exp()),
        })
    }

    /// The feature vector of a candidate in a state (see the type's docs).
    pub fn features(ctx: &JudgeContext<'_>, c: &Candidate<'_>) -> Result<Vec<f32>> {
        let d = ctx.query.len();
        let mut state: Vec<f64> = ctx.query.iter().map(|&v| f64::from(v)).collect();
        for (i, r) in ctx.retained.iter().enumerate() {
            if r.len() != d {
                return Err(Error::DimensionMismatch {
                    what: format!("retained[{i}] vs query"),
                    expected: d,
                    got: r.len(),
                });
            }
            state
                .iter_mut()
                .zip(r.iter())
                .for_each(|(s, &v)| *s += f64::from(v));
        }
        if c.embedding.len() != d {
            return Err(Error::DimensionMismatch {
                what: "candidate vs query".into(),
                expected: d,
                got: c.embedding.len(),
            });
        }
        let k = (ctx.retained.len() + 1) as f64;
        let mut f: Vec<f32> = state.iter().map(|&s| (s / k) as f32).collect();
        f.extend_from_slice(c.embedding);
        f.extend([c.depth as f32, c.order as f32, ctx.retained.len() as f32]);
        Ok(f)
    }
}

/// Checks a controller file's metadata against a network taking `width` features (see
/// [`LearnedController`]'s docs); absent keys are not checked.
fn check_metadata(meta: &BTreeMap<String, String>, width: usize, path: &Path) -> Result<()> {
    if let Some(f) = meta.get("format") {
        if f != CONTROLLER_FORMAT {
            return Err(Error::format(
                path,
                format!("metadata format is '{f}', this build reads '{CONTROLLER_FORMAT}'"),
            ));
        }
    }
    let dim = (width >= STRUCTURAL_FEATURES && (width - STRUCTURAL_FEATURES) % 2 == 0)
        .then(|| (width - STRUCTURAL_FEATURES) / 2);
    if let Some(d) = meta.get("embedding_dim") {
        if d.parse::<usize>().ok() != dim {
            return Err(Error::format(
                path,
                format!("metadata embedding_dim is '{d}', but the network takes {width} features (2 x embedding_dim + {STRUCTURAL_FEATURES})"),
            ));
        }
    }
    if let Some(f) = meta.get("features") {
        let want = dim.map(LearnedController::feature_layout);
        if want.as_deref() != Some(f.as_str()) {
            return Err(Error::format(
                path,
                format!(
                    "metadata features are '{f}', but the network takes {width} features laid out as '{}'",
                    want.unwrap_or_else(|| "(no layout of this crate has that width)".into())
                ),
            ));
        }
    }
    Ok(())
}

impl Judge for LearnedController {
    /// `p_keep` of every candidate.
    fn values(&mut self, ctx: &JudgeContext<'_>, candidates: &[Candidate<'_>]) -> Result<Vec<f64>> {
        candidates
            .iter()
            .map(|c| Ok(self.forward(&Self::features(ctx, c)?)?.p_keep))
            .collect()
    }
}
