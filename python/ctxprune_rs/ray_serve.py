"""ctxprune on Ray Serve (`pip install "ctxprune-rs[ray-serve]"`): `ctxprune serve`'s JSON
contract (`/v1/select`, `/v1/rerank`, `/v1/mask`, the pools, `/readyz`, every route) as
a Serve deployment, its replicas and autoscaling from Ray's own config.

    from ray import serve
    from ctxprune_rs.ray_serve import CtxpruneDeployment

    app = CtxpruneDeployment.options(
        autoscaling_config={"min_replicas": 1, "max_replicas": 8, "target_ongoing_requests": 4},
        ray_actor_options={"num_cpus": 4},
    ).bind(pools={"docs": "/data/docs.npy"})
    serve.run(app)          # POST http://127.0.0.1:8000/v1/select as to `ctxprune serve`

or from a Serve config file, `import_path: ctxprune_rs.ray_serve:app` with `args` (the
deployment's keyword arguments; `serve run ctxprune_rs.ray_serve:app pools=docs=/data/docs.npy`).

Each replica opens its engine once (CUDA when Ray gave it a GPU, else the CPU; `backend=`
overrides), makes its named pools resident before it takes a request (Serve marks it
ready when `__init__` returns), and computes with the CPUs Ray assigned it (`threads`,
by default the replica's `num_cpus`, at least 1). Every request is answered by the
server's own router in process (`ctxprune_rs.service.Service`), so each answer is
`ctxprune serve`'s.

Batching: `POST /v1/select` requests that name the same pool with the same options and
differ only in their `query` are gathered by Ray Serve's `@serve.batch` (up to
`max_batch_size`, waiting at most `batch_wait_timeout_s`) and run as one `"queries"`
request (the many-queries path: the passes over the pool shared). Each gets the answer
it would get alone, as JSON values (`select_many` gives each query `select`'s picks and
gains, bit for bit; the body is written again by Python, so a number may be spelled
`1e-05` for `1e-5`; `elapsed_ms` and `x-request-id` are the batch's, and the header
`x-ctxprune-gathered` says how many requests shared it). A body the server might read
otherwise than Python (not UTF-8, a repeated key, `-0`, a number past 128 characters,
over the body cap) is never gathered. If the batch is refused for its content (a bad
query, a limit), each request of it runs alone, so its answer is its own; if it found no
slot in time (503, 504), each member gets that answer. `max_batch_size=1` turns batching
off. The deployment lets 64 requests into a replica at once (`max_ongoing_requests`,
Serve's default is 5): keep it at least `max_batch_size`.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
from typing import Any, Dict, List, Mapping, Optional, Tuple

from ray import serve
from starlette.requests import Request
from starlette.responses import Response

from .ray import assigned_cpus, engine_for_actor
from .service import Service

__all__ = ["CtxpruneDeployment", "app"]

# Headers of the answer that belong to the connection, not to the answer: the host's
# HTTP server writes its own.
_HOP = {"connection", "content-length", "transfer-encoding", "keep-alive"}
# Fields that make a select request run over texts or a batch already: never gathered.
_ALONE = {"queries", "texts", "query_text", "model", "tokenizer", "embeddings"}
# A select body larger than this is not gathered (a named-pool request is a query and
# options: a few kB).
_GATHER_BYTES = 1 << 20


# (status, headers, body) of one answer.
_Answer = Tuple[int, List[Tuple[str, str]], bytes]


class _NotGathered(Exception):
    pass


# The server reads a number's text up to this length (longer is refused): longer ones run
# alone, so the server's own refusal answers them.
_NUMBER_CHARS = 128


def _strict_float(s: str) -> float:
    v = float(s)
    if len(s) > _NUMBER_CHARS or not math.isfinite(v):
        raise _NotGathered
    return v


def _strict_int(s: str) -> int:
    # "-0" is the float -0.0 to the server (an integer field refuses it) but 0 to Python.
    if len(s) > _NUMBER_CHARS or s == "-0":
        raise _NotGathered
    return int(s)


def _no_constant(_: str) -> Any:
    raise _NotGathered


def _no_duplicates(pairs: List[Tuple[str, Any]]) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise _NotGathered
        out[k] = v
    return out


def _gather_key(body: bytes, limit: int) -> Optional[Tuple[str, Dict[str, Any], List[float]]]:
    """(key, the body without its query, the query) for a select that may be gathered
    with others of the same key; None when it runs alone. Gathering re-writes the body, so
    only a body the server reads exactly as Python does is gathered: UTF-8 without a byte
    order mark, no key repeated, no NaN or infinity, no `-0`, no number over 128
    characters, at most `limit` bytes (the server's body cap). Any other runs alone, and
    the server's own answer (an error, mostly) is its answer."""
    if len(body) > limit:
        return None
    try:
        obj = json.loads(body.decode("utf-8"), object_pairs_hook=_no_duplicates, parse_float=_strict_float,
                         parse_int=_strict_int, parse_constant=_no_constant)
    except (_NotGathered, ValueError, RecursionError):
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("pool"), str) or _ALONE & obj.keys():
        return None
    query = obj.pop("query", None)
    if not isinstance(query, list) or not query or not all(
            isinstance(x, (int, float)) and not isinstance(x, bool) for x in query):
        return None
    return json.dumps(obj, sort_keys=True, separators=(",", ":")), obj, query


