"""ctxprune_rs.llamaindex's postprocessors inside LlamaIndex's own query engine
(VectorStoreIndex over MockEmbedding, MockLLM): the nodes chosen, their order and scores
equal ctxprune_rs.select / ctxprune_rs.rerank on the same vectors."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest
from conftest import framework, hashed_vector, passages, sigmoid

import ctxprune_rs

li = framework("llama_index.core")
li_emb = framework("llama_index.core.base.embeddings.base")
li_mock = framework("llama_index.core.embeddings")
li_llms = framework("llama_index.core.llms")
li_schema = framework("llama_index.core.schema")
from ctxprune_rs.llamaindex import CtxpruneNodeRerank, CtxpruneNodeSelector  # noqa: E402

QUERY = "how do I parse dates with time zones?"


class HashEmbedding(li_emb.BaseEmbedding):
    """A deterministic LlamaIndex embedding model (a seeded vector per text)."""

    def _get_query_embedding(self, query):
        return hashed_vector(query)

    async def _aget_query_embedding(self, query):
        return hashed_vector(query)

    def _get_text_embedding(self, text):
        return hashed_vector(text)


def engine_and_nodes(postprocessors, top=30):
    docs = [li.Document(text=t) for t in passages(41)]
    mock = li_mock.MockEmbedding(embed_dim=8)
    index = li.VectorStoreIndex.from_documents(docs, embed_model=mock)
    qe = index.as_query_engine(similarity_top_k=top, node_postprocessors=postprocessors, llm=li_llms.MockLLM(),
                               embed_model=mock)
    nodes = index.as_retriever(similarity_top_k=top, embed_model=mock).retrieve(QUERY)
    return qe, nodes


def vectors_of(nodes):
    texts = [n.node.get_content() for n in nodes]
    X = np.asarray([hashed_vector(t) for t in texts], dtype=np.float32)
    q = np.asarray(hashed_vector(QUERY), dtype=np.float32)
    return texts, X, q


@pytest.mark.parametrize("method,opts", [
    ("mmr", dict(k=6, lambda_=0.5)),
    ("dpp", dict(k=5)),
    ("dpp", dict(token_budget=70)),
    ("coverage", dict(k=5)),
    ("grn", dict(k=4)),
])
def test_selector_in_a_query_engine_picks_what_select_picks(method, opts):
    pp = CtxpruneNodeSelector(method=method, embed_model=HashEmbedding(), **opts)
    qe, nodes = engine_and_nodes([pp])
    resp = qe.query(QUERY)
    texts, X, q = vectors_of(nodes)
    kw = dict(opts)
    if "token_budget" in kw:
        kw["costs"] = ctxprune_rs.token_counter().count_many(texts)
    want = ctxprune_rs.select(X, None if method == "grn" else q, method, **kw)
    assert [n.node.get_content() for n in resp.source_nodes] == [texts[i] for i in want.indices]
    assert [n.score for n in resp.source_nodes] == want.gains.tolist()


def test_nodes_own_embeddings_and_the_bundles_query_embedding():
    _, nodes = engine_and_nodes([])
    texts, X, q = vectors_of(nodes)
    own = [li_schema.NodeWithScore(node=li_schema.TextNode(text=t, embedding=X[i].tolist()), score=0.0)
           for i, t in enumerate(texts)]
    bundle = li_schema.QueryBundle(query_str=QUERY, embedding=q.tolist())
    got = CtxpruneNodeSelector(method="dpp", k=5).postprocess_nodes(own, query_bundle=bundle)
    want = ctxprune_rs.select(X, q, "dpp", k=5)
    assert [n.node.get_content() for n in got] == [texts[i] for i in want.indices]
    # Without an embedding on a node and no embedder, the node is named.
    own[2].node.embedding = None
    with pytest.raises(ctxprune_rs.InvalidInputError, match=r"nodes\[2\]"):
        CtxpruneNodeSelector(method="dpp", k=5).postprocess_nodes(own, query_bundle=bundle)


def test_rerank_in_a_query_engine_calls_at_most_budget_and_matches_rerank():
    calls = []

    def cross_encoder(query, texts):
        calls.append(len(texts))
        return [math.cos(len(t) * 0.29) * 2.5 for t in texts]

    pp = CtxpruneNodeRerank(cross_encoder=cross_encoder, budget=10, top_n=4, embed_model=HashEmbedding())
    qe, nodes = engine_and_nodes([pp])
    resp = qe.query(QUERY)
    assert sum(calls) <= 10
    texts, X, q = vectors_of(nodes)
    oracle = lambda idx: [sigmoid(math.cos(len(texts[int(i)]) * 0.29) * 2.5) for i in idx]  # noqa: E731
    want = ctxprune_rs.rerank(X, q, oracle, 10, 4)
    assert [n.node.get_content() for n in resp.source_nodes] == [texts[i] for i in want.indices]
    scores = dict(zip(want.scored.tolist(), want.scores.tolist()))
    for n, i in zip(resp.source_nodes, want.indices.tolist()):
        assert (n.score == scores[i]) if i in scores else math.isnan(n.score)


def test_pickled_selector_gives_the_same_nodes():
    pp = CtxpruneNodeSelector(method="mmr", k=5, embed_model=HashEmbedding())
    _, nodes = engine_and_nodes([])
    bundle = li_schema.QueryBundle(query_str=QUERY)
    want = pp.postprocess_nodes(nodes, query_bundle=bundle)
    pp2 = pickle.loads(pickle.dumps(pp))
    got = pp2.postprocess_nodes(nodes, query_bundle=bundle)
    assert [n.node.node_id for n in got] == [n.node.node_id for n in want]
    assert [n.score for n in got] == [n.score for n in want]
