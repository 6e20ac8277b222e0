"""ctxprune_rs (distribution `ctxprune-rs`): ctxprune, the Rust crate, in Python. It decides what enters an LLM research agent's context, and does it fast.

Marginal-value selection (MMR, GRN, centroid drift, DPP, coverage per token, hybrid,
lexical), budgeted top-k reranking with a limited oracle (BoundaryMORPH), observation
masking of agent trajectories, and token-cost accounting, on the CPU or a CUDA device.

    import numpy as np, ctxprune_rs
    X = np.random.default_rng(0).standard_normal((1000, 384), dtype=np.float32)
    sel = ctxprune_rs.select(X, query=X[0], method="mmr", k=10)
    sel.indices                     # int64 array, in pick order

Every call that computes releases the GIL, so Python threads run selections in parallel.
Errors are `InvalidInputError` (a ValueError), `FileError` (an OSError), `BackendError`
and `OracleError`, all `CtxpruneError`.
"""

from __future__ import annotations

import copyreg
import json
import os
import threading
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Union

import numpy as np

from . import _native, cost
from ._arrays import count as _count
from ._arrays import floats as _floats
from ._arrays import indices as _indices
from ._arrays import numbers as _numbers
from ._errors import BackendError, CtxpruneError, FileError, InvalidInputError, OracleError
from ._native import DEFAULT_PLACEHOLDER, Engine, Reranked, Selection, TokenCounter
from .text import texts_arg as _texts_arg

_DEFAULT_TOKENIZER = "o200k_base"

__all__ = [
    "Engine", "Pool", "Selector", "Selection", "Reranker", "Reranked", "MaskSession",
    "Encoder", "TokenCounter", "Chosen",
    "select", "rerank", "mask", "count_tokens", "token_counter", "embed", "encoder",
    "select_texts", "rerank_texts", "default_engine", "cost", "attention",
    "CtxpruneError", "InvalidInputError", "FileError", "BackendError", "OracleError",
    "DEFAULT_PLACEHOLDER",
]
__version__ = "0.1.0"

_default: Optional[Engine] = None
_default_lock = threading.Lock()


def default_engine() -> Engine:
    """The module's engine, opened on first use: `CTXPRUNE_BACKEND` (auto, cpu, cuda) or
    auto (CUDA when usable, else the CPU; `.fallback_reason` says why)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Engine(os.environ.get("CTXPRUNE_BACKEND") or "auto")
        return _default


def _engine(engine: Optional[Engine]) -> Engine:
    if engine is None:
        return default_engine()
    if not isinstance(engine, Engine):
        raise InvalidInputError(f"invalid engine: expected a ctxprune_rs.Engine, got {type(engine).__name__}")
    return engine


def _open_engine(backend: str, device: int, cache_dir: Any, cuda_roots: Any) -> Engine:
    return Engine(backend, device=device, cache_dir=cache_dir, cuda_roots=list(cuda_roots))


# An engine pickles as the options it was opened with; the other process opens its own
# (which backend it gets there is that machine's answer, as for `Engine(...)` itself).
copyreg.pickle(Engine, lambda e: (_open_engine, e._options()))


class Pool:
    """Embeddings made resident once: rows checked and copied with their exact inverse
    norms (the array passed in is never written; cosines divide by the norms) and, on a
    CUDA engine, kept on the device. Reuse one pool across any number of selections and
    reranks.

    `embeddings`: an N x d float16, float32 or float64 array (C-contiguous arrays are read
    once, other layouts copied once); `storage`: "f32", or "f16"/"bf16" for a
    half-precision device copy (CUDA only)."""

    def __init__(self, embeddings: Any, *, engine: Optional[Engine] = None, storage: str = "f32"):
        self.engine = _engine(engine)
        self._pool = _native.Pool(self.engine, _floats(embeddings, "embeddings", 2), storage)

    def __len__(self) -> int:
        return len(self._pool)

    @property
    def dim(self) -> int:
        """The embedding dimension."""
        return self._pool.dim

    @property
    def on_device(self) -> bool:
        """Whether the rows are resident on a device."""
        return self._pool.on_device

    @property
    def storage(self) -> str:
        """"f32", "f16" or "bf16"."""
        return self._pool.storage

    def rows(self) -> np.ndarray:
        """A copy of the rows as the pool keeps them (float32): as given, or
        unit-normalised unless every row's norm was within 2**-8 of 1."""
        return self._pool.rows()

    def unit_rows(self) -> np.ndarray:
        """A copy of the rows unit-normalised (float32)."""
        return self._pool.unit_rows()

    def __reduce__(self):
        # The rows as kept, and whether they are the pool's unit copy: the unpickled pool
        # keeps them as they are, marked as they were, so it selects exactly as this one,
        # bit for bit.
        return (_pool_of_rows, (self.rows(), self.engine, self.storage, self._pool._unit))

    def __repr__(self) -> str:
        return repr(self._pool)