# Ray Serve lets `max_ongoing_requests` (5 by default) into a replica at once; batches of
# `max_batch_size` need at least that many.
@serve.deployment(max_ongoing_requests=64)
class CtxpruneDeployment:
    """`ctxprune serve` as a Ray Serve deployment; see the module's documentation.

    `pools`, `models`, `tokenizers`: name -> path, loaded at replica start. `backend`:
    auto (CUDA when Ray gave the replica a GPU), cpu or cuda. `threads`: the compute
    threads (by default the replica's CPUs), `max_concurrent`: requests computing at once
    (by default `threads`). `max_batch_size`, `batch_wait_timeout_s`: the select gathering
    (`@serve.batch`). Every other keyword is a limit of `ctxprune_rs.service.Service`
    (`timeout`, `max_work`, `max_pool_bytes`, ...)."""

    def __init__(
        self,
        *,
        pools: Optional[Mapping[str, str]] = None,
        models: Optional[Mapping[str, str]] = None,
        tokenizers: Optional[Mapping[str, str]] = None,
        backend: str = "auto",
        threads: Optional[int] = None,
        max_concurrent: Optional[int] = None,
        max_batch_size: int = 32,
        batch_wait_timeout_s: float = 0.002,
        **limits: Any,
    ) -> None:
        if isinstance(max_batch_size, bool) or not isinstance(max_batch_size, int) or max_batch_size < 1:
            raise ValueError(f"invalid max_batch_size: must be an integer >= 1, got {max_batch_size!r}")
        if not (isinstance(batch_wait_timeout_s, (int, float)) and 0 <= batch_wait_timeout_s <= 60):
            raise ValueError(f"invalid batch_wait_timeout_s: must be in [0, 60] seconds, got {batch_wait_timeout_s!r}")
        self._batch_size = max_batch_size
        if threads is None:
            threads = assigned_cpus() or os.cpu_count() or 1
        self.service = Service(engine_for_actor(backend), pools=pools, models=models, tokenizers=tokenizers,
                               threads=threads, max_concurrent=threads if max_concurrent is None else max_concurrent,
                               **limits)
        self._gather_limit = min(_GATHER_BYTES, limits.get("max_body_bytes") or _GATHER_BYTES)
        self._gathered.set_max_batch_size(max_batch_size)
        self._gathered.set_batch_wait_timeout_s(batch_wait_timeout_s)

    def _handle(self, method: str, path: str, body: bytes, headers: List[Tuple[str, str]]) -> _Answer:
        try:
            r = self.service.handle(method, path, body, headers)
        except ValueError as e:  # not an HTTP request the router can take: the server's 400
            return 400, [("content-type", "application/json")], json.dumps({"error": str(e)}).encode()
        return r.status, r.headers, r.body

    async def __call__(self, request: Request) -> Response:
        # The path as the client sent it (percent-encoded), less Serve's route prefix.
        path = (request.scope.get("raw_path") or request.url.path.encode()).decode("latin-1")
        root = request.scope.get("root_path") or ""
        if root and path.startswith(root):
            path = path[len(root):] or "/"
        query = request.scope.get("query_string") or b""
        if query:
            path = f"{path}?{query.decode('latin-1')}"
        body = await request.body()
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.headers.raw]
        gather = _gather_key(body, self._gather_limit) if request.method == "POST" and path == "/v1/select" else None
        if gather is not None and self._batch_size > 1:
            status, hdrs, out = await self._gathered((gather, body, headers))
        else:
            status, hdrs, out = await asyncio.to_thread(self._handle, request.method, path, body, headers)
        return Response(content=out, status_code=status, headers={k: v for k, v in hdrs if k not in _HOP})

    @serve.batch(max_batch_size=32, batch_wait_timeout_s=0.002)
    async def _gathered(self, items: List[Any]) -> List[_Answer]:
        groups: Dict[str, List[int]] = {}
        for i, ((key, _, _), _, _) in enumerate(items):
            groups.setdefault(key, []).append(i)
        out: List[Any] = [None] * len(items)

        async def run(members: List[int]) -> None:
            answers = await asyncio.to_thread(self._run_group, [items[i] for i in members])
            for i, a in zip(members, answers):
                out[i] = a

        # Each group (and each request of a refused one) computes in its own slot, side by side.
        await asyncio.gather(*(run(m) for m in groups.values()))
        return out

    def _run_group(self, group: List[Any]) -> List[_Answer]:
        """One group's answers: one many-queries request, each member's result its answer;
        a lone member, or each member of a batch the server refused, answered alone."""
        if len(group) > 1:
            (_, rest, _), _, _ = group[0]
            batch = dict(rest, queries=[q for (_, _, q), _, _ in group])
            status, hdrs, body = self._handle("POST", "/v1/select", json.dumps(batch).encode(),
                                              [("content-type", "application/json")])
            if status == 200:
                shared = [*hdrs, ("x-ctxprune-gathered", str(len(group)))]
                return [(200, shared, json.dumps(r, separators=(",", ":")).encode())
                        for r in json.loads(body)["results"]]
            if status in (503, 504):  # the slot or the deadline, shared: rerunning would only miss it again
                return [(status, hdrs, body)] * len(group)
        return [self._handle("POST", "/v1/select", body, headers) for _, body, headers in group]


