"""`ctxprune serve` in process: the same routes, limits and JSON answers, each request
handed over as bytes, for a host that owns the HTTP side (a Ray Serve replica,
`ctxprune_rs.ray_serve`; an ASGI or WSGI app; a test).

    from ctxprune_rs.service import Service
    svc = Service(pools={"docs": "docs.npy"})
    r = svc.handle("POST", "/v1/select", b'{"pool": "docs", "query": [...], "method": "mmr", "k": 10}')
    r.status, r.json()["indices"]

The answers are `ctxprune serve`'s, byte for byte but for the request id and the timings
(`elapsed_ms`): the service is the server's own router, called without a socket. Start-up
pools are resident when the constructor returns (the first that fails to load raises,
naming the pool and its file). Thread-safe: calls from many threads compute at once, each
in one of `max_concurrent` compute slots with `threads / max_concurrent` threads, with the
GIL released. A connection's own limits (the head and body timeouts, the drain on
SIGTERM) belong to the host that reads the socket.
"""

from __future__ import annotations

import json as _json
from os import PathLike
from typing import Any, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

from . import _native
from ._errors import InvalidInputError

__all__ = ["Service", "Response"]

PathArg = Union[str, "PathLike[str]"]


class Response(NamedTuple):
    """One answer: the status, the headers (lower-case names, in order) and the body."""

    status: int
    headers: List[Tuple[str, str]]
    body: bytes

    def header(self, name: str) -> Optional[str]:
        """The first value of header `name` (any case), or None."""
        name = name.lower()
        return next((v for k, v in self.headers if k == name), None)

    def json(self) -> Any:
        """The body parsed as JSON (every route but `/metrics` answers JSON)."""
        return _json.loads(self.body)


def _pairs(arg: str, value: Optional[Mapping[str, PathArg]]) -> List[Tuple[str, str]]:
    if value is None:
        return []
    if not isinstance(value, Mapping):
        raise InvalidInputError(f"invalid {arg}: expected a mapping of names to paths, got {type(value).__name__}")
    out = []
    for name, path in value.items():
        if not isinstance(name, str):
            raise InvalidInputError(f"invalid {arg}: a name is {type(name).__name__}, not a string")
        if not isinstance(path, (str, PathLike)):
            raise InvalidInputError(f"invalid {arg}[{name!r}]: expected a path, got {type(path).__name__}")
        out.append((name, str(path)))
    return out


class Service:
    """The service over one engine (`engine=None`: the module's default engine).

    `pools`: name -> a `.npy`, `.safetensors` (`FILE.safetensors:TENSOR`) or JSON lines
    file, resident at start (`serve --pool`). `models`: name -> a sentence-transformers
    directory (`--model`), `tokenizers`: name -> a tokenizer.json (`--tokenizer`). The
    limits are `ctxprune serve`'s flags of the same names, with the same defaults
    (`timeout` in seconds); `log=True` writes one JSON line per request on stderr.
    """

    def __init__(
        self,
        engine: Optional[_native.Engine] = None,
        *,
        pools: Optional[Mapping[str, PathArg]] = None,
        models: Optional[Mapping[str, PathArg]] = None,
        tokenizers: Optional[Mapping[str, PathArg]] = None,
        max_body_bytes: Optional[int] = None,
        timeout: Optional[float] = None,
        max_concurrent: Optional[int] = None,
        threads: Optional[int] = None,
        max_work: Optional[float] = None,
        max_request_memory: Optional[int] = None,
        max_queue: Optional[int] = None,
        max_pool_bytes: Optional[int] = None,
        oracle_url: Optional[str] = None,
        oracle_api: Optional[str] = None,
        allow_oracle_urls: bool = False,
        log: bool = False,
        max_embed_tokens: Optional[int] = None,
    ) -> None:
        from . import _engine

        self._native = _native.Service(
            _engine(engine),
            pools=_pairs("pools", pools),
            models=_pairs("models", models),
            tokenizers=_pairs("tokenizers", tokenizers),
            max_body_bytes=max_body_bytes,
            timeout=timeout,
            max_concurrent=max_concurrent,
            threads=threads,
            max_work=max_work,
            max_request_memory=max_request_memory,
            max_queue=max_queue,
            max_pool_bytes=max_pool_bytes,
            oracle_url=oracle_url,
            oracle_api=oracle_api,
            allow_oracle_urls=allow_oracle_urls,
            log=log,
            max_embed_tokens=max_embed_tokens,
        )

    def handle(
        self,
        method: str,
        path: str,
        body: Union[bytes, str, None] = None,
        headers: Sequence[Tuple[str, str]] = (),
    ) -> Response:
        """Answers one request (`path` with its query string, if any). Every answer the
        server gives, its errors included, is a `Response`; a request that is not HTTP (a
        bad method, path or header) raises `InvalidInputError`."""
        if isinstance(body, str):
            body = body.encode()
        elif body is not None and not isinstance(body, bytes):
            raise InvalidInputError(f"invalid body: expected bytes or str, got {type(body).__name__}")
        status, hdrs, out = self._native.handle(method, path, body, list(headers))
        return Response(status, hdrs, out)

    def request(self, method: str, path: str, json: Any = None) -> Response:
        """`handle` with `json` (any JSON value) as the body."""
        body = None if json is None else _json.dumps(json, allow_nan=False).encode()
        return self.handle(method, path, body, [("content-type", "application/json")] if body else [])

    def __repr__(self) -> str:
        return "Service(...)"
