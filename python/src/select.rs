//! `Selector` (a configuration checked once) and `Selection`.

use crate::arrays;
use crate::engine::{Engine, Pool};
use crate::errors::{invalid, to_py_at, IntoPy};
use ctxprune::select::{check_reads, Request, SelectOptions};
use numpy::PyArray1;
use pyo3::prelude::*;

/// A selection configuration checked once and bound to an engine; `select` from any
/// thread, any number of times.
#[pyclass(frozen, module = "ctxprune_rs._native")]
pub struct Selector {
    inner: ctxprune::select::Selector,
}

/// `retained` as row indices, naming a negative one.
fn indices(py: Python<'_>, v: Vec<i64>, what: &str) -> PyResult<Vec<usize>> {
    v.iter()
        .enumerate()
        .map(|(i, &x)| {
            usize::try_from(x).map_err(|_| invalid(py, &format!("{what}[{i}]"), format!("{x} is negative")))
        })
        .collect()
}

#[pymethods]
impl Selector {
    #[new]
    #[pyo3(signature = (engine, method = "mmr", *, mode = "greedy", k = None, token_budget = None,
        lambda_ = None, threshold = None, preset = None, weights = None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        engine: &Engine,
        method: &str,
        mode: &str,
        k: Option<usize>,
        token_budget: Option<f64>,
        lambda_: Option<f64>,
        threshold: Option<f64>,
        preset: Option<&str>,
        weights: Option<Vec<f64>>,
    ) -> PyResult<Self> {
        let opts = SelectOptions {
            method,
            mode: Some(mode),
            preset,
            k,
            token_budget,
            threshold,
            lambda: lambda_,
            weights: weights.as_deref(),
        };
        let cfg = opts.config().py(py)?;
        let inner = ctxprune::select::Selector::new(&engine.inner, cfg).py(py)?;
        Ok(Selector { inner })
    }

    /// Selects from `pool`: a Pool, an N x d array (float16/32/64, C-contiguous), or None
    /// for lexical without embeddings.
    #[pyo3(signature = (pool, query = None, *, costs = None, retained = Vec::new(), texts = None, query_text = None))]
    #[allow(clippy::too_many_arguments)]
    fn select(
        &self,
        py: Python<'_>,
        pool: Option<&Bound<'_, PyAny>>,
        query: Option<&Bound<'_, PyAny>>,
        costs: Option<Vec<f64>>,
        retained: Vec<i64>,
        texts: Option<Vec<String>>,
        query_text: Option<String>,
    ) -> PyResult<Selection> {
        let method = self.inner.config().method_kind();
        check_reads(method, query.is_some(), query_text.is_some(), texts.is_some()).py(py)?;
        let query = query.map(|q| arrays::vector(py, q, "query")).transpose()?;
        let retained = indices(py, retained, "retained")?;
        let req = Request {
            query: query.as_deref(),
            texts: texts.as_deref(),
            query_text: query_text.as_deref(),
            costs: costs.as_deref(),
            retained: &retained,
            cancel: None,
        };
        let sel = match pool {
            // An array: borrowed when float32 and C-contiguous, read once into the
            // selection's unit rows either way (the same bits as a Pool of it).
            Some(a) if !a.is_instance_of::<Pool>() => {
                arrays::with_rows(py, a, "embeddings", |data, rows, dim| {
                    self.inner.select_rows(data, rows, dim, "embeddings", &req)
                })?
            }
            p => {
                let p = p
                    .map(|p| p.cast::<Pool>())
                    .transpose()?
                    .map(|p| p.get().inner.clone());
                crate::compute(py, || self.inner.select_maybe_pool(p.as_ref(), &req)).py(py)?
            }
        };
        Ok(Selection::from(sel))
    }

    /// Runs one selection per row of `queries` (a Q x d array) over `pool`, sharing the
    /// passes over it; the same selections as Q calls of `select`. `costs` and `retained`
    /// apply to every query. An error names the query it came from.
    #[pyo3(signature = (pool, queries, *, costs = None, retained = Vec::new()))]
    fn select_many(
        &self,
        py: Python<'_>,
        pool: &Pool,
        queries: &Bound<'_, PyAny>,
        costs: Option<Vec<f64>>,
        retained: Vec<i64>,
    ) -> PyResult<Vec<Selection>> {
        let retained = indices(py, retained, "retained")?;
        let out = arrays::with_rows(py, queries, "queries", |data, q, dim| {
            if q == 0 {
                return Err(ctxprune::Error::Empty("queries".into()));
            }
            let reqs: Vec<Request<'_>> = data
                .chunks_exact(dim)
                .map(|query| Request {
                    query: Some(query),
                    costs: costs.as_deref(),
                    retained: &retained,
                    ..Request::default()
                })
                .collect();
            Ok(self.inner.select_many(&pool.inner, &reqs))
        })?;
        out.into_iter()
            .enumerate()
            .map(|(i, r)| {
                r.map(Selection::from)
                    .map_err(|e| to_py_at(py, &format!("queries[{i}]"), &e))
            })
            .collect()
    }

    /// The method's name.
    #[getter]
    fn method(&self) -> &'static str {
        self.inner.config().method_kind().name()
    }

    /// "greedy" or "gate".
    #[getter]
    fn mode(&self) -> &'static str {
        self.inner.config().mode_kind().name()
    }

    fn __repr__(&self) -> String {
        format!("Selector(method={}, mode={})", self.method(), self.mode())
    }
}

