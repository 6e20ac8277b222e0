"""Shared helpers: the `ctxprune` CLI (the Rust API's results, to compare against) and
seeded problems."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]


def cli_path() -> Path:
    """The CLI built from this checkout: $CTXPRUNE_BIN, else target/debug/ctxprune, else
    target/release/ctxprune. The comparisons need it; build it with `cargo build`."""
    env = os.environ.get("CTXPRUNE_BIN")
    if env:
        return Path(env)
    for p in (ROOT / "target" / "debug" / "ctxprune", ROOT / "target" / "release" / "ctxprune"):
        if p.exists():
            return p
    pytest.fail("no ctxprune CLI to compare against: run `cargo build` (or set CTXPRUNE_BIN)")


def cli(*args: str, stdin: str | None = None) -> dict | str:
    """Runs the CLI on the CPU; its stdout as JSON (or text when it is not JSON)."""
    env = dict(os.environ, CTXPRUNE_BACKEND="cpu")
    r = subprocess.run(
        [str(cli_path()), *args], input=stdin, capture_output=True, text=True, env=env, timeout=300
    )
    assert r.returncode == 0, f"ctxprune {' '.join(args)} failed: {r.stderr}"
    try:
        return json.loads(r.stdout)
    except json.JSONDecodeError:
        return r.stdout


@pytest.fixture
def rng():
    return np.random.default_rng(20261201)


def problem(rng, n: int, d: int, dtype=np.float32):
    """A pool of n rows in d dimensions with clusters (so redundancy matters), a query
    near one cluster, and costs in [20, 400)."""
    centres = rng.standard_normal((max(2, n // 15), d))
    X = centres[rng.integers(0, len(centres), n)] + 0.45 * rng.standard_normal((n, d))
    q = centres[0] + 0.3 * rng.standard_normal(d)
    costs = rng.integers(20, 400, n).astype(np.float64)
    return X.astype(dtype), q.astype(dtype), costs
