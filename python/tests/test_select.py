"""select through the wheel equals the Rust API (the CLI) on the same inputs: the same
indices, gains to 1e-12; every dtype and layout path gives the float32 result."""

from __future__ import annotations

import json

import numpy as np
import pytest

import ctxprune_rs as ctxprune
from conftest import cli, problem

CPU = ctxprune.Engine("cpu")

CASES = [
    # method, options for both sides (python kwargs, CLI flags)
    ("mmr", dict(k=17), ["--k", "17"]),
    ("mmr", dict(k=9, lambda_=0.7), ["--k", "9", "--lambda", "0.7"]),
    ("grn", dict(k=13), ["--k", "13"]),
    ("centroid", dict(k=11), ["--k", "11"]),
    ("dpp", dict(k=15), ["--k", "15"]),
    ("dpp", dict(token_budget=2500.0, costs=True), ["--token-budget", "2500"]),
    ("coverage", dict(token_budget=3100.0, costs=True), ["--token-budget", "3100"]),
    ("hybrid", dict(k=12, threshold=-5.0), ["--k", "12", "--threshold", "-5"]),
    ("mmr", dict(preset="paper"), ["--preset", "paper"]),
    ("grn", dict(mode="gate", threshold=0.4, retained=[3, 0, 7]),
     ["--mode", "gate", "--threshold", "0.4", "--retained", "3,0,7"]),
    ("dpp", dict(mode="gate", retained=[5, 1]), ["--mode", "gate", "--retained", "5,1"]),
]


