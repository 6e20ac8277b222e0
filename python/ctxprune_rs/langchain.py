"""Drop-in for LangChain's `maximal_marginal_relevance`
(`langchain_core.vectorstores.utils`): the same signature, the same picks in the same
order, the same result (a list of row indices), computed by ctxprune's MMR.

    from ctxprune_rs.langchain import maximal_marginal_relevance
    idx = maximal_marginal_relevance(query_embedding, embedding_list, lambda_mult=0.5, k=4)

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

from . import Engine, Pool, select
from ._arrays import floats

__all__ = ["maximal_marginal_relevance"]


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
    pool = Pool(X, engine=engine)
    # The first pick: the most similar row, which ctxprune's MMR with lambda = 1 is.
    first = int(select(pool, q, "mmr", k=1, lambda_=1.0).indices[0])
    if k == 1 or n == 1:
        return [first]
    rest = select(pool, q, "mmr", k=min(k, n) - 1, lambda_=float(lambda_mult), retained=[first])
    return [first] + rest.indices.tolist()
