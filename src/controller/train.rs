//! Training the controller on logged decisions: a grouped split by run, seeded
//! initialisation and batch order, AdamW, and early stopping on the held-out loss.

use super::candle_error;
use super::data::{split_by_run, Decision, Split};
use super::model::{predictions, ControllerModel, ModelInfo, Net, Prediction, Weights};
use crate::error::{Error, Result};
use crate::rng::Rng;
use candle_core::{Device, Tensor, Var};
use candle_nn::optim::{AdamW, Optimizer, ParamsAdamW};

/// Training settings. The defaults are the CLI's.
#[derive(Clone, Debug, PartialEq)]
pub struct TrainConfig {
    /// Widths of the hidden layers; by default `[64]`. Empty gives the two heads on the
    /// standardised features alone.
    pub hidden: Vec<usize>,
    /// Most passes over the training split; by default 200.
    pub epochs: usize,
    /// AdamW learning rate; by default 1e-3.
    pub lr: f64,
    /// AdamW decoupled weight decay, applied to the weight matrices (not the biases, nor
    /// the standardisation, which is fitted, not trained); by default 1e-2.
    pub weight_decay: f64,
    /// Decisions per mini-batch; by default 32.
    pub batch_size: usize,
    /// Stop after this many epochs without a lower held-out loss, and keep the best
    /// epoch's weights; by default 10.
    pub patience: usize,
    /// Fraction of runs held out; by default 0.2 (see [`split_by_run`]).
    pub holdout: f64,
    /// Seeds the split, the initialisation and the batch order; by default 0.
    pub seed: u64,
    /// Weight of the utility MSE in the loss `BCE + w · MSE`; by default 1.
    pub utility_weight: f64,
    /// The keep threshold stored in the file and used for accuracy; by default 0.5.
    pub tau: f64,
    /// The encoder the log's embeddings came from, stored in the file; by default empty.
    pub encoder: String,
}

impl TrainConfig {
    /// Checks the settings that do not need the decisions (every width within
    /// [`crate::limits::MAX_WIDTH`], each pair of consecutive layers' weights within the
    /// byte budget, the optimiser's numbers in range), so a front end refuses them before
    /// reading a log. [`train`] checks them again, with the input width. Errors name the
    /// CLI's flags (`--hidden`, `--epochs`, ...).
    pub fn check(&self) -> Result<()> {
        check_config(self)
    }
}

impl Default for TrainConfig {
    fn default() -> Self {
        TrainConfig {
            hidden: vec![64],
            epochs: 200,
            lr: 1e-3,
            weight_decay: 1e-2,
            batch_size: 32,
            patience: 10,
            holdout: 0.2,
            seed: 0,
            utility_weight: 1.0,
            tau: 0.5,
            encoder: String::new(),
        }
    }
}

/// How well a model does on a set of decisions.
#[derive(Clone, Debug, PartialEq)]
pub struct Metrics {
    /// Decisions scored.
    pub rows: usize,
    /// Of those, decisions with a logged utility.
    pub utility_rows: usize,
    /// Fraction whose `p_keep >= tau` agrees with `keep`.
    pub accuracy: f64,
    /// Mean binary cross-entropy of the keep head.
    pub bce: f64,
    /// Mean squared error of the utility head over `utility_rows`; `None` when there are
    /// none.
    pub mse: Option<f64>,
}

impl Metrics {
    /// The training loss on these decisions: `bce + utility_weight · mse` (MSE 0 when no
    /// decision has a utility).
    #[must_use]
    pub fn loss(&self, utility_weight: f64) -> f64 {
        self.bce + utility_weight * self.mse.unwrap_or(0.0)
    }
}

/// What training did.
#[derive(Clone, Debug, PartialEq)]
pub struct TrainReport {
    /// The split by run.
    pub split: Split,
    /// Epochs run before early stopping (or `epochs`).
    pub epochs_run: usize,
    /// The epoch (from 1) whose weights were kept: the lowest held-out loss.
    pub best_epoch: usize,
    /// The held-out loss after every epoch.
    pub heldout_loss: Vec<f64>,
    /// The kept model on the training split.
    pub train: Metrics,
    /// The kept model on the held-out split.
    pub heldout: Metrics,
}

/// A trained model and its report.
#[derive(Debug)]
pub struct Trained {
    /// The model, with the best epoch's weights.
    pub model: ControllerModel,
    /// How it was trained.
    pub report: TrainReport,
}

/// Keep the initialisation's and the batch order's random streams apart.
const INIT_STREAM: u64 = 0x1_417;
const SHUFFLE_STREAM: u64 = 0x5_4AF1E;

