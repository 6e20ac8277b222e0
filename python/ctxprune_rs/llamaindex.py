"""ctxprune in LlamaIndex (`pip install "ctxprune-rs[llamaindex]"`): node postprocessors
for a query engine's `node_postprocessors`, or on their own.

- `CtxpruneNodeSelector`: marginal-value selection of the retrieved nodes (MMR, DPP,
  facility location per token, hybrid, GRN, centroid drift, lexical) under an item and/or
  token budget; each returned `NodeWithScore.score` is the node's gain.
- `CtxpruneNodeRerank`: a cross-encoder called at most `budget` times for the best
  `top_n` (BoundaryMORPH); each returned score is the oracle's score in [0, 1] (NaN for a
  node the GP ranked without scoring it).
- `CtxpruneMaskedMemory`: any `BaseMemory` (an agent's memory) whose `get()` / `aget()`
  mask stale tool observations (`ctxprune_rs.MaskSession`'s options); the stored history
  (`get_all()`, `put()`) stays whole.

    from ctxprune_rs.llamaindex import CtxpruneNodeSelector
    engine = index.as_query_engine(similarity_top_k=50,
                                   node_postprocessors=[CtxpruneNodeSelector(method="dpp", k=8)])

Vectors: each node's `embedding` when every node has one, else `embed_model` (any
LlamaIndex `BaseEmbedding`: `get_text_embedding_batch`, once per call), else `model` (a
sentence-transformers directory embedded by the crate's own encoder). The query's vector
is in the same space: with the nodes' own embeddings, the `QueryBundle`'s `embedding`
(the retriever's) when set; with this component's embedder, the query through it. Importing this module
imports llama-index-core.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle

from . import _integrate as core
from ._errors import InvalidInputError

__all__ = ["CtxpruneNodeSelector", "CtxpruneNodeRerank", "CtxpruneMaskedMemory"]


def __getattr__(name: str) -> Any:
    # The memory imports LlamaIndex's memory module: imported on first use.
    if name == "CtxpruneMaskedMemory":
        from . import _llamaindex_memory

        return _llamaindex_memory.CtxpruneMaskedMemory
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class _Nodes(BaseNodePostprocessor):
    embed_model: Optional[BaseEmbedding] = Field(default=None, description="A LlamaIndex embedding model.")
    model: Optional[Any] = Field(default=None, description="Instead: a sentence-transformers directory (the crate's encoder).")
    cache_size: int = Field(default=0, description="Vectors of the last cache_size texts embedded, kept.")
    engine: Optional[Any] = Field(default=None, description="A ctxprune_rs.Engine (the module's default when None).", exclude=True)

    _cache: Any = PrivateAttr(default=None)

    def _embedders(self):
        return core.embedders(self.embed_model, "get_text_embedding_batch", "get_query_embedding", self.model,
                              "embed_model or model")

    def _vectors(self, nodes: List[NodeWithScore], texts: List[str]):
        """(the nodes' vectors, whether they are the nodes' own)."""
        embs = [n.node.embedding for n in nodes]
        if all(e is not None for e in embs):
            return core.vectors(embs, "nodes' embedding"), True
        embed_many, _, salt = self._embedders()
        if embed_many is None:
            i = next(i for i, e in enumerate(embs) if e is None)
            raise InvalidInputError(f"invalid nodes[{i}]: no embedding, and no embed_model or model to embed it")
        if self.cache_size and self._cache is None:
            self._cache = core.VectorCache(self.cache_size)
        return core.embed_cached(texts, embed_many, self._cache, salt), False

    def _query_vector(self, query_bundle: Optional[QueryBundle], own: bool) -> Optional[np.ndarray]:
        """The query's vector in the nodes' space: the bundle's own embedding (the
        retriever's) goes with the nodes' own embeddings; vectors from this component's
        embedder go with the query through the same embedder."""
        if query_bundle is None:
            return None
        if own and query_bundle.embedding is not None:
            return np.asarray(query_bundle.embedding, dtype=np.float32)
        _, embed_query, _ = self._embedders()
        if embed_query is None:
            raise InvalidInputError("invalid query_bundle: no embedding, and no embed_model or model to embed the query")
        return np.asarray(embed_query(query_bundle.query_str), dtype=np.float32)


class CtxpruneNodeSelector(_Nodes):
    """Marginal-value selection of nodes; see the module's documentation."""

    method: str = Field(default="mmr", description="mmr, dpp, coverage, hybrid, grn, centroid or lexical.")
    k: Optional[int] = Field(default=None, description="At most this many nodes.")
    token_budget: Optional[float] = Field(default=None, description="At most this many tokens in all.")
    lambda_: Optional[float] = Field(default=None, description="MMR's relevance weight in [0, 1].")
    threshold: Optional[float] = Field(default=None, description="Stop below this gain.")
    preset: Optional[str] = Field(default=None, description='"paper": the paper\'s operating point.')
    weights: Optional[List[float]] = Field(default=None, description="hybrid or lexical weights.")
    tokenizer: Optional[str] = Field(default="o200k_base", description="The crate's token counter.")
    tokens_key: Optional[str] = Field(default=None, description="Read token counts from node.metadata[tokens_key].")

    _sel: Any = PrivateAttr(default=None)

    @classmethod
    def class_name(cls) -> str:
        return "CtxpruneNodeSelector"

    def _postprocess_nodes(self, nodes: List[NodeWithScore],
                           query_bundle: Optional[QueryBundle] = None) -> List[NodeWithScore]:
        if self._sel is None:
            self._sel = core.DocSelection(self.method, self.k, self.token_budget, self.lambda_, self.threshold,
                                          self.preset, self.weights, self.tokenizer, self.engine)
        sel = self._sel
        if not nodes:
            return []
        texts = [n.node.get_content(metadata_mode=MetadataMode.NONE) for n in nodes]
        given = None if self.tokens_key is None else [n.node.metadata.get(self.tokens_key) for n in nodes]
        X = q = None
        if sel.method != "lexical":
            X, own = self._vectors(nodes, texts)
            if sel.reads_query:
                q = self._query_vector(query_bundle, own)
        query = None if query_bundle is None else query_bundle.query_str
        picks = sel.choose(texts, X, q, query, given)
        return [NodeWithScore(node=nodes[i].node, score=g) for i, g in zip(picks.indices, picks.scores)]


