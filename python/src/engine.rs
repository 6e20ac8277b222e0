//! `Engine` (a device, or the CPU, opened once) and `Pool` (unit rows made resident once).

use crate::arrays;
use crate::errors::IntoPy;
use ctxprune::{BackendChoice, EngineOptions, Storage};
use pyo3::prelude::*;
use std::path::PathBuf;

/// An engine: the CPU, or a CUDA device with its kernels and streams. Open one per
/// process and share it; `Clone + Send + Sync` in Rust, thread-safe here.
#[pyclass(frozen, module = "ctxprune_rs._native")]
pub struct Engine {
    pub inner: ctxprune::Engine,
    /// The options it was opened with, for pickling (`_options`).
    backend: String,
    device: usize,
    cache_dir: Option<PathBuf>,
    cuda_roots: Vec<PathBuf>,
}

#[pymethods]
impl Engine {
    #[new]
    #[pyo3(signature = (backend = "auto", *, device = 0, cache_dir = None, cuda_roots = Vec::new()))]
    fn new(
        py: Python<'_>,
        backend: &str,
        device: usize,
        cache_dir: Option<PathBuf>,
        cuda_roots: Vec<PathBuf>,
    ) -> PyResult<Self> {
        let choice: BackendChoice = backend.parse().py(py)?;
        let given = (backend.to_string(), cache_dir.clone(), cuda_roots.clone());
        // As the CLI: the environment's cache and CUDA roots unless given.
        let env = EngineOptions::from_env();
        let opts = EngineOptions {
            cache_dir: cache_dir.or(env.cache_dir),
            cuda_roots: if cuda_roots.is_empty() {
                env.cuda_roots
            } else {
                cuda_roots
            },
        };
        let inner = crate::compute(py, || match choice {
            BackendChoice::Cuda => ctxprune::Engine::cuda_with(device, &opts),
            _ if device != 0 => Err(ctxprune::Error::invalid("device", "applies to the cuda backend")),
            c => ctxprune::Engine::open(c, &opts),
        })
        .py(py)?;
        Ok(Engine {
            inner,
            backend: given.0,
            device,
            cache_dir: given.1,
            cuda_roots: given.2,
        })
    }

    /// `(backend, device, cache_dir, cuda_roots)` as given to the constructor: a pickled
    /// engine opens again with them on the other side (which backend it gets is that
    /// machine's answer).
    fn _options(&self) -> (String, usize, Option<PathBuf>, Vec<PathBuf>) {
        (
            self.backend.clone(),
            self.device,
            self.cache_dir.clone(),
            self.cuda_roots.clone(),
        )
    }

    /// "cpu" or "cuda".
    #[getter]
    fn backend(&self) -> &'static str {
        self.inner.name()
    }

    /// Why `auto` runs on the CPU, or None.
    #[getter]
    fn fallback_reason(&self) -> Option<String> {
        self.inner.fallback_reason().map(str::to_string)
    }

    /// The device ordinal, or None on the CPU.
    #[getter]
    fn device(&self) -> Option<usize> {
        self.inner.ordinal()
    }

    /// One line: the backend and the device.
    fn describe(&self) -> String {
        self.inner.describe()
    }

    fn __repr__(&self) -> String {
        format!("Engine({})", self.inner.describe())
    }
}

fn parse_storage(py: Python<'_>, storage: &str) -> PyResult<Storage> {
    match storage {
        "f32" => Ok(Storage::F32),
        "f16" => Ok(Storage::F16),
        "bf16" => Ok(Storage::Bf16),
        s => Err(crate::errors::invalid(
            py,
            "storage",
            format!("unknown storage '{s}' (f32, f16, bf16)"),
        )),
    }
}

/// A pool: the rows checked and copied once with their exact inverse norms (the
/// caller's array is never written) and made resident on the engine's device.
#[pyclass(frozen, module = "ctxprune_rs._native")]
pub struct Pool {
    pub inner: ctxprune::Pool,
}

#[pymethods]
impl Pool {
    #[new]
    #[pyo3(signature = (engine, embeddings, storage = "f32"))]
    fn new(py: Python<'_>, engine: &Engine, embeddings: &Bound<'_, PyAny>, storage: &str) -> PyResult<Self> {
        let storage = parse_storage(py, storage)?;
        let engine = &engine.inner;
        let inner = arrays::with_rows(py, embeddings, "embeddings", |data, rows, dim| {
            ctxprune::Pool::from_slice(engine, data, rows, dim, "embeddings", storage)
        })?;
        Ok(Pool { inner })
    }

    /// A pool of rows another pool unit-normalised (its `rows()` when `_unit` is true: how
    /// such a pickled pool comes back), kept as they are and marked unit, so it selects
    /// exactly as the original.
    #[staticmethod]
    #[pyo3(signature = (engine, rows, storage = "f32"))]
    fn _from_unit_rows(
        py: Python<'_>,
        engine: &Engine,
        rows: &Bound<'_, PyAny>,
        storage: &str,
    ) -> PyResult<Self> {
        let storage = parse_storage(py, storage)?;
        let engine = &engine.inner;
        let inner = arrays::with_rows(py, rows, "rows", |data, n, dim| {
            let e = ctxprune::Embeddings::from_unit_rows(n, dim, data.to_vec(), "rows")?;
            ctxprune::Pool::with_storage(engine, e, storage)
        })?;
        Ok(Pool { inner })
    }

    /// Whether the pool unit-normalised its rows (a copy), rather than keeping them as given.
    #[getter]
    fn _unit(&self) -> bool {
        self.inner.embeddings().is_unit()
    }

    /// A copy of the rows as the pool keeps them (`N x d` float32): as given when every
    /// row's norm was within 2^-8 of 1, else unit-normalised. A pool made of them selects
    /// exactly as this one (how a pickled pool comes back).
    fn rows<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let e = self.inner.embeddings();
        matrix(py, e.as_slice().to_vec(), e.rows(), e.dim())
    }

    /// A copy of the rows unit-normalised (`N x d` float32): each divided by its `f64` norm
    /// and rounded once.
    fn unit_rows<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let e = self.inner.embeddings();
        let u = ctxprune::Embeddings::unit_rows(e.as_slice(), e.rows(), e.dim(), "pool", None).py(py)?;
        matrix(py, u.e.into_vec(), e.rows(), e.dim())
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }

    /// The embedding dimension.
    #[getter]
    fn dim(&self) -> usize {
        self.inner.dim()
    }

    /// Whether the rows are resident on a device.
    #[getter]
    fn on_device(&self) -> bool {
        self.inner.on_device()
    }

    /// "f32", "f16" or "bf16".
    #[getter]
    fn storage(&self) -> &'static str {
        self.inner.storage().name()
    }

    /// The engine's backend.
    #[getter]
    fn backend(&self) -> &'static str {
        self.inner.engine().name()
    }

    fn __repr__(&self) -> String {
        format!(
            "Pool(rows={}, dim={}, backend={}, storage={})",
            self.inner.len(),
            self.inner.dim(),
            self.inner.engine().name(),
            self.inner.storage().name()
        )
    }
}

/// `values` as an `rows x dim` float32 array.
fn matrix(py: Python<'_>, values: Vec<f32>, rows: usize, dim: usize) -> PyResult<Bound<'_, PyAny>> {
    use numpy::{PyArray1, PyArrayMethods};
    Ok(PyArray1::from_vec(py, values).reshape([rows, dim])?.into_any())
}
