"""ctxprune.langchain.maximal_marginal_relevance against LangChain's own (installed from
PyPI): the same picks in the same order on seeded inputs, k = 1..50."""

from __future__ import annotations

import numpy as np
import pytest

from ctxprune_rs.langchain import maximal_marginal_relevance

lc = pytest.importorskip("langchain_core.vectorstores.utils").maximal_marginal_relevance


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("lam", [0.0, 0.3, 0.5, 0.77, 1.0])
def test_same_picks_as_langchain(seed, lam):
    rng = np.random.default_rng(seed)
    n, d = [(137, 31), (203, 64), (61, 9), (90, 384)][seed]
    centres = rng.standard_normal((9, d))
    X = (centres[rng.integers(0, 9, n)] + 0.5 * rng.standard_normal((n, d))).astype(np.float32)
    q = (centres[1] + 0.2 * rng.standard_normal(d)).astype(np.float32)
    for k in range(1, 51):
        want = lc(q, X, lambda_mult=lam, k=k)
        got = maximal_marginal_relevance(q, X, lambda_mult=lam, k=k)
        assert got == list(want), f"k={k}"
        assert all(type(i) is int for i in got)


def test_langchain_conventions():
    rng = np.random.default_rng(9)
    X = rng.standard_normal((12, 5))
    q = rng.standard_normal(5)
    # Lists of lists, a 1 x d query, k beyond the list, k <= 0: as LangChain.
    assert maximal_marginal_relevance(q[None, :], X.tolist(), k=30) == list(lc(q[None, :], X.tolist(), k=30))
    assert maximal_marginal_relevance(q, X, k=0) == list(lc(q, X, k=0)) == []
    assert maximal_marginal_relevance(q, [], k=3) == list(lc(q, [], k=3)) == []