def _pool_of_rows(rows: np.ndarray, engine: Engine, storage: str, unit: bool) -> Pool:
    p = Pool.__new__(Pool)
    p.engine = engine
    p._pool = (_native.Pool._from_unit_rows if unit else _native.Pool)(engine, rows, storage)
    return p


def _pool_of_unit_rows(rows: np.ndarray, engine: Engine, storage: str) -> Pool:
    # Pools pickled by earlier versions: their unit rows.
    return _pool_of_rows(rows, engine, storage, True)


def _pool(x: Any, engine: Engine) -> Optional[Pool]:
    if x is None or isinstance(x, Pool):
        return x
    return Pool(x, engine=engine)


class Selector:
    """A selection configuration checked once (ranges, options the method does not read),
    then `select` from any thread, any number of times.

    `method`: "mmr", "grn", "centroid", "dpp", "coverage", "hybrid" or "lexical";
    `mode`: "greedy" (budgeted) or "gate" (keep rows with V >= threshold against
    `retained`); `k` item budget; `token_budget` over `costs`; `lambda_` the MMR / lexical
    trade-off in [0, 1] (default 0.75 for MMR, measured on real text; 0.6 for lexical);
    `threshold` tau (gate defaults, measured: mmr 0.185, grn 0.679, centroid 0.0332, dpp
    0.138, coverage 0.0902, lexical -0.0178; greedy: none); `preset="paper"` the paper's
    operating point (MMR lambda 0.35, its thresholds and item caps) for every option not
    given; `weights` hybrid (alpha, beta, gamma) or lexical (w_tfidf, w_jaccard)."""

    def __init__(
        self,
        method: str = "mmr",
        *,
        mode: str = "greedy",
        k: Optional[int] = None,
        token_budget: Optional[float] = None,
        lambda_: Optional[float] = None,
        threshold: Optional[float] = None,
        preset: Optional[str] = None,
        weights: Optional[Sequence[float]] = None,
        engine: Optional[Engine] = None,
    ):
        self.engine = _engine(engine)
        self._sel = _native.Selector(
            self.engine, method, mode=mode, k=_count(k, "k"), token_budget=token_budget, lambda_=lambda_,
            threshold=threshold, preset=preset,
            weights=None if weights is None else _numbers(weights, "weights"),
        )
        self._args = dict(
            method=method, mode=mode, k=k, token_budget=token_budget, lambda_=lambda_,
            threshold=threshold, preset=preset, weights=None if weights is None else list(weights),
        )

    def __reduce__(self):
        return (_rebuild, (Selector, self._args, self.engine))

    @property
    def method(self) -> str:
        return self._sel.method

    def select(
        self,
        pool: Any = None,
        query: Any = None,
        *,
        costs: Any = None,
        retained: Iterable[int] = (),
        texts: Optional[Sequence[str]] = None,
        query_text: Optional[str] = None,
        model: Any = None,
        tokenizer: Optional[Union[str, "os.PathLike[str]"]] = None,
    ) -> Selection:
        """Selects from `pool` (a Pool or an N x d array).

        `query`: a d-vector: mmr and hybrid need one; dpp and coverage weigh each row by
        its relevance to it when one is given; grn, centroid and lexical do not read it.
        `costs`: each row's token cost (> 0), for `token_budget`; `retained`: rows already
        in the context, in the order they were added.

        Text in: `texts` (one per row) and `query_text` are what lexical reads; with
        `model` (a sentence-transformers directory, or an `Encoder`) they are embedded
        into the pool and the query instead (give no `pool` or `query` then). With a
        `token_budget` and no `costs`, the `texts` are counted by `tokenizer`
        ("o200k_base" by default, "cl100k_base", "approx", or a tokenizer.json).

        >>> import numpy as np, ctxprune_rs as ctxprune
        >>> s = ctxprune.Selector("lexical", k=1, token_budget=10)
        >>> s.select(texts=["parse dates with chrono", "a cat sat"], query_text="dates").indices.tolist()
        [0]
        """
        m = self._args["method"]
        if model is not None:
            if m == "lexical":
                raise InvalidInputError("invalid model: lexical reads the texts, not embeddings; leave model unset")
            _model_replaces(pool, query, texts)
        t = None if texts is None else _texts_arg(texts)
        counted = self._args["token_budget"] is not None and costs is None and t is not None
        if tokenizer is not None and not counted:
            raise InvalidInputError(
                "invalid tokenizer: applies where token_budget= counts the texts' tokens (texts=, and no costs=)"
            )
        if counted and t is not None:
            costs = token_counter(tokenizer or _DEFAULT_TOKENIZER).count_many(t)
        if model is not None:
            from .text import encoder as _encoder

            enc = _encoder(model)
            if not t:
                raise InvalidInputError("invalid texts: empty (nothing to choose from)")
            pool = enc.embed(t)
            if query_text is not None:
                if not isinstance(query_text, str):
                    raise InvalidInputError(f"invalid query_text: expected a str, got {type(query_text).__name__}")
                query = enc.embed([query_text])[0]
            elif m in ("mmr", "hybrid"):
                raise InvalidInputError(f"invalid query_text: {m} needs the query (query_text=, embedded by model=)")
            t, query_text = None, None
        elif m != "lexical" and counted:
            # Read for their counts only: the method itself reads embeddings.
            t = None
        # A Pool is resident; an array is read once per call (float32 C-contiguous
        # arrays are borrowed, not copied).
        rows: Any
        if pool is None or isinstance(pool, Pool):
            rows = None if pool is None else pool._pool
        else:
            rows = _floats(pool, "embeddings", 2)
        return self._sel.select(
            rows,
            None if query is None else _floats(query, "query", 1),
            costs=None if costs is None else _numbers(costs, "costs"),
            retained=_indices(retained, "retained"),
            texts=t,
            query_text=query_text,
        )

    def select_many(
        self,
        pool: "Pool",
        queries: Any,
        *,
        costs: Any = None,
        retained: Iterable[int] = (),
    ) -> List[Selection]:
        """One selection per row of `queries` (a Q x d array) over the resident `pool`:
        the same selections as `[self.select(pool, q) for q in queries]`, with the
        passes over the pool shared between them. `costs` and `retained` apply to every
        query. An error names the query it came from (`queries[3]: ...`).

        >>> import numpy as np, ctxprune_rs as ctxprune
        >>> pool = ctxprune.Pool(np.eye(3, dtype=np.float32) + 0.1)
        >>> s = ctxprune.Selector("mmr", k=1)
        >>> [sel.indices.tolist() for sel in s.select_many(pool, np.eye(3, dtype=np.float32))]
        [[0], [1], [2]]
        """
        if not isinstance(pool, Pool):
            raise InvalidInputError(
                f"invalid pool: select_many needs a ctxprune_rs.Pool, got {type(pool).__name__}"
            )
        return self._sel.select_many(
            pool._pool,
            _floats(queries, "queries", 2),
            costs=None if costs is None else _numbers(costs, "costs"),
            retained=_indices(retained, "retained"),
        )

    def __repr__(self) -> str:
        return _repr("Selector", self._args, {"mode": "greedy"})


