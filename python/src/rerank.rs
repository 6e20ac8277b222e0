//! `Reranker` (a budgeted top-k configuration checked once), the Python-callable oracle,
//! and `Reranked`.

use crate::arrays;
use crate::engine::{Engine, Pool};
use crate::errors::{invalid, IntoPy};
use ctxprune::rerank::http::{HttpConfig, HttpOracle};
use ctxprune::rerank::{Oracle, RerankOptions};
use ctxprune::similarity::Kernel;
use ctxprune::Error;
use numpy::{PyArray1, PyReadonlyArray1};
use pyo3::prelude::*;

/// A Python callable as the oracle: `f(indices: np.ndarray[int64]) -> scores`, one batch
/// per call. The scores (any float sequence or array) must be as many as the indices and
/// each in [0, 1]. An exception inside `f` is kept and re-raised as it is, traceback and
/// all, once the rerank has stopped.
struct Callable {
    f: Py<PyAny>,
    raised: Option<PyErr>,
}

fn oracle_error(msg: String) -> Error {
    Error::Oracle {
        oracle: "the oracle callable".into(),
        status: None,
        msg,
    }
}

impl Oracle for Callable {
    fn score(&mut self, items: &[usize]) -> ctxprune::Result<Vec<f64>> {
        Python::attach(|py| {
            let idx = PyArray1::from_vec(py, items.iter().map(|&i| i as i64).collect());
            let out = match self.f.call1(py, (idx,)) {
                Ok(out) => out.into_bound(py),
                Err(e) => {
                    self.raised = Some(e);
                    return Err(oracle_error("raised an exception".into()));
                }
            };
            let scores: Vec<f64> = match out.extract::<PyReadonlyArray1<'_, f64>>() {
                Ok(a) => a.as_array().to_vec(),
                Err(_) => out.extract::<Vec<f64>>().map_err(|_| {
                    oracle_error(format!(
                        "returned {}, not a sequence of floats",
                        out.get_type()
                            .name()
                            .map_or_else(|_| "?".into(), |n| n.to_string())
                    ))
                })?,
            };
            if scores.len() != items.len() {
                return Err(oracle_error(format!(
                    "returned {} scores for {} indices",
                    scores.len(),
                    items.len()
                )));
            }
            if let Some(i) = scores.iter().position(|s| !(0.0..=1.0).contains(s)) {
                return Err(oracle_error(format!(
                    "score {i} (row {}) is {}, outside [0, 1]",
                    items[i], scores[i]
                )));
            }
            Ok(scores)
        })
    }
}

/// A budgeted top-k configuration checked once and bound to an engine.
#[pyclass(frozen, module = "ctxprune_rs._native")]
pub struct Reranker {
    inner: ctxprune::rerank::Reranker,
}

#[pymethods]
impl Reranker {
    #[new]
    #[pyo3(signature = (engine, budget, capacity, method = "boundary-morph", *, kernel = None, kappa = None,
        prior = None, acquisition = None, beta0 = None, graph_degree = None, seed_div = None, frac = None,
        batch = None, token_capacity = None, prior_probes = None, row_precision = None,
        hyperparameters = None, feedback_neighbours = None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        engine: &Engine,
        budget: usize,
        capacity: usize,
        method: &str,
        kernel: Option<&str>,
        kappa: Option<f32>,
        prior: Option<&str>,
        acquisition: Option<&str>,
        beta0: Option<f64>,
        graph_degree: Option<usize>,
        seed_div: Option<f64>,
        frac: Option<f64>,
        batch: Option<usize>,
        token_capacity: Option<u64>,
        prior_probes: Option<usize>,
        row_precision: Option<&str>,
        hyperparameters: Option<&str>,
        feedback_neighbours: Option<f64>,
    ) -> PyResult<Self> {
        let opts = RerankOptions {
            kernel,
            kappa,
            prior,
            acquisition,
            beta0,
            graph_degree,
            seed_div,
            frac,
            batch,
            token_capacity,
            prior_probes,
            row_precision,
            hyperparameters,
            feedback_neighbours,
            ..RerankOptions::new(method, budget, capacity)
        };
        let cfg = opts.config().py(py)?;
        let inner = ctxprune::rerank::Reranker::new(&engine.inner, cfg).py(py)?;
        Ok(Reranker { inner })
    }

    /// Reranks `pool` for `query` with `oracle`: a callable, or the URL of a TEI or
    /// Cohere-style rerank server (then `texts` and `query_text` are required).
    /// With a token capacity, `tokens` gives each pool row's token count.
    #[pyo3(signature = (pool, query, oracle, *, texts = None, query_text = None, api = None, timeout = None, retries = None, tokens = None))]
    #[allow(clippy::too_many_arguments)]
    fn rerank(
        &self,
        py: Python<'_>,
        pool: &Pool,
        query: &Bound<'_, PyAny>,
        oracle: &Bound<'_, PyAny>,
        texts: Option<Vec<String>>,
        query_text: Option<String>,
        api: Option<&str>,
        timeout: Option<f64>,
        retries: Option<u32>,
        tokens: Option<Vec<f64>>,
    ) -> PyResult<Reranked> {
        let query = arrays::vector(py, query, "query")?;
        let tokens = match tokens {
            Some(t) => Some(ctxprune::rerank::options::token_counts(&t, "tokens").py(py)?),
            None => None,
        };
        let tokens = tokens.as_deref();
        let budget = self.inner.config().budget.min(pool.inner.len());
        if let Ok(url) = oracle.extract::<String>() {
            let texts = texts.ok_or_else(|| invalid(py, "texts", "a URL oracle needs the pool's texts"))?;
            if texts.len() != pool.inner.len() {
                let msg = format!("{} texts for a pool of {}", texts.len(), pool.inner.len());
                return Err(invalid(py, "texts", msg));
            }
            let qt =
                query_text.ok_or_else(|| invalid(py, "query_text", "a URL oracle needs the query text"))?;
            let mut cfg = HttpConfig::new(&url, api.unwrap_or("tei").parse().py(py)?);
            if let Some(t) = timeout {
                cfg = cfg.timeout_secs(t).py(py)?;
            }
            if let Some(r) = retries {
                cfg.retries = r;
            }
            let mut http = HttpOracle::new(cfg, &qt, texts, budget).py(py)?;
            let r = crate::compute(py, || {
                self.inner.rerank_tokens(&pool.inner, &query, tokens, &mut http)
            })
            .py(py)?;
            return Ok(Reranked { r });
        }
        for (given, name) in [
            (texts.is_some(), "texts"),
            (query_text.is_some(), "query_text"),
            (api.is_some(), "api"),
            (timeout.is_some(), "timeout"),
            (retries.is_some(), "retries"),
        ] {
            if given {
                return Err(invalid(py, name, "applies to a URL oracle"));
            }
        }
        if !oracle.is_callable() {
            return Err(invalid(
                py,
                "oracle",
                "must be a callable f(indices) -> scores or a rerank server's URL",
            ));
        }
        let mut call = Callable {
            f: oracle.clone().unbind(),
            raised: None,
        };
        let r = crate::compute(py, || {
            self.inner.rerank_tokens(&pool.inner, &query, tokens, &mut call)
        });
        if let Some(e) = call.raised.take() {
            return Err(e);
        }
        Ok(Reranked { r: r.py(py)? })
    }

    /// The method's name.
    #[getter]
    fn method(&self) -> &'static str {
        self.inner.config().method.name()
    }

    fn __repr__(&self) -> String {
        let c = self.inner.config();
        format!(
            "Reranker(method={}, budget={}, capacity={})",
            c.method.name(),
            c.budget,
            c.capacity
        )
    }
}

