"""rerank through the wheel equals the Rust API (the CLI with precomputed scores); the
callable oracle is called in batches, and its exceptions propagate with their traceback."""

from __future__ import annotations

import traceback

import numpy as np
import pytest

import ctxprune_rs as ctxprune
from conftest import cli, problem

CPU = ctxprune.Engine("cpu")


def scores_for(X, q):
    """Oracle scores in [0, 1]: a noisy monotone function of the cosine to the query."""
    c = (X @ q) / (np.linalg.norm(X, axis=1) * np.linalg.norm(q))
    return np.clip(0.5 + 0.45 * c + 0.02 * np.sin(np.arange(len(X))), 0.0, 1.0)


@pytest.mark.parametrize("method,extra", [
    ("boundary-morph", []), ("bagel", []), ("single-stage", []), ("rgs", []),
    ("boundary-morph", ["--prior", "zero", "--acquisition", "ucb", "--beta0", "0.5"]),
    ("boundary-morph", ["--batch", "4"]), ("bagel", ["--batch", "3"]),
    ("boundary-morph", ["--prior", "adaptive"]), ("boundary-morph", ["--prior", "score"]),
    ("boundary-morph", ["--prior", "feedback", "--batch", "3"]),
    ("boundary-morph", ["--prior", "feedback", "--feedback-neighbours", "0.3"]),
    ("boundary-morph", ["--prior", "feedback", "--feedback-neighbours", "1", "--batch", "4"]),
    ("boundary-morph", ["--prior", "score", "--hyperparameters", "evidence", "--batch", "3"]),
    ("rgs", ["--seed-div", "3", "--frac", "0.5", "--graph-degree", "6"]), ("rgs-simple", []),
    ("boundary-morph", ["--row-precision", "bf16"]), ("bagel", ["--row-precision", "f16"]),
    ("boundary-morph", ["--hyperparameters", "evidence"]),
    ("boundary-morph", ["--hyperparameters", "evidence", "--prior", "zero", "--batch", "3"]),
    ("auto", []), ("auto", ["--batch", "3"]),
])
def test_equals_the_rust_api(tmp_path, rng, method, extra):
    X, q, _ = problem(rng, 157, 21)
    s = scores_for(X.astype(np.float64), q.astype(np.float64))
    for name, a in (("x", X), ("q", q), ("s", s)):
        np.save(tmp_path / f"{name}.npy", a)
    want = cli("rerank", "--method", method, "--embeddings", str(tmp_path / "x.npy"),
               "--query", str(tmp_path / "q.npy"), "--oracle-scores", str(tmp_path / "s.npy"),
               "--budget", "31", "--capacity", "7", *extra)
    calls = []

    def oracle(idx):
        assert idx.dtype == np.int64
        calls.append(len(idx))
        return s[idx]

    opts = {}
    it = iter(extra)
    for flag, value in zip(it, it):
        key = flag[2:].replace("-", "_")
        opts[key] = (float(value) if key in ("beta0", "seed_div", "frac", "feedback_neighbours")
                     else int(value) if key in ("batch", "graph_degree") else value)
    got = ctxprune.rerank(X, q, oracle, 31, 7, method, engine=CPU, **opts)
    assert got.indices.tolist() == want["selected"]
    assert got.scored.tolist() == want["scored"]
    np.testing.assert_array_equal(got.scores, want["scores"])
    assert got.oracle_calls == sum(calls) == len(want["scored"]) <= 31
    assert got.oracle_rounds == len(calls) == want["oracle_rounds"]
    assert got.prior_alpha == want["prior_alpha"]
    assert got.kappa == pytest.approx(want["kappa"]) if want["kappa"] is not None else got.kappa is None
    assert got.hyperparameters == want["hyperparameters"]
    if "evidence" in extra:
        # Fitted at 10 and 20 calls: the last fit, in the model's units.
        h = got.hyperparameters
        assert set(h) == {"log_bandwidth", "signal", "noise", "scale", "offset"}
        assert h["signal"] > 0 and h["noise"] >= 1e-4 * h["signal"] * (1 - 1e-12)
        assert 0.0 <= h["scale"] <= 1.0
        assert got.kappa == pytest.approx(np.exp(h["log_bandwidth"]), rel=1e-6)


