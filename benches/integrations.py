"""The framework integrations' cost over the core call they wrap, and each framework's
nearest built-in beside them, in one run (not a test; issue 25).

Data: 1,000 real passages (the cargo-registry corpus of benches/corpus.py, embedded by the
crate's MiniLM), the top 1,000 by inner product for each of the corpus' hand-written
queries, in that order. The documents carry their vectors (LangChain: an `Embeddings`
that looks them up; LlamaIndex: `node.embedding`; Haystack: `Document.embedding`), so no
model runs inside the timings. Per wrapper: the core call (`ctxprune_rs.select` /
`rerank` on the arrays), the wrapper end to end, and the framework's own object
conversion alone (vectors out of its objects, read as the components read them, and its
result objects built), all medians;
the overhead is (wrapper - core - conversion) / core. Beside them, on the same inputs:
LangChain's `EmbeddingsRedundantFilter` + `EmbeddingsFilter` (top 10), pyversity's
Haystack ranker (MMR and DPP) where it installs, with the agreement of the picks.

    pip install -c python/constraints-integrations.txt langchain-core langchain-classic \\
        llama-index-core haystack-ai pyversity-haystack
    python benches/integrations.py [--repeats 15]
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import statistics
import sys
import time
from pathlib import Path

import numpy as np

import ctxprune_rs
from ctxprune_rs._integrate import vectors

sys.path.insert(0, str(Path(__file__).resolve().parent))
import corpus  # noqa: E402


def timed(fn, repeats):
    fn()
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e3


# ---------------------------------------------------------------------------------------
# The run (kept in one function per framework so each import is optional).


def pools(a):
    texts_all, E, Q = corpus.build(a.ctxprune, Path(a.cache), 20_000)
    out = []
    for q in Q[: a.pools]:
        order = np.argsort(-(E @ q), kind="stable")[:1000]
        out.append(([texts_all[i] for i in order], np.ascontiguousarray(E[order], dtype=np.float32),
                    q.astype(np.float32)))
    return out


def picks_tokens(texts, picks, repeats):
    """Counting the chosen documents' tokens for their metadata (o200k_base)."""
    c = ctxprune_rs.token_counter()
    return timed(lambda: c.count_many([texts[i] for i in picks]), repeats)


def overlap(a, b):
    return len(set(a) & set(b)) / max(1, len(a))


