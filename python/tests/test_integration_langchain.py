"""ctxprune_rs.langchain's compressors inside LangChain's own pipeline
(ContextualCompressionRetriever, DocumentCompressorPipeline), with LangChain's
DeterministicFakeEmbedding and a retriever of fixed documents: the picks and their order
equal ctxprune_rs.select / ctxprune_rs.rerank on the same vectors, and the metadata says
what was chosen and why."""

from __future__ import annotations

import asyncio
import math
import pickle
import threading
import time

import numpy as np
import pytest
from conftest import framework, passages, sigmoid

import ctxprune_rs

lc_docs = framework("langchain_core.documents")
lc_emb = framework("langchain_core.embeddings")
lc_ret = framework("langchain_core.retrievers")
lc_ce = framework("langchain_core.cross_encoders")
classic = framework("langchain_classic.retrievers")
classic_dc = framework("langchain_classic.retrievers.document_compressors")
from ctxprune_rs.langchain import CtxpruneCompressor, CtxpruneRerank  # noqa: E402

Document = lc_docs.Document
QUERY = "how do I parse dates with time zones?"


class FixedRetriever(lc_ret.BaseRetriever):
    """A retriever that returns the same documents for every query."""

    docs: list

    def _get_relevant_documents(self, query, *, run_manager=None):
        return list(self.docs)


class CountingEmbeddings(lc_emb.DeterministicFakeEmbedding):
    """LangChain's fake embedding, counting the texts it embeds."""

    calls: list = []

    def embed_documents(self, texts):
        self.calls.append(len(texts))
        return super().embed_documents(texts)


def docs_and_vectors(n=41, size=32):
    texts = passages(n)
    docs = [Document(page_content=t, metadata={"i": i}) for i, t in enumerate(texts)]
    emb = lc_emb.DeterministicFakeEmbedding(size=size)
    X = np.asarray(emb.embed_documents(texts), dtype=np.float32)
    q = np.asarray(emb.embed_query(QUERY), dtype=np.float32)
    return docs, texts, emb, X, q


@pytest.mark.parametrize("method,opts", [
    ("mmr", dict(k=7, lambda_=0.5)),
    ("mmr", dict(k=5, token_budget=60)),
    ("dpp", dict(k=6)),
    ("dpp", dict(token_budget=90)),
    ("coverage", dict(token_budget=80)),
    ("hybrid", dict(k=5)),
    ("grn", dict(k=4)),
    ("centroid", dict(k=4)),
    ("lexical", dict(k=5)),
])
def test_compressor_in_a_contextual_compression_retriever_picks_what_select_picks(method, opts):
    docs, texts, emb, X, q = docs_and_vectors()
    compressor = CtxpruneCompressor(embeddings=emb, method=method, **opts)
    retriever = classic.ContextualCompressionRetriever(base_compressor=compressor,
                                                      base_retriever=FixedRetriever(docs=docs))
    got = retriever.invoke(QUERY)
    costs = ctxprune_rs.token_counter("o200k_base").count_many(texts)
    kw = dict(opts)
    if "token_budget" in kw:
        kw["costs"] = costs
    if method == "lexical":
        want = ctxprune_rs.select(None, None, "lexical", texts=texts, query_text=QUERY, **kw)
    else:
        reads_query = method in ("mmr", "dpp", "hybrid", "coverage")
        want = ctxprune_rs.select(X, q if reads_query else None, method, **kw)
    assert [d.metadata["i"] for d in got] == want.indices.tolist()
    assert [d.metadata["ctxprune_rank"] for d in got] == list(range(len(got)))
    assert [d.metadata["ctxprune_gain"] for d in got] == want.gains.tolist()
    assert [d.metadata["ctxprune_tokens"] for d in got] == [costs[i] for i in want.indices]
    assert all(d.metadata["ctxprune_method"] == method for d in got)
    if "token_budget" in opts:
        assert sum(d.metadata["ctxprune_tokens"] for d in got) <= opts["token_budget"]
    # The input documents are not changed.
    assert all(set(d.metadata) == {"i"} for d in docs)


