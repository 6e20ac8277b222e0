"""numpy inputs as the extension reads them: float16, float32 or float64, C-contiguous,
native byte order. Those pass through without a copy here (the extension copies them once
into the engine's rows); another layout gets one copy; a non-float dtype is an error."""

from __future__ import annotations

from typing import Any

import numpy as np

from ._errors import InvalidInputError

_FLOATS = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))


def floats(x: Any, name: str, ndim: int) -> np.ndarray:
    """`x` as a contiguous float array of `ndim` dimensions, or an InvalidInputError
    naming `name`. Python lists (not arrays) are read as float64."""
    if isinstance(x, np.ndarray):
        a = x
    else:
        try:
            a = np.asarray(x, dtype=np.float64)
        except (TypeError, ValueError) as e:
            raise InvalidInputError(f"invalid {name}: not an array of numbers ({e})") from None
    if a.ndim != ndim:
        want = "a vector (1-D)" if ndim == 1 else "a matrix (rows x dimensions, 2-D)"
        raise InvalidInputError(f"invalid {name}: must be {want}, got shape {a.shape}")
    if a.dtype.newbyteorder("=") not in _FLOATS:
        hint = "; convert with .astype(np.float32)" if a.dtype.kind in "iub" else ""
        raise InvalidInputError(
            f"invalid {name}: dtype {a.dtype} is not float16, float32 or float64{hint}"
        )
    if not a.dtype.isnative:
        a = a.astype(a.dtype.newbyteorder("="))
    if not a.flags.c_contiguous:
        a = np.ascontiguousarray(a)
    return a


def numbers(x: Any, name: str) -> list:
    """A 1-D sequence of numbers (costs) as a list of floats."""
    a = np.asarray(x)
    if a.ndim != 1:
        raise InvalidInputError(f"invalid {name}: must be 1-D, got shape {a.shape}")
    if a.dtype.kind not in "iuf":
        raise InvalidInputError(f"invalid {name}: dtype {a.dtype} is not numeric")
    return a.astype(np.float64).tolist()


def indices(x: Any, name: str) -> list:
    """Row indices as a list of ints."""
    a = np.asarray(x)
    if a.size == 0:
        return []
    if a.ndim != 1 or a.dtype.kind not in "iu":
        raise InvalidInputError(f"invalid {name}: must be a 1-D sequence of ints")
    return [int(i) for i in a]


def count(v: Any, name: str) -> Any:
    """A non-negative int argument (None passes), or an InvalidInputError naming it."""
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise InvalidInputError(f"invalid {name}: expected a non-negative int, got {v!r}")
    if v < 0:
        raise InvalidInputError(f"invalid {name}: {v} is negative")
    if v >= 2**63:
        raise InvalidInputError(f"invalid {name}: {v} is too large")
    return int(v)
