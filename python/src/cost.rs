//! Token cost: FLOPs per token from a model's shape, effective token cost, and the
//! listwise window plan (SPEC §4).

use crate::errors::{invalid, IntoPy};
use ctxprune::cost::{self, FlopsOptions, ModelShape};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::path::{Path, PathBuf};

/// FLOPs per decoded token at `context`: from a config.json path, from its text, or from
/// the shape given. Returns {"gflops_per_token", "per_layer"} (GFLOPs).
#[pyfunction]
#[pyo3(signature = (config = None, *, config_json = None, layers = None, hidden = None, ffn = None,
    q_heads = None, kv_heads = None, experts_active = None, activation = None, context = 32_768,
    sliding_layers = None, window = None))]
#[allow(clippy::too_many_arguments)]
pub fn flops<'py>(
    py: Python<'py>,
    config: Option<PathBuf>,
    config_json: Option<&str>,
    layers: Option<usize>,
    hidden: Option<usize>,
    ffn: Option<usize>,
    q_heads: Option<usize>,
    kv_heads: Option<usize>,
    experts_active: Option<usize>,
    activation: Option<&str>,
    context: usize,
    sliding_layers: Option<usize>,
    window: Option<usize>,
) -> PyResult<Bound<'py, PyDict>> {
    let config = match (config, config_json) {
        (Some(_), Some(_)) => return Err(invalid(py, "config_json", "give config or config_json, not both")),
        (Some(p), None) => Some(ModelShape::from_config(&p).py(py)?),
        (None, Some(text)) => Some(ModelShape::from_json(text, Path::new("config_json")).py(py)?),
        (None, None) => None,
    };
    let opts = FlopsOptions {
        config,
        layers,
        hidden,
        ffn,
        q_heads,
        kv_heads,
        experts_active,
        activation,
        sliding_layers,
        window,
    };
    let v = opts.gflops_json(context).py(py)?;
    let d = PyDict::new(py);
    d.set_item("gflops_per_token", v["gflops_per_token"].as_f64())?;
    let per: Vec<f64> = v["per_layer"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|x| x.as_f64())
        .collect();
    d.set_item("per_layer", per)?;
    Ok(d)
}

/// Effective token cost: `input_noncached + alpha * input_cached + beta * output`.
#[pyfunction]
#[pyo3(signature = (input_noncached, input_cached, output, *, alpha = 0.3, beta = 5.0))]
pub fn etc(
    py: Python<'_>,
    input_noncached: f64,
    input_cached: f64,
    output: f64,
    alpha: f64,
    beta: f64,
) -> PyResult<f64> {
    cost::effective_token_cost(input_noncached, input_cached, output, alpha, beta).py(py)
}

/// The sliding-window listwise plan over the top `depth`: {"windows": [(start, end)],
/// "duplication"}.
#[pyfunction]
#[pyo3(signature = (depth, *, window = 20, stride = 10))]
pub fn plan<'py>(
    py: Python<'py>,
    depth: usize,
    window: usize,
    stride: usize,
) -> PyResult<Bound<'py, PyDict>> {
    let (w, dup) = cost::window_plan(depth, window, stride).py(py)?;
    let d = PyDict::new(py);
    d.set_item("windows", w)?;
    d.set_item("duplication", dup)?;
    Ok(d)
}
