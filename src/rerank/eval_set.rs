//! Problem sets from files for `ctxprune eval --set`: real pools with graded relevance,
//! evaluated beside the generated problems of [`super::eval`].
//!
//! A set is one safetensors file:
//!
//! | tensor | dtype | shape | meaning |
//! |---|---|---|---|
//! | `rows` | F32 | `[M, d]` | the corpus' embeddings |
//! | `queries` | F32 | `[Q, d]` | one query per problem |
//! | `pools` | I64 | `[Q, N]` | per query, the rows of its pool in `rows`, in the order a retriever hands them over (MIPS order) |
//! | `labels` | F32 | `[Q, N]` | graded relevance of each pool entry, finite and at least 0 |
//! | `tokens` | I64 | `[Q, N]` | optional: each pool entry's token count, at least 1 |
//!
//! Any other tensor is an error, as is a row index outside `rows` or named twice in one pool.
//! Problem `i`'s oracle is a simulated cross-encoder: `clamp(label / L + noise · z, 0, 1)`
//! with `L` the set's largest label and `z` standard normal from the seed `seed + i`, so the
//! noise is a flag and the scores are the same on every run. `benches/realtext.py` builds
//! a set from the crate READMEs and doc comments on this machine.

use super::eval::Problem;
use crate::backend::Engine;
use crate::embeddings::Embeddings;
use crate::error::{Error, Result};
use crate::pool::Pool;
use crate::rng::Rng;
use crate::similarity::{Kernel, KernelKind};
use std::path::{Path, PathBuf};

/// A problem set read from a file (see the module's documentation).
pub struct ProblemSet {
    path: PathBuf,
    dim: usize,
    rows: Vec<f32>,
    queries: Vec<f32>,
    /// Per problem, `n` row indices.
    pools: Vec<usize>,
    labels: Vec<f32>,
    tokens: Option<Vec<u64>>,
    /// Problems.
    q: usize,
    /// Pool size.
    n: usize,
    top_label: f64,
}

const TENSORS: [&str; 5] = ["rows", "queries", "pools", "labels", "tokens"];

impl ProblemSet {
    /// Reads and checks a set; errors name the file and the tensor (and element) at fault.
    pub fn load(path: &Path) -> Result<ProblemSet> {
        let bytes = crate::io::safetensors_header::read(path)?;
        Self::from_bytes(&bytes, path)
    }

