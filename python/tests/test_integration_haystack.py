"""ctxprune_rs.haystack's components inside a Haystack Pipeline (InMemoryDocumentStore,
its BM25 retriever, documents with embeddings): the documents chosen and their order equal
ctxprune_rs.select / ctxprune_rs.rerank on the same vectors, and the components round-trip
through to_dict / from_dict and a pipeline's YAML."""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import framework, hashed_vector, passages, sigmoid

import ctxprune_rs

hs = framework("haystack")
hs_store = framework("haystack.document_stores.in_memory")
hs_ret = framework("haystack.components.retrievers.in_memory")
from ctxprune_rs.haystack import CtxpruneBudgetedRanker, CtxpruneRanker  # noqa: E402

QUERY = "parse dates with time zones"
CALLS = []


def scorer(query, texts):
    """The test's cross-encoder (an importable function, so the component serialises)."""
    CALLS.append(len(texts))
    return [math.sin(len(t) * 0.41) * 2.0 for t in texts]


def pipeline(component):
    store = hs_store.InMemoryDocumentStore()
    store.write_documents([hs.Document(content=t, embedding=hashed_vector(t)) for t in passages(41)])
    p = hs.Pipeline()
    p.add_component("retriever", hs_ret.InMemoryBM25Retriever(document_store=store, top_k=25))
    p.add_component("ctx", component)
    p.connect("retriever.documents", "ctx.documents")
    return p, store


def run(p):
    return p.run({"retriever": {"query": QUERY},
                  "ctx": {"query": QUERY, "query_embedding": hashed_vector(QUERY)}},
                 include_outputs_from={"retriever"})


@pytest.mark.parametrize("method,opts", [
    ("mmr", dict(top_k=6, lambda_=0.6)),
    ("dpp", dict(top_k=5)),
    ("dpp", dict(token_budget=80)),
    ("coverage", dict(token_budget=70)),
    ("lexical", dict(top_k=4)),
])
def test_ranker_in_a_pipeline_picks_what_select_picks(method, opts):
    p, _ = pipeline(CtxpruneRanker(method=method, **opts))
    out = run(p)
    retrieved = out["retriever"]["documents"]
    got = out["ctx"]["documents"]
    texts = [d.content for d in retrieved]
    X = np.asarray([d.embedding for d in retrieved], dtype=np.float32)
    q = np.asarray(hashed_vector(QUERY), dtype=np.float32)
    costs = ctxprune_rs.token_counter().count_many(texts)
    kw = {"k": opts.get("top_k")} if "top_k" in opts else {}
    if "lambda_" in opts:
        kw["lambda_"] = opts["lambda_"]
    if "token_budget" in opts:
        kw.update(token_budget=opts["token_budget"], costs=costs)
    if method == "lexical":
        want = ctxprune_rs.select(None, None, "lexical", texts=texts, query_text=QUERY, **kw)
    else:
        want = ctxprune_rs.select(X, q, method, **kw)
    assert [d.content for d in got] == [texts[i] for i in want.indices]
    assert [d.score for d in got] == want.gains.tolist()
    assert [d.meta["ctxprune_rank"] for d in got] == list(range(len(got)))
    assert [d.meta["ctxprune_tokens"] for d in got] == [costs[i] for i in want.indices]


def test_serialisation_round_trips_through_a_pipelines_yaml():
    p, store = pipeline(CtxpruneRanker(method="dpp", top_k=5, token_budget=120, lambda_=None))
    want = [d.id for d in run(p)["ctx"]["documents"]]
    d = CtxpruneRanker(method="mmr", top_k=3, lambda_=0.4).to_dict()
    assert d["type"] == "ctxprune_rs.haystack.CtxpruneRanker"
    assert d["init_parameters"]["lambda_"] == 0.4
    yaml = p.dumps()
    assert "ctxprune_rs.haystack.CtxpruneRanker" in yaml
    # Haystack refuses classes from modules not on its allowlist: the user allows ours.
    p2 = hs.Pipeline.loads(yaml, allowed_modules=["ctxprune_rs.haystack"])
    p2.get_component("retriever").document_store = store
    assert [x.id for x in run(p2)["ctx"]["documents"]] == want


def test_budgeted_ranker_calls_at_most_budget_and_matches_rerank():
    CALLS.clear()
    p, _ = pipeline(CtxpruneBudgetedRanker(scorer=scorer, budget=9, top_k=4))
    out = run(p)
    assert sum(CALLS) <= 9
    retrieved = out["retriever"]["documents"]
    texts = [d.content for d in retrieved]
    X = np.asarray([d.embedding for d in retrieved], dtype=np.float32)
    q = np.asarray(hashed_vector(QUERY), dtype=np.float32)
    oracle = lambda idx: [sigmoid(math.sin(len(texts[int(i)]) * 0.41) * 2.0) for i in idx]  # noqa: E731
    want = ctxprune_rs.rerank(X, q, oracle, 9, 4)
    got = out["ctx"]["documents"]
    assert [d.content for d in got] == [texts[i] for i in want.indices]
    assert all(d.meta["ctxprune_oracle_calls"] == want.oracle_calls for d in got)
    d = CtxpruneBudgetedRanker(scorer=scorer, budget=9, top_k=4).to_dict()
    assert d["init_parameters"]["scorer"].endswith("test_integration_haystack.scorer")
    from haystack.core.serialization import allow_deserialization_module

    allow_deserialization_module(scorer.__module__)
    assert CtxpruneBudgetedRanker.from_dict(d).scorer is scorer


def test_errors_name_the_document_and_the_option():
    with pytest.raises(ctxprune_rs.InvalidInputError, match="invalid method"):
        CtxpruneRanker(method="nope", top_k=3)
    docs = [hs.Document(content=t, embedding=hashed_vector(t)) for t in passages(5)]
    docs[1] = hs.Document(content=docs[1].content)
    with pytest.raises(ctxprune_rs.InvalidInputError, match=r"documents\[1\]: no embedding"):
        CtxpruneRanker(method="dpp", top_k=2).run(documents=docs, query=QUERY, query_embedding=hashed_vector(QUERY))
    assert CtxpruneRanker(method="dpp", top_k=2).run(documents=[])["documents"] == []
