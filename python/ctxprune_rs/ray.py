"""ctxprune on Ray Data (`pip install "ctxprune-rs[ray]"`): selection and budgeted
reranking for many queries, as callable classes for `Dataset.map_batches`.

    import ray
    from ctxprune_rs.ray import SelectBatches

    ds = ray.data.from_items([{"id": i, "query": q, "pool": "docs"} for i, q in enumerate(queries)])
    out = ds.map_batches(SelectBatches, batch_format="numpy", compute=ray.data.ActorPoolStrategy(size=2),
                         fn_constructor_kwargs={"pools": {"docs": "corpus.npy"}, "method": "mmr", "k": 10})

Each actor opens its `Engine` once (CUDA when Ray gave the actor a GPU, else the CPU,
unless `backend=` says otherwise), computes with the CPUs Ray assigned it (`num_cpus`,
through RAYON_NUM_THREADS unless that is set), loads its shared pools once (`pools`: name -> a `.npy`
path, an array, or a Ray object reference to one) and keeps them resident. A row names a
shared pool in its `pool` column or carries its own N x d array in its `embeddings`
column. Output: the batch's columns (less `embeddings`) and, per row, the results, the
backend and `error`: None, or the row's one-line error. A bad row is an error in its own
row, never a failed job, unless `strict=True` (then the error raises). The work of a row
depends on that row alone, so a batch Ray retries after an actor died gives the same
answers, and Ray Data keeps every row exactly once (its actor pool restarts a dead actor
and retries the batch, by default).
"""

from __future__ import annotations

from collections.abc import Mapping
from os import PathLike
from typing import Any, Callable, Dict, List, Optional, Union

import math
import os

import numpy as np

from . import CtxpruneError, Engine, Pool, Reranker, Selector
from ._errors import InvalidInputError

__all__ = ["SelectBatches", "RerankBatches", "engine_for_actor", "assigned_cpus"]

PoolSource = Union[str, "PathLike[str]", np.ndarray, Any]


def assigned_cpus() -> Optional[int]:
    """The CPUs Ray assigned this actor, task or replica (`num_cpus`, rounded up, at least
    1), or None outside a Ray worker (or with no CPUs assigned)."""
    try:
        import ray

        if not ray.is_initialized():
            return None
        cpus = ray.get_runtime_context().get_assigned_resources().get("CPU")
    except Exception:  # noqa: BLE001 - not in a Ray worker
        return None
    return max(1, math.ceil(cpus)) if cpus else None


def _threads_from_ray() -> None:
    """Computes with the CPUs Ray assigned this actor, so actors side by side do not
    contend for each other's cores: sets RAYON_NUM_THREADS (read once, when the
    extension's first parallel call starts its threads; an actor's process is its own)
    unless it is set already."""
    cpus = assigned_cpus()
    if cpus is not None and "RAYON_NUM_THREADS" not in os.environ:
        os.environ["RAYON_NUM_THREADS"] = str(cpus)


def engine_for_actor(backend: str = "auto") -> Engine:
    """The engine an actor opens: `backend="auto"` is CUDA when Ray assigned this actor a
    GPU (`ray.get_gpu_ids()`), else the CPU; "cpu" or "cuda" as named."""
    if backend != "auto":
        return Engine(backend)
    try:
        import ray

        gpus = ray.get_gpu_ids() if ray.is_initialized() else []
    except ImportError:
        gpus = []
    return Engine("cuda") if gpus else Engine("cpu")