_INTS = {"max_body_bytes", "max_concurrent", "threads", "max_request_memory", "max_queue", "max_pool_bytes",
         "max_embed_tokens", "max_batch_size", "num_replicas"}
_FLOATS = {"timeout", "max_work", "batch_wait_timeout_s", "num_cpus"}


def _named_arg(key: str, value: Any) -> Mapping[str, str]:
    if isinstance(value, Mapping):
        return value
    if isinstance(value, str):  # `serve run ... pools=docs=/data/docs.npy,faq=/data/faq.npy`
        out: Dict[str, str] = {}
        for part in filter(None, value.split(",")):
            name, sep, path = part.partition("=")
            if not sep:
                raise ValueError(f"invalid {key}: '{part}' is not NAME=PATH")
            if name in out:
                raise ValueError(f"invalid {key}: the name '{name}' is given twice")
            out[name] = path
        return out
    raise ValueError(f"invalid {key}: expected a mapping or NAME=PATH,..., got {type(value).__name__}")


def app(args: Dict[str, Any]) -> Any:
    """The application builder for `serve run ctxprune_rs.ray_serve:app KEY=VALUE ...` and
    Serve config files (`import_path: ctxprune_rs.ray_serve:app`): `args` are the
    deployment's keyword arguments (`pools`, `models`, `tokenizers` as mappings or
    `NAME=PATH,...`; numbers as numbers or strings), plus `num_replicas` and `num_cpus`
    (each replica's; replicas and autoscaling are otherwise set in the config file's
    `deployments` section)."""
    kwargs: Dict[str, Any] = {}
    for key, value in args.items():
        if key in ("pools", "models", "tokenizers"):
            kwargs[key] = _named_arg(key, value)
        elif key in _INTS and isinstance(value, str):
            try:
                kwargs[key] = int(value)
            except ValueError:
                raise ValueError(f"invalid {key}: '{value}' is not an integer") from None
        elif key in _FLOATS and isinstance(value, str):
            try:
                kwargs[key] = float(value)
            except ValueError:
                raise ValueError(f"invalid {key}: '{value}' is not a number") from None
        elif key == "allow_oracle_urls" and isinstance(value, str):
            if value not in ("true", "false"):
                raise ValueError(f"invalid allow_oracle_urls: '{value}' is not true or false")
            kwargs[key] = value == "true"
        else:
            kwargs[key] = value
    options: Dict[str, Any] = {}
    if "num_replicas" in kwargs:
        options["num_replicas"] = kwargs.pop("num_replicas")
    if "num_cpus" in kwargs:
        options["ray_actor_options"] = {"num_cpus": kwargs.pop("num_cpus")}
    return (CtxpruneDeployment.options(**options) if options else CtxpruneDeployment).bind(**kwargs)
