"""Benchmark of the wheel against the Python peers, in one run (not a test): issue 24's
goals, measured the way a Python user calls each library, medians of --repeats runs after
a warm-up (which also JIT-compiles apricot's numba code).

(a) Real text: the pools of benches/corpus.py (the READMEs and doc comments of the crates
    in the cargo registry, embedded by the crate's MiniLM; one pool of --pool passages per
    hand-written query, in MIPS order). MMR (lambda 0.5) and DPP at k = 10 and 100:
    ctxprune with the array in (`Selector.select(X, q)`: one read of the array for its
    norms, then the selection over it where it is), over a
    resident `Pool`, and pyversity 0.2 (`mmr` / `dpp`, relevance precomputed and not
    timed). Ratios are geometric means over the pools.
(b) Synthetic N = 10,000, d = 1,024 (200 Gaussian clusters, rows unit-normalised as
    embedding models return them): the same cases, plus LangChain's
    maximal_marginal_relevance and ctxprune's drop-in for it, and MMR k = 10 with the
    array in on the rows before normalising (ctxprune then normalises a copy).
(c) Array in at memory speed: (array in - resident) against one read of the array
    (NumPy's matrix-vector product, the cheapest read a Python caller has), per case.
(d) Many queries: `Selector.select_many(pool, Q)` against Q `select` calls, Q = 32,
    N = 10,000, d = 1,024, MMR k = 100, results compared.
(e) Facility location k = 50 over N = 2,000, d = 384: ctxprune coverage against
    apricot-select's FacilityLocationSelection (cosine, lazy greedy).

Build the wheel with `maturin build --release`; the peers:
`pip install pyversity apricot-select scikit-learn langchain-core`; the corpus and its
embeddings are built (and cached under target/bench-corpus) on the first run:

    python benches/python_peers.py --ctxprune target/release/ctxprune [--repeats 7]
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

import ctxprune_rs as ctxprune
from ctxprune_rs.langchain import maximal_marginal_relevance as cp_mmr

sys.path.insert(0, str(Path(__file__).resolve().parent))
import corpus  # noqa: E402
import realtext  # noqa: E402


def timed(fn, repeats):
    out = fn()  # warm-up
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e3, out


def gmean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def facility_value(X, picks):
    U = X / np.linalg.norm(X, axis=1, keepdims=True)
    S = np.maximum(U @ U[list(picks)].T, 0.0)
    return float(S.max(axis=1).sum())


def peers(X, q):
    """pyversity's calls with the relevance it needs precomputed (outside the clock)."""
    import pyversity

    Xn = X / np.linalg.norm(X, axis=1, keepdims=True)
    rel = (Xn @ (q / np.linalg.norm(q))).astype(np.float32)
    return {
        "mmr": lambda k: pyversity.mmr(X, rel, k, diversity=0.5).indices,
        "dpp": lambda k: pyversity.dpp(X, rel, k).indices,
    }


def cases(engine, X, q, pool, repeats, ks=(10, 100)):
    """Per (method, k): medians of array in, resident pool, pyversity, and one read."""
    read = timed(lambda: X @ q, repeats)[0]
    pv = peers(X, q)
    out = {}
    for m in ("mmr", "dpp"):
        for k in ks:
            s = ctxprune.Selector(m, k=k, lambda_=0.5 if m == "mmr" else None, engine=engine)
            a, sel_a = timed(lambda: s.select(X, q), repeats)
            r, sel_r = timed(lambda: s.select(pool, q), repeats)
            assert sel_a.indices.tolist() == sel_r.indices.tolist() and sel_a.gains.tobytes() == sel_r.gains.tobytes()
            p, _ = timed(lambda: pv[m](k), repeats)
            out[(m, k)] = dict(array=a, pool=r, peer=p, read=read)
    return out