class CtxpruneNodeRerank(_Nodes):
    """A cross-encoder called at most `budget` times for the best `top_n` nodes;
    `cross_encoder(query, texts) -> raw scores`, mapped into [0, 1] by `score_map`
    ("sigmoid", "identity" or a function of one score). See the module's documentation."""

    cross_encoder: Callable[[str, List[str]], Sequence[float]] = Field(description="(query, texts) -> raw scores.", exclude=True)
    budget: int = Field(description="At most this many nodes sent to the cross-encoder.")
    top_n: int = Field(default=3, description="Nodes returned.")
    method: str = Field(default="boundary-morph", description="boundary-morph, bagel, single-stage, rgs, rgs-simple, auto.")
    batch: Optional[int] = Field(default=None, description="Nodes per cross-encoder call.")
    score_map: Any = Field(default="sigmoid", description="sigmoid, identity, or a function of one score.", exclude=True)
    options: Dict[str, Any] = Field(default_factory=dict, description="Other ctxprune_rs.Reranker options.")

    _rr: Any = PrivateAttr(default=None)

    @classmethod
    def class_name(cls) -> str:
        return "CtxpruneNodeRerank"

    def _postprocess_nodes(self, nodes: List[NodeWithScore],
                           query_bundle: Optional[QueryBundle] = None) -> List[NodeWithScore]:
        if self._rr is None:
            self._rr = core.DocRerank(self.budget, self.top_n, self.method, self.batch, self.score_map,
                                      self.options, self.engine)
        if not callable(self.cross_encoder):
            raise InvalidInputError("invalid cross_encoder: expected a function (query, texts) -> scores")
        if query_bundle is None:
            raise InvalidInputError("invalid query_bundle: the rerank needs the query")
        if not nodes:
            return []
        texts = [n.node.get_content(metadata_mode=MetadataMode.NONE) for n in nodes]
        X, own = self._vectors(nodes, texts)
        q = self._query_vector(query_bundle, own)
        picks = self._rr.run(texts, X, q, query_bundle.query_str, self.cross_encoder)
        return [NodeWithScore(node=nodes[i].node, score=s) for i, s in zip(picks.indices, picks.scores)]