def _model_replaces(pool: Any, query: Any, texts: Any) -> None:
    """With `model=`, the texts are the pool and the query text the query."""
    for name, v in (("pool", pool), ("query", query)):
        if v is not None:
            raise InvalidInputError(
                f"invalid {name}: the model embeds texts= and query_text=; give {name} or model=, not both"
            )
    if texts is None:
        raise InvalidInputError("invalid texts: model= needs the pool's texts (texts=)")


def _repr(name: str, args: Dict[str, Any], defaults: Dict[str, Any]) -> str:
    """`Name(option=value, ...)`: the options given, those at their default left out."""
    shown = [f"{k}={v!r}" for k, v in args.items() if v is not None and defaults.get(k, object()) != v]
    return f"{name}({', '.join(shown)})"


def _rebuild(cls: type, args: Dict[str, Any], engine: Engine) -> Any:
    """A `Selector` or `Reranker` from the options it was made with (unpickling)."""
    return cls(engine=engine, **args)


def select(
    embeddings: Any,
    query: Any = None,
    method: str = "mmr",
    k: Optional[int] = None,
    token_budget: Optional[float] = None,
    costs: Any = None,
    retained: Iterable[int] = (),
    lambda_: Optional[float] = None,
    threshold: Optional[float] = None,
    preset: Optional[str] = None,
    mode: str = "greedy",
    *,
    weights: Optional[Sequence[float]] = None,
    texts: Optional[Sequence[str]] = None,
    query_text: Optional[str] = None,
    model: Any = None,
    tokenizer: Optional[Union[str, "os.PathLike[str]"]] = None,
    engine: Optional[Engine] = None,
) -> Selection:
    """Selects rows of `embeddings` (an N x d array, or a Pool; None with `model=` or
    for lexical) by marginal value; see `Selector` for the options and
    `Selector.select` for text in (`texts`, `query_text`, `model`, `tokenizer`).
    Returns a `Selection`: `.indices` (int64, in pick order), `.gains`, `.stop`,
    `.tokens`, `.notes`, `.backend`.

    >>> import numpy as np, ctxprune_rs as ctxprune
    >>> X = np.eye(3, dtype=np.float32) + 0.1
    >>> ctxprune.select(X, query=X[0], method="mmr", k=2).indices.tolist()
    [0, 1]
    """
    if isinstance(embeddings, Pool):
        engine = embeddings.engine if engine is None else engine
    s = Selector(
        method, mode=mode, k=k, token_budget=token_budget, lambda_=lambda_,
        threshold=threshold, preset=preset, weights=weights, engine=engine,
    )
    return s.select(embeddings, query, costs=costs, retained=retained, texts=texts, query_text=query_text,
                    model=model, tokenizer=tokenizer)