/// The outcome of a budgeted top-k run.
#[pyclass(frozen, module = "ctxprune_rs._native")]
pub struct Reranked {
    r: ctxprune::rerank::Reranked,
}

fn int64<'py>(py: Python<'py>, v: &[usize]) -> Bound<'py, PyArray1<i64>> {
    PyArray1::from_vec(py, v.iter().map(|&i| i as i64).collect())
}

#[pymethods]
impl Reranked {
    /// The k rows, best first (int64).
    #[getter]
    fn indices<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<i64>> {
        int64(py, &self.r.selected)
    }

    /// Rows sent to the oracle, in call order (int64).
    #[getter]
    fn scored<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<i64>> {
        int64(py, &self.r.scored)
    }

    /// Their scores, in the same order (float64).
    #[getter]
    fn scores<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<f64>> {
        PyArray1::from_vec(py, self.r.scores.clone())
    }

    /// Documents scored by the oracle.
    #[getter]
    fn oracle_calls(&self) -> usize {
        self.r.scored.len()
    }

    /// Oracle requests made (with `batch = q`, about `oracle_calls / q`).
    #[getter]
    fn oracle_rounds(&self) -> usize {
        self.r.rounds
    }

    /// The adaptive prior's final scale (None for the other priors).
    #[getter]
    fn prior_alpha(&self) -> Option<f64> {
        self.r.alpha
    }

    /// Tokens of the selected set (None without a token capacity).
    #[getter]
    fn tokens(&self) -> Option<u64> {
        self.r.tokens
    }

    /// The hyperparameters the evidence fitted last (`hyperparameters="evidence"`):
    /// `log_bandwidth` (ln kappa, or ln l²), `signal`, `noise`, `scale`, `offset`; None with
    /// the paper's, or when the budget ended before the first fit.
    #[getter]
    fn hyperparameters(&self) -> Option<std::collections::BTreeMap<&'static str, f64>> {
        self.r.hyperparameters.map(|h| {
            [
                ("log_bandwidth", h.log_bandwidth),
                ("signal", h.log_signal.exp()),
                ("noise", h.log_noise.exp()),
                ("scale", h.scale),
                ("offset", h.offset),
            ]
            .into_iter()
            .collect()
        })
    }

    /// vMF's concentration when the GP used vMF (the last fitted with
    /// `hyperparameters="evidence"`), else None.
    #[getter]
    fn kappa(&self) -> Option<f32> {
        match self.r.kernel {
            Kernel::Vmf { kappa } => Some(kappa),
            _ => None,
        }
    }

    /// Notes (a budget capped at the pool size, an early stop, ...).
    #[getter]
    fn notes(&self) -> Vec<String> {
        self.r.notes.clone()
    }

    /// "cpu" or "cuda".
    #[getter]
    fn backend(&self) -> &'static str {
        self.r.backend.name()
    }

    fn __len__(&self) -> usize {
        self.r.selected.len()
    }

    fn __repr__(&self) -> String {
        format!(
            "Reranked(indices={:?}, oracle_calls={}, backend={})",
            self.r.selected,
            self.r.scored.len(),
            self.r.backend.name()
        )
    }
}
