//! `MaskSession` (one conversation's masking state) and `count_tokens`. Messages cross
//! as JSON text: the Python side turns lists of dicts into it and back.

use crate::errors::IntoPy;
use ctxprune::mask::masker::{MaskConfig, MaskStats, Masker};
use ctxprune::mask::{Format, Trajectory};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::sync::Mutex;

/// One conversation's masker: options checked once, token counts cached across calls.
#[pyclass(frozen, module = "ctxprune_rs._native")]
pub struct MaskSession {
    format: Option<Format>,
    session: Mutex<ctxprune::mask::masker::MaskSession>,
}

fn stats_dict<'py>(py: Python<'py>, s: &MaskStats) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("turns", s.turns)?;
    d.set_item("observations_masked", s.observations_masked)?;
    d.set_item("observations_kept", s.observations_kept)?;
    d.set_item("tokens_before", s.tokens_before)?;
    d.set_item("tokens_after", s.tokens_after)?;
    d.set_item("rolling_input_tokens", s.rolling_input_tokens)?;
    d.set_item("rolling_input_tokens_unmasked", s.rolling_input_tokens_unmasked)?;
    Ok(d)
}

#[pymethods]
impl MaskSession {
    #[new]
    #[pyo3(signature = (format = "auto", *, window = 5, keep_errors = true, keep_first = false,
        tools_keep = Vec::new(), tools_mask = Vec::new(), trigger_tokens = None, clear_at_least = 0,
        step = 1, placeholder = None, tokenizer = "o200k_base"))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        format: &str,
        window: usize,
        keep_errors: bool,
        keep_first: bool,
        tools_keep: Vec<String>,
        tools_mask: Vec<String>,
        trigger_tokens: Option<usize>,
        clear_at_least: usize,
        step: usize,
        placeholder: Option<String>,
        tokenizer: &str,
    ) -> PyResult<Self> {
        let format = match format {
            "auto" => None,
            f => Some(f.parse::<Format>().py(py)?),
        };
        let cfg = MaskConfig {
            window,
            keep_errors,
            keep_first,
            tools_keep,
            tools_mask,
            trigger_tokens,
            clear_at_least,
            step,
            placeholder: placeholder.unwrap_or_else(|| MaskConfig::default().placeholder),
        };
        let counter = crate::compute(py, || ctxprune::tokens::counter(tokenizer)).py(py)?;
        let masker = Masker::new(cfg, counter).py(py)?;
        Ok(MaskSession {
            format,
            session: Mutex::new(masker.session()),
        })
    }

    /// Masks the messages (JSON text: an array, or an object with "messages") and returns
    /// the masked JSON text and the accounting.
    fn mask_json<'py>(&self, py: Python<'py>, text: &str) -> PyResult<(String, Bound<'py, PyDict>)> {
        let (json, stats) = crate::compute(py, || {
            let mut traj = Trajectory::parse(text, self.format)?;
            // A poisoned lock means a panic elsewhere; the cache is still sound.
            let mut s = self.session.lock().unwrap_or_else(|p| p.into_inner());
            let stats = s.mask(&mut traj);
            Ok::<_, ctxprune::Error>((traj.to_json(), stats))
        })
        .py(py)?;
        Ok((json, stats_dict(py, &stats)?))
    }
}

/// Tokens in `text` by `tokenizer`: "o200k_base", "cl100k_base", "approx", or a path to a
/// HuggingFace tokenizer.json.
#[pyfunction]
#[pyo3(signature = (text, tokenizer = "o200k_base"))]
pub fn count_tokens(py: Python<'_>, text: &str, tokenizer: &str) -> PyResult<usize> {
    crate::compute(py, || ctxprune::tokens::counter(tokenizer).map(|c| c.count(text))).py(py)
}