@pytest.mark.parametrize("method,kw,flags", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_equals_the_rust_api(tmp_path, rng, method, kw, flags):
    X, q, costs = problem(rng, 211, 37)
    np.save(tmp_path / "x.npy", X)
    np.save(tmp_path / "q.npy", q)
    np.save(tmp_path / "c.npy", costs)
    kw = dict(kw)
    args = ["select", "--method", method, "--embeddings", str(tmp_path / "x.npy"), *flags]
    query = q if method in ("mmr", "dpp", "coverage", "hybrid") else None
    if query is not None:
        args += ["--query", str(tmp_path / "q.npy")]
    if kw.pop("costs", False):
        kw["costs"] = costs
        args += ["--costs", str(tmp_path / "c.npy")]
    want = cli(*args)
    got = ctxprune.select(X, query, method, engine=CPU, **kw)
    assert got.indices.dtype == np.int64
    assert got.indices.tolist() == want["selected"]
    np.testing.assert_allclose(got.gains, want["gains"], rtol=0, atol=1e-12)
    assert got.stop == want.get("stopped_by")
    assert got.method == method and got.backend == "cpu"
    if "tokens" in want:
        assert got.tokens == pytest.approx(want["tokens"], abs=1e-9)


def test_lexical_equals_the_rust_api(tmp_path, rng):
    words = ["gpu", "kernel", "pool", "rerank", "budget", "token", "mask", "agent", "query", "cost"]
    texts = [" ".join(rng.choice(words, 6)) for _ in range(41)]
    (tmp_path / "t.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    want = cli("select", "--method", "lexical", "--texts", str(tmp_path / "t.jsonl"),
               "--query-text", "gpu kernel budget", "--k", "6")
    got = ctxprune.select(None, method="lexical", texts=texts, query_text="gpu kernel budget", k=6, engine=CPU)
    assert got.indices.tolist() == want["selected"]
    np.testing.assert_allclose(got.gains, want["gains"], rtol=0, atol=1e-12)


def _reference(X, q):
    return ctxprune.select(X.astype(np.float32), q.astype(np.float32), "dpp", k=9, engine=CPU)


def test_every_dtype_and_layout_gives_the_float32_result(rng):
    X16, q16, _ = problem(rng, 97, 24, dtype=np.float16)
    want = _reference(X16, q16)
    X32 = X16.astype(np.float32)
    variants = {
        "float16": X16,
        "float32": X32,
        "float64": X16.astype(np.float64),
        "fortran": np.asfortranarray(X32),
        "strided": np.repeat(X32, 2, axis=1)[:, ::2],
        "big-endian": X32.astype(">f4"),
        "list": X32.tolist(),
    }
    for name, X in variants.items():
        got = ctxprune.select(X, q16.astype(np.float64), "dpp", k=9, engine=CPU)
        assert got.indices.tolist() == want.indices.tolist(), name
        np.testing.assert_array_equal(got.gains, want.gains, err_msg=name)
    # The caller's array is never written (the pool normalises its own copy).
    before = X32.copy()
    ctxprune.Pool(X32, engine=CPU)
    np.testing.assert_array_equal(X32, before)


def test_a_pool_is_reused_across_selectors_and_threads(rng):
    X, q, costs = problem(rng, 301, 19)
    pool = ctxprune.Pool(X, engine=CPU)
    assert (len(pool), pool.dim, pool.on_device, pool.storage) == (301, 19, False, "f32")
    mmr = ctxprune.Selector("mmr", k=8, engine=CPU)
    want = ctxprune.select(X, q, "mmr", k=8, engine=CPU)
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(4) as ex:
        outs = list(ex.map(lambda _: mmr.select(pool, q), range(16)))
    for o in outs:
        assert o.indices.tolist() == want.indices.tolist()
        np.testing.assert_array_equal(o.gains, want.gains)


@pytest.mark.parametrize("unit", [False, True], ids=["raw rows", "unit rows"])
@pytest.mark.parametrize("method", ["mmr", "grn", "centroid", "dpp", "coverage", "hybrid"])
def test_a_borrowed_array_selects_as_a_pool_of_it_bit_for_bit(rng, method, unit):
    X, q, costs = problem(rng, 157, 29)
    X = X.astype(np.float32)
    if unit:  # selected from where they are (norms within 2**-8 of 1); else a unit copy
        X = (X / np.linalg.norm(X, axis=1, keepdims=True)).astype(np.float32)
    assert X.flags.c_contiguous  # borrowed: read in place, not copied
    before = X.copy()
    kw = dict(k=9, threshold=-5.0) if method == "hybrid" else dict(k=9)
    s = ctxprune.Selector(method, engine=CPU, **kw)
    query = None if method in ("grn", "centroid") else q
    got = s.select(X, query, costs=costs)
    want = s.select(ctxprune.Pool(X, engine=CPU), query, costs=costs)
    assert got.indices.tolist() == want.indices.tolist()
    assert got.gains.tobytes() == want.gains.tobytes()
    np.testing.assert_array_equal(X, before)  # the caller's array is never written


def test_select_many_equals_one_select_per_query(rng):
    X, _, costs = problem(rng, 233, 17)
    pool = ctxprune.Pool(X, engine=CPU)
    Q = np.stack([problem(rng, 5, 17)[1] for _ in range(7)]).astype(np.float32)
    for method, kw in [("mmr", dict(k=8)), ("dpp", dict(k=6)), ("coverage", dict(token_budget=900.0))]:
        s = ctxprune.Selector(method, engine=CPU, **kw)
        c = costs if "token_budget" in kw else None
        many = s.select_many(pool, Q, costs=c, retained=[3])
        assert len(many) == len(Q)
        for q, got in zip(Q, many):
            want = s.select(pool, q, costs=c, retained=[3])
            assert got.indices.tolist() == want.indices.tolist(), method
            assert got.gains.tobytes() == want.gains.tobytes(), method
    s = ctxprune.Selector("mmr", k=3, engine=CPU)
    bad = Q.copy()
    bad[4] = 0.0
    with pytest.raises(ctxprune.InvalidInputError, match=r"queries\[4\]"):
        s.select_many(pool, bad)
    with pytest.raises(ctxprune.InvalidInputError, match="queries"):
        s.select_many(pool, Q[:, :5])
    with pytest.raises(ctxprune.InvalidInputError, match="Pool"):
        s.select_many(X, Q)
    with pytest.raises(ctxprune.InvalidInputError, match="2-D"):
        s.select_many(pool, Q[0])


def test_engine_reports_its_backend():
    e = ctxprune.Engine("cpu")
    assert e.backend == "cpu" and e.fallback_reason is None and e.device is None
    auto = ctxprune.default_engine()
    assert auto is ctxprune.default_engine()
    assert auto.backend in ("cpu", "cuda")
    if auto.backend == "cpu" and "CTXPRUNE_BACKEND" not in __import__("os").environ:
        assert auto.fallback_reason  # auto says why it runs on the CPU
