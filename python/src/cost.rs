//! Token cost: FLOPs per token from a model's shape, effective token cost, and the
//! listwise window plan (SPEC §4).

use crate::errors::{invalid, IntoPy};
use ctxprune::cost::{self, ModelShape};
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
    let given = [
        ("layers", layers),
        ("hidden", hidden),
        ("ffn", ffn),
        ("q_heads", q_heads),
        ("kv_heads", kv_heads),
    ];
    if config.is_some() || config_json.is_some() {
        if let Some((name, _)) = given.iter().find(|g| g.1.is_some()) {
            return Err(invalid(
                py,
                name,
                "cannot be given with a config (it sets the shape)",
            ));
        }
    }
    let mut shape = match (config, config_json) {
        (Some(_), Some(_)) => return Err(invalid(py, "config_json", "give config or config_json, not both")),
        (Some(p), None) => ModelShape::from_config(&p).py(py)?,
        (None, Some(text)) => ModelShape::from_json(text, Path::new("config_json")).py(py)?,
        (None, None) => {
            let need = |v: Option<usize>, name: &str| {
                v.ok_or_else(|| invalid(py, name, "required without a config"))
            };
            let (l, h, f, q) = (
                need(layers, "layers")?,
                need(hidden, "hidden")?,
                need(ffn, "ffn")?,
                need(q_heads, "q_heads")?,
            );
            ModelShape::dense(l, h, f, q, kv_heads.unwrap_or(q)).py(py)?
        }
    };
    if let Some(k) = experts_active {
        shape.experts_active = k;
    }
    if let Some(a) = activation {
        shape.activation = a.parse().py(py)?;
    }
    match (sliding_layers, window) {
        (Some(n), Some(w)) => shape.set_sliding(n, w).py(py)?,
        (None, None) => {}
        (Some(_), None) => return Err(invalid(py, "sliding_layers", "needs window")),
        (None, Some(_)) => return Err(invalid(py, "window", "needs sliding_layers")),
    }
    let f = shape.flops(context).py(py)?;
    let d = PyDict::new(py);
    d.set_item("gflops_per_token", f.total / 1e9)?;
    d.set_item(
        "per_layer",
        f.per_layer.iter().map(|x| x / 1e9).collect::<Vec<f64>>(),
    )?;
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
