//! The BERT forward pass the encoder runs: packed ("unpadded") tokens, fused attention.
//!
//! candle-transformers' `BertModel` pads every sequence of a batch to the longest, runs
//! attention over `batch × heads × len × len` scores with a mask, and does its
//! element-wise work (bias, GELU, softmax, residuals) on one core. This pass keeps
//! candle's weights (read by candle's `VarBuilder`, so names, prefixes and dtypes resolve
//! exactly as candle resolves them) and computes the same function differently:
//! - the token-wise layers (QKV, output, FFN, LayerNorm) run on the real tokens of the
//!   batch packed end to end (`T × hidden`), so padding costs nothing at all;
//! - attention runs per sequence and head over that sequence's own length (no mask, no
//!   padded scores), the softmax fused with the scaling, spread over the cores;
//! - GEMMs are faer's blocked GEMM on all cores; element-wise passes are split over the
//!   cores by rows.
//!
//! Sums of the LayerNorm and softmax accumulate in f64. `tests/embed.rs` holds this pass to
//! candle-transformers' `BertModel` and to sentence-transformers.

use crate::backend::cpu::gemm_abt;
use crate::error::{Error, Result};
use rayon::prelude::*;
use serde::Deserialize;

/// A BERT `config.json`, read as candle-transformers' `bert::Config` reads it (the same
/// fields, required and defaulted alike, so the same files are accepted and refused).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub(crate) struct Config {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub intermediate_size: usize,
    pub hidden_act: HiddenAct,
    #[allow(dead_code)] // read to be refused when missing, as candle does
    pub hidden_dropout_prob: f64,
    pub max_position_embeddings: usize,
    pub type_vocab_size: usize,
    #[allow(dead_code)]
    pub initializer_range: f64,
    pub layer_norm_eps: f64,
    #[allow(dead_code)]
    pub pad_token_id: usize,
    #[serde(default)]
    #[allow(dead_code)]
    pub position_embedding_type: PositionEmbeddingType,
    #[serde(default)]
    #[allow(dead_code)]
    pub use_cache: bool,
    #[allow(dead_code)]
    pub classifier_dropout: Option<f64>,
    pub model_type: Option<String>,
}

/// The feed-forward activation (`hidden_act`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum HiddenAct {
    Gelu,
    GeluApproximate,
    Relu,
}

/// Position embeddings: absolute only (as candle-transformers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub(crate) enum PositionEmbeddingType {
    #[default]
    Absolute,
}

struct Norm {
    gamma: Vec<f32>,
    beta: Vec<f32>,
}

struct Layer {
    /// Query, key and value weights stacked: `3·hidden × hidden`.
    w_qkv: Vec<f32>,
    b_qkv: Vec<f32>,
    w_out: Vec<f32>,
    b_out: Vec<f32>,
    norm_attn: Norm,
    w_up: Vec<f32>,
    b_up: Vec<f32>,
    w_down: Vec<f32>,
    b_down: Vec<f32>,
    norm_ffn: Norm,
}

/// BERT's weights as row-major f32 matrices (`out × in`, as torch's `Linear` stores them).
pub(crate) struct Bert {
    hidden: usize,
    heads: usize,
    inter: usize,
    eps: f64,
    act: HiddenAct,
    word: Vec<f32>,
    position: Vec<f32>,
    max_positions: usize,
    token_type0: Vec<f32>,
    norm_emb: Norm,
    layers: Vec<Layer>,
}

/// Rows per task of the element-wise passes.
const ROWS: usize = 16;

