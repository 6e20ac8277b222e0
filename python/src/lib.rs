//! `ctxprune_rs._native`: the crate's service API for Python. The Python package
//! (python/ctxprune_rs/) wraps it with the argument handling, dtypes and docs users see.
//!
//! Every call that computes releases the GIL (`Python::detach`), so a thread pool of
//! Python callers runs in parallel; arrays are copied into owned rows (under the GIL)
//! before it is released, so nothing Python can touch is read without it.

use pyo3::prelude::*;

mod arrays;
mod cost;
mod engine;
mod errors;
mod mask;
mod rerank;
mod select;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<engine::Engine>()?;
    m.add_class::<engine::Pool>()?;
    m.add_class::<select::Selector>()?;
    m.add_class::<select::Selection>()?;
    m.add_class::<rerank::Reranker>()?;
    m.add_class::<rerank::Reranked>()?;
    m.add_class::<mask::MaskSession>()?;
    m.add_function(wrap_pyfunction!(mask::count_tokens, m)?)?;
    m.add_function(wrap_pyfunction!(cost::flops, m)?)?;
    m.add_function(wrap_pyfunction!(cost::etc, m)?)?;
    m.add_function(wrap_pyfunction!(cost::plan, m)?)?;
    m.add("DEFAULT_PLACEHOLDER", ctxprune::mask::masker::DEFAULT_PLACEHOLDER)?;
    Ok(())
}
