//! `ctxprune_rs._native`: the crate's service API for Python. The Python package
//! (python/ctxprune_rs/) wraps it with the argument handling, dtypes and docs users see.
//!
//! Every call that computes releases the GIL (`Python::detach`, through [`compute`], which
//! also runs it in the process's own rayon pool), so a thread pool of
//! Python callers runs in parallel; arrays are copied into owned rows (under the GIL)
//! before it is released, so nothing Python can touch is read without it.

use pyo3::prelude::*;

mod arrays;
mod attention;
mod cost;
mod embed;
mod engine;
mod errors;
mod mask;
mod rerank;
mod select;
mod service;
mod tokens;

/// Runs `f` with the GIL released, on the calling thread (its parallel parts on rayon's
/// global pool), or, in a process forked from the one that loaded the extension, in a
/// pool of that process's own. rayon's global pool does not survive a fork (the default
/// start method of `multiprocessing` and process pools on Linux): a child inherits a
/// pool whose threads are gone and would wait on them forever once the parent had used
/// it. So a forked child runs every computing call in a pool it made itself (made again
/// in a child of the child).
pub fn compute<T: Send>(py: Python<'_>, f: impl FnOnce() -> T + Send) -> T {
    match forked_pool() {
        Some(pool) => py.detach(|| pool.install(f)),
        None => py.detach(f),
    }
}

/// The process that loaded the extension (where rayon's global pool is its own).
static LOADED_IN: std::sync::OnceLock<u32> = std::sync::OnceLock::new();

fn forked_pool() -> Option<std::sync::Arc<rayon::ThreadPool>> {
    use std::sync::{Arc, Mutex, PoisonError};
    static POOL: Mutex<Option<(u32, Arc<rayon::ThreadPool>)>> = Mutex::new(None);
    let pid = std::process::id();
    if LOADED_IN.get().is_none_or(|&p| p == pid) {
        return None;
    }
    let mut slot = POOL.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some((p, pool)) = slot.as_ref() {
        if *p == pid {
            return Some(pool.clone());
        }
    }
    // A child of a child: the inherited pool is forgotten, never dropped (dropping it
    // would signal threads that do not exist here). A pool that cannot start its threads
    // leaves the calls on the global pool.
    if let Some(old) = slot.take() {
        std::mem::forget(old);
    }
    let pool = Arc::new(rayon::ThreadPoolBuilder::new().build().ok()?);
    *slot = Some((pid, pool.clone()));
    Some(pool)
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    LOADED_IN.get_or_init(std::process::id);
    m.add_class::<engine::Engine>()?;
    m.add_class::<engine::Pool>()?;
    m.add_class::<select::Selector>()?;
    m.add_class::<select::Selection>()?;
    m.add_class::<rerank::Reranker>()?;
    m.add_class::<rerank::Reranked>()?;
    m.add_class::<mask::MaskSession>()?;
    m.add_class::<embed::Encoder>()?;
    m.add_class::<tokens::TokenCounter>()?;
    m.add_class::<service::Service>()?;
    m.add_function(wrap_pyfunction!(mask::count_tokens, m)?)?;
    m.add_function(wrap_pyfunction!(arrays::float_rows, m)?)?;
    m.add_function(wrap_pyfunction!(cost::flops, m)?)?;
    m.add_function(wrap_pyfunction!(cost::etc, m)?)?;
    m.add_function(wrap_pyfunction!(cost::plan, m)?)?;
    m.add_function(wrap_pyfunction!(attention::segment, m)?)?;
    m.add_function(wrap_pyfunction!(attention::mass_file, m)?)?;
    m.add_function(wrap_pyfunction!(attention::mass_arrays, m)?)?;
    m.add_function(wrap_pyfunction!(attention::heatmap_matrices, m)?)?;
    m.add_function(wrap_pyfunction!(attention::draw_heatmap, m)?)?;
    m.add_function(wrap_pyfunction!(attention::decay, m)?)?;
    m.add_function(wrap_pyfunction!(attention::probe, m)?)?;
    m.add("DEFAULT_PLACEHOLDER", ctxprune::mask::masker::DEFAULT_PLACEHOLDER)?;
    Ok(())
}
