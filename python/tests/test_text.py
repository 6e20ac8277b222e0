"""Text in from Python: ctxprune_rs.embed against `ctxprune embed` (bit for bit) and
sentence-transformers' own vectors of the fixture; select_texts / rerank_texts against
the calls they stand for; token counters; pickling of every configured object; a process
pool answering as one process does; and `import ctxprune_rs` importing no framework."""

from __future__ import annotations

import concurrent.futures
import json
import math
import pickle
import subprocess
import sys

import numpy as np
import pytest
from conftest import ROOT, cli, minilm_dir, passages, problem, sigmoid

import ctxprune_rs

FIXTURE = ROOT / "tests" / "data" / "minilm" / "minilm-reference.json"


def fixture_texts():
    recs = json.loads(FIXTURE.read_text())["records"]
    return [r["text"] for r in recs], np.asarray([r["embedding"] for r in recs], dtype=np.float32)


def test_embed_equals_the_cli_bit_for_bit_and_sentence_transformers(tmp_path):
    model = minilm_dir()
    texts, reference = fixture_texts()
    got = ctxprune_rs.embed(texts, model)
    assert got.dtype == np.float32 and got.shape == (len(texts), 384)
    src = tmp_path / "texts.jsonl"
    src.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    out = tmp_path / "e.npy"
    cli("embed", "--model", str(model), "--input", str(src), "--out", str(out), "--quiet")
    assert np.load(out).tobytes() == got.tobytes()
    # sentence-transformers (torch) made the fixture: the same vectors to float32 noise.
    assert np.max(np.abs(got - reference)) < 2e-5
    # Batching and a Path or an Encoder give the same bits.
    enc = ctxprune_rs.Encoder(model)
    assert enc.embed(texts, batch_size=3).tobytes() == got.tobytes()
    seen = []
    enc.embed(texts, batch_size=5, progress=lambda done, total: seen.append((done, total)))
    assert seen[-1] == (len(texts), len(texts)) and len(seen) == math.ceil(len(texts) / 5)
    assert pickle.loads(pickle.dumps(enc)).embed(texts[:3]).tobytes() == got[:3].tobytes()


def test_embed_errors_name_the_argument(tmp_path):
    model = minilm_dir()
    with pytest.raises(ctxprune_rs.InvalidInputError, match=r"texts\[1\]: expected a str"):
        ctxprune_rs.embed(["a", 2], model)
    with pytest.raises(ctxprune_rs.InvalidInputError, match="empty"):
        ctxprune_rs.embed([], model)
    with pytest.raises(ctxprune_rs.InvalidInputError, match="batch_size"):
        ctxprune_rs.embed(["a"], model, batch_size=0)
    with pytest.raises(ctxprune_rs.CtxpruneError, match=str(tmp_path)):
        ctxprune_rs.Encoder(tmp_path)

    def boom(done, total):
        raise RuntimeError("stop here")

    with pytest.raises(RuntimeError, match="stop here"):
        ctxprune_rs.embed(["a", "b"], model, batch_size=1, progress=boom)


def test_select_texts_is_embed_count_and_select():
    model = minilm_dir()
    texts = passages(30)
    query = "time zones and dates"
    got = ctxprune_rs.select_texts(texts, query, model=model, method="dpp", k=6, token_budget=90)
    X = ctxprune_rs.embed(texts, model)
    q = ctxprune_rs.embed([query], model)[0]
    costs = [ctxprune_rs.count_tokens(t) for t in texts]
    want = ctxprune_rs.select(X, q, "dpp", k=6, token_budget=90, costs=costs)
    assert got.indices == want.indices.tolist()
    assert got.texts == [texts[i] for i in got.indices]
    assert got.tokens == [costs[i] for i in got.indices] and sum(got.tokens) <= 90
    assert got.scores == want.gains.tolist()
    lex = ctxprune_rs.select_texts(texts, query, method="lexical", k=3)
    assert lex.indices == ctxprune_rs.select(None, None, "lexical", k=3, texts=texts, query_text=query).indices.tolist()
    with pytest.raises(ctxprune_rs.InvalidInputError, match="needs embeddings; give model"):
        ctxprune_rs.select_texts(texts, query, method="mmr", k=3)