def host_cpu() -> str:
    """The host CPU's model and widest vector extension: the lead over BLAS-based peers
    depends on it (the selectors' exact products widen f32 to f64 at the vector width)."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or "unknown CPU"
    model = next((ln.split(":", 1)[1].strip() for ln in info.splitlines() if ln.startswith("model name")), "unknown CPU")
    flags = next((ln.split(":", 1)[1].split() for ln in info.splitlines() if ln.startswith("flags")), [])
    simd = next((f for f in ("avx512f", "avx2", "sse4_2") if f in flags), "no AVX")
    return f"{model}, {simd}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--ctxprune", default="target/release/ctxprune", help="the binary that embeds the corpus")
    ap.add_argument("--cache", default="target/bench-corpus")
    ap.add_argument("--pool", type=int, default=5_000)
    ap.add_argument("--queries", type=int, default=32, help="Q of the select_many case")
    a = ap.parse_args()
    import pyversity

    engine = ctxprune.Engine("cpu")
    print(f"ctxprune {ctxprune.__version__} on {engine.describe()}; pyversity {pyversity.__version__}; "
          f"Python {platform.python_version()}, numpy {np.__version__}; {os.cpu_count()} CPUs ({host_cpu()}); "
          f"medians of {a.repeats} runs each, after a warm-up")

    # (a) real text
    texts, E, _ = corpus.build(a.ctxprune, Path(a.cache), 20_000)
    # With realtext.py's cache, its first 24 questions (their embeddings cached by digest).
    Q = realtext.query_embeddings(a.ctxprune, Path(a.cache), realtext.FIRST_24)
    pools = corpus.pools(E, Q, a.pool)
    print(f"\n(a) real text: {len(texts)} passages (cargo registry READMEs and doc comments), "
          f"MiniLM 384-d; {len(pools)} pools of {a.pool} in MIPS order")
    real = [cases(engine, X, q, ctxprune.Pool(X, engine=engine), a.repeats) for X, q in pools]
    print(f"{'case':<12} {'array in ms':>11} {'Pool ms':>8} {'pyversity ms':>12} "
          f"{'array/pyv':>9} {'Pool/pyv':>8} {'(array-Pool)/read':>17}")
    for key in real[0]:
        rows = [r[key] for r in real]
        med = lambda f: statistics.median(r[f] for r in rows)  # noqa: E731
        ga = gmean([r["peer"] / r["array"] for r in rows])
        gp = gmean([r["peer"] / r["pool"] for r in rows])
        over = max((r["array"] - r["pool"]) / r["read"] for r in rows)
        print(f"{key[0].upper()} k={key[1]:<6} {med('array'):>11.2f} {med('pool'):>8.2f} {med('peer'):>12.2f} "
              f"{ga:>8.1f}x {gp:>7.1f}x {over:>16.2f}x")
    print(f"one read of a pool (X @ q): median {statistics.median(r[('mmr', 10)]['read'] for r in real):.3f} ms; "
          "(array - Pool)/read is the worst pool")

    # (b) synthetic
    rng = np.random.default_rng(0)
    N, d = 10_000, 1_024
    centres = rng.standard_normal((200, d))
    raw = (centres[rng.integers(0, 200, N)] + 0.7 * rng.standard_normal((N, d))).astype(np.float32)
    # Unit rows, as embedding models return them (cosines, and so every pick, are the raw
    # rows'): ctxprune selects from them where they are.
    X = (raw / np.linalg.norm(raw, axis=1, keepdims=True)).astype(np.float32)
    q = (centres[0] + 0.5 * rng.standard_normal(d)).astype(np.float32)
    pool = ctxprune.Pool(X, engine=engine)
    syn = cases(engine, X, q, pool, a.repeats)
    print(f"\n(b) synthetic N={N}, d={d}, unit rows")
    print(f"{'case':<12} {'array in ms':>11} {'Pool ms':>8} {'pyversity ms':>12} "
          f"{'array/pyv':>9} {'Pool/pyv':>8} {'(array-Pool)/read':>17}")
    for key, r in syn.items():
        print(f"{key[0].upper()} k={key[1]:<6} {r['array']:>11.2f} {r['pool']:>8.2f} {r['peer']:>12.2f} "
              f"{r['peer'] / r['array']:>8.1f}x {r['peer'] / r['pool']:>7.1f}x {(r['array'] - r['pool']) / r['read']:>16.2f}x")
    print(f"one read (X @ q): {syn[('mmr', 10)]['read']:.2f} ms")
    s10 = ctxprune.Selector("mmr", k=10, lambda_=0.5, engine=engine)
    raw_ms, _ = timed(lambda: s10.select(raw, q), a.repeats)
    print(f"the same rows before normalising (norms about {np.linalg.norm(raw[0]):.0f}), MMR k=10 array in: "
          f"{raw_ms:.2f} ms (ctxprune unit-normalises a copy of rows that are not unit)")
    try:
        from langchain_core.vectorstores.utils import maximal_marginal_relevance as lc_mmr

        lc, _ = timed(lambda: lc_mmr(q, X, lambda_mult=0.5, k=100), a.repeats)
        dr, _ = timed(lambda: cp_mmr(q, X, lambda_mult=0.5, k=100, engine=engine), a.repeats)
        print(f"MMR k=100: langchain_core maximal_marginal_relevance {lc:.2f} ms; ctxprune.langchain drop-in {dr:.2f} ms")
    except ImportError:
        print("langchain-core not installed: skipped")

    # (d) many queries over one pool
    Qs = (centres[rng.integers(0, 200, a.queries)] + 0.5 * rng.standard_normal((a.queries, d))).astype(np.float32)
    s = ctxprune.Selector("mmr", k=100, lambda_=0.5, engine=engine)
    seq, want = timed(lambda: [s.select(pool, qq) for qq in Qs], max(3, a.repeats // 2))
    many, got = timed(lambda: s.select_many(pool, Qs), max(3, a.repeats // 2))
    same = all(g.indices.tolist() == w.indices.tolist() and g.gains.tobytes() == w.gains.tobytes()
               for g, w in zip(got, want))
    print(f"\n(d) select_many, Q={a.queries}, N={N}, d={d}, MMR k=100: {many:.1f} ms against {seq:.1f} ms "
          f"for {a.queries} select calls: {seq / many:.2f}x; results {'equal' if same else 'DIFFER'}")

    # (e) facility location
    N2, d2, k2 = 2_000, 384, 50
    Y = rng.standard_normal((N2, d2)).astype(np.float32) + 0.3 * rng.standard_normal((1, d2)).astype(np.float32)
    ours, picks = timed(lambda: ctxprune.select(Y, None, "coverage", k=k2, engine=engine).indices.tolist(), a.repeats)
    line = f"\n(e) facility location N={N2}, d={d2}, k={k2}: ctxprune {ours:.2f} ms, F(S) = {facility_value(Y, picks):.2f}"
    try:
        from apricot import FacilityLocationSelection

        def apricot_fl():
            return [int(i) for i in FacilityLocationSelection(k2, metric="cosine", optimizer="lazy").fit(Y).ranking]

        ap_ms, ap_picks = timed(apricot_fl, max(3, a.repeats // 2))
        line += f"; apricot {ap_ms:.1f} ms, F(S) = {facility_value(Y, ap_picks):.2f}: {ap_ms / ours:.0f}x"
    except ImportError:
        line += "; apricot-select not installed: skipped"
    print(line)


if __name__ == "__main__":
    main()