    /// Parses a set from safetensors bytes; `path` names them in errors.
    pub fn from_bytes(bytes: &[u8], path: &Path) -> Result<ProblemSet> {
        use safetensors::Dtype;
        crate::io::safetensors_header::check(path, bytes)?;
        let st = safetensors::SafeTensors::deserialize(bytes)
            .map_err(|e| Error::format(path, format!("not a valid safetensors file: {e}")))?;
        let mut names = st.names();
        names.sort_unstable();
        if let Some(x) = names.iter().find(|n| !TENSORS.contains(n)) {
            return Err(Error::format(
                path,
                format!("unknown tensor '{x}' (a problem set holds rows, queries, pools, labels and tokens)"),
            ));
        }
        let fmt = |m: String| Error::format(path, m);
        let get = |name: &str, want: Dtype| -> Result<Option<(Vec<usize>, Vec<u8>)>> {
            let Ok(t) = st.tensor(name) else {
                return Ok(None);
            };
            if t.dtype() != want {
                return Err(fmt(format!(
                    "tensor '{name}' is {:?}, expected {want:?}",
                    t.dtype()
                )));
            }
            if t.shape().len() != 2 || t.shape().contains(&0) {
                return Err(fmt(format!(
                    "tensor '{name}' has shape {:?}, expected 2-D and non-empty",
                    t.shape()
                )));
            }
            Ok(Some((t.shape().to_vec(), t.data().to_vec())))
        };
        let need =
            |name: &str, want: Dtype| get(name, want)?.ok_or_else(|| fmt(format!("missing tensor '{name}'")));
        let floats = |name: &str, raw: &[u8]| -> Result<Vec<f32>> {
            let v: Vec<f32> = raw
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            match v.iter().position(|x| !x.is_finite()) {
                Some(i) => Err(fmt(format!("tensor '{name}' element {i} is not finite"))),
                None => Ok(v),
            }
        };
        let ints = |raw: &[u8]| -> Vec<i64> {
            raw.chunks_exact(8)
                .map(|b| i64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]))
                .collect()
        };
        let (rs, raw) = need("rows", Dtype::F32)?;
        let rows = floats("rows", &raw)?;
        let (qs, raw) = need("queries", Dtype::F32)?;
        let queries = floats("queries", &raw)?;
        let (m, dim) = (rs[0], rs[1]);
        if qs[1] != dim {
            return Err(fmt(format!(
                "tensor 'queries' has {} columns, 'rows' has {dim}",
                qs[1]
            )));
        }
        let q = qs[0];
        let (ps, raw) = need("pools", Dtype::I64)?;
        if ps[0] != q {
            return Err(fmt(format!(
                "tensor 'pools' has {} rows, one per query ({q}) expected",
                ps[0]
            )));
        }
        let n = ps[1];
        let mut pools = Vec::with_capacity(q * n);
        let mut seen = vec![usize::MAX; m];
        for (i, &x) in ints(&raw).iter().enumerate() {
            let (p, j) = (i / n, i % n);
            let r = usize::try_from(x)
                .ok()
                .filter(|&r| r < m)
                .ok_or_else(|| fmt(format!("tensor 'pools' [{p}, {j}] = {x} is outside the {m} rows")))?;
            if seen[r] == p {
                return Err(fmt(format!("tensor 'pools' row {p} names row {r} twice")));
            }
            seen[r] = p;
            pools.push(r);
        }
        let shaped = |name: &str, s: &[usize]| {
            if s == [q, n] {
                Ok(())
            } else {
                Err(fmt(format!(
                    "tensor '{name}' has shape {s:?}, expected [{q}, {n}] (as 'pools')"
                )))
            }
        };
        let (ls, raw) = need("labels", Dtype::F32)?;
        shaped("labels", &ls)?;
        let labels = floats("labels", &raw)?;
        if let Some(i) = labels.iter().position(|&l| l < 0.0) {
            return Err(fmt(format!("tensor 'labels' element {i} is negative")));
        }
        let top_label = labels.iter().fold(0.0f64, |a, &l| a.max(f64::from(l)));
        if top_label == 0.0 {
            return Err(fmt(
                "tensor 'labels' is all 0: no problem has a relevant entry".into()
            ));
        }
        let tokens = match get("tokens", Dtype::I64)? {
            None => None,
            Some((ts, raw)) => {
                shaped("tokens", &ts)?;
                let t = ints(&raw);
                if let Some(i) = t.iter().position(|&x| x < 1) {
                    return Err(fmt(format!("tensor 'tokens' element {i} is below 1")));
                }
                Some(t.into_iter().map(|x| x as u64).collect())
            }
        };
        Ok(ProblemSet {
            path: path.to_path_buf(),
            dim,
            rows,
            queries,
            pools,
            labels,
            tokens,
            q,
            n,
            top_label,
        })
    }

    /// Problems (queries) in the set.
    #[must_use]
    pub fn len(&self) -> usize {
        self.q
    }

    /// True when the set has no problem (never, for a loaded set).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.q == 0
    }

    /// Entries per pool.
    #[must_use]
    pub fn pool_size(&self) -> usize {
        self.n
    }

    /// Whether every entry has a token count.
    #[must_use]
    pub fn has_tokens(&self) -> bool {
        self.tokens.is_some()
    }

    /// The file's stem, the set's name in tables.
    #[must_use]
    pub fn name(&self) -> String {
        self.path
            .file_stem()
            .map_or_else(|| "set".into(), |s| s.to_string_lossy().into_owned())
    }

    /// Problem `i`: its pool (rows in pool order, on the CPU engine), query, the kernel of
    /// the generated problems (vMF, median heuristic), labels, token counts (0 without
    /// them) and the simulated cross-encoder's scores at `noise`, seeded by `seed + i`
    /// (wrapping). Errors name `noise` when it is negative or not finite, and `problem`.
    pub fn problem(&self, i: usize, noise: f64, seed: u64) -> Result<Problem> {
        if !(noise.is_finite() && noise >= 0.0) {
            return Err(Error::invalid(
                "noise",
                format!("{noise} is not a finite number >= 0"),
            ));
        }
        if i >= self.q {
            return Err(Error::invalid(
                "problem",
                format!("{i} is outside the set's {} problems", self.q),
            ));
        }
        let (n, d) = (self.n, self.dim);
        let idx = &self.pools[i * n..(i + 1) * n];
        let mut data = Vec::with_capacity(n * d);
        for &r in idx {
            data.extend_from_slice(&self.rows[r * d..(r + 1) * d]);
        }
        let e = Embeddings::new(n, d, data, format!("{}:pools[{i}]", self.path.display()))?;
        let pool = Pool::new(&Engine::cpu(), e)?;
        let kernel = Kernel::from_median(KernelKind::Vmf, pool.median_one_minus_cos()?);
        let labels: Vec<f64> = self.labels[i * n..(i + 1) * n]
            .iter()
            .map(|&l| f64::from(l))
            .collect();
        let mut rng = Rng::new(seed.wrapping_add(i as u64));
        let oracle = labels
            .iter()
            .map(|&l| (l / self.top_label + noise * rng.normal()).clamp(0.0, 1.0))
            .collect();
        let tokens = self
            .tokens
            .as_ref()
            .map_or_else(|| vec![0; n], |t| t[i * n..(i + 1) * n].to_vec());
        Ok(Problem {
            pool,
            query: self.queries[i * d..(i + 1) * d].to_vec(),
            kernel,
            oracle,
            labels,
            tokens,
        })
    }
}
