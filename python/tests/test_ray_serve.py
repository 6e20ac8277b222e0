"""ctxprune_rs.ray_serve on a real local Ray cluster (ray[serve] from PyPI, `num_cpus=2`,
no dashboard, its HTTP proxy on 127.0.0.1): the deployment, two replicas with start-up
pools, answers every request as `ctxprune serve` does (errors included, but for the
timings); concurrent selects that differ only in their query are gathered into one
many-queries request and each still gets its own answer; the application builder reads
its arguments as `serve run` and config files give them."""

from __future__ import annotations

import json
import socket
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import serve_requests
from conftest import ServeProcess, framework

ray = framework("ray")
serve = framework("ray.serve")

from ctxprune_rs.ray_serve import CtxpruneDeployment, app  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Proxy:
    """Ray Serve's HTTP proxy, spoken to as `ServeProcess.call`."""

    def __init__(self, port: int):
        self.base = f"http://127.0.0.1:{port}"

    call = ServeProcess.call


@pytest.fixture(scope="module")
def deployed(ray_cluster, tmp_path_factory):
    x = serve_requests.pool()
    path = tmp_path_factory.mktemp("rayserve") / "docs.npy"
    np.save(path, x)
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    # Through the builder, as `serve run ctxprune_rs.ray_serve:app pools=docs=FILE ...` gives it.
    serve.run(app({"pools": f"docs={path}", "backend": "cpu", "num_replicas": "2", "num_cpus": "0.5",
                   "max_batch_size": "16", "batch_wait_timeout_s": "0.05"}), name="ctxprune", route_prefix="/")
    proxy = Proxy(port)
    deadline = time.monotonic() + 120
    while proxy.call("GET", "/readyz")[0] != 200:
        assert time.monotonic() < deadline, "the deployment did not answer /readyz within 120 s"
        time.sleep(0.2)
    with ServeProcess("--pool", f"docs={path}") as server:
        yield x, proxy, server
    serve.shutdown()


def test_the_deployment_answers_as_ctxprune_serve(deployed):
    x, proxy, server = deployed
    for method, route, body in serve_requests.requests(x):
        if method in ("PUT", "DELETE"):
            continue  # a pool uploaded through the proxy lands on one replica of the two
        status, headers, out = proxy.call(method, route, body)
        want_status, want_headers, want = server.call(method, route, body)
        serve_requests.check_same((status, out), (want_status, want), f"{method} {route} {body!r:.80}")
        assert headers["content-type"] == want_headers["content-type"]
    # A route's query string is passed on.
    assert proxy.call("GET", "/v1/pools?x=1")[0] == server.call("GET", "/v1/pools?x=1")[0] == 200


def odd_bodies(q) -> list:
    """Select bodies the gathering must leave alone (the server reads them otherwise than
    Python would): each must get the server's own answer."""
    qs = json.dumps(q)
    return [
        f'{{"pool": "docs", "query": {qs}, "method": "mmr", "k": -0}}'.encode(),
        f'{{"pool": "docs", "query": {qs}, "method": "mmr", "k": 8, "lambda": 0.{"5" * 130}}}'.encode(),
        f'{{"pool": "docs", "query": {qs}, "method": "mmr", "k": 8, "retained": [-0]}}'.encode(),
        json.dumps({"pool": "docs", "query": q, "method": "mmr", "k": 8}).encode("utf-16"),
        b"\xef\xbb\xbf" + json.dumps({"pool": "docs", "query": q, "method": "mmr", "k": 8}).encode(),
        f'{{"pool": "docs", "query": {qs}, "method": "mmr", "k": 8, "k": 9}}'.encode(),
    ]


def test_concurrent_selects_are_gathered_and_each_gets_its_own_answer(deployed):
    x, proxy, server = deployed
    qs = serve_requests.queries(x, 60, seed=11)
    costs = [float(10 + i % 7) for i in range(len(x))]
    bodies = []
    for i, q in enumerate(qs):  # three groups of options, each gathered on its own
        if i % 3 == 0:
            bodies.append({"pool": "docs", "query": q, "method": "mmr", "k": 8})
        elif i % 3 == 1:
            bodies.append({"pool": "docs", "query": q, "method": "dpp", "token_budget": 60, "costs": costs})
        else:
            bodies.append({"pool": "docs", "query": q, "method": "mmr", "k": 6, "retained": [0, 3], "lambda": 0.7})
    bodies = [json.dumps(b).encode() for b in bodies]
    # One bad query among them: its batch is refused, and every member of it answered alone.
    bodies[17] = json.dumps({"pool": "docs", "query": [0.0] * len(qs[0]), "method": "mmr", "k": 8}).encode()
    bodies += odd_bodies(qs[0])
    with ThreadPoolExecutor(16) as ex:
        got = list(ex.map(lambda b: proxy.call("POST", "/v1/select", b), bodies))
    gathered = 0
    for i, ((status, headers, out), body) in enumerate(zip(got, bodies)):
        want_status, _, want = server.call("POST", "/v1/select", body)
        serve_requests.check_same((status, out), (want_status, want), f"body {i}: {body[:120]!r}")
        gathered += int(headers.get("x-ctxprune-gathered", "1")) > 1
        if i >= len(qs):
            assert "x-ctxprune-gathered" not in headers, f"body {i} was gathered"
    assert got[17][0] == 422
    assert gathered > 0, "no request was gathered with another"


def test_paths_and_headers_are_passed_as_sent(deployed):
    _, proxy, server = deployed
    for path in ["/v1/pools/a%20b", "/v1/pools/a%2Fb", "/v1/pools/docs?x=%20"]:
        got, want = proxy.call("GET", path), server.call("GET", path)
        serve_requests.check_same((got[0], got[2]), (want[0], want[2]), path)
    got = proxy.call("GET", "/healthz", headers={"x-note": "caf\u00e9"})
    assert got[0] == 200 == server.call("GET", "/healthz", headers={"x-note": "caf\u00e9"})[0]


def test_the_builder_reads_strings_and_refuses_bad_ones(tmp_path):
    built = app({"pools": "a=/x/a.npy,b=/x/b.npy", "max_batch_size": "4", "timeout": "2.5",
                 "allow_oracle_urls": "false", "num_replicas": 3})
    assert built is not None
    for args, words in [
        ({"pools": "a"}, "invalid pools: 'a' is not NAME=PATH"),
        ({"pools": "a=x,a=y"}, "invalid pools: the name 'a' is given twice"),
        ({"pools": 3}, "invalid pools: expected a mapping or NAME=PATH"),
        ({"max_batch_size": "many"}, "invalid max_batch_size: 'many' is not an integer"),
        ({"timeout": "soon"}, "invalid timeout: 'soon' is not a number"),
        ({"allow_oracle_urls": "yes"}, "invalid allow_oracle_urls: 'yes' is not true or false"),
    ]:
        with pytest.raises(ValueError, match=words):
            app(args)


def test_the_replica_refuses_bad_batching_settings():
    # The class behind the deployment, constructed directly (outside a replica).
    cls = CtxpruneDeployment.func_or_class
    for kwargs, words in [({"max_batch_size": 0}, "invalid max_batch_size"),
                          ({"batch_wait_timeout_s": -1}, "invalid batch_wait_timeout_s")]:
        with pytest.raises(ValueError, match=words):
            cls(backend="cpu", **kwargs)
