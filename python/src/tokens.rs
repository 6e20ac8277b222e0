//! `TokenCounter`: one of the crate's exact token counters (o200k_base, cl100k_base, a
//! HuggingFace tokenizer.json, or the 4-characters-a-token approximation), loaded once.

use crate::errors::IntoPy;
use pyo3::prelude::*;
use std::sync::Arc;

/// A token counter loaded once (loading a BPE takes tens of milliseconds; counting takes
/// microseconds).
#[pyclass(frozen, module = "ctxprune_rs._native")]
pub struct TokenCounter {
    name: String,
    inner: Arc<dyn ctxprune::tokens::TokenCounter>,
}

#[pymethods]
impl TokenCounter {
    #[new]
    #[pyo3(signature = (tokenizer = "o200k_base"))]
    fn new(py: Python<'_>, tokenizer: &str) -> PyResult<Self> {
        let inner = crate::compute(py, || ctxprune::tokens::counter(tokenizer)).py(py)?;
        Ok(TokenCounter {
            name: tokenizer.to_string(),
            inner,
        })
    }

    /// The tokenizer's name (or path).
    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    /// Tokens in `text`.
    fn count(&self, py: Python<'_>, text: &str) -> usize {
        crate::compute(py, || self.inner.count(text))
    }

    /// Tokens in each of `texts`, in order.
    fn count_many(&self, py: Python<'_>, texts: Vec<String>) -> Vec<usize> {
        crate::compute(py, || texts.iter().map(|t| self.inner.count(t)).collect())
    }

    /// Pickles as its name (loaded again on the other side).
    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> (Bound<'py, PyAny>, (String,)) {
        (slf.get_type().into_any(), (slf.get().name.clone(),))
    }

    fn __repr__(&self) -> String {
        format!("TokenCounter({:?})", self.name)
    }
}
