"""What every framework integration shares, written once: documents as (text, vector,
tokens) in, ctxprune's selection or budgeted rerank, and the picks and their numbers out.
Each framework module (`langchain`, `llamaindex`, `haystack`) only says where its
documents keep their text, vectors and token counts, and how it wraps results.
"""

from __future__ import annotations

import hashlib
import math
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np

from . import _native
from ._errors import InvalidInputError

SELECT_METHODS = ("mmr", "grn", "centroid", "dpp", "coverage", "hybrid", "lexical")
RERANK_METHODS = ("boundary-morph", "bagel", "single-stage", "rgs", "rgs-simple", "auto")
# Methods that read the query: MMR, DPP, hybrid need it; coverage weighs by it when
# given; GRN and centroid drift never read it (SPEC: they look at the documents alone).
QUERY_METHODS = ("mmr", "dpp", "hybrid", "coverage")


class VectorCache:
    """The last `size` document vectors, keyed by the SHA-256 of the text and the
    embedder (so a document embedded once is not embedded again by the next call)."""

    def __init__(self, size: int):
        self.size = size
        self._d: "OrderedDict[bytes, np.ndarray]" = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def key(text: str, salt: str) -> bytes:
        return hashlib.sha256(salt.encode() + b"\0" + text.encode()).digest()

    def get(self, k: bytes) -> Optional[np.ndarray]:
        with self._lock:
            v = self._d.get(k)
            if v is not None:
                self._d.move_to_end(k)
            return v

    def put(self, k: bytes, v: np.ndarray) -> None:
        if self.size <= 0:
            return
        with self._lock:
            self._d[k] = v
            self._d.move_to_end(k)
            while len(self._d) > self.size:
                self._d.popitem(last=False)

    def __len__(self) -> int:
        return len(self._d)

    def __getstate__(self):
        return {"size": self.size, "items": list(self._d.items())}

    def __setstate__(self, st):
        self.size = st["size"]
        self._d = OrderedDict(st["items"])
        self._lock = threading.Lock()


def vectors(rows: Sequence[Any], what: str) -> np.ndarray:
    """Per-document vectors (lists or arrays) as one float32 matrix; a missing or ragged
    one is an InvalidInputError naming the document."""
    # Lists (or tuples) of numbers, as the frameworks hold them: read in one pass by the
    # extension, twice as fast as numpy's conversion of nested lists.
    m = _native.float_rows(rows, what)
    if m is not None:
        return m
    if len(rows) and all(r is not None for r in rows):
        try:
            m = np.asarray(rows, dtype=np.float32)  # one pass when every vector is well formed
            if m.ndim == 2:
                return m
        except (TypeError, ValueError):
            pass
    out = []
    dim = None
    for i, r in enumerate(rows):
        if r is None:
            raise InvalidInputError(f"invalid {what}[{i}]: the document has no embedding")
        a = np.asarray(r, dtype=np.float32)
        if a.ndim != 1:
            raise InvalidInputError(f"invalid {what}[{i}]: expected a vector, got shape {a.shape}")
        if dim is None:
            dim = a.shape[0]
        elif a.shape[0] != dim:
            raise InvalidInputError(f"invalid {what}[{i}]: {a.shape[0]} values, document 0 has {dim}")
        out.append(a)
    if not out:
        raise InvalidInputError(f"invalid {what}: no documents")
    return np.stack(out)


def _cached(texts: List[str], cache: Optional[VectorCache], salt: str):
    """(keys, vectors held, indices missing) of `texts` in `cache`."""
    if cache is None or cache.size <= 0:
        return None, [None] * len(texts), list(range(len(texts)))
    keys = [VectorCache.key(t, salt) for t in texts]
    have = [cache.get(k) for k in keys]
    return keys, have, [i for i, v in enumerate(have) if v is None]


def _fill(have: list, keys: Optional[list], missing: List[int], got: Any, cache: Optional[VectorCache]) -> np.ndarray:
    if not missing:
        return vectors(have, "embeddings")
    got = vectors(list(got), "embeddings")
    if len(got) != len(missing):
        raise InvalidInputError(f"invalid embeddings: {len(got)} vectors for {len(missing)} documents")
    for j, i in enumerate(missing):
        have[i] = got[j]
        if keys is not None and cache is not None:
            cache.put(keys[i], got[j])
    return vectors(have, "embeddings")


