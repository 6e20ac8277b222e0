"""Makes passages.jsonl and query.txt here: 300 passages of real text and a question, for
the end-to-end RAG test of every surface (python/tests/test_rag_surfaces.py).

The passages come from the real-text corpus of benches/corpus.py (the READMEs and doc
comments of the crates in the cargo registry, embedded by all-MiniLM-L6-v2): the 150
nearest the query by inner product and 150 others drawn with a fixed seed, shuffled
with that seed, so a selection has near-duplicates to skip and off-topic rows to leave.

    python tests/data/rag/make_rag_fixture.py /work/bench-corpus
"""

import json
import sys
from pathlib import Path

import numpy as np

QUERY = "Parse and format dates, times and time zones"


def main(cache: str) -> None:
    cache_dir = Path(cache)
    texts = [json.loads(l)["text"] for l in (cache_dir / "passages.jsonl").read_text().splitlines()]
    X = np.load(cache_dir / "passages.npy")
    Q = np.load(cache_dir / "queries.npy")
    # The query's row in queries.npy: benches/corpus.py's QUERIES[8].
    q = Q[8]
    order = np.argsort(-(X @ q), kind="stable")
    near = order[:150]
    rng = np.random.default_rng(27)
    rest = rng.choice(order[150:], size=150, replace=False)
    rows = np.concatenate([near, rest])
    rng.shuffle(rows)
    here = Path(__file__).parent
    with open(here / "passages.jsonl", "w") as f:
        for i in rows:
            f.write(json.dumps({"text": texts[int(i)]}, ensure_ascii=False) + "\n")
    (here / "query.txt").write_text(QUERY + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
