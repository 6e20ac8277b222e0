"""`ctxprune_rs.service.Service`: `ctxprune serve`'s router in process. Every answer equals
the server's (`ctxprune serve --pool docs=FILE` on loopback) on the same request, errors
included, but for the timings; its settings are refused naming them; calls from many
threads give the answers one thread gives."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import serve_requests
from conftest import ServeProcess

import ctxprune_rs
from ctxprune_rs.service import Response, Service


@pytest.fixture(scope="module")
def docs(tmp_path_factory):
    x = serve_requests.pool()
    path = tmp_path_factory.mktemp("svc") / "docs.npy"
    np.save(path, x)
    return x, path


def test_every_answer_equals_the_servers(docs):
    x, path = docs
    svc = Service(ctxprune_rs.Engine("cpu"), pools={"docs": path})
    with ServeProcess("--pool", f"docs={path}") as server:
        for method, route, body in serve_requests.requests(x):
            r = svc.handle(method, route, body, [("content-type", "application/json")] if body else [])
            assert isinstance(r, Response)
            status, headers, out = server.call(method, route, body)
            serve_requests.check_same((r.status, r.body), (status, out), f"{method} {route} {body!r:.80}")
            assert r.header("content-type") == headers["content-type"]
            assert r.header("x-request-id")


def test_the_convenience_call_and_the_limits(docs):
    x, path = docs
    svc = Service(pools={"docs": str(path)}, max_body_bytes=1000)
    r = svc.request("POST", "/v1/select", {"pool": "docs", "query": x[3].tolist(), "method": "mmr", "k": 3,
                                           "costs": list(range(len(x)))})
    assert r.status == 413 and "1000 bytes" in r.json()["error"]
    # The docs pool holds 211 x 17 x 4 = 14,348 bytes.
    svc = Service(pools={"docs": str(path)}, max_pool_bytes=15000)
    r = svc.request("PUT", "/v1/pools/more", {"embeddings": [[1.0] * 10] * 30})
    assert r.status == 413 and "over --max-pool-bytes 15000" in r.json()["error"], r.json()
    r = svc.request("GET", "/readyz")
    assert r.status == 200 and r.json()["ready"] is True
    assert "ctxprune_requests_total" in svc.handle("GET", "/metrics").body.decode()


@pytest.mark.parametrize("kwargs, words", [
    ({"threads": 0}, "invalid threads: must be at least 1"),
    ({"max_concurrent": 0}, "invalid max_concurrent: must be at least 1"),
    ({"timeout": float("nan")}, "invalid timeout: must be in (0, 86400] seconds, got NaN"),
    ({"max_work": 0.5}, "invalid max_work: must be a finite number of operations >= 1"),
    ({"oracle_api": "tei"}, "invalid oracle_api: applies to oracle_url="),
    ({"max_embed_tokens": 9}, "invalid max_embed_tokens: applies to models="),
    ({"pools": {"a b": "x.npy"}}, "invalid pools: 'a b=x.npy': the name must be"),
    ({"pools": {"docs": "/nowhere/docs.npy"}}, "invalid pools: 'docs=/nowhere/docs.npy': no such file"),
    ({"pools": ["docs.npy"]}, "invalid pools: expected a mapping of names to paths, got list"),
    ({"pools": {"docs": 3}}, "invalid pools['docs']: expected a path, got int"),
    ({"tokenizers": {"o200k_base": "t.json"}}, "invalid tokenizers: 'o200k_base' is a built-in tokenizer's name"),
    ({"models": {"m": "/nowhere"}}, "/nowhere"),
])
def test_settings_are_refused_naming_them(kwargs, words):
    with pytest.raises(ctxprune_rs.CtxpruneError) as e:
        Service(ctxprune_rs.Engine("cpu"), **kwargs)
    assert words in str(e.value)
    assert "\n" not in str(e.value)


def test_a_pool_that_fails_to_load_raises_naming_it(tmp_path):
    bad = tmp_path / "bad.npy"
    bad.write_bytes(b"not a npy file")
    with pytest.raises(ctxprune_rs.InvalidInputError, match=r"invalid pools: pool 'bad' \(.*bad\.npy\)"):
        Service(ctxprune_rs.Engine("cpu"), pools={"bad": bad})


@pytest.mark.parametrize("method, path, body, headers, words", [
    ("GE T", "/healthz", None, [], "invalid method: 'GE T' is not an HTTP method"),
    ("GET", "healthz", None, [], "invalid path"),
    ("GET", "/healthz", None, [("bad name", "x")], "invalid headers: 'bad name' is not a header name"),
    ("GET", "/healthz", None, [("x-a", "line\nbreak")], "invalid headers: the value of 'x-a' is not a header value"),
    ("POST", "/v1/select", 3, [], "invalid body: expected bytes or str, got int"),
])
def test_a_request_that_is_not_http_raises(method, path, body, headers, words):
    svc = Service(ctxprune_rs.Engine("cpu"))
    with pytest.raises(ctxprune_rs.InvalidInputError) as e:
        svc.handle(method, path, body, headers)
    assert words in str(e.value)


def test_header_values_take_any_byte_as_the_server_does():
    svc = Service(ctxprune_rs.Engine("cpu"))
    assert svc.handle("GET", "/healthz", None, [("x-note", "caf\u00e9")]).status == 200


def test_many_threads_get_the_answers_of_one(docs):
    x, path = docs
    svc = Service(ctxprune_rs.Engine("cpu"), pools={"docs": path}, threads=2, max_concurrent=2)
    bodies = [json.dumps({"pool": "docs", "query": q, "method": m, "k": 9}).encode()
              for q in serve_requests.queries(x, 12, seed=3) for m in ("mmr", "dpp")]
    one = [svc.handle("POST", "/v1/select", b) for b in bodies]
    with ThreadPoolExecutor(6) as ex:
        many = list(ex.map(lambda b: svc.handle("POST", "/v1/select", b), bodies))
    for a, b in zip(one, many):
        assert a.status == b.status == 200
        assert json.loads(a.body)["selected"] == json.loads(b.body)["selected"]
        assert json.loads(a.body)["gains"] == json.loads(b.body)["gains"]
