//! `Encoder`: a sentence-transformers directory loaded once by the crate's candle encoder
//! (`ctxprune embed`'s), embedding texts into a float32 array with the GIL released.

use crate::errors::{invalid, IntoPy};
use ctxprune::embed::{EncodeOptions, SentenceEncoder};
use numpy::{PyArray1, PyArrayMethods};
use pyo3::prelude::*;
use std::path::PathBuf;

/// A sentence encoder (BERT family: all-MiniLM-L6-v2, bge, e5, ...), loaded once.
#[pyclass(frozen, module = "ctxprune_rs._native")]
pub struct Encoder {
    pub(crate) enc: SentenceEncoder,
}

#[pymethods]
impl Encoder {
    #[new]
    fn new(py: Python<'_>, model: PathBuf) -> PyResult<Self> {
        let enc = crate::compute(py, || SentenceEncoder::load(&model)).py(py)?;
        Ok(Encoder { enc })
    }

    /// The embedding dimension.
    #[getter]
    fn dim(&self) -> usize {
        self.enc.dim()
    }

    /// The model directory.
    #[getter]
    fn model(&self) -> PathBuf {
        self.enc.dir().to_path_buf()
    }

    /// `len(texts) x dim` float32 embeddings, row `i` of `texts[i]` (the bits of
    /// `ctxprune embed`); `progress(done, total)` is called after each batch.
    #[pyo3(signature = (texts, *, batch_size = 32, progress = None))]
    fn embed<'py>(
        &self,
        py: Python<'py>,
        texts: Vec<String>,
        batch_size: usize,
        progress: Option<Py<PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        if batch_size == 0 {
            return Err(invalid(py, "batch_size", "must be at least 1"));
        }
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        // A progress callback runs with the GIL taken back; an exception inside it is
        // kept and raised once the encoder returns.
        let failed = std::sync::Mutex::new(None::<PyErr>);
        let report = |done: usize, total: usize| {
            if let Some(cb) = &progress {
                Python::attach(|py| {
                    if let Err(e) = cb.call1(py, (done, total)) {
                        let mut f = failed.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                        f.get_or_insert(e);
                    }
                });
            }
        };
        let opts = EncodeOptions {
            batch_size,
            progress: if progress.is_some() { Some(&report) } else { None },
            cancel: None,
        };
        let e = crate::compute(py, || self.enc.encode(&refs, &opts)).py(py)?;
        if let Some(err) = failed
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
        {
            return Err(err);
        }
        let (rows, dim) = (e.rows(), e.dim());
        let flat = PyArray1::from_vec(py, e.as_slice().to_vec());
        Ok(flat.reshape([rows, dim])?.into_any())
    }

    fn __repr__(&self) -> String {
        format!(
            "Encoder(model={:?}, dim={})",
            self.enc.dir().display().to_string(),
            self.enc.dim()
        )
    }

    /// Pickles as its model directory (the weights are loaded again on the other side).
    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<(Bound<'py, PyAny>, (PathBuf,))> {
        let cls = slf.get_type().into_any();
        Ok((cls, (slf.get().enc.dir().to_path_buf(),)))
    }
}