def _array(name: str, src: PoolSource) -> np.ndarray:
    if isinstance(src, np.ndarray):
        return src
    if isinstance(src, (str, PathLike)):
        path = str(src)
        if not path.endswith(".npy"):
            raise InvalidInputError(f"invalid pools[{name!r}]: {path!r} is not a .npy file (give an array or a .npy)")
        try:
            return np.load(path, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise InvalidInputError(f"invalid pools[{name!r}]: {path}: {e}") from None
    try:
        import ray

        if isinstance(src, ray.ObjectRef):
            return np.asarray(ray.get(src))
    except ImportError:
        pass
    raise InvalidInputError(f"invalid pools[{name!r}]: expected a .npy path, an array or a Ray object reference, "
                            f"got {type(src).__name__}")


class _Batches:
    """What both callables share: the engine, the shared pools, the columns, and the
    per-row loop with errors kept in their rows."""

    _results: List[str] = []

    def __init__(self, pools: Optional[Mapping[str, PoolSource]], backend: str, strict: bool,
                 query_column: str, pool_column: str, embeddings_column: str):
        _threads_from_ray()
        self.engine = engine_for_actor(backend)
        self.strict = bool(strict)
        self.query_column, self.pool_column, self.embeddings_column = query_column, pool_column, embeddings_column
        if pools is not None and not isinstance(pools, Mapping):
            raise InvalidInputError(f"invalid pools: expected a mapping of names to pools, got {type(pools).__name__}")
        self.pools: Dict[str, Pool] = {}
        for name, src in (pools or {}).items():
            rows = _array(str(name), src)
            try:
                self.pools[str(name)] = Pool(rows, engine=self.engine)
            except CtxpruneError as e:
                raise InvalidInputError(f"invalid pools[{name!r}]: {e}") from None

    def _pool(self, batch: Mapping[str, np.ndarray], i: int) -> Any:
        if self.pool_column in batch and batch[self.pool_column][i] is not None:
            name = str(batch[self.pool_column][i])
            if name not in self.pools:
                known = ", ".join(sorted(self.pools)) or "none"
                raise InvalidInputError(f"invalid {self.pool_column}: no shared pool named {name!r} (loaded: {known})")
            return self.pools[name]
        if self.embeddings_column in batch:
            return np.asarray(batch[self.embeddings_column][i], dtype=np.float32)
        raise InvalidInputError(f"invalid row: give a {self.pool_column!r} name or an {self.embeddings_column!r} array")

    def _row(self, batch: Mapping[str, np.ndarray], i: int) -> Dict[str, Any]:
        raise NotImplementedError

    def __call__(self, batch: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        if self.query_column not in batch:
            raise InvalidInputError(f"invalid batch: no {self.query_column!r} column (columns: {sorted(batch)})")
        n = len(batch[self.query_column])
        cols: Dict[str, List[Any]] = {k: [] for k in self._results + ["backend", "error"]}
        taken = sorted(set(cols) & set(batch))
        if taken:
            raise InvalidInputError(f"invalid batch: its column {taken[0]!r} is one this adds (rename it: "
                                    f"the output columns are {sorted(cols)})")
        for i in range(n):
            try:
                out = self._row(batch, i)
                out["error"] = None
            except (CtxpruneError, ValueError, TypeError, KeyError) as e:
                if self.strict:
                    raise
                out = {k: None for k in self._results}
                out["error"] = str(e).splitlines()[0] if str(e) else type(e).__name__
            out["backend"] = self.engine.backend
            for k in cols:
                cols[k].append(out[k])
        result = {k: v for k, v in batch.items() if k != self.embeddings_column}
        for k, v in cols.items():
            arr = np.empty(n, dtype=object)
            arr[:] = v
            result[k] = arr
        return result


class SelectBatches(_Batches):
    """`Dataset.map_batches(SelectBatches, fn_constructor_kwargs={...}, batch_format="numpy")`:
    per row, `ctxprune_rs.Selector(method, **options).select(pool, query)`.

    `pools`: shared pools by name (a `.npy` path, an array, or a Ray object reference),
    loaded once per actor; `backend`: "auto" (CUDA when the actor has a GPU), "cpu" or
    "cuda"; `strict`: raise on a bad row instead of writing its `error`; the column names
    (`query`, `pool`, `embeddings`, and `costs` for a token budget); any other keyword is
    a `Selector` option (`k`, `token_budget`, `lambda_`, `threshold`, `mode`, ...),
    checked when the actor starts. Adds the columns `indices` (int64, in pick order),
    `gains`, `backend` and `error`."""

    _results = ["indices", "gains"]

    def __init__(self, method: str = "mmr", *, pools: Optional[Mapping[str, PoolSource]] = None,
                 backend: str = "auto", strict: bool = False, query_column: str = "query",
                 pool_column: str = "pool", embeddings_column: str = "embeddings", costs_column: str = "costs",
                 **options: Any):
        super().__init__(pools, backend, strict, query_column, pool_column, embeddings_column)
        self.costs_column = costs_column
        self.selector = Selector(method, engine=self.engine, **options)

    def _row(self, batch: Mapping[str, np.ndarray], i: int) -> Dict[str, Any]:
        pool = self._pool(batch, i)
        query = batch[self.query_column][i]
        costs = batch[self.costs_column][i] if self.costs_column in batch else None
        kw = {} if costs is None else {"costs": np.asarray(costs, dtype=np.float64)}
        r = self.selector.select(pool, None if query is None else np.asarray(query, dtype=np.float32), **kw)
        return {"indices": r.indices, "gains": np.asarray(r.gains)}


class RerankBatches(_Batches):
    """`Dataset.map_batches(RerankBatches, fn_constructor_kwargs={...}, batch_format="numpy")`:
    per row, `ctxprune_rs.Reranker(budget, capacity, method, **options).rerank(pool,
    query, oracle)`.

    The oracle of a row: its `oracle_scores` column (a score per pool row, read where the
    reranker asks), else `oracle`, given at construction: a factory called once per actor
    (so it may open a model or a client there) returning `f(row, indices) -> scores`
    (`row`: the row's columns as a dict; `indices`: the pool rows to score, `batch` of them
    per call when `batch=` is set), or the URL of a TEI / Cohere-style rerank server (then
    rows carry `texts` and `query_text` (`texts_column`, `query_text_column`), and `api=`
    names the protocol). Other keywords:
    `pools`, `backend`, `strict` and the columns as for `SelectBatches`, and `Reranker`
    options. Adds `indices` (best first), `scores` (the oracle's, of the rows scored),
    `oracle_calls`, `backend` and `error`."""

    _results = ["indices", "scores", "oracle_calls"]

    def __init__(self, budget: int, capacity: int, method: str = "boundary-morph", *,
                 oracle: Union[None, str, Callable[[], Callable[[Dict[str, Any], np.ndarray], Any]]] = None,
                 api: Optional[str] = None, pools: Optional[Mapping[str, PoolSource]] = None,
                 backend: str = "auto", strict: bool = False, query_column: str = "query",
                 pool_column: str = "pool", embeddings_column: str = "embeddings",
                 scores_column: str = "oracle_scores", texts_column: str = "texts",
                 query_text_column: str = "query_text", **options: Any):
        super().__init__(pools, backend, strict, query_column, pool_column, embeddings_column)
        self.scores_column = scores_column
        self.texts_column, self.query_text_column = texts_column, query_text_column
        self.reranker = Reranker(budget, capacity, method, engine=self.engine, **options)
        if oracle is None or isinstance(oracle, str):
            self.oracle: Any = oracle
        elif callable(oracle):
            self.oracle = oracle()
            if not callable(self.oracle):
                raise InvalidInputError(f"invalid oracle: the factory returned {type(self.oracle).__name__}, "
                                        "not a function f(row, indices) -> scores")
        else:
            raise InvalidInputError(f"invalid oracle: expected a URL or a factory of f(row, indices) -> scores, "
                                    f"got {type(oracle).__name__}")
        self.api = api

    def _row(self, batch: Mapping[str, np.ndarray], i: int) -> Dict[str, Any]:
        pool = self._pool(batch, i)
        query = np.asarray(batch[self.query_column][i], dtype=np.float32)
        kw: Dict[str, Any] = {}
        if self.scores_column in batch and batch[self.scores_column][i] is not None:
            scores = np.asarray(batch[self.scores_column][i], dtype=np.float64)
            n = len(pool) if isinstance(pool, Pool) else pool.shape[0]
            if scores.shape != (n,):
                raise InvalidInputError(f"invalid {self.scores_column}: {scores.shape[0] if scores.ndim == 1 else scores.shape}"
                                        f" scores for a pool of {n} rows")
            oracle: Any = lambda idx: scores[idx]  # noqa: E731
        elif isinstance(self.oracle, str):
            oracle = self.oracle
            for col in (self.texts_column, self.query_text_column):
                if col not in batch:
                    raise InvalidInputError(f"invalid row: the oracle URL needs a {col!r} column")
            kw = {"texts": list(batch[self.texts_column][i]), "query_text": str(batch[self.query_text_column][i])}
            if self.api is not None:
                kw["api"] = self.api
        elif self.oracle is not None:
            row = {k: v[i] for k, v in batch.items()}
            oracle = lambda idx: self.oracle(row, idx)  # noqa: E731
        else:
            raise InvalidInputError(f"invalid row: no {self.scores_column!r} column and no oracle given")
        r = self.reranker.rerank(pool, query, oracle, **kw)
        return {"indices": r.indices, "scores": np.asarray(r.scores), "oracle_calls": int(r.oracle_calls)}