def _checked(m: np.ndarray, n: int) -> np.ndarray:
    if len(m) != n:
        raise InvalidInputError(f"invalid embeddings: {len(m)} vectors for {n} documents")
    return m


def embed_cached(texts: List[str], embed_many: Callable[[List[str]], Any], cache: Optional[VectorCache],
                 salt: str) -> np.ndarray:
    """`embed_many` (one call, for the texts the cache does not hold) with the cache."""
    if cache is None or cache.size <= 0:
        return _checked(vectors(list(embed_many(texts)), "embeddings"), len(texts))
    keys, have, missing = _cached(texts, cache, salt)
    got = embed_many([texts[i] for i in missing]) if missing else []
    return _fill(have, keys, missing, got, cache)


async def aembed_cached(texts: List[str], aembed_many: Callable[[List[str]], Any], cache: Optional[VectorCache],
                        salt: str) -> np.ndarray:
    """`embed_cached` with an async `aembed_many`."""
    if cache is None or cache.size <= 0:
        return _checked(vectors(list(await aembed_many(texts)), "embeddings"), len(texts))
    keys, have, missing = _cached(texts, cache, salt)
    got = await aembed_many([texts[i] for i in missing]) if missing else []
    return _fill(have, keys, missing, got, cache)


def check_method(method: str, allowed: Sequence[str], what: str = "method") -> str:
    if method not in allowed:
        raise InvalidInputError(f"invalid {what}: unknown '{method}' ({', '.join(allowed)})")
    return method


@dataclass
class Picks:
    """The chosen documents: `indices` into the documents given, in order (pick order, or
    best first for a rerank); per chosen document its `scores` (gain, or oracle score /
    NaN), `tokens` (or None) and for a rerank whether the oracle `scored` it; and the
    run's `oracle_calls` (rerank)."""

    indices: List[int]
    scores: List[float]
    tokens: Optional[List[int]]
    scored: Optional[List[bool]] = None
    oracle_calls: Optional[int] = None
    result: Any = None


class DocSelection:
    """A selection configuration for documents: a `ctxprune_rs.Selector`, with `k` and/or
    a token budget over counted tokens. Made once per component; thread-safe."""

    def __init__(self, method: str, k: Optional[int], token_budget: Optional[float], lambda_: Optional[float],
                 threshold: Optional[float], preset: Optional[str], weights: Optional[Sequence[float]],
                 tokenizer: Any, engine: Any):
        from . import Selector, token_counter

        check_method(method, SELECT_METHODS)
        if k is None and token_budget is None and threshold is None and method in ("mmr", "lexical", "hybrid"):
            raise InvalidInputError(f"invalid k: {method} ranks every document without k, token_budget or threshold")
        self.method = method
        self.token_budget = token_budget
        self.selector = Selector(method, k=k, token_budget=token_budget, lambda_=lambda_, threshold=threshold,
                                 preset=preset, weights=weights, engine=engine)
        self.counter = None if tokenizer is None else token_counter(tokenizer)

    @property
    def reads_query(self) -> bool:
        return self.method in QUERY_METHODS

    def costs(self, texts: List[str], given: Optional[List[Optional[float]]],
              only: Optional[List[int]] = None) -> Optional[List[float]]:
        """Token counts of `texts` (of the documents `only`, in that order, when given): the
        documents' own where given, else counted; None without a counter or counts."""
        idx = range(len(texts)) if only is None else only
        if given is not None and all(given[i] is not None for i in idx):
            return [float(given[i]) for i in idx]  # type: ignore[arg-type]
        if self.counter is None:
            if self.token_budget is not None:
                raise InvalidInputError("invalid tokenizer: a token_budget needs token counts (a tokenizer or a tokens key)")
            return None
        counted = self.counter.count_many([texts[i] for i in idx])
        if given is None:
            return [float(c) for c in counted]
        return [float(given[i]) if given[i] is not None else float(c) for i, c in zip(idx, counted)]

    def choose(self, texts: List[str], X: Optional[np.ndarray], q: Optional[np.ndarray], query: Optional[str],
               given: Optional[List[Optional[float]]] = None) -> Picks:
        """`run` with the token counts it needs: every document's under a budget (the
        selection reads them), else only the chosen ones' (for the caller's metadata)."""
        if self.token_budget is not None:
            return self.run(texts, X, q, query, self.costs(texts, given))
        picks = self.run(texts, X, q, query, None)
        counts = self.costs(texts, given, picks.indices)
        picks.tokens = None if counts is None else [int(c) for c in counts]
        return picks

    def run(self, texts: List[str], X: Optional[np.ndarray], q: Optional[np.ndarray], query: Optional[str],
            costs: Optional[List[float]]) -> Picks:
        if self.method == "lexical":
            sel = self.selector.select(None, None, costs=costs if self.token_budget is not None else None,
                                       texts=texts, query_text=query or "")
        else:
            if self.reads_query and q is None and self.method != "coverage":
                raise InvalidInputError(f"invalid query: {self.method} needs the query's embedding")
            sel = self.selector.select(X, q if self.reads_query else None,
                                       costs=costs if self.token_budget is not None else None)
        idx = sel.indices.tolist()
        return Picks(
            indices=idx,
            scores=sel.gains.tolist(),
            tokens=None if costs is None else [int(costs[i]) for i in idx],
            result=sel,
        )