impl Bert {
    /// Reads the weights through candle's `VarBuilder` (shapes checked there).
    pub(crate) fn load(vb: &candle_nn::VarBuilder, cfg: &Config) -> candle_core::Result<Self> {
        // The prefixes candle-transformers' BertModel accepts: none, "bert.", "<model_type>.".
        let mut prefixes = vec![String::new(), "bert.".to_string()];
        if let Some(t) = &cfg.model_type {
            prefixes.push(format!("{t}."));
        }
        let pre = prefixes
            .into_iter()
            .find(|p| vb.contains_tensor(&format!("{p}embeddings.word_embeddings.weight")))
            .unwrap_or_default();
        let (h, i) = (cfg.hidden_size, cfg.intermediate_size);
        let get = |shape: &[usize], name: &str| -> candle_core::Result<Vec<f32>> {
            vb.get(shape, &format!("{pre}{name}"))?
                .flatten_all()?
                .to_vec1::<f32>()
        };
        let norm = |name: &str| -> candle_core::Result<Norm> {
            Ok(Norm {
                gamma: get(&[h], &format!("{name}.weight"))?,
                beta: get(&[h], &format!("{name}.bias"))?,
            })
        };
        let types = get(
            &[cfg.type_vocab_size, h],
            "embeddings.token_type_embeddings.weight",
        )?;
        let mut layers = Vec::with_capacity(cfg.num_hidden_layers);
        for l in 0..cfg.num_hidden_layers {
            let p = format!("encoder.layer.{l}");
            // Sized by the weights read, not by the config's sizes (checked against the
            // weights by these very reads).
            let (mut w_qkv, mut b_qkv) = (Vec::new(), Vec::new());
            for part in ["query", "key", "value"] {
                w_qkv.extend(get(&[h, h], &format!("{p}.attention.self.{part}.weight"))?);
                b_qkv.extend(get(&[h], &format!("{p}.attention.self.{part}.bias"))?);
            }
            layers.push(Layer {
                w_qkv,
                b_qkv,
                w_out: get(&[h, h], &format!("{p}.attention.output.dense.weight"))?,
                b_out: get(&[h], &format!("{p}.attention.output.dense.bias"))?,
                norm_attn: norm(&format!("{p}.attention.output.LayerNorm"))?,
                w_up: get(&[i, h], &format!("{p}.intermediate.dense.weight"))?,
                b_up: get(&[i], &format!("{p}.intermediate.dense.bias"))?,
                w_down: get(&[h, i], &format!("{p}.output.dense.weight"))?,
                b_down: get(&[h], &format!("{p}.output.dense.bias"))?,
                norm_ffn: norm(&format!("{p}.output.LayerNorm"))?,
            });
        }
        Ok(Bert {
            hidden: h,
            heads: cfg.num_attention_heads,
            inter: i,
            eps: cfg.layer_norm_eps,
            act: cfg.hidden_act,
            word: get(&[cfg.vocab_size, h], "embeddings.word_embeddings.weight")?,
            position: get(
                &[cfg.max_position_embeddings, h],
                "embeddings.position_embeddings.weight",
            )?,
            max_positions: cfg.max_position_embeddings,
            token_type0: types[..h].to_vec(),
            norm_emb: norm("embeddings.LayerNorm")?,
            layers,
        })
    }

