"""NumPy doing the same work as the criterion benches, on the same machine, for the
comparison column of the README's table.

    ctxprune make-pool --n 10000 --d 1024 --out /tmp/pool10k
    ctxprune make-pool --n 2000 --d 1024 --out /tmp/pool2k
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python3 benches/numpy_baseline.py /tmp/pool10k /tmp/pool2k

Medians of 5 runs (Gram: 3). Each algorithm is the straightforward vectorised NumPy
version: full E @ E.T for the Gram, one matrix-vector product per greedy step for
MMR, Chen et al.'s incremental Cholesky for DPP on a precomputed kernel, and a dense
facility location whose gains are recomputed every step.
"""
import statistics
import sys
import time

import numpy as np


def med(f, reps=5):
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts) * 1e3


def unit(e):
    return e / np.linalg.norm(e, axis=1, keepdims=True)


def gram_vmf(e, kappa=10.0):
    g = e @ e.T
    return np.exp(kappa * (g - 1.0))


def mmr(e, q, k=100, lam=0.35):
    rel = e @ q
    maxsim = np.full(len(e), -np.inf)
    alive = np.ones(len(e), bool)
    picks = []
    for t in range(k):
        red = np.where(maxsim == -np.inf, 0.0, maxsim) if t else np.zeros(len(e))
        s = lam * rel - (1 - lam) * red
        s[~alive] = -np.inf
        x = int(np.argmax(s))
        picks.append(x)
        alive[x] = False
        maxsim = np.maximum(maxsim, e @ e[x])
    return picks


def dpp_from_kernel(L, k=100, eps=1e-10):
    n = len(L)
    c = np.zeros((k, n))
    d2 = np.diag(L).copy()
    picks = []
    for t in range(k):
        x = int(np.argmax(d2))
        if d2[x] < eps:
            break
        picks.append(x)
        e = (L[x] - c[:t, x] @ c[:t]) / np.sqrt(d2[x])
        c[t] = e
        d2 -= e * e
        d2[x] = -np.inf
    return picks


def facility_location(e, q, costs, budget, k=50):
    w = np.maximum(e @ q, 0)
    s = np.maximum(w[:, None] * (e @ e.T), 0)
    np.fill_diagonal(s, w)
    cur = np.zeros(len(e))
    left = budget
    alive = np.ones(len(e), bool)
    picks = []
    for _ in range(k):
        alive &= costs <= left
        if not alive.any():
            break
        gain = np.maximum(s - cur, 0).sum(axis=1) / costs
        gain[~alive] = -np.inf
        x = int(np.argmax(gain))
        picks.append(x)
        alive[x] = False
        left -= costs[x]
        cur = np.maximum(cur, s[x])
    return picks


def main():
    big, small = sys.argv[1], sys.argv[2]
    e = unit(np.load(f"{big}/emb.npy").astype(np.float32))
    q = np.load(f"{big}/query.npy").astype(np.float32).ravel()
    q /= np.linalg.norm(q)
    print(f"numpy {np.__version__}")
    print(f"gram cos+vmf n=10000 d=1024: {med(lambda: gram_vmf(e), 3):.1f} ms")
    print(f"greedy mmr k=100 n=10000 d=1024: {med(lambda: mmr(e, q)):.1f} ms")
    w = np.maximum(e @ q, 0)
    L = (w[:, None] * (e @ e.T)) * w[None, :]
    print(f"greedy dpp k=100 from a given kernel n=10000: {med(lambda: dpp_from_kernel(L)):.1f} ms")
    del L
    e2 = unit(np.load(f"{small}/emb.npy").astype(np.float32))
    q2 = np.load(f"{small}/query.npy").astype(np.float32).ravel()
    q2 /= np.linalg.norm(q2)
    costs = np.load(f"{small}/costs.npy").astype(np.float64).ravel()
    print(f"facility location n=2000 d=1024 k=50 budget: {med(lambda: facility_location(e2, q2, costs, costs.sum() / 10)):.1f} ms")


if __name__ == "__main__":
    main()