/// The outcome of a selection.
#[pyclass(frozen, module = "ctxprune_rs._native")]
pub struct Selection {
    sel: ctxprune::select::Selection,
}

impl From<ctxprune::select::Selection> for Selection {
    fn from(sel: ctxprune::select::Selection) -> Self {
        Selection { sel }
    }
}

#[pymethods]
impl Selection {
    /// Selected rows (int64): greedy in pick order, gate in index order.
    #[getter]
    fn indices<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<i64>> {
        let v: Vec<i64> = self.sel.selected.iter().map(|&i| i as i64).collect();
        PyArray1::from_vec(py, v)
    }

    /// `V(x | C)` of each selected row when it was selected (float64).
    #[getter]
    fn gains<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<f64>> {
        PyArray1::from_vec(py, self.sel.gains.clone())
    }

    /// Why greedy selection stopped ("item_budget", "token_budget", "threshold", "no_gain", "exhausted"), None for gating.
    #[getter]
    fn stop(&self) -> Option<&'static str> {
        self.sel.stop.map(|s| s.as_str())
    }

    /// The threshold in force, if any.
    #[getter]
    fn threshold(&self) -> Option<f64> {
        self.sel.threshold
    }

    /// The selected rows' total cost.
    #[getter]
    fn tokens(&self) -> f64 {
        self.sel.tokens_selected
    }

    /// Things to know (a budget larger than the pool, ...), one sentence each.
    #[getter]
    fn notes(&self) -> Vec<String> {
        self.sel.notes.clone()
    }

    /// "cpu" or "cuda".
    #[getter]
    fn backend(&self) -> &'static str {
        self.sel.backend.name()
    }

    /// The method's name.
    #[getter]
    fn method(&self) -> &'static str {
        self.sel.method.name()
    }

    /// "greedy" or "gate".
    #[getter]
    fn mode(&self) -> &'static str {
        self.sel.mode.name()
    }

    fn __len__(&self) -> usize {
        self.sel.selected.len()
    }

    fn __repr__(&self) -> String {
        format!(
            "Selection(method={}, indices={:?}, stop={}, backend={})",
            self.sel.method.name(),
            self.sel.selected,
            self.stop().map_or("None".to_string(), |s| format!("'{s}'")),
            self.sel.backend.name()
        )
    }
}