Oracle = Union[str, Callable[[np.ndarray], Any]]


class Reranker:
    """A budgeted top-k configuration checked once: at most `budget` oracle calls to
    return the best `capacity` rows. `method`: "boundary-morph" (a Gaussian process over
    the pool with the boundary rule), "bagel", "single-stage", "rgs" (App. C.2),
    "rgs-simple", or "auto" (boundary-morph with the feedback prior, 0.3 of it from the
    relevant documents' neighbourhoods, and the kernel's concentration doubled; if its
    first 10 scores and the MIPS top (up to 15) are all
    below 0.5, the zero prior and hyperparameters by the evidence from there on);
    `kernel`: "vmf"
    (default, concentration by the median heuristic unless `kappa`), "cosine", "rbf",
    "matern52"; `prior` ("mips", "zero", "adaptive", "score", "feedback": the score prior
    re-shaped every 10 calls from the query moved by the scores) and `acquisition`
    ("boundary", "ucb") for boundary-morph; `beta0` for UCB; `graph_degree`
    for rgs and rgs-simple, `seed_div` and `frac` for rgs; `batch` (documents per oracle
    call, boundary-morph and bagel); `token_capacity` (then `rerank` needs `tokens`);
    `prior_probes` with the adaptive prior; `row_precision` ("f32", the default and the
    paper's computation, "bf16" or "f16": kernel rows read from a half-precision copy of
    the pool, half the bytes; every method but single-stage; for the paper's GP: the
    evidence's fitted kernels need f32 rows); `hyperparameters` ("paper",
    the default, or "evidence": the GP's kernel bandwidth, signal and noise variances and
    the prior's scale and offset fitted by type-II maximum likelihood of the scores seen,
    after 10 calls and whenever the calls have doubled, up to 160; boundary-morph with the
    mips or zero prior); `feedback_neighbours` (with the feedback prior: the share of the
    prior taken from the neighbourhoods of the documents scored at least 0.5, in [0, 1],
    by default 0)."""

    def __init__(
        self,
        budget: int,
        capacity: int,
        method: str = "boundary-morph",
        *,
        kernel: Optional[str] = None,
        kappa: Optional[float] = None,
        prior: Optional[str] = None,
        acquisition: Optional[str] = None,
        beta0: Optional[float] = None,
        graph_degree: Optional[int] = None,
        seed_div: Optional[float] = None,
        frac: Optional[float] = None,
        batch: Optional[int] = None,
        token_capacity: Optional[int] = None,
        prior_probes: Optional[int] = None,
        row_precision: Optional[str] = None,
        hyperparameters: Optional[str] = None,
        feedback_neighbours: Optional[float] = None,
        engine: Optional[Engine] = None,
    ):
        self.engine = _engine(engine)
        self._r = _native.Reranker(
            self.engine, _count(budget, "budget"), _count(capacity, "capacity"), method, kernel=kernel, kappa=kappa, prior=prior,
            acquisition=acquisition, beta0=beta0, graph_degree=_count(graph_degree, "graph_degree"),
            seed_div=seed_div, frac=frac, batch=_count(batch, "batch"),
            token_capacity=_count(token_capacity, "token_capacity"),
            prior_probes=_count(prior_probes, "prior_probes"), row_precision=row_precision,
            hyperparameters=hyperparameters, feedback_neighbours=feedback_neighbours,
        )
        self._args = dict(
            budget=budget, capacity=capacity, method=method, kernel=kernel, kappa=kappa, prior=prior,
            acquisition=acquisition, beta0=beta0, graph_degree=graph_degree, seed_div=seed_div, frac=frac,
            batch=batch, token_capacity=token_capacity, prior_probes=prior_probes, row_precision=row_precision,
            hyperparameters=hyperparameters, feedback_neighbours=feedback_neighbours,
        )

    def __reduce__(self):
        return (_rebuild, (Reranker, self._args, self.engine))

    def __repr__(self) -> str:
        return _repr("Reranker", self._args, {"method": "boundary-morph"})

    def rerank(
        self,
        pool: Any,
        query: Any,
        oracle: Oracle,
        *,
        texts: Optional[Sequence[str]] = None,
        query_text: Optional[str] = None,
        api: Optional[str] = None,
        timeout: Optional[float] = None,
        retries: Optional[int] = None,
        tokens: Optional[Sequence[int]] = None,
        model: Any = None,
        tokenizer: Optional[Union[str, "os.PathLike[str]"]] = None,
    ) -> Reranked:
        """Reranks `pool` (a Pool or an N x d array) for `query` (a d-vector); with a
        token capacity, `tokens` gives each row's token count (else the `texts` are
        counted by `tokenizer`, "o200k_base" by default).

        `oracle` is a callable `f(indices) -> scores` (an int64 array in, as many floats
        in [0, 1] out; called with batches; an exception inside it propagates as it is),
        or the URL of a TEI or Cohere-style rerank server (`api="tei"` or `"cohere"`),
        which needs the pool's `texts` and the `query_text`. With `model` (a
        sentence-transformers directory or an `Encoder`), `texts` and `query_text` are
        embedded for the GP: give `pool` and `query` as None then."""
        t = None if texts is None else _texts_arg(texts)
        counted = self._args["token_capacity"] is not None and tokens is None and t is not None
        if tokenizer is not None and not counted:
            raise InvalidInputError(
                "invalid tokenizer: applies where token_capacity= counts the texts' tokens (texts=, and no tokens=)"
            )
        if counted and t is not None:
            tokens = token_counter(tokenizer or _DEFAULT_TOKENIZER).count_many(t)
        if model is not None:
            from .text import encoder as _encoder

            _model_replaces(pool, query, t or None)
            if not isinstance(query_text, str):
                raise InvalidInputError("invalid query_text: model= needs the query as text (query_text=)")
            enc = _encoder(model)
            pool, query = enc.embed(t or []), enc.embed([query_text])[0]
        if not isinstance(oracle, str) and (model is not None or counted):
            # Read for the embeddings or the counts: a callable oracle reads neither.
            t, query_text = None, None
        p = _pool(pool, self.engine)
        if p is None:
            raise InvalidInputError("invalid pool: give the embeddings (an N x d array or a Pool), or texts= with model=")
        return self._r.rerank(
            p._pool, _floats(query, "query", 1), oracle,
            texts=t, query_text=query_text,
            api=api, timeout=timeout, retries=_count(retries, "retries"),
            tokens=None if tokens is None else _numbers(tokens, "tokens"),
        )