def test_vectors_and_tokens_from_metadata_keys():
    docs, texts, emb, X, q = docs_and_vectors()
    tokens = [10 + (i * 37) % 90 for i in range(len(docs))]
    keyed = [Document(page_content=d.page_content, metadata={"i": i, "vec": X[i].tolist(), "tok": tokens[i]})
             for i, d in enumerate(docs)]
    c = CtxpruneCompressor(embeddings=emb, embedding_key="vec", tokens_key="tok", method="dpp", token_budget=200)
    got = c.compress_documents(keyed, QUERY)
    want = ctxprune_rs.select(X, q, "dpp", token_budget=200, costs=tokens)
    assert [d.metadata["i"] for d in got] == want.indices.tolist()
    assert [d.metadata["ctxprune_tokens"] for d in got] == [tokens[i] for i in want.indices]
    # A document without the key is named.
    keyed[3].metadata.pop("vec")
    with pytest.raises(ctxprune_rs.InvalidInputError, match=r"metadata\['vec'\] of documents\[3\]"):
        c.compress_documents(keyed, QUERY)


def test_the_cache_embeds_each_document_once():
    docs, texts, _, X, q = docs_and_vectors()
    emb = CountingEmbeddings(size=32)
    emb.calls.clear()
    c = CtxpruneCompressor(embeddings=emb, method="mmr", k=5, cache_size=1000)
    first = c.compress_documents(docs, QUERY)
    second = c.compress_documents(docs[:30], QUERY)
    assert emb.calls == [len(docs)]  # the second call found every vector in the cache
    want = ctxprune_rs.select(X[:30], q, "mmr", k=5)
    assert [d.metadata["i"] for d in second] == want.indices.tolist()
    assert first


def test_acompress_documents_does_not_block_the_event_loop():
    docs, texts, emb, X, q = docs_and_vectors(n=41)
    c = CtxpruneCompressor(embeddings=emb, method="dpp", k=6)
    want = [d.metadata["i"] for d in c.compress_documents(docs, QUERY)]

    async def main():
        ticks = 0
        stop = False

        async def ticker():
            nonlocal ticks
            while not stop:
                ticks += 1
                await asyncio.sleep(0)

        t = asyncio.create_task(ticker())
        outs = await asyncio.gather(*(c.acompress_documents(docs, QUERY) for _ in range(8)))
        stop = True
        await t
        return outs, ticks

    outs, ticks = asyncio.run(main())
    assert all([d.metadata["i"] for d in o] == want for o in outs)
    assert ticks > 1  # the loop ran other tasks while the selections ran


class CountingCrossEncoder(lc_ce.BaseCrossEncoder):
    """A cross-encoder (LangChain's interface) whose logit is a fixed function of the
    text, counting the pairs it scores."""

    def __init__(self):
        self.pairs = 0
        self.lock = threading.Lock()

    def score(self, text_pairs):
        with self.lock:
            self.pairs += len(text_pairs)
        return [math.sin(len(t) * 0.37) * 3.0 for _, t in text_pairs]


@pytest.mark.parametrize("budget,top_n,batch", [(12, 4, None), (20, 5, 4), (41, 3, None)])
def test_rerank_calls_the_cross_encoder_at_most_budget_times_and_matches_rerank(budget, top_n, batch):
    docs, texts, emb, X, q = docs_and_vectors()
    ce = CountingCrossEncoder()
    r = CtxpruneRerank(cross_encoder=ce, embeddings=emb, budget=budget, top_n=top_n, batch=batch)
    got = r.compress_documents(docs, QUERY)
    assert ce.pairs <= budget
    # ctxprune_rs.rerank with the same oracle scores (the sigmoid of the logits).
    logit = lambda t: math.sin(len(t) * 0.37) * 3.0  # noqa: E731
    oracle = lambda idx: [sigmoid(logit(texts[int(i)])) for i in idx]  # noqa: E731
    kw = {} if batch is None else {"batch": batch}
    want = ctxprune_rs.rerank(X, q, oracle, budget, top_n, **kw)
    assert [d.metadata["i"] for d in got] == want.indices.tolist()
    scores = dict(zip(want.scored.tolist(), want.scores.tolist()))
    for d in got:
        i = d.metadata["i"]
        if i in scores:
            assert d.metadata["ctxprune_scored"] and d.metadata["ctxprune_score"] == scores[i]
        else:
            assert not d.metadata["ctxprune_scored"] and math.isnan(d.metadata["ctxprune_score"])
        assert d.metadata["ctxprune_oracle_calls"] == want.oracle_calls == ce.pairs


