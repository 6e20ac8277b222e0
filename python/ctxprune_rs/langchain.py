"""ctxprune in LangChain (`pip install "ctxprune-rs[langchain]"`):

- `CtxpruneCompressor`: marginal-value selection of retrieved documents (MMR, DPP,
  facility location per token, hybrid, GRN, centroid drift, lexical) under an item and/or
  token budget, as a document compressor (`ContextualCompressionRetriever`,
  `DocumentCompressorPipeline`);
- `CtxpruneRerank`: a cross-encoder called at most `budget` times for the best `top_n`
  (BoundaryMORPH), as a document compressor;
- `maximal_marginal_relevance`: a drop-in for LangChain's
  (`langchain_core.vectorstores.utils`): the same signature, the same picks in the same
  order, the same result (a list of row indices), computed by ctxprune's MMR;
- observation masking in agents (`pip install langchain`): `CtxpruneMaskEdit` (a
  `ContextEdit` for `ContextEditingMiddleware`), `CtxpruneMaskMiddleware` (an
  `AgentMiddleware` for `create_agent`) and `ctxprune_pre_model_hook` /
  `CtxpruneMaskHook` (LangGraph's `create_react_agent(pre_model_hook=...)`): the model
  sees stale tool observations masked, the agent's state keeps them whole.

    from ctxprune_rs.langchain import maximal_marginal_relevance
    idx = maximal_marginal_relevance(query_embedding, embedding_list, lambda_mult=0.5, k=4)

The compressors import langchain-core when first used (`from ctxprune_rs.langchain
import CtxpruneCompressor`); the drop-in needs only numpy.

LangChain's convention, kept here: the first pick is the row most similar to the query
(for any `lambda_mult`), each next one maximises
`lambda_mult * cos(q, x) - (1 - lambda_mult) * max_{s picked} cos(x, s)`, ties go to the
lower index, and `k` larger than the list returns every row (`k <= 0`: none). Unlike
LangChain, a zero or non-finite row is an error (`InvalidInputError`), not a similarity
of 0.
"""

from __future__ import annotations

from typing import Any, List, Optional

import numpy as np

from . import Engine, select
from ._arrays import floats

__all__ = [
    "maximal_marginal_relevance", "CtxpruneCompressor", "CtxpruneRerank",
    "CtxpruneMaskEdit", "CtxpruneMaskMiddleware", "CtxpruneMaskHook", "ctxprune_pre_model_hook",
]
_AGENTS = ("CtxpruneMaskEdit", "CtxpruneMaskMiddleware", "CtxpruneMaskHook", "ctxprune_pre_model_hook")


def __getattr__(name: str) -> Any:
    # The compressors subclass LangChain's classes: LangChain is imported on first use.
    if name in ("CtxpruneCompressor", "CtxpruneRerank"):
        from . import _langchain

        return getattr(_langchain, name)
    if name in _AGENTS:  # the agent adapters import LangChain on first use too
        from . import _langchain_agents

        return getattr(_langchain_agents, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def maximal_marginal_relevance(
    query_embedding: Any,
    embedding_list: Any,
    lambda_mult: float = 0.5,
    k: int = 4,
    *,
    engine: Optional[Engine] = None,
) -> List[int]:
    """Indices of `k` rows of `embedding_list` chosen by maximal marginal relevance to
    `query_embedding` (1-D, or 1 x d as LangChain accepts)."""
    rows = np.asarray(embedding_list) if not isinstance(embedding_list, np.ndarray) else embedding_list
    n = 0 if rows.size == 0 else len(rows)
    if min(k, n) <= 0:
        return []
    q = query_embedding if isinstance(query_embedding, np.ndarray) else np.asarray(query_embedding, dtype=np.float64)
    if q.ndim == 2 and q.shape[0] == 1:
        q = q[0]
    X = floats(rows, "embedding_list", 2)
    q = floats(q, "query_embedding", 1)
    # The array is selected from twice where it is (unit rows, as embedding models return
    # them, are read in place; others are normalised into a per-thread scratch copy), not
    # copied into a Pool: a fresh copy of a large array costs more than the two reads.
    # The first pick: the most similar row, which ctxprune's MMR with lambda = 1 is.
    first = int(select(X, q, "mmr", k=1, lambda_=1.0, engine=engine).indices[0])
    if k == 1 or n == 1:
        return [first]
    rest = select(X, q, "mmr", k=min(k, n) - 1, lambda_=float(lambda_mult), retained=[first], engine=engine)
    return [first] + rest.indices.tolist()