    /// The last hidden states of `seqs` (token ids), packed: `Σ len × hidden`, sequence
    /// after sequence.
    pub(crate) fn forward(&self, seqs: &[&[u32]]) -> Result<Vec<f32>> {
        let h = self.hidden;
        let vocab = self.word.len() / h;
        let mut offsets = Vec::with_capacity(seqs.len() + 1);
        offsets.push(0usize);
        for (s, ids) in seqs.iter().enumerate() {
            if ids.len() > self.max_positions {
                return Err(Error::invalid(
                    format!("text {s}"),
                    format!(
                        "{} tokens exceed the model's {} positions",
                        ids.len(),
                        self.max_positions
                    ),
                ));
            }
            if let Some(&bad) = ids.iter().find(|&&t| t as usize >= vocab) {
                return Err(Error::invalid(
                    format!("text {s}"),
                    format!("token id {bad} is outside the vocabulary of {vocab}"),
                ));
            }
            offsets.push(offsets[s] + ids.len());
        }
        let t = offsets[seqs.len()];
        // Embeddings: word + position + token type 0, then LayerNorm.
        let mut x = vec![0f32; t * h];
        let pos_of: Vec<(u32, usize)> = seqs
            .iter()
            .flat_map(|ids| ids.iter().enumerate().map(|(p, &id)| (id, p)))
            .collect();
        x.par_chunks_mut(h * ROWS).enumerate().for_each(|(c, block)| {
            for (k, row) in block.chunks_mut(h).enumerate() {
                let (id, p) = pos_of[c * ROWS + k];
                let w = &self.word[id as usize * h..(id as usize + 1) * h];
                let pe = &self.position[p * h..(p + 1) * h];
                for j in 0..h {
                    row[j] = w[j] + pe[j] + self.token_type0[j];
                }
                layer_norm(row, &self.norm_emb, self.eps);
            }
        });
        let mut qkv = vec![0f32; t * 3 * h];
        let mut ctx = vec![0f32; t * h];
        let mut tmp = vec![0f32; t * h];
        let mut up = vec![0f32; t * self.inter];
        for l in &self.layers {
            linear(&x, h, &l.w_qkv, &l.b_qkv, &mut qkv);
            self.attention(&qkv, &offsets, &mut ctx);
            linear(&ctx, h, &l.w_out, &l.b_out, &mut tmp);
            add_norm(&mut x, &tmp, h, &l.norm_attn, self.eps);
            linear(&x, h, &l.w_up, &l.b_up, &mut up);
            let act = self.act;
            up.par_chunks_mut(self.inter * ROWS)
                .for_each(|c| activation(act, c));
            linear(&up, self.inter, &l.w_down, &l.b_down, &mut tmp);
            add_norm(&mut x, &tmp, h, &l.norm_ffn, self.eps);
        }
        Ok(x)
    }

    /// Softmax(Q Kᵀ / √d) V per sequence and head, into `ctx` (`T × hidden`).
    fn attention(&self, qkv: &[f32], offsets: &[usize], ctx: &mut [f32]) {
        let (h, nh) = (self.hidden, self.heads);
        let dh = h / nh;
        let scale = 1.0 / (dh as f64).sqrt();
        // One task per (sequence, head); each writes its own columns of its own rows.
        let tasks: Vec<(usize, usize)> = (0..offsets.len() - 1)
            .flat_map(|s| (0..nh).map(move |hd| (s, hd)))
            .collect();
        let results: Vec<Vec<f32>> = tasks
            .par_iter()
            .map(|&(s, hd)| {
                let (o, n) = (offsets[s], offsets[s + 1] - offsets[s]);
                let mut q = vec![0f32; n * dh];
                let mut k = vec![0f32; n * dh];
                let mut vt = vec![0f32; dh * n];
                for r in 0..n {
                    let row = &qkv[(o + r) * 3 * h..(o + r + 1) * 3 * h];
                    q[r * dh..(r + 1) * dh].copy_from_slice(&row[hd * dh..(hd + 1) * dh]);
                    k[r * dh..(r + 1) * dh].copy_from_slice(&row[h + hd * dh..h + (hd + 1) * dh]);
                    for c in 0..dh {
                        vt[c * n + r] = row[2 * h + hd * dh + c];
                    }
                }
                let mut s_ = vec![0f32; n * n];
                gemm_abt(&q, &k, dh, &mut s_, n, false);
                softmax_rows(&mut s_, n, scale as f32);
                let mut out = vec![0f32; n * dh];
                gemm_abt(&s_, &vt, n, &mut out, dh, false);
                out
            })
            .collect();
        for (&(s, hd), out) in tasks.iter().zip(results) {
            let o = offsets[s];
            for (r, src) in out.chunks(dh).enumerate() {
                ctx[(o + r) * h + hd * dh..(o + r) * h + (hd + 1) * dh].copy_from_slice(src);
            }
        }
    }
}

