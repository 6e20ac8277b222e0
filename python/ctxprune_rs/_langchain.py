"""The LangChain document compressors (imported by `ctxprune_rs.langchain` on first use,
so `import ctxprune_rs` never imports LangChain)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Callable, Dict, List, Optional, Union

import numpy as np
from langchain_core.callbacks import Callbacks
from langchain_core.cross_encoders import BaseCrossEncoder
from langchain_core.documents import BaseDocumentCompressor, Document
from langchain_core.embeddings import Embeddings
from pydantic import ConfigDict, Field, PrivateAttr

from . import _integrate as core
from ._errors import InvalidInputError

__all__ = ["CtxpruneCompressor", "CtxpruneRerank"]


class _Docs(BaseDocumentCompressor):
    """Where a LangChain document's vector and tokens come from (shared by both
    compressors)."""

    embeddings: Optional[Embeddings] = None
    """A LangChain `Embeddings`: the documents are embedded with `embed_documents` (once
    per call, in one batch; `aembed_documents` in `acompress_documents`), the query with
    `embed_query`."""
    model: Optional[Any] = None
    """Instead of `embeddings`: a sentence-transformers directory (or a
    `ctxprune_rs.Encoder`) embedded by the crate's own encoder (no torch)."""
    embedding_key: Optional[str] = None
    """Read each document's vector from `metadata[embedding_key]` instead (the query still
    needs `embeddings` or `model` when the method reads it)."""
    cache_size: int = 0
    """Keep the vectors of the last `cache_size` documents embedded (by the SHA-256 of their
    text), so a document retrieved again is not embedded again. 0: no cache."""
    engine: Optional[Any] = None
    """A `ctxprune_rs.Engine` (the module's default when None)."""
    metadata_prefix: str = "ctxprune_"
    """Prefix of the metadata keys written into each returned document."""

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    _cache: Any = PrivateAttr(default=None)

    def _vector_cache(self) -> Optional[core.VectorCache]:
        if self.cache_size and self._cache is None:
            self._cache = core.VectorCache(self.cache_size)
        return self._cache

    def _embedder(self):
        return core.embedders(self.embeddings, "embed_documents", "embed_query", self.model, "embeddings or model")

    def _doc_vectors(self, docs: List[Document], texts: List[str], embed_many) -> np.ndarray:
        if self.embedding_key is not None:
            key = self.embedding_key
            return core.vectors([d.metadata.get(key) for d in docs], f"metadata[{key!r}] of documents")
        if embed_many is None:
            raise InvalidInputError("invalid embeddings: give embeddings (a LangChain Embeddings), model, or embedding_key")
        _, _, salt = self._embedder()
        return core.embed_cached(texts, embed_many, self._vector_cache(), salt)

    def _out(self, docs: List[Document], picks: core.Picks, extra: Dict[str, Any]) -> List[Document]:
        p = self.metadata_prefix
        return [Document(page_content=docs[i].page_content, id=docs[i].id,
                         metadata=core.result_meta(docs[i].metadata, picks, rank, p, extra))
                for rank, i in enumerate(picks.indices)]


class CtxpruneCompressor(_Docs):
    """Marginal-value selection of retrieved documents (MMR, DPP, facility location per
    token, hybrid, GRN, centroid drift, lexical MMR) with an item and/or token budget, as
    a LangChain document compressor: use it in `ContextualCompressionRetriever` or a
    `DocumentCompressorPipeline`.

        from ctxprune_rs.langchain import CtxpruneCompressor
        compressor = CtxpruneCompressor(embeddings=emb, method="dpp", k=8, token_budget=3000)
        docs = compressor.compress_documents(retrieved, "my question")

    The documents come back in pick order, as new `Document`s (the inputs are not changed),
    each with `ctxprune_rank`, `ctxprune_gain` and `ctxprune_tokens` in its metadata. The
    picks are `ctxprune_rs.select`'s on the same vectors, in the same order."""

    method: str = "mmr"
    """mmr, dpp, coverage, hybrid, grn, centroid or lexical."""
    k: Optional[int] = None
    """At most this many documents."""
    token_budget: Optional[float] = None
    """At most this many tokens in all (counted with `tokenizer`, or read from
    `metadata[tokens_key]`)."""
    lambda_: Optional[float] = None
    """MMR's relevance weight in [0, 1] (the crate's default when None)."""
    threshold: Optional[float] = None
    """Stop below this gain (tau)."""
    preset: Optional[str] = None
    """"paper": the paper's operating point for every option not given."""
    weights: Optional[List[float]] = None
    """hybrid (alpha, beta, gamma) or lexical (w_tfidf, w_jaccard)."""
    tokenizer: Optional[str] = "o200k_base"
    """The crate's exact token counter: o200k_base, cl100k_base, approx, or a HuggingFace
    tokenizer.json path; None to count nothing (then a budget needs `tokens_key`)."""
    tokens_key: Optional[str] = None
    """Read each document's token count from `metadata[tokens_key]` (counted where
    missing)."""

    _sel: Any = PrivateAttr(default=None)

    def _selection(self) -> core.DocSelection:
        if self._sel is None:
            self._sel = core.DocSelection(self.method, self.k, self.token_budget, self.lambda_, self.threshold,
                                          self.preset, self.weights, self.tokenizer, self.engine)
        return self._sel

    def _prepare(self, documents: Sequence[Document]):
        docs = list(documents)
        sel = self._selection()
        texts = [d.page_content for d in docs]
        given = None if self.tokens_key is None else [d.metadata.get(self.tokens_key) for d in docs]
        return docs, sel, texts, given

    def _finish(self, docs, sel, texts, given, X, q, query) -> List[Document]:
        picks = sel.choose(texts, X, q, query, given)
        return self._out(docs, picks, {"method": self.method})

    def compress_documents(self, documents: Sequence[Document], query: str,
                           callbacks: Callbacks = None) -> Sequence[Document]:
        """The chosen documents, in pick order."""
        docs, sel, texts, given = self._prepare(documents)
        if not docs:
            return []
        X = q = None
        if sel.method != "lexical":
            embed_many, embed_query, _ = self._embedder()
            X = self._doc_vectors(docs, texts, embed_many)
            if sel.reads_query and embed_query is not None:
                q = np.asarray(embed_query(query), dtype=np.float32)
        return self._finish(docs, sel, texts, given, X, q, query)

    async def acompress_documents(self, documents: Sequence[Document], query: str,
                                  callbacks: Callbacks = None) -> Sequence[Document]:
        """`compress_documents` for async pipelines: LangChain embeddings through their
        async methods, the selection (which releases the GIL) in a worker thread, so the
        event loop is never blocked."""
        docs, sel, texts, given = self._prepare(documents)
        if not docs:
            return []
        X = q = None
        if sel.method != "lexical":
            if self.embeddings is not None and self.embedding_key is None:
                e = self.embeddings
                X = await core.aembed_cached(texts, e.aembed_documents, self._vector_cache(), core.model_salt(e))
                if sel.reads_query:
                    q = np.asarray(await e.aembed_query(query), dtype=np.float32)
            else:
                embed_many, embed_query, _ = self._embedder()
                X = await asyncio.to_thread(self._doc_vectors, docs, texts, embed_many)
                if sel.reads_query and embed_query is not None:
                    q = np.asarray(await asyncio.to_thread(embed_query, query), dtype=np.float32)
        return await asyncio.to_thread(self._finish, docs, sel, texts, given, X, q, query)