def rerank(
    pool: Any,
    query: Any,
    oracle: Oracle,
    budget: int,
    capacity: int,
    method: str = "boundary-morph",
    *,
    engine: Optional[Engine] = None,
    **options: Any,
) -> Reranked:
    """The best `capacity` rows of `pool` for `query` with at most `budget` oracle calls;
    see `Reranker` for the options and `Reranker.rerank` for the oracle and text in
    (`texts`, `query_text`, `model`, `tokenizer`). Returns a
    `Reranked`: `.indices` (best first), `.scored`, `.scores`, `.oracle_calls`."""
    per_call = ("texts", "query_text", "api", "timeout", "retries", "tokens", "model", "tokenizer")
    http = {k: options.pop(k) for k in per_call if k in options}
    if isinstance(pool, Pool):
        engine = pool.engine if engine is None else engine
    r = Reranker(budget, capacity, method, engine=engine, **options)
    return r.rerank(pool, query, oracle, **http)


def _plain(o: Any) -> Any:
    """JSON for SDK message objects (pydantic models of the OpenAI and Anthropic SDKs)."""
    dump = getattr(o, "model_dump", None)
    if callable(dump):
        return dump(mode="json", exclude_none=True)
    raise TypeError(f"{type(o).__name__} is not JSON serialisable")


