//! The attention probe's numeric input, [`Qk`]: the query rows at the reasoning steps and
//! the keys of the hooked layers, checked once. It sits here, beside [`crate::pool`],
//! because both the capability ([`crate::attention`]) and the backends that compute the
//! mass read it; neither imports the other for it.

use crate::error::{Error, Result};
use crate::rng::Rng;

/// The query rows at the reasoning steps and the keys of the hooked layers of one
/// trajectory, as f32.
///
/// Layer `l`'s `q` holds `R = steps.len()` rows of `heads · head_dim` (row `r` is
/// `Q_l[t_r]`, heads back to back); its `k` holds the keys of positions `0..n_keys`,
/// `n_keys = t_{R-1} + 1`, rows of `kv_heads · head_dim`. Query head `h` reads key head
/// `h / (heads / kv_heads)`.
#[derive(Clone, Debug)]
pub struct Qk {
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    steps: Vec<usize>,
    layers: Vec<QkLayer>,
}

/// One hooked layer of a [`Qk`].
#[derive(Clone, Debug)]
pub struct QkLayer {
    /// Query rows at the steps, `R × heads · head_dim`.
    pub q: Vec<f32>,
    /// Keys of positions `0..n_keys`, `n_keys × kv_heads · head_dim`.
    pub k: Vec<f32>,
}

impl Qk {
    /// Checked: shapes agree, `heads` is a multiple of `kv_heads`, steps strictly increase,
    /// every value is finite. Errors name the layer, row and column.
    pub fn new(
        heads: usize,
        kv_heads: usize,
        head_dim: usize,
        steps: Vec<usize>,
        layers: Vec<QkLayer>,
    ) -> Result<Self> {
        if heads == 0 || kv_heads == 0 || head_dim == 0 {
            return Err(Error::invalid(
                "heads",
                format!(
                    "heads = {heads}, kv_heads = {kv_heads}, head_dim = {head_dim}: each must be at least 1"
                ),
            ));
        }
        if heads % kv_heads != 0 {
            return Err(Error::invalid(
                "heads",
                format!("{heads} query heads are not a multiple of {kv_heads} key heads"),
            ));
        }
        if steps.is_empty() {
            return Err(Error::Empty("reasoning steps".into()));
        }
        if layers.is_empty() {
            return Err(Error::Empty("layers".into()));
        }
        for r in 1..steps.len() {
            if steps[r] <= steps[r - 1] {
                return Err(Error::invalid(
                    format!("steps[{r}]"),
                    format!(
                        "position {} is not after steps[{}] = {}",
                        steps[r],
                        r - 1,
                        steps[r - 1]
                    ),
                ));
            }
        }
        let n_keys = steps[steps.len() - 1] + 1;
        let too_big = |what: &str| Error::invalid(what, "the tensor's size overflows usize".to_string());
        let qw = heads.checked_mul(head_dim).ok_or_else(|| too_big("heads"))?;
        let kw = kv_heads
            .checked_mul(head_dim)
            .ok_or_else(|| too_big("kv_heads"))?;
        for (l, layer) in layers.iter().enumerate() {
            let mut amax = [0.0f32; 2];
            for (x, (what, v, rows, w)) in [("q", &layer.q, steps.len(), qw), ("k", &layer.k, n_keys, kw)]
                .into_iter()
                .enumerate()
            {
                let want = rows.checked_mul(w).ok_or_else(|| too_big(what))?;
                if v.len() != want {
                    return Err(Error::DimensionMismatch {
                        what: format!("layers[{l}].{what}: {rows} rows of {w}"),
                        expected: want,
                        got: v.len(),
                    });
                }
                if let Some(i) = v.iter().position(|x| !x.is_finite()) {
                    return Err(Error::NonFinite {
                        source_name: format!("layers[{l}].{what}"),
                        row: i / w,
                        col: i % w,
                        value: v[i],
                    });
                }
                amax[x] = v.iter().fold(0.0f32, |a, &b| a.max(b.abs()));
            }
            // |q·k| <= d max|q| max|k| must stay finite in f32, or a score is inf and the
            // softmax NaN.
            let bound = head_dim as f64 * f64::from(amax[0]) * f64::from(amax[1]);
            if bound > f64::from(f32::MAX) / 2.0 {
                return Err(Error::invalid(
                    format!("layers[{l}]"),
                    format!(
                        "max |q| = {:e} and max |k| = {:e} over d = {head_dim} can overflow an f32 score",
                        amax[0], amax[1]
                    ),
                ));
            }
        }
        Ok(Qk {
            heads,
            kv_heads,
            head_dim,
            steps,
            layers,
        })
    }

    /// Query heads `H`.
    #[must_use]
    pub fn heads(&self) -> usize {
        self.heads
    }
    /// Key heads `G`.
    #[must_use]
    pub fn kv_heads(&self) -> usize {
        self.kv_heads
    }
    /// Head dimension `d`.
    #[must_use]
    pub fn head_dim(&self) -> usize {
        self.head_dim
    }
    /// The query positions `t_r`.
    #[must_use]
    pub fn steps(&self) -> &[usize] {
        &self.steps
    }
    /// The layers.
    #[must_use]
    pub fn layers(&self) -> &[QkLayer] {
        &self.layers
    }
    /// Keys per layer: `t_{R-1} + 1`.
    #[must_use]
    pub fn n_keys(&self) -> usize {
        self.steps[self.steps.len() - 1] + 1
    }
}

impl Qk {
    /// Seeded Gaussian query rows at `steps` and keys of positions `0..=steps.last()`, for
    /// tests, benchmarks and the device check ([`crate::attention::synthetic`] adds the
    /// segmentation around them).
    pub fn gaussian(
        layers: usize,
        heads: usize,
        kv_heads: usize,
        head_dim: usize,
        steps: Vec<usize>,
        seed: u64,
    ) -> Result<Qk> {
        let Some(&last) = steps.last() else {
            return Err(Error::Empty("reasoning steps".into()));
        };
        let n_keys = last + 1;
        let mut rng = Rng::new(seed);
        let mut gauss = |len: usize| -> Vec<f32> { (0..len).map(|_| rng.normal() as f32).collect() };
        let layers = (0..layers)
            .map(|_| QkLayer {
                q: gauss(steps.len() * heads * head_dim),
                k: gauss(n_keys * kv_heads * head_dim),
            })
            .collect();
        Qk::new(heads, kv_heads, head_dim, steps, layers)
    }
}
