"""The requests both in-process hosts of the service (`ctxprune_rs.service.Service` and the
Ray Serve deployment) are checked on against `ctxprune serve`: every answer, errors
included, must equal the server's but for the timings."""

from __future__ import annotations

import json

import numpy as np

N, D = 211, 17


def pool(seed: int = 20261204) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((12, D))
    return (centres[rng.integers(0, 12, N)] + 0.4 * rng.standard_normal((N, D))).astype(np.float32)


def queries(x: np.ndarray, n: int, seed: int = 7) -> list:
    rng = np.random.default_rng(seed)
    return [(x[i] * 0.5 + 0.2 * rng.standard_normal(D)).astype(np.float32).tolist() for i in rng.integers(0, N, n)]


def requests(x: np.ndarray) -> list:
    """(method, path, body bytes or None), in an order whose pool changes (PUT, DELETE)
    both hosts apply alike."""
    q = queries(x, 4)
    small = x[:30].tolist()
    scores = [((i * 37) % N) / N for i in range(N)]
    msgs = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "tool_calls": [{"id": "a", "type": "function",
                                              "function": {"name": "search", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "a", "content": "long result " * 50},
        {"role": "assistant", "tool_calls": [{"id": "b", "type": "function",
                                              "function": {"name": "open", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "b", "content": "page"},
    ]

    def j(v):
        return json.dumps(v).encode()

    return [
        ("GET", "/healthz", None),
        ("GET", "/v1/pools/docs", None),
        ("POST", "/v1/select", j({"pool": "docs", "query": q[0], "method": "mmr", "k": 7})),
        ("POST", "/v1/select", j({"pool": "docs", "query": q[1], "method": "dpp", "k": 11, "lambda": 0.3})),
        ("POST", "/v1/select", j({"pool": "docs", "queries": q, "method": "mmr", "k": 5})),
        ("POST", "/v1/select", j({"embeddings": small, "query": q[2], "method": "coverage", "k": 4})),
        ("POST", "/v1/rerank", j({"pool": "docs", "query": q[3], "budget": 29, "capacity": 6,
                                  "oracle_scores": scores})),
        ("POST", "/v1/mask", j({"messages": msgs, "window": 1})),
        ("PUT", "/v1/pools/small", j({"embeddings": small})),
        ("POST", "/v1/select", j({"pool": "small", "query": q[0], "method": "grn", "k": 3})),
        ("DELETE", "/v1/pools/small", None),
        ("DELETE", "/v1/pools/small", None),
        ("POST", "/v1/select", b"{not json"),
        ("POST", "/v1/select", b'{"pool": "docs", "query": [1, 2], "query": [2, 1], "method": "mmr"}'),
        ("POST", "/v1/select", b'{"pool": "docs", "query": [NaN, 1], "method": "mmr", "k": 2}'),
        ("POST", "/v1/select", j({"pool": "docs", "query": [1.0, 2.0], "method": "mmr", "k": 3})),
        ("POST", "/v1/select", j({"pool": "nope", "query": q[0], "method": "mmr", "k": 3})),
        ("POST", "/v1/select", j({"pool": "docs", "query": q[0], "method": "mmr", "k": 3, "extra": 1})),
        ("POST", "/v1/rerank", j({"pool": "docs", "query": q[3], "capacity": 6})),
        ("GET", "/v1/select", None),
        ("GET", "/v1/nowhere", None),
        ("GET", "/openapi.json", None),
    ]


def check_same(got, want, what: str) -> None:
    """`got` and `want` are (status, body bytes): the same status and, parsed, the same
    JSON but for the timings."""
    from conftest import untimed

    assert got[0] == want[0], f"{what}: {got[0]} {got[1][:300]!r} against {want[0]} {want[1][:300]!r}"
    assert untimed(json.loads(got[1])) == untimed(json.loads(want[1])), what
    if want[0] >= 400:
        line = json.loads(got[1])["error"]
        assert line and "\n" not in line, what
