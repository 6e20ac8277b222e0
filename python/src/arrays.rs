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

/// Per-document vectors held as Python lists (or tuples) of numbers, as LlamaIndex's
/// `node.embedding`, Haystack's `Document.embedding` and LangChain's `embed_documents`
/// hold them, read into one `rows x dim` float32 array in one pass, with the errors of
/// the package's own checks: a missing vector (None), a ragged one, a value that is not a
/// number or does not fit in float32 (never an infinity or a silent zero), each naming
/// `what[i]` or `what[i][j]`; no rows at all is an error too, and a matrix that cannot be
/// allocated a MemoryError. `None` when `rows` is not a list or tuple, or one of its rows
/// is neither (a numpy array, say): the caller's own conversion reads those. Twice as
/// fast as `np.asarray(rows, np.float32)` on nested lists (docs/performance.md).
#[pyfunction]
#[pyo3(signature = (rows, what))]
pub fn float_rows<'py>(
    py: Python<'py>,
    rows: &Bound<'py, PyAny>,
    what: &str,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    use numpy::{PyArray1, PyArrayMethods};
    use pyo3::types::{PyList, PySequence, PyTuple};
    let as_seq = |x: &Bound<'py, PyAny>| -> Option<Bound<'py, PySequence>> {
        (x.is_instance_of::<PyList>() || x.is_instance_of::<PyTuple>())
            .then(|| x.cast::<PySequence>().ok().cloned())
            .flatten()
    };
    let Some(outer) = as_seq(rows) else {
        return Ok(None);
    };
    let n = outer.len()?;
    if n == 0 {
        return Err(invalid(py, what, "no documents"));
    }
    let mut out: Vec<f32> = Vec::new();
    let mut dim = 0usize;
    for i in 0..n {
        let row = outer.get_item(i)?;
        if row.is_none() {
            let at = format!("{what}[{i}]");
            return Err(invalid(py, &at, "the document has no embedding"));
        }
        let Some(row) = as_seq(&row) else {
            return Ok(None);
        };
        let len = row.len()?;
        if i == 0 {
            dim = len;
            // The whole matrix at once, or a MemoryError (never an abort): every row then
            // fills its share without a reallocation.
            let room = n.checked_mul(len).map(|t| out.try_reserve_exact(t));
            if !matches!(room, Some(Ok(()))) {
                return Err(pyo3::exceptions::PyMemoryError::new_err(format!(
                    "{what}: {n} x {len} float32 values do not fit in memory"
                )));
            }
        } else if len != dim {
            let at = format!("{what}[{i}]");
            return Err(invalid(py, &at, format!("{len} values, document 0 has {dim}")));
        }
        let value = |j: usize, item: Bound<'py, PyAny>| -> PyResult<f32> {
            let at = || format!("{what}[{i}][{j}]");
            let x: f64 = item.extract().map_err(|_| {
                let ty = item
                    .get_type()
                    .name()
                    .map_or_else(|_| "?".to_string(), |t| t.to_string());
                invalid(py, &at(), format!("not a number ({ty})"))
            })?;
            ctxprune::embeddings::narrow_f32(x).map_err(|m| invalid(py, &at(), m))
        };
        for j in 0..len {
            out.push(value(j, row.get_item(j)?)?);
        }
    }
    Ok(Some(PyArray1::from_vec(py, out).reshape([n, dim])?.into_any()))
}