/// `y = x Wᵀ + b` for row-major `x` (`T × in`) and `w` (`out × in`), on every core.
fn linear(x: &[f32], inp: usize, w: &[f32], b: &[f32], y: &mut [f32]) {
    let out = b.len();
    gemm_abt(x, w, inp, y, out, true);
    y.par_chunks_mut(out * ROWS).for_each(|c| {
        for row in c.chunks_mut(out) {
            row.iter_mut().zip(b).for_each(|(v, &bb)| *v += bb);
        }
    });
}

/// `x = LayerNorm(x + r)` row by row.
fn add_norm(x: &mut [f32], r: &[f32], h: usize, n: &Norm, eps: f64) {
    x.par_chunks_mut(h * ROWS)
        .zip(r.par_chunks(h * ROWS))
        .for_each(|(xc, rc)| {
            for (row, res) in xc.chunks_mut(h).zip(rc.chunks(h)) {
                row.iter_mut().zip(res).for_each(|(v, &a)| *v += a);
                layer_norm(row, n, eps);
            }
        });
}

fn layer_norm(row: &mut [f32], n: &Norm, eps: f64) {
    let h = row.len() as f64;
    let mean = row.iter().map(|&v| f64::from(v)).sum::<f64>() / h;
    let var = row.iter().map(|&v| (f64::from(v) - mean).powi(2)).sum::<f64>() / h;
    let inv = 1.0 / (var + eps).sqrt();
    for ((v, &g), &b) in row.iter_mut().zip(&n.gamma).zip(&n.beta) {
        *v = ((f64::from(*v) - mean) * inv) as f32 * g + b;
    }
}

/// The activation in place.
fn activation(act: HiddenAct, xs: &mut [f32]) {
    match act {
        HiddenAct::Gelu => gelu_erf(xs),
        HiddenAct::GeluApproximate => {
            let c = (2.0f32 / std::f32::consts::PI).sqrt();
            xs.iter_mut()
                .for_each(|v| *v = 0.5 * *v * (1.0 + (c * (*v + 0.044_715 * *v * *v * *v)).tanh()));
        }
        HiddenAct::Relu => xs.iter_mut().for_each(|v| *v = v.max(0.0)),
    }
}

/// `exp(x)` in f32 without a libm call, so loops over it vectorise: `2^n · p(r)` with
/// `x = n ln 2 + r`, `|r| <= ln 2 / 2`, a degree-6 polynomial (relative error below
/// 3e-7 over [-87.3, 88], measured in the tests; the argument is clamped to that range).
#[inline(always)]
fn exp_f32(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_145_75;
    const LN2_LO: f32 = 1.428_606_8e-6;
    const ROUND: f32 = 12_582_912.0; // 1.5 · 2^23: adding it rounds to an integer
    let x = x.clamp(-87.3, 88.0);
    let n = (x * LOG2E + ROUND) - ROUND;
    let r = x - n * LN2_HI - n * LN2_LO;
    let p = 1.0
        + r * (1.0
            + r * (0.5 + r * (0.166_666_67 + r * (0.041_666_668 + r * (0.008_333_334 + r * 0.001_388_889)))));
    let scale = f32::from_bits(((n as i32 + 127) as u32) << 23);
    p * scale
}

/// `erf(x)` (Abramowitz and Stegun 7.1.26: 1.5e-7 in exact arithmetic, below 1e-6 absolute
/// evaluated in f32, measured in the tests) on [`exp_f32`].
#[inline(always)]
fn erf_f32(x: f32) -> f32 {
    let a = x.abs();
    let t = 1.0 / (1.0 + 0.327_591_1 * a);
    let y = 1.0
        - t * (0.254_829_6 + t * (-0.284_496_74 + t * (1.421_413_7 + t * (-1.453_152_1 + t * 1.061_405_4))))
            * exp_f32(-a * a);
    y.copysign(x)
}

