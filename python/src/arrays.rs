//! numpy arrays in: float32, float16 and float64, C-contiguous (the Python side makes
//! other layouts contiguous, and refuses other dtypes, before they get here). A float32
//! matrix is borrowed (the library reads it once); the others are read once into f32
//! rows; a float64 value that does not fit in f32 is an error naming its position, never
//! an infinity or a silent zero.

use crate::errors::{invalid, IntoPy};
use numpy::PyReadonlyArrayDyn;
use pyo3::prelude::*;

/// The values of a contiguous float array (1-D or 2-D) as f32, naming `what[pos]` when a
/// float64 value does not fit. `cols` is the row length, for the position in messages.
fn values(py: Python<'_>, a: &Bound<'_, PyAny>, what: &str, cols: usize) -> PyResult<Vec<f32>> {
    let place = |i: usize| match i.checked_div(cols) {
        Some(row) => format!("{what}[{row}, {}]", i % cols),
        None => format!("{what}[{i}]"),
    };
    let contiguous = |e: numpy::AsSliceError| invalid(py, what, format!("not C-contiguous ({e})"));
    macro_rules! read {
        ($t:ty, $conv:expr) => {
            if let Ok(r) = a.extract::<PyReadonlyArrayDyn<'_, $t>>() {
                let v = r.as_slice().map_err(contiguous)?;
                return v.iter().enumerate().map(|(i, &x)| $conv(i, x)).collect();
            }
        };
    }
    read!(f32, |_, v: f32| Ok(v));
    read!(half::f16, |_, v: half::f16| Ok(v.to_f32()));
    read!(f64, |i, v: f64| ctxprune::embeddings::narrow_f32(v)
        .map_err(|m| invalid(py, &place(i), m)));
    Err(invalid(
        py,
        what,
        "expected a float16, float32 or float64 numpy array",
    ))
}

/// `f` over the rows of a 2-D array, with the GIL released: a float32 C-contiguous array
/// is borrowed as it is (no copy here: the library reads it once), float16 and float64 are
/// read into f32 first (naming a float64 value that does not fit).
pub fn with_rows<T: Send>(
    py: Python<'_>,
    a: &Bound<'_, PyAny>,
    what: &str,
    f: impl FnOnce(&[f32], usize, usize) -> ctxprune::Result<T> + Send,
) -> PyResult<T> {
    let shape: (usize, usize) = a
        .getattr("shape")?
        .extract()
        .map_err(|_| invalid(py, what, "must be 2-D (rows x dimensions)"))?;
    if let Ok(r) = a.extract::<PyReadonlyArrayDyn<'_, f32>>() {
        if let Ok(v) = r.as_slice() {
            return crate::compute(py, || f(v, shape.0, shape.1)).py(py);
        }
    }
    let v = values(py, a, what, shape.1)?;
    crate::compute(py, || f(&v, shape.0, shape.1)).py(py)
}

/// A vector from a 1-D array.
pub fn vector(py: Python<'_>, a: &Bound<'_, PyAny>, what: &str) -> PyResult<Vec<f32>> {
    values(py, a, what, 0)
}