class DocRerank:
    """A budgeted top-k configuration for documents: a `ctxprune_rs.Reranker` whose oracle
    is a scorer of (query, texts), its scores mapped into [0, 1] (`text_oracle`)."""

    def __init__(self, budget: int, top_n: int, method: str, batch: Optional[int], score_map: Any,
                 options: Dict[str, Any], engine: Any):
        from . import Reranker
        from .text import _score_map

        check_method(method, RERANK_METHODS)
        _score_map(score_map)  # checked now, not at the first call
        self.score_map = score_map
        self.reranker = Reranker(budget, top_n, method, batch=batch, engine=engine, **options)

    def run(self, texts: List[str], X: np.ndarray, q: np.ndarray, query: str,
            score: Callable[[str, List[str]], Sequence[float]]) -> Picks:
        from .text import text_oracle

        oracle, calls = text_oracle(query, texts, score, self.score_map)
        r = self.reranker.rerank(X, q, oracle)
        got = dict(zip(r.scored.tolist(), r.scores.tolist()))
        idx = r.indices.tolist()
        return Picks(
            indices=idx,
            scores=[got.get(i, math.nan) for i in idx],
            tokens=None,
            scored=[i in got for i in idx],
            oracle_calls=r.oracle_calls,
            result=r,
        )


def result_meta(meta: Dict[str, Any], picks: Picks, rank: int, prefix: str, extra: Dict[str, Any]) -> Dict[str, Any]:
    """A chosen document's metadata: its own, with `<prefix>rank`, its gain (a selection)
    or score and whether it was scored (a rerank), its tokens when counted, and `extra`."""
    out = dict(meta)
    out[prefix + "rank"] = rank
    out[prefix + ("score" if picks.scored is not None else "gain")] = picks.scores[rank]
    if picks.scored is not None:
        out[prefix + "scored"] = picks.scored[rank]
    if picks.tokens is not None:
        out[prefix + "tokens"] = picks.tokens[rank]
    for k, v in extra.items():
        out[prefix + k] = v
    return out


def embedders(framework_model: Any, many: Optional[str], one: Optional[str], model: Any, names: str):
    """`(embed many texts, embed the query, the cache's name for them)`: the framework's
    embedding model (its methods `many` and `one`), or the crate's encoder for `model`, or
    `(None, None, "")` without either; both given is an error naming `names`."""
    if framework_model is not None and model is not None:
        raise InvalidInputError(f"invalid model: give {names}, not both")
    if framework_model is not None:
        return getattr(framework_model, many), getattr(framework_model, one), model_salt(framework_model)
    enc = ctxprune_encoder(model)
    if enc is not None:
        return enc.embed, (lambda q: enc.embed([q])[0]), model_salt(enc)
    return None, None, ""


def model_salt(model: Any) -> str:
    """A name for an embedder in the cache's keys."""
    return f"{type(model).__module__}.{type(model).__qualname__}:{getattr(model, 'model', '') or id(model)}"


def ctxprune_encoder(model: Any):
    """`model` (a sentence-transformers directory or an Encoder) as an Encoder, or None."""
    if model is None:
        return None
    from .text import encoder

    if isinstance(model, (str, os.PathLike)) or type(model).__name__ == "Encoder":
        return encoder(model)
    raise InvalidInputError(f"invalid model: expected a directory path or a ctxprune_rs.Encoder, got {type(model).__name__}")
