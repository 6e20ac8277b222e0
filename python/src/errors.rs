//! The crate's errors as the package's exceptions (python/ctxprune_rs/_errors.py):
//! `InvalidInputError` (a `ValueError`), `FileError` (an `OSError`), `BackendError` and
//! `OracleError`, all subclasses of `CtxpruneError`, with the crate's one-line message.

use ctxprune::{Error, ErrorKind};
use pyo3::prelude::*;
use pyo3::types::PyType;

/// The exception class `name` of `ctxprune_rs._errors`.
fn class<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyType>> {
    Ok(py.import("ctxprune_rs._errors")?.getattr(name)?.cast_into()?)
}

/// The exception for `e`, its message as Python names the inputs (keyword arguments:
/// `costs=`; see `ctxprune::Surface`).
pub fn to_py(py: Python<'_>, e: &Error) -> PyErr {
    let name = match e.kind() {
        ErrorKind::InvalidInput => "InvalidInputError",
        ErrorKind::Io => "FileError",
        ErrorKind::Oracle => "OracleError",
        ErrorKind::DeviceUnavailable | ErrorKind::DeviceFailed | ErrorKind::Unsupported => "BackendError",
        _ => "CtxpruneError",
    };
    match class(py, name) {
        Ok(t) => PyErr::from_type(t, e.render(ctxprune::Surface::Python)),
        Err(err) => err,
    }
}

/// The exception for `e`, its message prefixed with `at` (which of many requests).
pub fn to_py_at(py: Python<'_>, at: &str, e: &Error) -> PyErr {
    let err = to_py(py, e);
    let msg = format!("{at}: {}", err.value(py));
    PyErr::from_type(err.get_type(py), msg)
}

/// An `InvalidInputError` naming `name`, for arguments checked here.
pub fn invalid(py: Python<'_>, name: &str, msg: impl Into<String>) -> PyErr {
    to_py(py, &Error::invalid(name, msg))
}

/// `r` with its error as the package's exception.
pub trait IntoPy<T> {
    /// The value, or the exception.
    fn py(self, py: Python<'_>) -> PyResult<T>;
}

impl<T> IntoPy<T> for ctxprune::Result<T> {
    fn py(self, py: Python<'_>) -> PyResult<T> {
        self.map_err(|e| to_py(py, &e))
    }
}
