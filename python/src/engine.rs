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
        let inner = py
            .detach(|| match choice {
                BackendChoice::Cuda => ctxprune::Engine::cuda_with(device, &opts),
                _ if device != 0 => Err(ctxprune::Error::invalid("device", "applies to the cuda backend")),
                c => ctxprune::Engine::open(c, &opts),
            })
            .py(py)?;
        Ok(Engine { inner })
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

/// A pool: the rows normalised to unit length once (a copy; the caller's array is never
/// written) and made resident on the engine's device.
#[pyclass(frozen, module = "ctxprune_rs._native")]
pub struct Pool {
    pub inner: ctxprune::Pool,
}

#[pymethods]
impl Pool {
    #[new]
    #[pyo3(signature = (engine, embeddings, storage = "f32"))]
    fn new(py: Python<'_>, engine: &Engine, embeddings: &Bound<'_, PyAny>, storage: &str) -> PyResult<Self> {
        let storage = match storage {
            "f32" => Storage::F32,
            "f16" => Storage::F16,
            "bf16" => Storage::Bf16,
            s => {
                return Err(crate::errors::invalid(
                    py,
                    "storage",
                    format!("unknown storage '{s}' (f32, f16, bf16)"),
                ))
            }
        };
        let engine = &engine.inner;
        let inner = arrays::with_rows(py, embeddings, "embeddings", |data, rows, dim| {
            ctxprune::Pool::from_slice(engine, data, rows, dim, "embeddings", storage)
        })?;
        Ok(Pool { inner })
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