CrossEncoderLike = Union[BaseCrossEncoder, Callable[[str, List[str]], Sequence[float]]]


def _scorer(ce: Any) -> Callable[[str, List[str]], Sequence[float]]:
    if isinstance(ce, BaseCrossEncoder):
        return lambda query, texts: ce.score([(query, t) for t in texts])
    if callable(ce):
        return ce
    raise InvalidInputError(
        f"invalid cross_encoder: expected a BaseCrossEncoder or a function (query, texts) -> scores, "
        f"got {type(ce).__name__}"
    )


class CtxpruneRerank(_Docs):
    """A cross-encoder called at most `budget` times to return the best `top_n` documents
    (BoundaryMORPH: a Gaussian process over the documents' embeddings decides which to
    score; or BAGEL, single-stage, RGS), as a LangChain document compressor.

        from ctxprune_rs.langchain import CtxpruneRerank
        rerank = CtxpruneRerank(cross_encoder=HuggingFaceCrossEncoder(...), embeddings=emb,
                                budget=30, top_n=5)

    `cross_encoder`: a LangChain `BaseCrossEncoder` (its `score(pairs)`) or any function
    `(query, texts) -> scores`. Raw scores are mapped into [0, 1] by `score_map`:
    "sigmoid" (default: logits, as ms-marco cross-encoders return), "identity" (already
    probabilities), or a function of one score. The documents come back best first, each
    with `ctxprune_rank`, `ctxprune_score` (the mapped oracle score; NaN for a document the
    GP ranked without scoring it), `ctxprune_scored` and `ctxprune_oracle_calls` (documents
    sent to the cross-encoder in this call). The top-k and scores are `ctxprune_rs.rerank`'s
    on the same vectors and scores."""

    cross_encoder: Any
    budget: int
    """At most this many documents sent to the cross-encoder."""
    top_n: int = 3
    """Documents returned (the rerank's capacity)."""
    method: str = "boundary-morph"
    """boundary-morph, bagel, single-stage, rgs, rgs-simple or auto."""
    batch: Optional[int] = None
    """Documents per cross-encoder call (boundary-morph and bagel; 1 by default)."""
    score_map: Any = "sigmoid"
    options: Dict[str, Any] = Field(default_factory=dict)
    """Other `ctxprune_rs.Reranker` options (kernel, prior, acquisition, ...)."""

    _rr: Any = PrivateAttr(default=None)

    def _rerank(self) -> core.DocRerank:
        if self._rr is None:
            self._rr = core.DocRerank(self.budget, self.top_n, self.method, self.batch, self.score_map,
                                      self.options, self.engine)
        return self._rr

    def compress_documents(self, documents: Sequence[Document], query: str,
                           callbacks: Callbacks = None) -> Sequence[Document]:
        """The best `top_n` documents, best first."""
        docs = list(documents)
        rr = self._rerank()
        score = _scorer(self.cross_encoder)
        if not docs:
            return []
        texts = [d.page_content for d in docs]
        embed_many, embed_query, _ = self._embedder()
        X = self._doc_vectors(docs, texts, embed_many)
        if embed_query is None:
            raise InvalidInputError("invalid embeddings: the rerank needs the query's embedding (embeddings or model)")
        q = np.asarray(embed_query(query), dtype=np.float32)
        picks = rr.run(texts, X, q, query, score)
        return self._out(docs, picks, {"oracle_calls": picks.oracle_calls})