def logit_scorer(query, texts):
    """A picklable scorer (query, texts) -> logits."""
    return [math.sin(len(t) * 0.37) * 3.0 for t in texts]


def test_a_document_compressor_pipeline_of_both():
    docs, texts, emb, X, q = docs_and_vectors()
    ce = CountingCrossEncoder()
    pipe = classic_dc.DocumentCompressorPipeline(transformers=[
        CtxpruneCompressor(embeddings=emb, method="dpp", k=12),
        CtxpruneRerank(cross_encoder=lambda query, ts: ce.score([(query, t) for t in ts]), embeddings=emb,
                       budget=6, top_n=3),
    ])
    retriever = classic.ContextualCompressionRetriever(base_compressor=pipe, base_retriever=FixedRetriever(docs=docs))
    got = retriever.invoke(QUERY)
    first = ctxprune_rs.select(X, q, "dpp", k=12).indices.tolist()
    assert len(got) == 3 and all(d.metadata["i"] in first for d in got)
    assert ce.pairs <= 6
    assert asyncio.run(retriever.ainvoke(QUERY)) == got


def test_pickled_compressors_give_the_same_documents():
    docs, texts, emb, X, q = docs_and_vectors()
    c = CtxpruneCompressor(embeddings=emb, method="coverage", token_budget=120, cache_size=10)
    want = c.compress_documents(docs, QUERY)
    c2 = pickle.loads(pickle.dumps(c))
    assert c2.compress_documents(docs, QUERY) == want
    r = CtxpruneRerank(cross_encoder=logit_scorer, embeddings=emb, budget=10, top_n=3)
    r2 = pickle.loads(pickle.dumps(r))
    assert r2.compress_documents(docs, QUERY) == r.compress_documents(docs, QUERY)


def test_errors_name_the_option():
    docs, *_ = docs_and_vectors()
    with pytest.raises(ctxprune_rs.InvalidInputError, match="invalid method: unknown 'mrm'"):
        CtxpruneCompressor(method="mrm", k=3).compress_documents(docs, QUERY)
    with pytest.raises(ctxprune_rs.InvalidInputError, match="give embeddings"):
        CtxpruneCompressor(method="dpp", k=3).compress_documents(docs, QUERY)
    with pytest.raises(ctxprune_rs.InvalidInputError, match="invalid k: mmr ranks every document"):
        CtxpruneCompressor(method="mmr").compress_documents(docs, QUERY)
    with pytest.raises(ctxprune_rs.InvalidInputError, match="invalid score_map"):
        CtxpruneRerank(cross_encoder=CountingCrossEncoder(), budget=3, top_n=2, score_map="softmax",
                       embeddings=lc_emb.DeterministicFakeEmbedding(size=8)).compress_documents(docs, QUERY)
    assert CtxpruneCompressor(method="dpp", k=3).compress_documents([], QUERY) == []


def test_a_real_model_through_the_crates_encoder():
    from conftest import minilm_dir

    model = minilm_dir()
    docs, texts, *_ = docs_and_vectors(n=25)
    c = CtxpruneCompressor(model=model, method="mmr", k=4, lambda_=0.7)
    got = c.compress_documents(docs, QUERY)
    X = ctxprune_rs.embed(texts, model)
    q = ctxprune_rs.embed([QUERY], model)[0]
    assert [d.metadata["i"] for d in got] == ctxprune_rs.select(X, q, "mmr", k=4, lambda_=0.7).indices.tolist()
    assert "dates" in got[0].page_content
    t0 = time.perf_counter()
    c.compress_documents(docs, QUERY)
    assert time.perf_counter() - t0 < 60
