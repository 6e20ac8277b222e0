"""Benchmark of the wheel against the Python peers, in one run (not a test):

- MMR, k = 100 over N = 10,000, d = 1,024 (lambda 0.5): ctxprune (a fresh pool per call,
  and a resident Pool), ctxprune's LangChain drop-in, pyversity's mmr, and LangChain's
  maximal_marginal_relevance;
- facility location, k = 50 over N = 2,000, d = 384: ctxprune's coverage (unit costs, no
  query: F(S) = sum_j max(0, max_{i in S} cos(i, j))) and apricot-select's
  FacilityLocationSelection (cosine, lazy greedy).

Prints the median and min wall time of each over --repeats runs (after one warm-up run,
which also JIT-compiles apricot's numba code), and whether the picks agree with
ctxprune's. Build the wheel with `maturin build --release` for meaningful numbers; the
peers: `pip install pyversity apricot-select scikit-learn langchain-core` (apricot needs scikit-learn but does not declare it).

    python benches/python_peers.py [--repeats 7]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import numpy as np

import ctxprune
from ctxprune.langchain import maximal_marginal_relevance as cp_mmr


def timed(fn, repeats):
    fn()  # warm-up
    ts, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e3, min(ts) * 1e3, out


def facility_value(X, picks):
    U = X / np.linalg.norm(X, axis=1, keepdims=True)
    S = np.maximum(U @ U[list(picks)].T, 0.0)
    return float(S.max(axis=1).sum())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=7)
    a = ap.parse_args()
    engine = ctxprune.Engine("cpu")
    print(f"ctxprune {ctxprune.__version__} ({ctxprune.__file__}) on {engine.describe()}; "
          f"Python {platform.python_version()}, numpy {np.__version__}; {a.repeats} runs each, after a warm-up")
    rows = []

    rng = np.random.default_rng(0)
    N, d, k = 10_000, 1_024, 100
    centres = rng.standard_normal((200, d))
    X = (centres[rng.integers(0, 200, N)] + 0.7 * rng.standard_normal((N, d))).astype(np.float32)
    q = (centres[0] + 0.5 * rng.standard_normal(d)).astype(np.float32)
    ours = ctxprune.select(X, q, "mmr", k=k, lambda_=0.5, engine=engine).indices.tolist()
    pool = ctxprune.Pool(X, engine=engine)
    sel = ctxprune.Selector("mmr", k=k, lambda_=0.5, engine=engine)
    cases = [
        ("ctxprune.select (array in)", lambda: ctxprune.select(X, q, "mmr", k=k, lambda_=0.5, engine=engine).indices.tolist()),
        ("ctxprune Selector, resident Pool", lambda: sel.select(pool, q).indices.tolist()),
        ("ctxprune.langchain drop-in", lambda: cp_mmr(q, X, lambda_mult=0.5, k=k, engine=engine)),
    ]
    try:
        import pyversity

        Xn = X / np.linalg.norm(X, axis=1, keepdims=True)
        rel = (Xn @ (q / np.linalg.norm(q))).astype(np.float32)
        cases.append(("pyversity.mmr", lambda: list(map(int, pyversity.mmr(X, rel, k, diversity=0.5).indices))))
    except ImportError:
        print("pyversity not installed: skipped")
    try:
        from langchain_core.vectorstores.utils import maximal_marginal_relevance as lc_mmr

        cases.append(("langchain_core maximal_marginal_relevance", lambda: list(lc_mmr(q, X, lambda_mult=0.5, k=k))))
    except ImportError:
        print("langchain-core not installed: skipped")
    for name, fn in cases:
        med, lo, picks = timed(fn, a.repeats)
        first = next((i for i, (x, y) in enumerate(zip(picks, ours)) if x != y), None)
        common = len(set(picks) & set(ours))
        agree = "the same picks in the same order" if first is None and len(picks) == k else (
            f"same order up to pick {first}; {common}/{k} picks in common")
        rows.append((f"MMR N={N} d={d} k={k}", name, med, lo, agree))

    N2, d2, k2 = 2_000, 384, 50
    Y = rng.standard_normal((N2, d2)).astype(np.float32) + 0.3 * rng.standard_normal((1, d2)).astype(np.float32)
    ours = ctxprune.select(Y, None, "coverage", k=k2, engine=engine).indices.tolist()
    f_ours = facility_value(Y, ours)
    cases = [("ctxprune.select coverage", lambda: ctxprune.select(Y, None, "coverage", k=k2, engine=engine).indices.tolist())]
    try:
        from apricot import FacilityLocationSelection

        def apricot_fl():
            return [int(i) for i in FacilityLocationSelection(k2, metric="cosine", optimizer="lazy").fit(Y).ranking]

        cases.append(("apricot FacilityLocationSelection", apricot_fl))
    except ImportError:
        print("apricot-select not installed: skipped")
    for name, fn in cases:
        med, lo, picks = timed(fn, a.repeats)
        rows.append((f"facility location N={N2} d={d2} k={k2}", name, med, lo,
                     f"F(S) = {facility_value(Y, picks):.2f} (ctxprune {f_ours:.2f})"))

    w = max(len(r[1]) for r in rows)
    print(f"{'case':<38} {'library':<{w}} {'median ms':>10} {'min ms':>9}  agreement")
    for case, name, med, lo, note in rows:
        print(f"{case:<38} {name:<{w}} {med:>10.2f} {lo:>9.2f}  {note}")


if __name__ == "__main__":
    main()
