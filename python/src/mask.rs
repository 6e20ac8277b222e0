//! `MaskSession` (one conversation's masking state) and `count_tokens`. Messages cross
//! as JSON text: the Python side turns lists of dicts into it and back.

use crate::errors::IntoPy;
use ctxprune::mask::masker::{MaskStats, Masker};
use ctxprune::mask::policy::MaskOptions;
use ctxprune::mask::{Format, Trajectory};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::sync::Mutex;

/// One conversation's masker: options checked once, token counts cached across calls.
#[pyclass(frozen, module = "ctxprune_rs._native")]
pub struct MaskSession {
    format: Option<Format>,
    session: Mutex<ctxprune::mask::masker::MaskSession>,
    semantic: Option<Semantic>,
}

/// Semantic masking's encoder, gate and embedded task.
struct Semantic {
    enc: ctxprune::embed::SentenceEncoder,
    method: ctxprune::select::Method,
    tau: f64,
    query: Option<Vec<f32>>,
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
    d.set_item("cleared_tool_uses", s.cleared_tool_uses)?;
    d.set_item("cleared_input_tokens", s.cleared_input_tokens)?;
    Ok(d)
}

#[pymethods]
impl MaskSession {
    #[new]
    #[pyo3(signature = (format = "auto", *, preset = None, edit = None, window = None, keep_errors = None,
        keep_first = None, tools_keep = None, tools_mask = None, trigger_tokens = None, clear_at_least = None,
        step = None, unit = None, anchor = None, hold = None, clear_tool_inputs = None, placeholder = None,
        tokenizer = "o200k_base", encoder = None, semantic_method = None, semantic_tau = None,
        query_text = None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        format: &str,
        preset: Option<String>,
        edit: Option<String>,
        window: Option<usize>,
        keep_errors: Option<bool>,
        keep_first: Option<bool>,
        tools_keep: Option<Vec<String>>,
        tools_mask: Option<Vec<String>>,
        trigger_tokens: Option<usize>,
        clear_at_least: Option<usize>,
        step: Option<usize>,
        unit: Option<String>,
        anchor: Option<String>,
        hold: Option<bool>,
        clear_tool_inputs: Option<bool>,
        placeholder: Option<String>,
        tokenizer: &str,
        encoder: Option<PyRef<'_, crate::embed::Encoder>>,
        semantic_method: Option<String>,
        semantic_tau: Option<f64>,
        query_text: Option<String>,
    ) -> PyResult<Self> {
        let format = match format {
            "auto" => None,
            f => Some(f.parse::<Format>().py(py)?),
        };
        // The edit crosses as JSON text (the Python side dumps the dict).
        let edit = edit
            .map(|e| ctxprune::io::json::value_str(&e).map_err(|m| ctxprune::Error::invalid("edit", m)))
            .transpose()
            .py(py)?;
        let cfg = MaskOptions {
            preset,
            edit,
            window,
            keep_errors,
            keep_first,
            tools_keep,
            tools_mask,
            trigger_tokens,
            clear_at_least,
            step,
            unit,
            anchor,
            hold,
            clear_tool_inputs,
            placeholder,
        }
        .config()
        .py(py)?;
        let counter = crate::compute(py, || ctxprune::tokens::counter(tokenizer)).py(py)?;
        let masker = Masker::new(cfg, counter).py(py)?;
        let semantic = match encoder {
            None => None,
            Some(e) => {
                let (method, tau) = ctxprune::mask::policy::semantic_gate(
                    semantic_method.as_deref(),
                    semantic_tau,
                    query_text.is_some(),
                )
                .py(py)?;
                let enc = e.enc.clone();
                let query = match &query_text {
                    Some(t) => Some(
                        crate::compute(py, || enc.encode(&[t.as_str()], &Default::default()))
                            .py(py)?
                            .row(0)
                            .to_vec(),
                    ),
                    None => None,
                };
                Some(Semantic {
                    enc,
                    method,
                    tau,
                    query,
                })
            }
        };
        Ok(MaskSession {
            format,
            session: Mutex::new(masker.session()),
            semantic,
        })
    }

    /// Masks the messages (JSON text: an array, or an object with "messages") and returns
    /// the masked JSON text and the accounting.
    fn mask_json<'py>(&self, py: Python<'py>, text: &str) -> PyResult<(String, Bound<'py, PyDict>)> {
        let (json, stats0, kept) = crate::compute(py, || {
            let mut traj = Trajectory::parse(text, self.format)?;
            // A poisoned lock means a panic elsewhere; the cache is still sound.
            let mut s = self.session.lock().unwrap_or_else(|p| p.into_inner());
            let (stats, kept_back) = match &self.semantic {
                None => (s.mask(&mut traj), None),
                Some(sem) => {
                    let texts = traj.observation_texts();
                    if texts.is_empty() {
                        (s.mask(&mut traj), Some(0))
                    } else {
                        let e = sem.enc.encode(&texts, &Default::default())?;
                        let (st, n) =
                            s.mask_semantic(&mut traj, &e, sem.method, sem.tau, sem.query.as_deref())?;
                        (st, Some(n))
                    }
                }
            };
            Ok::<_, ctxprune::Error>((traj.to_json(), stats, kept_back))
        })
        .py(py)?;
        let d = stats_dict(py, &stats0)?;
        if let Some(n) = kept {
            d.set_item("semantic_kept_back", n)?;
        }
        Ok((json, d))
    }
}

/// Tokens in `text` by `tokenizer`: "o200k_base", "cl100k_base", "approx", or a path to a
/// HuggingFace tokenizer.json.
#[pyfunction]
#[pyo3(signature = (text, tokenizer = "o200k_base"))]
pub fn count_tokens(py: Python<'_>, text: &str, tokenizer: &str) -> PyResult<usize> {
    crate::compute(py, || ctxprune::tokens::counter(tokenizer).map(|c| c.count(text))).py(py)
}