/// Trains the controller on `decisions` (App. B.3).
///
/// - Split: by run ([`split_by_run`], seeded), so no trajectory is on both sides.
/// - Inputs: [`Decision::features`], standardised by the training split's per-feature
///   mean and standard deviation (population; a feature whose deviation is below 1e-6,
///   such as a depth that never varies, is centred but not scaled). Both are stored in
///   the file.
/// - Initialisation: every weight and bias uniform in `±1/sqrt(fan_in)` (candle's and
///   PyTorch's `Linear` default), drawn from the crate's seeded [`Rng`] rather than
///   candle's generator, which cannot be seeded reliably on the CPU.
/// - Loss per mini-batch: `BCE-with-logits(cls, keep) + utility_weight · MSE(reg,
///   utility)`, the BCE averaged over the batch, the MSE over the batch's decisions
///   that logged a utility (a decision without one trains the keep head only; a batch
///   with none has no MSE term). The BCE is computed as `max(z, 0) − z·y + ln(1 +
///   e^−|z|)`, which does not overflow for large logits.
/// - Optimiser: AdamW (`candle_nn::optim::AdamW`, β = (0.9, 0.999), ε = 1e-8) at `lr`;
///   weight decay on the weight matrices only.
/// - Batches: the training decisions reshuffled each epoch by the seeded generator.
/// - Early stopping: after each epoch the held-out loss is measured; training stops
///   after `patience` epochs without a strictly lower one, and the model keeps the best
///   epoch's weights.
///
/// The same decisions and config give the same weights, bit for bit, on one machine.
pub fn train(decisions: &[Decision], cfg: &TrainConfig) -> Result<Trained> {
    check_config(cfg)?;
    let first = decisions
        .first()
        .ok_or_else(|| Error::Empty("decisions".into()))?;
    let dim = first.embedding_dim();
    for d in decisions {
        if d.embedding_dim() != dim || d.state.len() != dim {
            return Err(Error::DimensionMismatch {
                what: format!("decision from line {} (run '{}')", d.line, d.run),
                expected: dim,
                got: d.embedding_dim(),
            });
        }
    }
    let split = split_by_run(decisions, cfg.holdout, cfg.seed)?;
    let info = ModelInfo {
        embedding_dim: dim,
        hidden: cfg.hidden.clone(),
        encoder: cfg.encoder.clone(),
        tau: cfg.tau,
        trained: String::new(),
    };
    let width = info.width();
    let train_rows: Vec<&Decision> = split.train.iter().map(|&i| &decisions[i]).collect();
    let held_rows: Vec<&Decision> = split.heldout.iter().map(|&i| &decisions[i]).collect();
    let (mean, std) = standardisation(&train_rows, width);

    let dev = Device::Cpu;
    let ce = candle_error;
    let matrix = |rows: &[&Decision]| -> Result<Tensor> {
        let x: Vec<f32> = rows.iter().flat_map(|d| d.features()).collect();
        Tensor::from_vec(x, (rows.len(), width), &dev).map_err(ce)
    };
    let column = |v: Vec<f32>| -> Result<Tensor> {
        let n = v.len();
        Tensor::from_vec(v, n, &dev).map_err(ce)
    };
    let x_train = matrix(&train_rows)?;
    let y_train = column(train_rows.iter().map(|d| f32::from(u8::from(d.keep))).collect())?;
    let u_train = column(train_rows.iter().map(|d| d.utility.unwrap_or(0.0)).collect())?;
    let m_train = column(
        train_rows
            .iter()
            .map(|d| f32::from(u8::from(d.utility.is_some())))
            .collect(),
    )?;
    let x_held = matrix(&held_rows)?;

    // Seeded initialisation, trunk then reg then cls.
    let mut rng = Rng::new(cfg.seed ^ INIT_STREAM);
    let mut shapes = Vec::new();
    let mut inp = width;
    for &h in cfg.hidden.iter().chain([&1, &1]) {
        shapes.push((h, inp));
        if shapes.len() <= cfg.hidden.len() {
            inp = h;
        }
    }
    // Every weight of the network within the byte budget before one is drawn.
    let params = shapes
        .iter()
        .try_fold(0usize, |acc, &(o, i)| {
            o.checked_mul(i).and_then(|p| acc.checked_add(p))
        })
        .unwrap_or(usize::MAX);
    crate::limits::bytes("--hidden", &[("weights of the network", params)], 4)?;
    let (mut weight_vars, mut bias_vars, mut params) = (Vec::new(), Vec::new(), Vec::new());
    for &(out, inp) in &shapes {
        let bound = 1.0 / (inp as f64).sqrt();
        let mut draw = |n: usize| -> Vec<f32> {
            (0..n)
                .map(|_| ((2.0 * rng.uniform() - 1.0) * bound) as f32)
                .collect()
        };
        let w = Var::from_vec(draw(out * inp), (out, inp), &dev).map_err(ce)?;
        let b = Var::from_vec(draw(out), out, &dev).map_err(ce)?;
        params.push(w.as_tensor().clone());
        params.push(b.as_tensor().clone());
        weight_vars.push(w);
        bias_vars.push(b);
    }
    let net = Net::new(
        &params,
        Tensor::from_slice(&mean, width, &dev).map_err(ce)?,
        Tensor::from_slice(&std, width, &dev).map_err(ce)?,
    )?;
    let adam = |weight_decay: f64| ParamsAdamW {
        lr: cfg.lr,
        weight_decay,
        ..ParamsAdamW::default()
    };
    let mut opt_w = AdamW::new(weight_vars.clone(), adam(cfg.weight_decay)).map_err(ce)?;
    let mut opt_b = AdamW::new(bias_vars.clone(), adam(0.0)).map_err(ce)?;
    let snapshot = || -> Result<Vec<(Vec<f32>, Vec<f32>)>> {
        weight_vars
            .iter()
            .zip(&bias_vars)
            .map(|(w, b)| {
                let host = |v: &Var| v.as_tensor().flatten_all()?.to_vec1::<f32>();
                Ok((host(w).map_err(ce)?, host(b).map_err(ce)?))
            })
            .collect()
    };

    let mut shuffle = Rng::new(cfg.seed ^ SHUFFLE_STREAM);
    let mut order: Vec<u32> = (0..train_rows.len() as u32).collect();
    let (mut best, mut best_epoch, mut since) = (f64::INFINITY, 0, 0);
    let mut best_layers = snapshot()?;
    let mut heldout_loss = Vec::new();
    for epoch in 1..=cfg.epochs {
        for i in (1..order.len()).rev() {
            order.swap(i, shuffle.below(i + 1));
        }
        for batch in order.chunks(cfg.batch_size) {
            let idx = Tensor::from_slice(batch, batch.len(), &dev).map_err(ce)?;
            let pick = |t: &Tensor| t.index_select(&idx, 0);
            let with_utility = batch
                .iter()
                .filter(|&&i| train_rows[i as usize].utility.is_some())
                .count();
            let loss = batch_loss(
                &net,
                &pick(&x_train).map_err(ce)?,
                &pick(&y_train).map_err(ce)?,
                &pick(&u_train).map_err(ce)?,
                &pick(&m_train).map_err(ce)?,
                with_utility,
                cfg.utility_weight,
            )
            .map_err(ce)?;
            let grads = loss.backward().map_err(ce)?;
            opt_w.step(&grads).map_err(ce)?;
            opt_b.step(&grads).map_err(ce)?;
        }
        let m = metrics(&predictions(&net, &x_held)?, &held_rows, cfg.tau);
        let loss = m.loss(cfg.utility_weight);
        if !loss.is_finite() {
            return Err(Error::invalid(
                "--lr",
                format!(
                    "training diverged at epoch {epoch} (held-out loss {loss}); try a smaller learning rate"
                ),
            ));
        }
        heldout_loss.push(loss);
        if loss < best {
            (best, best_epoch, since) = (loss, epoch, 0);
            best_layers = snapshot()?;
        } else {
            since += 1;
            if since >= cfg.patience {
                break;
            }
        }
    }

    let epochs_run = heldout_loss.len();
    let info = ModelInfo {
        trained: format!(
            "epochs={epochs_run},best_epoch={best_epoch},seed={},lr={},weight_decay={},batch_size={},patience={},holdout={},utility_weight={},train_rows={},heldout_rows={}",
            cfg.seed,
            cfg.lr,
            cfg.weight_decay,
            cfg.batch_size,
            cfg.patience,
            cfg.holdout,
            cfg.utility_weight,
            train_rows.len(),
            held_rows.len()
        ),
        ..info
    };
    let model = ControllerModel::from_weights(
        Weights {
            layers: best_layers,
            mean,
            std,
        },
        info,
    )?;
    let train = evaluate_rows(&model, &train_rows, cfg.tau)?;
    let heldout = evaluate_rows(&model, &held_rows, cfg.tau)?;
    Ok(Trained {
        model,
        report: TrainReport {
            split,
            epochs_run,
            best_epoch,
            heldout_loss,
            train,
            heldout,
        },
    })
}

