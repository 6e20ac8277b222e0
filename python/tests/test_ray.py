"""ctxprune_rs.ray on a real local Ray cluster started by the test (ray from PyPI,
`num_cpus=2`, no dashboard, loopback only): 2,000 queries through `SelectBatches` and
`RerankBatches` equal the sequential `ctxprune_rs.select` / `Reranker.rerank` row for row;
bad rows come back as errors in their rows (or raise with `strict`); an actor that dies
in the middle of the dataset is restarted (Ray Data's default) and every row comes back
exactly once."""

from __future__ import annotations

import os
import sys
import tempfile

import numpy as np
import pytest
from conftest import framework

ray = framework("ray")

import ctxprune_rs  # noqa: E402
from ctxprune_rs.ray import RerankBatches, SelectBatches  # noqa: E402

N_QUERIES = 2000
# The actors unpickle the classes defined here (CrashOnce): by value, since the workers
# cannot import this test module.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def cluster(ray_cluster):
    yield


@pytest.fixture(scope="module")
def corpus():
    rng = np.random.default_rng(20261204)
    centres = rng.standard_normal((40, 24))
    pool = (centres[rng.integers(0, 40, 701)] + 0.5 * rng.standard_normal((701, 24))).astype(np.float32)
    queries = (centres[rng.integers(0, 40, N_QUERIES)] + 0.3 * rng.standard_normal((N_QUERIES, 24))).astype(np.float32)
    d = tempfile.mkdtemp()
    path = os.path.join(d, "docs.npy")
    np.save(path, pool)
    return pool, queries, path


def by_id(rows):
    """The rows by id, each id once."""
    ids = sorted(int(r["id"]) for r in rows)
    assert len(set(ids)) == len(ids), "a row came back twice"
    return {int(r["id"]): r for r in rows}


def test_select_over_a_dataset_equals_the_sequential_calls(cluster, corpus):
    pool, queries, path = corpus
    ds = ray.data.from_items([{"id": i, "query": q, "pool": "docs"} for i, q in enumerate(queries)])
    out = ds.map_batches(SelectBatches, batch_format="numpy", batch_size=100, compute=ray.data.ActorPoolStrategy(size=2),
                         fn_constructor_kwargs={"method": "mmr", "k": 10, "lambda_": 0.6, "pools": {"docs": path},
                                                "backend": "cpu"}).take_all()
    rows = by_id(out)
    assert sorted(rows) == list(range(N_QUERIES))
    for i in range(0, N_QUERIES, 7):
        want = ctxprune_rs.select(pool, queries[i], method="mmr", k=10, lambda_=0.6)
        assert rows[i]["error"] is None
        assert list(rows[i]["indices"]) == list(want.indices), i
        assert np.array_equal(rows[i]["gains"], want.gains), i
        assert rows[i]["backend"] == "cpu"


def test_rerank_over_a_dataset_equals_the_sequential_calls(cluster, corpus):
    pool, queries, _ = corpus
    n = 300
    rng = np.random.default_rng(7)
    scores = rng.random((n, len(pool)))
    items = [{"id": i, "query": queries[i], "embeddings": pool, "oracle_scores": scores[i]} for i in range(n)]
    out = ray.data.from_items(items).map_batches(
        RerankBatches, batch_format="numpy", batch_size=25, compute=ray.data.ActorPoolStrategy(size=2),
        fn_constructor_kwargs={"budget": 40, "capacity": 5, "backend": "cpu"}).take_all()
    rows = by_id(out)
    assert sorted(rows) == list(range(n)) and "embeddings" not in out[0]
    r = ctxprune_rs.Reranker(40, 5)
    for i in range(0, n, 3):
        want = r.rerank(pool, queries[i], lambda idx, s=scores[i]: s[idx])
        assert rows[i]["error"] is None, rows[i]["error"]
        assert list(rows[i]["indices"]) == list(want.indices), i
        assert rows[i]["oracle_calls"] == want.oracle_calls <= 40


def test_an_oracle_built_in_each_actor_over_a_pool_in_the_object_store(cluster, corpus):
    pool, queries, _ = corpus
    weights = np.random.default_rng(3).random(len(pool))

    def make_oracle():  # runs in the actor: a model or a client would be opened here
        w = weights.copy()
        return lambda row, idx: w[idx] * (1 + 0 * row["id"])

    items = [{"id": i, "query": queries[i], "pool": "docs"} for i in range(60)]
    out = ray.data.from_items(items).map_batches(
        RerankBatches, batch_format="numpy", batch_size=20, compute=ray.data.ActorPoolStrategy(size=1),
        fn_constructor_kwargs={"budget": 30, "capacity": 4, "oracle": make_oracle, "batch": 5,
                               "pools": {"docs": ray.put(pool)}, "backend": "cpu"}).take_all()
    rows = by_id(out)
    r = ctxprune_rs.Reranker(30, 4, batch=5)
    for i in range(60):
        want = r.rerank(pool, queries[i], lambda idx: weights[idx])
        assert list(rows[i]["indices"]) == list(want.indices)


