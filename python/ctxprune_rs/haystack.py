"""ctxprune in Haystack (`pip install "ctxprune-rs[haystack]"`): two components for a
`Pipeline`, serialisable with `to_dict` / `from_dict` (so a pipeline YAML can name them),
and a compactor for an `Agent`.

- `CtxpruneRanker`: marginal-value selection of documents (MMR, DPP, facility location
  per token, hybrid, GRN, centroid drift, lexical) under an item (`top_k`) and/or token
  budget; each returned document's `score` is its gain and its `meta` gets
  `ctxprune_rank`, `ctxprune_gain`, `ctxprune_tokens`.
- `CtxpruneBudgetedRanker`: a scorer (a cross-encoder: `(query, texts) -> raw scores`, an
  importable function so the component serialises) called at most `budget` times for the
  best `top_k` (BoundaryMORPH); `score` is the oracle's score in [0, 1] (NaN for a
  document the GP ranked without scoring it).
- `CtxpruneCompactor`: observation masking (`ctxprune_rs.MaskSession`'s options) as a
  `Compactor` for Haystack's `CompactionHook`: stale tool results of an Agent's
  conversation replaced by a placeholder, each original kept in the message's meta.

    from ctxprune_rs.haystack import CtxpruneRanker
    pipe.add_component("diversify", CtxpruneRanker(method="dpp", top_k=8))
    pipe.connect("retriever.documents", "diversify.documents")
    pipe.connect("text_embedder.embedding", "diversify.query_embedding")

Vectors: each `Document.embedding` (a document embedder's output), else `model` (a
sentence-transformers directory embedded by the crate's own encoder); the query's vector:
the `query_embedding` input (a text embedder's output), else `model`. Importing this
module imports haystack-ai.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, List, Optional

import numpy as np
from haystack import Document, component, default_from_dict, default_to_dict
from haystack.utils import deserialize_callable, serialize_callable

from . import _integrate as core
from ._errors import InvalidInputError

__all__ = ["CtxpruneRanker", "CtxpruneBudgetedRanker", "CtxpruneCompactor"]


def __getattr__(name: str) -> Any:
    # The compactor imports Haystack's agent hooks: imported on first use.
    if name == "CtxpruneCompactor":
        from . import _haystack_agents

        return _haystack_agents.CtxpruneCompactor
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _engine(backend: str):
    from . import Engine, default_engine

    return default_engine() if backend == "default" else Engine(backend)


class _Docs:
    def _vectors(self, documents: List[Document], texts: List[str]) -> np.ndarray:
        embs = [d.embedding for d in documents]
        if all(e is not None for e in embs):
            return core.vectors(embs, "documents' embedding")
        enc = core.ctxprune_encoder(self.model)
        if enc is None:
            i = next(i for i, e in enumerate(embs) if e is None)
            raise InvalidInputError(f"invalid documents[{i}]: no embedding (run a document embedder, or give model)")
        return enc.embed(texts)

    def _query(self, query: Optional[str], query_embedding: Optional[List[float]]) -> Optional[np.ndarray]:
        if query_embedding is not None:
            return np.asarray(query_embedding, dtype=np.float32)
        enc = core.ctxprune_encoder(self.model)
        if enc is None or query is None:
            return None
        return enc.embed([query])[0]

    @staticmethod
    def _texts(documents: List[Document]) -> List[str]:
        for i, d in enumerate(documents):
            if d.content is None:
                raise InvalidInputError(f"invalid documents[{i}]: no text content")
        return [d.content for d in documents]  # type: ignore[misc]

    @staticmethod
    def _out(documents: List[Document], picks: core.Picks, prefix: str, extra: Dict[str, Any]) -> List[Document]:
        return [dataclasses.replace(documents[i], meta=core.result_meta(documents[i].meta, picks, rank, prefix, extra),
                                    score=picks.scores[rank])
                for rank, i in enumerate(picks.indices)]


@component
class CtxpruneRanker(_Docs):
    """Marginal-value selection of documents; see the module's documentation.

    :param method: mmr, dpp, coverage, hybrid, grn, centroid or lexical.
    :param top_k: at most this many documents.
    :param token_budget: at most this many tokens in all (counted with `tokenizer`, or read
        from `meta[tokens_meta_key]`).
    :param lambda_: MMR's relevance weight in [0, 1].
    :param threshold: stop below this gain.
    :param preset: "paper": the paper's operating point for every option not given.
    :param weights: hybrid (alpha, beta, gamma) or lexical (w_tfidf, w_jaccard).
    :param tokenizer: o200k_base, cl100k_base, approx, or a tokenizer.json path.
    :param tokens_meta_key: read each document's token count from its meta.
    :param model: a sentence-transformers directory for documents or a query without
        embeddings.
    :param backend: "default" (the module's engine), "cpu", "cuda" or "auto".
    """

    def __init__(self, method: str = "mmr", top_k: Optional[int] = None, token_budget: Optional[float] = None,
                 lambda_: Optional[float] = None, threshold: Optional[float] = None, preset: Optional[str] = None,
                 weights: Optional[List[float]] = None, tokenizer: Optional[str] = "o200k_base",
                 tokens_meta_key: Optional[str] = None, model: Optional[str] = None, backend: str = "default",
                 meta_prefix: str = "ctxprune_"):
        self.method, self.top_k, self.token_budget = method, top_k, token_budget
        self.lambda_, self.threshold, self.preset, self.weights = lambda_, threshold, preset, weights
        self.tokenizer, self.tokens_meta_key, self.model = tokenizer, tokens_meta_key, model
        self.backend, self.meta_prefix = backend, meta_prefix
        # Checked now: a bad option fails when the pipeline is built, not at its first run.
        self._sel = self._selection(top_k, token_budget)

    def _selection(self, top_k, token_budget) -> core.DocSelection:
        return core.DocSelection(self.method, top_k, token_budget, self.lambda_, self.threshold, self.preset,
                                 self.weights, self.tokenizer, _engine(self.backend))

    def to_dict(self) -> Dict[str, Any]:
        return default_to_dict(
            self, method=self.method, top_k=self.top_k, token_budget=self.token_budget, lambda_=self.lambda_,
            threshold=self.threshold, preset=self.preset, weights=self.weights, tokenizer=self.tokenizer,
            tokens_meta_key=self.tokens_meta_key, model=None if self.model is None else str(self.model),
            backend=self.backend, meta_prefix=self.meta_prefix,
        )

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "CtxpruneRanker":
        return default_from_dict(cls, data)

    @component.output_types(documents=List[Document])
    def run(self, documents: List[Document], query: Optional[str] = None,
            query_embedding: Optional[List[float]] = None, top_k: Optional[int] = None,
            token_budget: Optional[float] = None) -> Dict[str, List[Document]]:
        """The chosen documents, in pick order. `top_k` / `token_budget` override the
        component's for this run."""
        sel = self._sel
        if (top_k is not None and top_k != self.top_k) or (token_budget is not None and token_budget != self.token_budget):
            sel = self._selection(self.top_k if top_k is None else top_k,
                                  self.token_budget if token_budget is None else token_budget)
        if not documents:
            return {"documents": []}
        texts = self._texts(documents)
        given = None if self.tokens_meta_key is None else [d.meta.get(self.tokens_meta_key) for d in documents]
        X = q = None
        if sel.method != "lexical":
            X = self._vectors(documents, texts)
            if sel.reads_query:
                q = self._query(query, query_embedding)
        picks = sel.choose(texts, X, q, query, given)
        return {"documents": self._out(documents, picks, self.meta_prefix, {"method": self.method})}


@component
class CtxpruneBudgetedRanker(_Docs):
    """A scorer called at most `budget` times for the best `top_k` documents; see the
    module's documentation.

    :param scorer: `(query, texts) -> raw scores` (a cross-encoder), an importable function
        (it is serialised by its import path).
    :param budget: at most this many documents scored.
    :param top_k: documents returned.
    :param method: boundary-morph, bagel, single-stage, rgs, rgs-simple or auto.
    :param batch: documents per scorer call.
    :param score_map: "sigmoid" (logits, the default) or "identity" (probabilities).
    :param options: other `ctxprune_rs.Reranker` options (kernel, prior, ...).
    :param model: a sentence-transformers directory for documents or a query without
        embeddings.
    :param backend: "default", "cpu", "cuda" or "auto".
    """

    def __init__(self, scorer: Callable[[str, List[str]], List[float]], budget: int, top_k: int = 3,
                 method: str = "boundary-morph", batch: Optional[int] = None, score_map: str = "sigmoid",
                 options: Optional[Dict[str, Any]] = None, model: Optional[str] = None, backend: str = "default",
                 meta_prefix: str = "ctxprune_"):
        if not callable(scorer):
            raise InvalidInputError(f"invalid scorer: expected a function (query, texts) -> scores, got {type(scorer).__name__}")
        if not isinstance(score_map, str):
            raise InvalidInputError("invalid score_map: a serialisable component takes \"sigmoid\" or \"identity\"")
        self.scorer, self.budget, self.top_k, self.method = scorer, budget, top_k, method
        self.batch, self.score_map, self.options = batch, score_map, dict(options or {})
        self.model, self.backend, self.meta_prefix = model, backend, meta_prefix
        self._rr = core.DocRerank(budget, top_k, method, batch, score_map, self.options, _engine(backend))

    def to_dict(self) -> Dict[str, Any]:
        return default_to_dict(
            self, scorer=serialize_callable(self.scorer), budget=self.budget, top_k=self.top_k, method=self.method,
            batch=self.batch, score_map=self.score_map, options=self.options,
            model=None if self.model is None else str(self.model), backend=self.backend,
            meta_prefix=self.meta_prefix,
        )

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "CtxpruneBudgetedRanker":
        params = data.get("init_parameters", {})
        if isinstance(params.get("scorer"), str):
            params["scorer"] = deserialize_callable(params["scorer"])
        return default_from_dict(cls, data)

    @component.output_types(documents=List[Document])
    def run(self, query: str, documents: List[Document],
            query_embedding: Optional[List[float]] = None) -> Dict[str, List[Document]]:
        """The best `top_k` documents, best first."""
        if not documents:
            return {"documents": []}
        texts = self._texts(documents)
        X = self._vectors(documents, texts)
        q = self._query(query, query_embedding)
        if q is None:
            raise InvalidInputError("invalid query_embedding: the rerank needs the query's embedding (or model)")
        picks = self._rr.run(texts, X, q, query, self.scorer)
        return {"documents": self._out(documents, picks, self.meta_prefix, {"oracle_calls": picks.oracle_calls})}