/// The model's metrics on `decisions` at threshold `tau` (all scored in one batch).
pub fn evaluate(model: &ControllerModel, decisions: &[Decision], tau: f64) -> Result<Metrics> {
    evaluate_rows(model, &decisions.iter().collect::<Vec<_>>(), tau)
}

fn evaluate_rows(model: &ControllerModel, rows: &[&Decision], tau: f64) -> Result<Metrics> {
    let x: Vec<f32> = rows.iter().flat_map(|d| d.features()).collect();
    Ok(metrics(&model.predict(&x, rows.len())?, rows, tau))
}

/// Metrics of `preds` against `rows`, in f64.
fn metrics(preds: &[Prediction], rows: &[&Decision], tau: f64) -> Metrics {
    let n = rows.len().max(1) as f64;
    let (mut correct, mut bce, mut se, mut nu) = (0usize, 0.0f64, 0.0f64, 0usize);
    for (p, d) in preds.iter().zip(rows) {
        correct += usize::from((p.p_keep() >= tau) == d.keep);
        let (z, y) = (f64::from(p.logit), f64::from(u8::from(d.keep)));
        bce += z.max(0.0) - z * y + (-z.abs()).exp().ln_1p();
        if let Some(u) = d.utility {
            se += (f64::from(p.utility) - f64::from(u)).powi(2);
            nu += 1;
        }
    }
    Metrics {
        rows: rows.len(),
        utility_rows: nu,
        accuracy: correct as f64 / n,
        bce: bce / n,
        mse: (nu > 0).then(|| se / nu as f64),
    }
}