/// GELU with the exact (erf) form, as BERT's "gelu".
#[multiversion::multiversion(targets("x86_64+avx512f+avx512vl+fma", "x86_64+avx2+fma", "aarch64+neon"))]
fn gelu_erf(xs: &mut [f32]) {
    for v in xs.iter_mut() {
        *v = 0.5 * *v * (1.0 + erf_f32(*v * std::f32::consts::FRAC_1_SQRT_2));
    }
}

/// Softmax of each `n`-wide row of `s` after scaling by `scale`.
#[multiversion::multiversion(targets("x86_64+avx512f+avx512vl+fma", "x86_64+avx2+fma", "aarch64+neon"))]
fn softmax_rows(s: &mut [f32], n: usize, scale: f32) {
    for row in s.chunks_mut(n) {
        let m = row.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
        let mut sum = 0f32;
        for v in row.iter_mut() {
            let e = exp_f32((*v - m) * scale);
            *v = e;
            sum += e;
        }
        let inv = 1.0 / sum;
        row.iter_mut().for_each(|v| *v *= inv);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_and_erf_match_the_libm_definitions() {
        let mut worst_exp = 0f64;
        let mut worst_erf = 0f64;
        for i in 0..=200_000 {
            let x = -87.0 + 175.0 * f64::from(i) / 200_000.0;
            let got = f64::from(exp_f32(x as f32));
            let want = (f64::from(x as f32)).exp();
            worst_exp = worst_exp.max(((got - want) / want).abs());
            let z = -6.0 + 12.0 * f64::from(i) / 200_000.0;
            let e = f64::from(erf_f32(z as f32));
            let w = candle_core::cpu::erf::erf_f64(f64::from(z as f32));
            worst_erf = worst_erf.max((e - w).abs());
        }
        assert!(worst_exp < 3e-7, "exp relative error {worst_exp:e}");
        assert!(worst_erf < 1e-6, "erf absolute error {worst_erf:e}");
        eprintln!("exp relative error {worst_exp:e}, erf absolute error {worst_erf:e}");
        assert_eq!(exp_f32(-1000.0), exp_f32(-87.3));
        assert!(exp_f32(-87.3) < 1e-37 && exp_f32(0.0) == 1.0);
        // GELU at a few points against 0.5 x (1 + erf(x / sqrt 2)) in f64.
        let mut xs = [-3.0f32, -1.0, -0.1, 0.0, 0.5, 2.0, 7.0];
        let want: Vec<f64> = xs
            .iter()
            .map(|&x| {
                let x = f64::from(x);
                0.5 * x * (1.0 + candle_core::cpu::erf::erf_f64(x / std::f64::consts::SQRT_2))
            })
            .collect();
        gelu_erf(&mut xs);
        for (g, w) in xs.iter().zip(want) {
            assert!((f64::from(*g) - w).abs() < 1e-6, "{g} vs {w}");
        }
    }

    #[test]
    fn softmax_rows_sum_to_one_and_match_f64() {
        let mut rng = crate::rng::Rng::new(5);
        let n = 37;
        let mut s: Vec<f32> = (0..n * 3).map(|_| (rng.normal() * 4.0) as f32).collect();
        let orig = s.clone();
        softmax_rows(&mut s, n, 0.3);
        for (row, o) in s.chunks(n).zip(orig.chunks(n)) {
            let m = o
                .iter()
                .map(|&v| f64::from(v) * 0.3)
                .fold(f64::NEG_INFINITY, f64::max);
            let z: f64 = o.iter().map(|&v| (f64::from(v) * 0.3 - m).exp()).sum();
            for (p, &v) in row.iter().zip(o) {
                let w = (f64::from(v) * 0.3 - m).exp() / z;
                assert!((f64::from(*p) - w).abs() < 1e-6);
            }
        }
    }
}