def test_token_capacity_equals_the_cli(tmp_path, rng):
    X, q, _ = problem(rng, 93, 11)
    s = scores_for(X.astype(np.float64), q.astype(np.float64))
    tokens = (20 + (np.arange(93) * 37) % 400).astype(np.int64)
    for name, a in (("x", X), ("q", q), ("s", s)):
        np.save(tmp_path / f"{name}.npy", a)
    (tmp_path / "t.json").write_text(str(tokens.tolist()))
    want = cli("rerank", "--method", "boundary-morph", "--embeddings", str(tmp_path / "x.npy"),
               "--query", str(tmp_path / "q.npy"), "--oracle-scores", str(tmp_path / "s.npy"),
               "--budget", "25", "--capacity", "93", "--token-capacity", "1500",
               "--tokens", str(tmp_path / "t.json"))
    got = ctxprune.rerank(X, q, lambda i: s[i], 25, 93, engine=CPU, token_capacity=1500, tokens=tokens)
    assert got.indices.tolist() == want["selected"]
    assert got.tokens == want["tokens"] == int(tokens[got.indices].sum()) <= 1500
    with pytest.raises(ctxprune.InvalidInputError, match="token"):
        ctxprune.rerank(X, q, lambda i: s[i], 25, 93, engine=CPU, token_capacity=1500)


class Boom(RuntimeError):
    pass


def test_an_exception_in_the_oracle_propagates_with_its_traceback(rng):
    X, q, _ = problem(rng, 60, 8)

    def failing_oracle(idx):
        raise Boom(f"reranker down after {len(idx)} items")

    with pytest.raises(Boom, match="reranker down") as info:
        ctxprune.rerank(X, q, failing_oracle, 10, 3, engine=CPU)
    frames = [f.name for f in traceback.extract_tb(info.value.__traceback__)]
    assert "failing_oracle" in frames


@pytest.mark.parametrize("answer,match", [
    (lambda idx: [0.5] * (len(idx) + 1), "scores for"),
    (lambda idx: np.full(len(idx), 1.5), "outside \\[0, 1\\]"),
    (lambda idx: "nope", "not a sequence of floats"),
    (lambda idx: [float("nan")] * len(idx), "outside \\[0, 1\\]"),
])
def test_a_bad_oracle_answer_is_an_oracle_error(rng, answer, match):
    X, q, _ = problem(rng, 40, 6)
    with pytest.raises(ctxprune.OracleError, match=match):
        ctxprune.rerank(X, q, answer, 8, 3, engine=CPU)


def test_options_that_do_not_apply_are_errors(rng):
    X, q, _ = problem(rng, 40, 6)
    with pytest.raises(ctxprune.InvalidInputError, match="graph_degree: does not apply to bagel"):
        ctxprune.rerank(X, q, lambda i: [0.5] * len(i), 8, 3, "bagel", graph_degree=4, engine=CPU)
    with pytest.raises(ctxprune.InvalidInputError, match="texts: applies to a URL oracle"):
        ctxprune.rerank(X, q, lambda i: [0.5] * len(i), 8, 3, texts=["a"] * 40, engine=CPU)
    with pytest.raises(ctxprune.InvalidInputError, match="oracle: must be a callable"):
        ctxprune.rerank(X, q, 42, 8, 3, engine=CPU)
    with pytest.raises(ctxprune.InvalidInputError, match="a URL oracle needs the pool's texts"):
        ctxprune.rerank(X, q, "http://127.0.0.1:9/rerank", 8, 3, engine=CPU)
    with pytest.raises(ctxprune.InvalidInputError, match="hyperparameters: does not apply to rgs"):
        ctxprune.Reranker(8, 3, "rgs", hyperparameters="evidence")
    with pytest.raises(ctxprune.InvalidInputError, match=r"unknown hyperparameters 'ml' \(paper, evidence\)"):
        ctxprune.Reranker(8, 3, hyperparameters="ml")
    with pytest.raises(ctxprune.InvalidInputError, match="use it with the mips, zero or score prior"):
        ctxprune.Reranker(8, 3, prior="adaptive", hyperparameters="evidence")
    with pytest.raises(ctxprune.InvalidInputError, match="feedback_neighbours: applies to the feedback prior"):
        ctxprune.Reranker(8, 3, prior="score", feedback_neighbours=0.3)
    with pytest.raises(ctxprune.InvalidInputError, match=r"feedback_neighbours: 1\.5 is outside \[0, 1\]"):
        ctxprune.Reranker(8, 3, prior="feedback", feedback_neighbours=1.5)
    with pytest.raises(ctxprune.InvalidInputError, match="feedback_neighbours: NaN is outside"):
        ctxprune.Reranker(8, 3, prior="feedback", feedback_neighbours=float("nan"))
    with pytest.raises(ctxprune.InvalidInputError, match="feedback_neighbours: does not apply to auto, which chooses it"):
        ctxprune.Reranker(8, 3, "auto", feedback_neighbours=0.3)


def test_an_unreachable_url_oracle_is_an_oracle_error(rng):
    X, q, _ = problem(rng, 30, 6)
    texts = [f"doc {i}" for i in range(30)]
    with pytest.raises(ctxprune.OracleError):
        # Port 9 (discard) on loopback: nothing listens, the connection is refused at once.
        ctxprune.rerank(X, q, "http://127.0.0.1:9/rerank", 6, 3, texts=texts, query_text="q",
                        timeout=2.0, retries=0, engine=CPU)
