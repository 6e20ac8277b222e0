//! Attention mass, its decay curves and figures, and the SNR probe (`ctxprune attention`,
//! `ctxprune probe`) for Python. Structured results cross as JSON text (the Python side
//! turns them into dicts and numpy arrays); tensors cross as float32 rows.

use crate::engine::Engine;
use crate::errors::{invalid, IntoPy};
use ctxprune::attention::{
    self, figures, segment as segmenter, tensors::TensorFile, Mass, QkLayer, Segmentation,
};
use ctxprune::Error;
use pyo3::prelude::*;
use std::path::{Path, PathBuf};

fn to_json<T: serde::Serialize>(v: &T) -> ctxprune::Result<String> {
    serde_json::to_string(v).map_err(|e| Error::invalid("json", e.to_string()))
}

fn seg_of(text: &str) -> ctxprune::Result<Segmentation> {
    Segmentation::from_json(text, Path::new("segments"))
}

fn mass_of(text: &str, what: &str) -> ctxprune::Result<Mass> {
    let m: Mass =
        ctxprune::io::json::from_str(text).map_err(|e| Error::invalid(what, format!("not a mass: {e}")))?;
    m.check().map_err(|e| Error::invalid(what, e.to_string()))?;
    Ok(m)
}

/// The (turn, role) spans and reasoning steps of a rendered prompt: JSON.
#[pyfunction]
#[pyo3(signature = (prompt, tokenizer, template = "qwen"))]
pub fn segment(py: Python<'_>, prompt: &str, tokenizer: PathBuf, template: &str) -> PyResult<String> {
    crate::compute(py, || {
        let t = segmenter::Template::by_name(template)?;
        let tok = segmenter::load_tokenizer(&tokenizer)?;
        let seg =
            segmenter::segment(prompt, &t, &tok).map_err(|e| Error::invalid("prompt", e.to_string()))?;
        to_json(&seg)
    })
    .py(py)
}

/// Attention mass from a safetensors file of Q/K (`attention mass --tensors`): JSON.
#[pyfunction]
#[pyo3(signature = (engine, tensors, segments, head_dim = None))]
pub fn mass_file(
    py: Python<'_>,
    engine: &Engine,
    tensors: PathBuf,
    segments: &str,
    head_dim: Option<usize>,
) -> PyResult<String> {
    crate::compute(py, || {
        let seg = seg_of(segments)?;
        if seg.steps.is_empty() {
            return Err(Error::invalid("segments", "no reasoning steps (steps is empty)"));
        }
        let mut file = TensorFile::open(&tensors, head_dim)?;
        let n = file.layout().n;
        if n != seg.n_tokens {
            return Err(Error::invalid(
                "segments",
                format!(
                    "segments {} tokens but {} holds {n} positions",
                    seg.n_tokens,
                    tensors.display()
                ),
            ));
        }
        let qk = file.read(&seg.steps)?;
        to_json(&attention::mass(&engine.inner, &qk, &seg)?)
    })
    .py(py)
}

/// Attention mass from arrays: per layer, the query rows at the steps (`R x heads *
/// head_dim`) and the keys up to the last step (`n_keys x kv_heads * head_dim`): JSON.
#[pyfunction]
#[pyo3(signature = (engine, segments, heads, kv_heads, head_dim, queries, keys))]
#[allow(clippy::too_many_arguments)]
pub fn mass_arrays(
    py: Python<'_>,
    engine: &Engine,
    segments: &str,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    queries: Vec<Bound<'_, PyAny>>,
    keys: Vec<Bound<'_, PyAny>>,
) -> PyResult<String> {
    if queries.len() != keys.len() {
        return Err(invalid(
            py,
            "layers",
            format!("{} query arrays for {} key arrays", queries.len(), keys.len()),
        ));
    }
    let mut layers = Vec::with_capacity(queries.len());
    for (l, (q, k)) in queries.iter().zip(&keys).enumerate() {
        layers.push(QkLayer {
            q: crate::arrays::vector(py, q, &format!("layers[{l}].q"))?,
            k: crate::arrays::vector(py, k, &format!("layers[{l}].k"))?,
        });
    }
    crate::compute(py, || {
        let seg = seg_of(segments)?;
        let qk = attention::Qk::new(heads, kv_heads, head_dim, seg.steps.clone(), layers)?;
        to_json(&attention::mass(&engine.inner, &qk, &seg)?)
    })
    .py(py)
}

/// The T x T heat-map matrices of a mass (App. E.4): (reasoning, observation), row-major,
/// and T.
#[pyfunction]
pub fn heatmap_matrices(py: Python<'_>, mass: &str) -> PyResult<(Vec<f64>, Vec<f64>, usize)> {
    crate::compute(py, || {
        let m = mass_of(mass, "mass")?;
        let (a, b) = figures::heatmap_matrices(&m);
        let t = (a.len() as f64).sqrt().round() as usize;
        Ok((a, b, t))
    })
    .py(py)
}

/// Draws a mass's heat map as a PNG.
#[pyfunction]
pub fn draw_heatmap(py: Python<'_>, mass: &str, path: PathBuf, title: &str) -> PyResult<()> {
    crate::compute(py, || {
        figures::draw_heatmap(&mass_of(mass, "mass")?, &path, title)
    })
    .py(py)
}

/// The decay curves over many masses (App. E.5): JSON; with `png`, drawn there too.
#[pyfunction]
#[pyo3(signature = (masses, png = None, title = "attention by relative position of the past turn"))]
pub fn decay(py: Python<'_>, masses: Vec<String>, png: Option<PathBuf>, title: &str) -> PyResult<String> {
    crate::compute(py, || {
        let ms = masses
            .iter()
            .enumerate()
            .map(|(i, m)| mass_of(m, &format!("masses[{i}]")))
            .collect::<ctxprune::Result<Vec<_>>>()?;
        let d = figures::decay(&ms)?;
        if let Some(p) = &png {
            figures::draw_decay(&d, p, title)?;
        }
        to_json(&d)
    })
    .py(py)
}

/// The SNR probe (`ctxprune probe`): the report as JSON; with `plot`, the scatter there.
#[pyfunction]
#[pyo3(signature = (trajectories, labels, *, prefixes = 8, folds = 5, seed = 0, search_tools = None,
    open_tools = None, tokenizer = "o200k_base", plot = None))]
#[allow(clippy::too_many_arguments)]
pub fn probe(
    py: Python<'_>,
    trajectories: PathBuf,
    labels: PathBuf,
    prefixes: usize,
    folds: usize,
    seed: u64,
    search_tools: Option<Vec<String>>,
    open_tools: Option<Vec<String>>,
    tokenizer: &str,
    plot: Option<PathBuf>,
) -> PyResult<String> {
    use ctxprune::probe::Options;
    let d = Options::default();
    for (name, v) in [("search_tools", &search_tools), ("open_tools", &open_tools)] {
        if v.as_ref().is_some_and(Vec::is_empty) {
            return Err(invalid(py, name, "names no tool"));
        }
    }
    let opts = Options {
        prefixes,
        folds,
        seed,
        search_tools: search_tools.unwrap_or(d.search_tools),
        open_tools: open_tools.unwrap_or(d.open_tools),
    };
    crate::compute(py, || {
        let counter = ctxprune::tokens::counter(tokenizer)?;
        let report = ctxprune::probe::probe(&trajectories, &labels, &opts, counter.as_ref())?;
        if let Some(p) = &plot {
            ctxprune::probe::scatter(p, &report)?;
        }
        to_json(&report)
    })
    .py(py)
}