class TeiStub:
    """A TEI-shaped rerank server on 127.0.0.1 (`POST` {query, texts} -> [{index, score}]):
    a text "doc I" scores `weights[I]`; counts the texts it scored."""

    def __init__(self, weights):
        import http.server
        import threading

        stub = self
        self.scored = 0
        self.lock = threading.Lock()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                import json

                req = json.loads(self.rfile.read(int(self.headers["content-length"])))
                with stub.lock:  # the server answers on a thread per request
                    stub.scored += len(req["texts"])
                out = json.dumps([{"index": i, "score": float(weights[int(t.split()[1])])}
                                  for i, t in enumerate(req["texts"])]).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/rerank"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()


def test_a_url_oracle_is_called_from_the_actors(cluster, corpus):
    pool, queries, path = corpus
    weights = np.random.default_rng(5).random(len(pool))
    texts = [f"doc {i}" for i in range(len(pool))]
    stub = TeiStub(weights)
    try:
        items = [{"id": i, "query": queries[i], "pool": "docs", "texts": texts, "query_text": f"q {i}"}
                 for i in range(24)]
        out = ray.data.from_items(items).map_batches(
            RerankBatches, batch_format="numpy", batch_size=8, compute=ray.data.ActorPoolStrategy(size=2),
            fn_constructor_kwargs={"budget": 30, "capacity": 4, "oracle": stub.url, "api": "tei",
                                   "pools": {"docs": path}, "backend": "cpu"}).take_all()
    finally:
        stub.close()
    rows = by_id(out)
    r = ctxprune_rs.Reranker(30, 4)
    calls = 0
    for i in range(24):
        want = r.rerank(pool, queries[i], lambda idx: weights[idx])
        assert rows[i]["error"] is None, rows[i]["error"]
        assert list(rows[i]["indices"]) == list(want.indices), i
        assert np.array_equal(rows[i]["scores"], want.scores), i
        calls += int(rows[i]["oracle_calls"])
    assert stub.scored == calls  # each row's oracle calls went to the server, once


def test_bad_rows_are_errors_in_their_rows(cluster, corpus):
    pool, queries, path = corpus
    items = [{"id": i, "query": queries[i], "pool": "docs"} for i in range(20)]
    items[3]["pool"] = "nope"
    items[5]["query"] = np.full(24, np.nan, dtype=np.float32)
    items[8]["query"] = queries[8][:5]
    ds = ray.data.from_items(items)
    kwargs = {"method": "dpp", "k": 4, "pools": {"docs": path}, "backend": "cpu"}
    rows = by_id(ds.map_batches(SelectBatches, batch_format="numpy", batch_size=10, compute=ray.data.ActorPoolStrategy(size=1),
                                fn_constructor_kwargs=kwargs).take_all())
    assert "no shared pool named 'nope' (loaded: docs)" in rows[3]["error"]
    assert "query" in rows[5]["error"] and "query" in rows[8]["error"]
    for i in set(range(20)) - {3, 5, 8}:
        assert rows[i]["error"] is None
        assert list(rows[i]["indices"]) == list(ctxprune_rs.select(pool, queries[i], method="dpp", k=4).indices)
    for i in (3, 5, 8):
        assert rows[i]["indices"] is None and "\n" not in rows[i]["error"]
    with pytest.raises(Exception, match="nope"):
        ds.map_batches(SelectBatches, batch_format="numpy", batch_size=10, compute=ray.data.ActorPoolStrategy(size=1),
                       fn_constructor_kwargs=dict(kwargs, strict=True)).take_all()
    with pytest.raises(ValueError, match="^invalid pools\\['x'\\]: 'missing.txt' is not a .npy file"):
        SelectBatches(pools={"x": "missing.txt"})
    with pytest.raises(ValueError, match="^invalid pools\\['y'\\]: [^\\n]*missing.npy") as e:
        SelectBatches(pools={"y": "missing.npy"})
    assert str(e.value).count("invalid pools") == 1
    with pytest.raises(ValueError, match="invalid k\\b"):
        SelectBatches(k=-1)
    # A batch that already has a column the callable adds is refused, naming it.
    with pytest.raises(ValueError, match="column 'error'"):
        SelectBatches(pools={"docs": path})({"query": queries[:2], "pool": np.array(["docs", "docs"]),
                                             "error": np.array([0, 0])})


class CrashOnce(SelectBatches):
    """Dies (the whole actor process) on its first batch holding row 1000, once per test."""

    def __init__(self, marker, **kw):
        super().__init__(**kw)
        self.marker = marker

    def __call__(self, batch):
        if 1000 in set(int(i) for i in batch["id"]) and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            os._exit(1)
        return super().__call__(batch)


def test_an_actor_that_dies_is_restarted_and_no_row_is_lost_or_doubled(cluster, corpus):
    pool, queries, path = corpus
    marker = os.path.join(tempfile.mkdtemp(), "crashed")
    ds = ray.data.from_items([{"id": i, "query": q, "pool": "docs"} for i, q in enumerate(queries)])
    out = ds.map_batches(CrashOnce, batch_format="numpy", batch_size=100, compute=ray.data.ActorPoolStrategy(size=2),
                         fn_constructor_kwargs={"marker": marker, "method": "mmr", "k": 5,
                                                "pools": {"docs": path}, "backend": "cpu"}).take_all()
    assert os.path.exists(marker), "the actor never crashed"
    ids = [int(r["id"]) for r in out]
    assert sorted(ids) == list(range(N_QUERIES))  # every row, once
    rows = by_id(out)
    for i in (0, 999, 1000, 1001, 1999):
        assert list(rows[i]["indices"]) == list(ctxprune_rs.select(pool, queries[i], method="mmr", k=5).indices)