def test_rerank_texts_calls_the_scorer_at_most_budget_times():
    model = minilm_dir()
    texts = passages(30)
    query = "json serialisation"
    calls = []

    def score(q, batch):
        calls.append(len(batch))
        return [3.0 if "json" in t else -1.0 + 0.01 * len(t) for t in batch]

    got = ctxprune_rs.rerank_texts(texts, query, score, model=model, budget=12, capacity=3)
    assert sum(calls) <= 12
    X = ctxprune_rs.embed(texts, model)
    q = ctxprune_rs.embed([query], model)[0]
    sig = sigmoid
    oracle = lambda idx: [sig(3.0 if "json" in texts[int(i)] else -1.0 + 0.01 * len(texts[int(i)])) for i in idx]  # noqa: E731
    want = ctxprune_rs.rerank(X, q, oracle, 12, 3)
    assert got.indices == want.indices.tolist()
    with pytest.raises(ctxprune_rs.InvalidInputError, match="score_map"):
        ctxprune_rs.rerank_texts(texts, query, score, model=model, budget=5, capacity=2, score_map="tanh")


def test_token_counters_are_the_clis():
    texts = ["Hello, world!", "ctxprune counts tokens exactly", "", "日本語のテキスト"]
    for name in ("o200k_base", "cl100k_base", "approx"):
        c = ctxprune_rs.token_counter(name)
        assert c is ctxprune_rs.token_counter(name)  # loaded once
        assert c.count_many(texts) == [ctxprune_rs.count_tokens(t, name) for t in texts]
        assert pickle.loads(pickle.dumps(c)).count_many(texts) == c.count_many(texts)
    assert ctxprune_rs.count_tokens("Hello, world!", "o200k_base") == 4
    with pytest.raises(ctxprune_rs.InvalidInputError, match="unknown tokenizer"):
        ctxprune_rs.token_counter("gpt9")


@pytest.mark.parametrize("unit", [False, True], ids=["raw rows", "unit rows"])
def test_engine_pool_selector_reranker_pickle_to_the_same_results(rng, unit):
    X, q, costs = problem(rng, 211, 19)
    if unit:  # kept as given by the pool (norms within 2**-8 of 1)
        X = (X / np.linalg.norm(X, axis=1, keepdims=True)).astype(np.float32)
    engine = ctxprune_rs.Engine("cpu")
    pool = ctxprune_rs.Pool(X, engine=engine)
    assert (pool.rows().tobytes() == X.tobytes()) == unit
    for obj in (engine, pool):
        assert repr(pickle.loads(pickle.dumps(obj))) == repr(obj)
    pool2 = pickle.loads(pickle.dumps(pool))
    assert pool2.rows().tobytes() == pool.rows().tobytes()
    assert pool2.unit_rows().tobytes() == pool.unit_rows().tobytes()
    for method, kw in (("mmr", dict(k=13, lambda_=0.6)), ("dpp", dict(token_budget=900)), ("coverage", dict(k=9))):
        s = ctxprune_rs.Selector(method, engine=engine, **kw)
        s2 = pickle.loads(pickle.dumps(s))
        a = s.select(pool, q, costs=costs)
        b = s2.select(pool2, q, costs=costs)
        assert a.indices.tolist() == b.indices.tolist() and a.gains.tobytes() == b.gains.tobytes()
    r = ctxprune_rs.Reranker(20, 5, engine=engine, kernel="cosine")
    r2 = pickle.loads(pickle.dumps(r))
    oracle = lambda idx: [float(abs(math.sin(i))) for i in idx]  # noqa: E731
    a, b = r.rerank(pool, q, oracle), r2.rerank(pool2, q, oracle)
    assert a.indices.tolist() == b.indices.tolist() and a.scores.tobytes() == b.scores.tobytes()


def _select_in_worker(args):
    selector, pool, q = args
    sel = selector.select(pool, q)
    return sel.indices.tolist(), sel.gains.tobytes()


def test_a_process_pool_answers_200_selections_as_one_process(rng):
    X, _, _ = problem(rng, 301, 23)
    pool = ctxprune_rs.Pool(X, engine=ctxprune_rs.Engine("cpu"))
    selector = ctxprune_rs.Selector("mmr", k=8, lambda_=0.5, engine=pool.engine)
    queries = [X[i] + 0.1 * rng.standard_normal(23).astype(np.float32) for i in range(200)]
    want = [_select_in_worker((selector, pool, qq)) for qq in queries]
    with concurrent.futures.ProcessPoolExecutor(max_workers=2) as ex:
        got = list(ex.map(_select_in_worker, [(selector, pool, qq) for qq in queries], chunksize=20))
    assert got == want


def test_importing_the_package_imports_no_framework():
    code = ("import sys, ctxprune_rs, ctxprune_rs.langchain, ctxprune_rs.text\n"
            "bad = [m for m in ('langchain_core', 'llama_index', 'haystack', 'torch') if m in sys.modules]\n"
            "print(bad)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"