def langchain_rows(pool_list, repeats):
    from langchain_classic.retrievers.document_compressors import EmbeddingsFilter
    from langchain_core.documents import Document
    from langchain_core.embeddings import Embeddings
    from langchain_classic.document_transformers import EmbeddingsRedundantFilter

    from ctxprune_rs.langchain import CtxpruneCompressor, CtxpruneRerank

    rows = []
    for texts, X, q in pool_list:
        lookup = {t: X[i] for i, t in enumerate(texts)}

        class Lookup(Embeddings):
            """The pool's precomputed MiniLM vectors, looked up by text."""

            def embed_documents(self, ts):
                return [lookup[t] for t in ts]

            def embed_query(self, t):
                return q

        emb = Lookup()
        docs = [Document(page_content=t, metadata={"i": i}) for i, t in enumerate(texts)]
        for name, kw in (("MMR k=10", dict(method="mmr", k=10, lambda_=0.5)),
                         ("DPP k=10", dict(method="dpp", k=10)),
                         ("coverage 2,000 tokens", dict(method="coverage", token_budget=2000))):
            c = CtxpruneCompressor(embeddings=emb, tokenizer="o200k_base", **kw)
            costs = ctxprune_rs.token_counter().count_many(texts)
            sel_kw = {k: v for k, v in kw.items() if k != "method"}
            if "token_budget" in sel_kw:
                sel_kw["costs"] = costs
            if "token_budget" in sel_kw:
                # Under a budget the wrapper must count every document's tokens: the core
                # call it stands for is the count and the selection.
                def core(sel_kw=sel_kw, kw=kw):
                    c_ = ctxprune_rs.token_counter().count_many(texts)
                    return ctxprune_rs.select(X, q, kw["method"], **dict(sel_kw, costs=c_))
            else:
                core = lambda sel_kw=sel_kw, kw=kw: ctxprune_rs.select(X, q, kw["method"], **sel_kw)  # noqa: E731
            picks = core().indices.tolist()

            def conversion():
                # LangChain's objects in and out: texts and vectors from Documents, token
                # counts, result Documents with metadata.
                ts = [d.page_content for d in docs]
                V = np.stack(emb.embed_documents(ts))
                [Document(page_content=docs[i].page_content, metadata=dict(docs[i].metadata, r=1)) for i in picks]
                return V

            wrapped = lambda: c.compress_documents(docs, "q")  # noqa: E731
            assert [d.metadata["i"] for d in wrapped()] == picks
            rows.append(("LangChain CtxpruneCompressor", name, timed(core, repeats), timed(wrapped, repeats),
                         timed(conversion, repeats), None,
                         0.0 if "token_budget" in sel_kw else picks_tokens(texts, picks, repeats)))
        # LangChain's nearest built-in: drop near-duplicates, then the 10 most similar.
        red = EmbeddingsRedundantFilter(embeddings=emb)
        filt = EmbeddingsFilter(embeddings=emb, k=10)

        def builtin():
            return filt.compress_documents(red.transform_documents(docs), "q")

        theirs = [d.metadata["i"] for d in builtin()]
        ours = [d.metadata["i"] for d in CtxpruneCompressor(embeddings=emb, method="mmr", k=10, lambda_=0.5)
                .compress_documents(docs, "q")]
        rows.append(("LangChain EmbeddingsRedundantFilter + EmbeddingsFilter", "top 10",
                     None, timed(builtin, max(3, repeats // 3)), None, overlap(ours, theirs), None))
        # The budgeted rerank: a cross-encoder stand-in (cosine to the query as a logit).
        logit = {t: float(X[i] @ q) * 8 - 4 for i, t in enumerate(texts)}
        ce = lambda query, ts: [logit[t] for t in ts]  # noqa: E731
        r = CtxpruneRerank(cross_encoder=ce, embeddings=emb, budget=50, top_n=10)
        oracle = lambda idx: [1 / (1 + math.exp(-logit[texts[int(i)]])) for i in idx]  # noqa: E731
        rows.append(("LangChain CtxpruneRerank", "B=50, k=10",
                     timed(lambda: ctxprune_rs.rerank(X, q, oracle, 50, 10), repeats),
                     timed(lambda: r.compress_documents(docs, "q"), repeats),
                     timed(lambda: [Document(page_content=d.page_content, metadata=dict(d.metadata)) for d in docs[:10]]
                           and np.stack(emb.embed_documents([d.page_content for d in docs])), repeats), None, 0.0))
    return rows


def llamaindex_rows(pool_list, repeats):
    from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

    from ctxprune_rs.llamaindex import CtxpruneNodeSelector

    rows = []
    for texts, X, q in pool_list:
        nodes = [NodeWithScore(node=TextNode(text=t, embedding=X[i].tolist()), score=0.0) for i, t in enumerate(texts)]
        bundle = QueryBundle(query_str="q", embedding=q.tolist())
        pp = CtxpruneNodeSelector(method="mmr", k=10, lambda_=0.5)
        core = lambda: ctxprune_rs.select(X, q, "mmr", k=10, lambda_=0.5)  # noqa: E731
        picks = core().indices.tolist()

        def conversion():
            V = vectors([n.node.embedding for n in nodes], "nodes' embedding")
            [n.node.get_content() for n in nodes]
            [NodeWithScore(node=nodes[i].node, score=1.0) for i in picks]
            return V

        rows.append(("LlamaIndex CtxpruneNodeSelector", "MMR k=10", timed(core, repeats),
                     timed(lambda: pp.postprocess_nodes(nodes, query_bundle=bundle), repeats),
                     timed(conversion, repeats), None, picks_tokens(texts, picks, repeats)))
    return rows


def haystack_rows(pool_list, repeats):
    from haystack import Document

    from ctxprune_rs.haystack import CtxpruneRanker

    rows = []
    for texts, X, q in pool_list:
        rel = (X @ q) / np.linalg.norm(X, axis=1) / np.linalg.norm(q)
        docs = [Document(content=t, embedding=X[i].tolist(), score=float(rel[i])) for i, t in enumerate(texts)]
        for method, name in (("mmr", "MMR k=10"), ("dpp", "DPP k=10")):
            rk = CtxpruneRanker(method=method, top_k=10, lambda_=0.5 if method == "mmr" else None)
            core = lambda m=method: ctxprune_rs.select(X, q, m, k=10, lambda_=0.5 if m == "mmr" else None)  # noqa: E731
            picks = core().indices.tolist()

            def conversion():
                V = vectors([d.embedding for d in docs], "documents' embedding")
                [dataclasses.replace(docs[i], meta=dict(docs[i].meta, r=1), score=1.0) for i in picks]
                return V

            run = lambda rk=rk: rk.run(documents=docs, query="q", query_embedding=q.tolist())  # noqa: E731
            ours = [texts.index(d.content) for d in run()["documents"]]
            assert ours == picks
            rows.append(("Haystack CtxpruneRanker", name, timed(core, repeats), timed(run, repeats),
                         timed(conversion, repeats), None, picks_tokens(texts, picks, repeats)))
            try:
                from haystack_integrations.components.rankers.pyversity import PyversityRanker
                from pyversity import Strategy
            except ImportError:
                continue
            pv = PyversityRanker(top_k=10, strategy=Strategy.MMR if method == "mmr" else Strategy.DPP, diversity=0.5)
            theirs = [texts.index(d.content) for d in pv.run(documents=docs)["documents"]]
            rows.append(("Haystack PyversityRanker (pyversity-haystack)", name, None,
                         timed(lambda pv=pv: pv.run(documents=docs), repeats), None, overlap(ours, theirs), None))
    return rows


def report(rows):
    print(f"{'component':<54} {'case':<22} {'core ms':>7} {'wrapper':>8} {'conversion':>10} {'tokens':>6} "
          f"{'overhead':>8} {'agreement':>9}")
    groups = {}
    for r in rows:
        groups.setdefault((r[0], r[1]), []).append(r)
    for (comp, case), rs in groups.items():
        med = lambda j: None if rs[0][j] is None else statistics.median(x[j] for x in rs)  # noqa: E731
        core, wrap, conv, agree, tok = med(2), med(3), med(4), med(5), med(6)
        over = None if core is None else statistics.median((x[3] - x[2] - x[4] - x[6]) / x[2] for x in rs)
        f = lambda v, fmt: "" if v is None else format(v, fmt)  # noqa: E731
        print(f"{comp:<54} {case:<22} {f(core, '7.2f'):>7} {f(wrap, '8.2f'):>8} {f(conv, '10.2f'):>10} "
              f"{f(tok, '6.2f'):>6} {f(None if over is None else 100 * over, '7.1f') + ('%' if over is not None else ''):>8} "
              f"{f(agree, '9.2f'):>9}")


def run():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--cache", default="target/bench-corpus")
    ap.add_argument("--ctxprune", default="target/release/ctxprune")
    ap.add_argument("--pools", type=int, default=4)
    a = ap.parse_args()
    import platform

    pool_list = pools(a)
    print(f"ctxprune_rs {ctxprune_rs.__version__} on {ctxprune_rs.default_engine().describe()}; Python "
          f"{platform.python_version()}; {len(pool_list)} pools of 1,000 real passages (MiniLM, 384-d); "
          f"medians of {a.repeats}")
    vers = []
    for dist in ("langchain-core", "langchain-classic", "llama-index-core", "haystack-ai", "pyversity",
                 "pyversity-haystack"):
        try:
            from importlib.metadata import version

            vers.append(f"{dist} {version(dist)}")
        except Exception:  # noqa: BLE001
            vers.append(f"{dist} not installed")
    print("; ".join(vers))
    rows = []
    for f in (langchain_rows, llamaindex_rows, haystack_rows):
        try:
            rows += f(pool_list, a.repeats)
        except ImportError as e:
            print(f"{f.__name__}: skipped ({e})")
    report(rows)
    print("ms, medians. conversion: the framework's objects in and out alone (vectors out of its documents as the "
          "components read them (their lists of floats in one pass by the extension), texts out of its "
          "documents, its result objects built); tokens: counting the chosen documents' tokens for their "
          "metadata (under a budget every document's count is part of the core call); overhead = (wrapper - core "
          "- conversion - tokens) / core, median over the pools; agreement = the share of the built-in's picks "
          "that ctxprune's MMR k=10 (LangChain) or the same method (Haystack) also picks.")
    print("Haystack's SentenceTransformersDiversityRanker is not run: it embeds with its own "
          "sentence-transformers model (torch), which this machine does not install.")


if __name__ == "__main__":
    run()
