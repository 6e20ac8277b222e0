"""Every error class, with the crate's one-line message naming the input at fault; bad
input never crashes the interpreter."""

from __future__ import annotations

import numpy as np
import pytest

import ctxprune_rs as ctxprune
from ctxprune_rs import BackendError, CtxpruneError, FileError, InvalidInputError, OracleError

CPU = ctxprune.Engine("cpu")
X = np.random.default_rng(3).standard_normal((20, 5)).astype(np.float32)


def test_the_hierarchy():
    assert issubclass(InvalidInputError, ValueError) and issubclass(InvalidInputError, CtxpruneError)
    assert issubclass(FileError, OSError) and issubclass(FileError, CtxpruneError)
    assert issubclass(BackendError, CtxpruneError) and issubclass(OracleError, CtxpruneError)


@pytest.mark.parametrize("call,match", [
    (lambda: ctxprune.select(X.astype(np.int64), X[0], k=2, engine=CPU),
     "invalid embeddings: dtype int64 is not float16, float32 or float64; convert with .astype"),
    (lambda: ctxprune.select(X[None], X[0], k=2, engine=CPU), "must be a matrix"),
    (lambda: ctxprune.select(X, X[:2], k=2, engine=CPU), "query"),
    (lambda: ctxprune.select(np.where(np.arange(100).reshape(20, 5) == 17, np.nan, X), X[0], k=2, engine=CPU),
     "row 3"),
    (lambda: ctxprune.select(np.vstack([X, np.zeros((1, 5), np.float32)]), X[0], k=2, engine=CPU), "row 20"),
    (lambda: ctxprune.select(X.astype(np.float64) * 1e39, X[0], k=2, engine=CPU),
     r"embeddings\[0, 0\]: .* does not fit in f32"),
    (lambda: ctxprune.select(X, X[0], "nope", engine=CPU), "unknown method 'nope'"),
    (lambda: ctxprune.select(X, X[0], "grn", k=2, engine=CPU), "query: does not apply to grn"),
    (lambda: ctxprune.select(X, None, "mmr", k=2, engine=CPU), "query"),
    (lambda: ctxprune.select(X, X[0], "mmr", lambda_=1.5, engine=CPU), "lambda"),
    (lambda: ctxprune.select(X, X[0], "mmr", k=2, weights=[1, 2], engine=CPU), "weights: mmr takes no weights"),
    (lambda: ctxprune.select(X, X[0], "mmr", k=2, retained=[-1], engine=CPU), r"retained\[0\]: -1 is negative"),
    (lambda: ctxprune.select(X, X[0], "mmr", k=2, retained=[99], engine=CPU), "99"),
    (lambda: ctxprune.select(X, X[0], "dpp", token_budget=5, costs=[1.0] * 19, engine=CPU), "costs"),
    (lambda: ctxprune.select(X, X[0], "dpp", token_budget=5, costs=[0.0] * 20, engine=CPU), "costs"),
    (lambda: ctxprune.select(X, X[0], "mmr", mode="sideways", engine=CPU), "unknown mode"),
    (lambda: ctxprune.Pool(X, storage="f8", engine=CPU), "unknown storage"),
    (lambda: ctxprune.select(X, X[0], k=-1, engine=CPU), "invalid k: -1 is negative"),
    (lambda: ctxprune.select(X, X[0], k=2**70, engine=CPU), "invalid k: .* is too large"),
    (lambda: ctxprune.select(X, X[0], k="3", engine=CPU), "invalid k: expected a non-negative int"),
    (lambda: ctxprune.rerank(X, X[0], lambda i: [0.5] * len(i), -3, 2, engine=CPU), "budget: -3 is negative"),
    (lambda: ctxprune.mask([], window=-1), "window: -1 is negative"),
    (lambda: ctxprune.cost.plan(-5), "depth: -5 is negative"),
    (lambda: ctxprune.Engine("tpu"), "unknown backend 'tpu'"),
    (lambda: ctxprune.Engine("cpu", device=1), "device: applies to the cuda backend"),
    (lambda: ctxprune.mask([{"role": "tool"}], format="openai"), "message"),
    (lambda: ctxprune.mask("not messages"), "expected a list of message dicts"),
    (lambda: ctxprune.mask([{"x": object()}]), "not JSON"),
    (lambda: ctxprune.mask([], format="xml"), "unknown format 'xml'"),
    (lambda: ctxprune.mask([], step=0), "step"),
    (lambda: ctxprune.mask([], placeholder="{nope}"), "nope"),
    (lambda: ctxprune.count_tokens("x", "gpt-9"), "unknown tokenizer 'gpt-9'"),
    (lambda: ctxprune.cost.etc(1e308, 1e308, 1e308, beta=1e308), "etc"),
    (lambda: ctxprune.cost.plan(0), "depth: must be positive"),
    (lambda: ctxprune.cost.flops(layers=0, hidden=64, ffn=128, q_heads=4), "layers"),
    (lambda: ctxprune.cost.flops({"num_hidden_layers": 2, "hidden_size": 8, "intermediate_size": 16,
                                  "num_attention_heads": 2}, layers=3), "layers: cannot be given with a config"),
    (lambda: ctxprune.cost.flops({"hidden_size": 8}), 'config_json: missing "num_hidden_layers"'),
    (lambda: ctxprune.cost.flops(layers=2, hidden=8, ffn=16, q_heads=2, sliding_layers=1),
     "sliding_layers: needs window"),
])
def test_bad_input_is_an_invalid_input_error(call, match):
    with pytest.raises(ValueError, match=match) as info:
        call()
    assert isinstance(info.value, InvalidInputError), type(info.value)
    assert "\n" not in str(info.value)


def test_a_missing_file_is_a_file_error(tmp_path):
    with pytest.raises(FileError, match="nope.json"):
        ctxprune.cost.flops(tmp_path / "nope.json")


def test_an_unusable_device_is_a_backend_error():
    try:
        e = ctxprune.Engine("cuda")
    except BackendError as err:
        assert "cuda" in str(err)
    else:  # a machine with a GPU
        assert e.backend == "cuda"


def test_half_storage_on_the_cpu_is_a_backend_error():
    with pytest.raises(BackendError, match="f16 pool storage"):
        ctxprune.Pool(X, storage="f16", engine=CPU)