/// The mini-batch loss (see [`train`]).
fn batch_loss(
    net: &Net,
    x: &Tensor,
    y: &Tensor,
    u: &Tensor,
    mask: &Tensor,
    with_utility: usize,
    utility_weight: f64,
) -> candle_core::Result<Tensor> {
    let (pred_u, z) = net.heads(x)?;
    let softplus = z.abs()?.neg()?.exp()?.affine(1.0, 1.0)?.log()?;
    let bce = ((z.relu()? - (&z * y)?)? + softplus)?.mean_all()?;
    if with_utility == 0 || utility_weight == 0.0 {
        return Ok(bce);
    }
    let mse = ((pred_u - u)?.sqr()? * mask)?
        .sum_all()?
        .affine(utility_weight / with_utility as f64, 0.0)?;
    bce + mse
}

/// Per-feature mean and standard deviation over `rows` (see [`train`]).
fn standardisation(rows: &[&Decision], width: usize) -> (Vec<f32>, Vec<f32>) {
    let n = rows.len().max(1) as f64;
    let mut sum = vec![0.0f64; width];
    let feats: Vec<Vec<f32>> = rows.iter().map(|d| d.features()).collect();
    for f in &feats {
        sum.iter_mut().zip(f).for_each(|(s, &v)| *s += f64::from(v));
    }
    let mean: Vec<f64> = sum.iter().map(|s| s / n).collect();
    let mut var = vec![0.0f64; width];
    for f in &feats {
        var.iter_mut()
            .zip(f.iter().zip(&mean))
            .for_each(|(s, (&v, m))| *s += (f64::from(v) - m).powi(2));
    }
    let std = var
        .iter()
        .map(|v| {
            let s = (v / n).sqrt();
            if s < 1e-6 {
                1.0
            } else {
                s as f32
            }
        })
        .collect();
    (mean.iter().map(|&m| m as f32).collect(), std)
}

fn check_config(cfg: &TrainConfig) -> Result<()> {
    let bad = |name: &str, msg: String| Err(Error::invalid(name, msg));
    if let Some(i) = cfg.hidden.iter().position(|&h| h == 0) {
        return bad("--hidden", format!("layer {i} has width 0"));
    }
    for (i, &h) in cfg.hidden.iter().enumerate() {
        crate::limits::check(h as u64, crate::limits::MAX_WIDTH)
            .map_err(|m| Error::invalid("--hidden", format!("layer {i}: width {m}")))?;
    }
    for (i, w) in cfg.hidden.windows(2).enumerate() {
        crate::limits::bytes(
            "--hidden",
            &[
                (format!("layer {i} width").as_str(), w[0]),
                (format!("layer {} width", i + 1).as_str(), w[1]),
            ],
            4,
        )?;
    }
    if cfg.epochs == 0 {
        return bad("--epochs", "must be at least 1".into());
    }
    if !(cfg.lr.is_finite() && cfg.lr > 0.0) {
        return bad("--lr", format!("must be a positive number, got {}", cfg.lr));
    }
    if !(cfg.weight_decay.is_finite() && cfg.weight_decay >= 0.0) {
        return bad(
            "--weight-decay",
            format!("must be a non-negative number, got {}", cfg.weight_decay),
        );
    }
    if cfg.batch_size == 0 {
        return bad("--batch-size", "must be at least 1".into());
    }
    if cfg.patience == 0 {
        return bad("--patience", "must be at least 1".into());
    }
    if !(cfg.utility_weight.is_finite() && cfg.utility_weight >= 0.0) {
        return bad(
            "utility_weight",
            format!("must be a non-negative number, got {}", cfg.utility_weight),
        );
    }
    if !(0.0..=1.0).contains(&cfg.tau) {
        return bad("--tau", format!("must be in [0, 1], got {}", cfg.tau));
    }
    Ok(())
}
