"""Per-document vectors as the frameworks hold them (lists of Python floats), read into
one float32 matrix by the extension (`_native.float_rows`, behind every framework
component's `vectors`): the matrix numpy makes of them, bit for bit, and the package's
errors, each naming the document and the value."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ctxprune_rs import InvalidInputError, _native
from ctxprune_rs._integrate import vectors


@pytest.mark.parametrize("n,d,seed", [(1, 1, 1), (3, 7, 2), (37, 385, 3), (130, 19, 4)])
def test_lists_read_as_numpy_reads_them(n, d, seed):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)) * rng.choice([1e-30, 1e-3, 1.0, 1e30], size=(n, d))
    rows = X.tolist()
    want = np.asarray(rows, dtype=np.float32)
    got = _native.float_rows(rows, "docs")
    assert got.dtype == np.float32 and got.shape == (n, d) and got.flags.c_contiguous
    assert got.tobytes() == want.tobytes()
    # Tuples, an outer tuple, ints, bools and numpy scalars are numbers as numpy reads them.
    mixed = tuple(tuple(r) for r in rows)
    assert _native.float_rows(mixed, "docs").tobytes() == want.tobytes()
    odd = [[int(v * 10) if j % 3 == 0 else (np.float64(v) if j % 3 == 1 else v) for j, v in enumerate(r)]
           for r in rows]
    odd[0][0] = True
    assert _native.float_rows(odd, "docs").tobytes() == np.asarray(odd, dtype=np.float32).tobytes()
    assert vectors(rows, "docs").tobytes() == want.tobytes()


def test_other_layouts_are_left_to_numpy():
    X = np.arange(12, dtype=np.float32).reshape(3, 4)
    for rows in (X, list(X), [X[0].tolist(), X[1], X[2].tolist()], iter(X.tolist())):
        assert _native.float_rows(rows, "docs") is None
    # ... and the components' conversion still reads them.
    for rows in (X, list(X), [X[0].tolist(), X[1], X[2].tolist()]):
        assert vectors(rows, "docs").tobytes() == X.tobytes()


def test_not_a_number_is_kept_for_the_selection_to_name():
    rows = [[1.0, 0.0], [math.nan, 1.0]]
    got = _native.float_rows(rows, "docs")
    assert math.isnan(got[1, 0]) and got[0, 0] == 1.0


@pytest.mark.parametrize("rows,match", [
    ([], r"invalid docs: no documents"),
    ([[1.0, 2.0], None], r"invalid docs\[1\]: the document has no embedding"),
    ([[1.0, 2.0], [3.0]], r"invalid docs\[1\]: 1 values, document 0 has 2"),
    ([[1.0, 2.0], [3.0, "x"]], r"invalid docs\[1\]\[1\]: not a number \(str\)"),
    ([[1.0, 2.0], [3.0, None]], r"invalid docs\[1\]\[1\]: not a number \(NoneType\)"),
    ([[1.0, 1e39]], r"invalid docs\[0\]\[1\]: 1e39 does not fit in f32"),
    ([[1.0, -1e-50]], r"invalid docs\[0\]\[1\]: -1e-50 underflows f32 to 0"),
])
def test_errors_name_the_document_and_the_value(rows, match):
    with pytest.raises(InvalidInputError, match=match):
        _native.float_rows(rows, "docs")
    with pytest.raises(InvalidInputError, match=match):
        vectors(rows, "docs")


def test_a_matrix_too_large_to_allocate_is_a_memory_error():
    # 10**7 references to one row of 10**7 values: 4e14 bytes of float32, more than any
    # address space; refused before any is allocated (no abort).
    row = [0.0] * 10**7
    with pytest.raises(MemoryError, match=r"docs: 10000000 x 10000000 float32 values do not fit in memory"):
        _native.float_rows([row] * 10**7, "docs")