def _to_json(messages: Any) -> str:
    if not isinstance(messages, (list, tuple, dict)):
        raise InvalidInputError(
            f"invalid messages: expected a list of message dicts (or a dict with \"messages\"), "
            f"got {type(messages).__name__}"
        )
    try:
        return json.dumps(messages, ensure_ascii=False, default=_plain)
    except (TypeError, ValueError) as e:
        raise InvalidInputError(f"invalid messages: not JSON ({e})") from None


def _edit_json(edit: Dict[str, Any]) -> str:
    try:
        return json.dumps(edit, ensure_ascii=False)
    except (TypeError, ValueError) as e:
        raise InvalidInputError(f"invalid edit: not JSON ({e})") from None


class MaskSession:
    """One conversation's observation masking (an agent loop): the options checked once,
    token counts of earlier messages cached across calls (reused only while each history
    extends the one before, compared byte for byte, so a session shared by several
    conversations is slower, never wrong). Pass the whole history each turn.

    `format`: "auto", "openai" or "anthropic". The policy, as options (each `None` is the
    preset's, the edit's, else the default):
    `window` (default 5): units whose observations are kept, counting back from the
    latest; `unit`: "turns" (default) or "tool_uses"; `keep_errors` (default True),
    `keep_first`; `tools_keep` (never masked) / `tools_mask` (only these masked);
    `trigger_tokens`: mask only above this context size; `clear_at_least`: mask only when
    that many tokens would go; `step`: the boundary moves in steps of this many units,
    counted from the window's edge or, with `anchor="start"`, from the first unit;
    `hold`: cache-aware, the boundary moves only when the masked context exceeds
    `trigger_tokens` and the move clears at least `clear_at_least` more tokens;
    `clear_tool_inputs`: also clear masked calls' arguments (to {}); `placeholder`: the
    template ({tool}, {args}, {tokens}, {lines}).
    Or as users state them elsewhere: `preset="paper" | "swe-agent" | "anthropic"`
    (SWE-agent's `LastNObservations(n, polling)` is `preset="swe-agent", window=n,
    step=polling`), or `edit=` Anthropic's `clear_tool_uses_20250919` dict as its API
    takes it (stats then carry `cleared_tool_uses` and `cleared_input_tokens`).
    `tokenizer`: "o200k_base" (default), "cl100k_base", "approx" or a tokenizer.json path.

    Semantic masking (`ctxprune mask --model`): with `model` (a sentence-transformers
    directory or an `Encoder`), every observation is embedded, and a stale one that still
    adds marginal value against those kept (the gate of `semantic_method`, "grn" by
    default, at `semantic_tau`, by default the method's paper threshold) is kept back;
    `query_text` is the task, the query of mmr, dpp and coverage. `stats` then carry
    `semantic_kept_back`."""

    def __init__(
        self,
        format: str = "auto",
        window: Optional[int] = None,
        *,
        preset: Optional[str] = None,
        edit: Optional[Dict[str, Any]] = None,
        keep_errors: Optional[bool] = None,
        keep_first: Optional[bool] = None,
        tools_keep: Optional[Sequence[str]] = None,
        tools_mask: Optional[Sequence[str]] = None,
        trigger_tokens: Optional[int] = None,
        clear_at_least: Optional[int] = None,
        step: Optional[int] = None,
        unit: Optional[str] = None,
        anchor: Optional[str] = None,
        hold: Optional[bool] = None,
        clear_tool_inputs: Optional[bool] = None,
        placeholder: Optional[str] = None,
        tokenizer: str = "o200k_base",
        model: Any = None,
        semantic_method: Optional[str] = None,
        semantic_tau: Optional[float] = None,
        query_text: Optional[str] = None,
    ):
        self._args = dict(
            format=format, window=window, preset=preset, edit=edit, keep_errors=keep_errors,
            keep_first=keep_first, tools_keep=tools_keep, tools_mask=tools_mask,
            trigger_tokens=trigger_tokens, clear_at_least=clear_at_least, step=step, unit=unit,
            anchor=anchor, hold=hold, clear_tool_inputs=clear_tool_inputs, placeholder=placeholder,
            tokenizer=tokenizer, model=model, semantic_method=semantic_method,
            semantic_tau=semantic_tau, query_text=query_text,
        )
        enc = None
        if model is not None:
            from .text import encoder as _encoder

            enc = _encoder(model)._enc
        else:
            given = {"semantic_method": semantic_method, "semantic_tau": semantic_tau, "query_text": query_text}
            for name, val in given.items():
                if val is not None:
                    raise InvalidInputError(f"invalid {name}: applies to semantic masking (model=)")
        if edit is not None and not isinstance(edit, dict):
            raise InvalidInputError(f"invalid edit: must be a dict (got {type(edit).__name__})")
        for name, v in (("tools_keep", tools_keep), ("tools_mask", tools_mask)):
            if isinstance(v, str):
                raise InvalidInputError(f"invalid {name}: must be a list of tool names, not a string")
        self._s = _native.MaskSession(
            format, preset=preset, edit=None if edit is None else _edit_json(edit),
            window=_count(window, "window"), keep_errors=keep_errors, keep_first=keep_first,
            tools_keep=None if tools_keep is None else list(tools_keep),
            tools_mask=None if tools_mask is None else list(tools_mask),
            trigger_tokens=_count(trigger_tokens, "trigger_tokens"),
            clear_at_least=_count(clear_at_least, "clear_at_least"), step=_count(step, "step"),
            unit=unit, anchor=anchor, hold=hold, clear_tool_inputs=clear_tool_inputs,
            placeholder=placeholder, tokenizer=tokenizer,
            encoder=enc, semantic_method=semantic_method, semantic_tau=semantic_tau, query_text=query_text,
        )
        self.stats: Optional[dict] = None

    def __repr__(self) -> str:
        return _repr("MaskSession", self._args, {"format": "auto", "tokenizer": "o200k_base"})

    def mask(self, messages: Any) -> Any:
        """The messages with stale tool observations replaced by the placeholder, in the
        shape given (a list of dicts, or a dict with "messages"); the input is not
        changed. `self.stats` holds the accounting of this call."""
        text, self.stats = self._s.mask_json(_to_json(messages))
        return json.loads(text)


