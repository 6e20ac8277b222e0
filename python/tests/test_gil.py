"""Long calls release the GIL: Python threads keep running while a selection computes,
and two selections overlap in time."""

from __future__ import annotations

import threading
import time

import numpy as np

import ctxprune_rs as ctxprune

CPU = ctxprune.Engine("cpu")


def _long_call(pool, q, k):
    return ctxprune.select(pool, q, "mmr", k=k)


def test_another_thread_runs_during_a_call():
    rng = np.random.default_rng(5)
    X = rng.standard_normal((20000, 128)).astype(np.float32)
    pool = ctxprune.Pool(X, engine=CPU)
    # A call long enough to tell (a good fraction of a second on any machine).
    k = 50
    while True:
        t0 = time.perf_counter()
        _long_call(pool, X[0], k)
        alone = time.perf_counter() - t0
        if alone > 0.3 or k >= 20000:
            break
        k = min(20000, k * 2)
    assert alone > 0.1, f"the call took {alone:.3f} s: too short to tell"

    ticks = []
    done = threading.Event()

    def ticker():
        while not done.is_set():
            ticks.append(time.perf_counter())
            time.sleep(0.001)

    th = threading.Thread(target=ticker)
    th.start()
    time.sleep(0.02)
    start = time.perf_counter()
    _long_call(pool, X[0], k)
    end = time.perf_counter()
    done.set()
    th.join()
    during = [t for t in ticks if start <= t <= end]
    gaps = np.diff([start, *during, end])
    # With the GIL held the ticker stops for the whole call: one gap as long as the call.
    assert gaps.max() < 0.5 * (end - start), (
        f"the ticker stalled {gaps.max():.3f} s of a {end - start:.3f} s call"
    )
    assert len(during) >= 5


def test_two_selections_overlap_in_time():
    rng = np.random.default_rng(6)
    X = rng.standard_normal((3000, 64)).astype(np.float32)
    pool = ctxprune.Pool(X, engine=CPU)
    spans = {}
    inside = []
    lock = threading.Lock()
    barrier = threading.Barrier(2)

    def worker(name):
        barrier.wait()
        # An oracle runs inside the native rerank: it records when each call is mid-way.
        def oracle(idx):
            with lock:
                inside.append((name, time.perf_counter()))
            time.sleep(0.01)
            return np.full(len(idx), 0.5)

        t0 = time.perf_counter()
        ctxprune.rerank(pool, X[0], oracle, 25, 5, "boundary-morph")
        spans[name] = (t0, time.perf_counter())

    threads = [threading.Thread(target=worker, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    (a0, a1), (b0, b1) = spans["a"], spans["b"]
    assert max(a0, b0) < min(a1, b1), "the two reranks ran one after the other"
    # Both threads' oracles were called while the other's rerank was still running.
    a_times = [t for n, t in inside if n == "a"]
    b_times = [t for n, t in inside if n == "b"]
    assert any(b0 < t < b1 for t in a_times) and any(a0 < t < a1 for t in b_times)
