#!/usr/bin/env python3
"""Attention mass (observation-masking.txt App. E.3) in NumPy against `ctxprune attention
bench`, in one run, on the same shapes and the same synthetic layout (spans and step
positions of `ctxprune::attention::synthetic`; the Gaussian values come from each side's own
generator).

NumPy does what the crate's CPU path does, vectorised: per layer and key head one f32 GEMM
of the stacked query rows against the keys, then the causal softmax rows in f64 (max, exp,
sum, divide), accumulated per step and key, and the per-span sums (np.add.reduceat).

Usage: python3 benches/attention_numpy.py target/release/ctxprune [--n 32768 --layers 8
       --heads 16 --kv-heads 4 --head-dim 256 --steps 50 --repeat 3]
Needs numpy. Prints both medians and their ratio.
"""
import argparse
import re
import subprocess
import time

import numpy as np


def layout(n, turns):
    """Span boundaries and step positions of attention::synthetic (Rust), as lists."""
    spans, steps = [], []
    per = n // turns
    for k in range(turns):
        a = k * per
        b = n if k + 1 == turns else a + per
        length = b - a
        at = a
        if k == 0:
            for _ in range(2):  # system, user
                spans.append((at, at + length // 20 + 1))
                at += length // 20 + 1
        at += 1  # a marker token
        think = max(length * 15 // 100, 3)
        steps.append(at + 1)
        spans.append((at, at + think))
        at += think
        call = max(length * 5 // 100, 1)
        spans.append((at, at + call))
        at += call
        at += 1
        obs = b - at - 1
        spans.append((at, at + max(obs, 1)))
        at += max(obs, 1)
    return spans, steps


def mass(q_layers, k_layers, steps, h, g, d, spans):
    r_n = len(steps)
    nk = steps[-1] + 1
    hpg = h // g
    isd = 1.0 / np.sqrt(d)
    acc = np.zeros((r_n, nk))
    t = np.asarray(steps)
    causal = np.arange(nk)[None, :] <= t[:, None]  # R x nk
    for q, k in zip(q_layers, k_layers):
        for kg in range(g):
            kmat = k[:, kg * d:(kg + 1) * d]  # nk x d (strided view)
            for hl in range(hpg):
                head = kg * hpg + hl
                s = q[:, head * d:(head + 1) * d] @ kmat.T  # R x nk, f32 GEMM
                s = np.where(causal, s.astype(np.float64), -np.inf)
                m = s.max(axis=1, keepdims=True)
                w = np.exp((s - m) * isd)
                acc += w / w.sum(axis=1, keepdims=True)
    acc /= len(q_layers) * h
    # Per span: sums over [start, end) up to each step.
    out = np.zeros((r_n, len(spans)))
    for i, (a, b) in enumerate(spans):
        if a < nk:
            out[:, i] = acc[:, a:min(b, nk)].sum(axis=1)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ctxprune")
    ap.add_argument("--n", type=int, default=32768)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--head-dim", type=int, default=256)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    spans, steps = layout(a.n, a.steps)
    nk = steps[-1] + 1
    rng = np.random.default_rng(7)
    h, g, d = a.heads, a.kv_heads, a.head_dim
    t0 = time.perf_counter()
    qs = [rng.standard_normal((len(steps), h * d), dtype=np.float32) for _ in range(a.layers)]
    ks = [rng.standard_normal((nk, g * d), dtype=np.float32) for _ in range(a.layers)]
    print(f"numpy {np.__version__}: inputs in {time.perf_counter() - t0:.1f} s")
    times = []
    for i in range(a.repeat + 1):
        t0 = time.perf_counter()
        out = mass(qs, ks, steps, h, g, d, spans)
        if i > 0:
            times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    np_ms = times[len(times) // 2]
    total = out.sum(axis=1)
    print(f"NumPy: median {np_ms:.1f} ms over {len(times)} runs (min {times[0]:.1f}, max {times[-1]:.1f}); "
          f"span mass per step {total.min():.4f}..{total.max():.4f}")
    del qs, ks
    cmd = [a.ctxprune, "attention", "bench", "--backend", "cpu", "--n", str(a.n), "--layers", str(a.layers),
           "--heads", str(h), "--kv-heads", str(g), "--head-dim", str(d), "--steps", str(a.steps),
           "--repeat", str(a.repeat)]
    res = subprocess.run(cmd, capture_output=True, text=True, check=True)
    line = res.stdout.strip()
    print("ctxprune:", line)
    rust_ms = float(re.search(r"median ([0-9.]+) ms", line).group(1))
    print(f"ctxprune CPU is {np_ms / rust_ms:.2f}x NumPy's speed ({rust_ms:.1f} ms vs {np_ms:.1f} ms)")


if __name__ == "__main__":
    main()