def mask(messages: Any, format: str = "auto", window: Optional[int] = None, **options: Any) -> Any:
    """Masks stale tool observations in one trajectory (OpenAI or Anthropic messages as
    plain lists of dicts); see `MaskSession` for the options. Returns the masked messages
    in the shape given; the input is not changed."""
    return MaskSession(format, window, **options).mask(messages)


_counters: Dict[str, TokenCounter] = {}
_counters_lock = threading.Lock()


def token_counter(tokenizer: Union[str, "os.PathLike[str]"] = "o200k_base") -> TokenCounter:
    """The module's `TokenCounter` for `tokenizer` ("o200k_base", "cl100k_base", "approx"
    or a HuggingFace tokenizer.json path), loaded on first use and kept: `.count(text)`,
    `.count_many(texts)`."""
    if not isinstance(tokenizer, (str, os.PathLike)):
        raise InvalidInputError(f"invalid tokenizer: expected a name or a path, got {type(tokenizer).__name__}")
    name = os.fspath(tokenizer)
    with _counters_lock:
        c = _counters.get(name)
        if c is None:
            c = _counters[name] = TokenCounter(name)
        return c


def count_tokens(text: str, tokenizer: str = "o200k_base") -> int:
    """Tokens in `text`: "o200k_base", "cl100k_base", "approx" (4 characters a token) or a
    HuggingFace tokenizer.json path (the counter is loaded once and kept)."""
    if not isinstance(text, str):
        raise InvalidInputError(f"invalid text: expected a str, got {type(text).__name__}")
    return token_counter(tokenizer).count(text)


from .text import Chosen, Encoder, embed, encoder, rerank_texts, select_texts  # noqa: E402
from . import attention  # noqa: E402


def __dir__() -> List[str]:
    # The API only: not the modules this one imports (numpy, json, os, threading).
    return sorted(set(__all__) | {"__version__"})
