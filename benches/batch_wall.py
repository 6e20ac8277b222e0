"""Wall time of `ctxprune rerank --oracle-url` with batches (issue 15): q = 1 against
q = 8 at the same budget, against a local TEI-style /rerank server on 127.0.0.1 that
answers every request in 50 ms whatever its size (up to 16 texts), as a GPU
cross-encoder does for small batches.

    python3 benches/batch_wall.py [path/to/ctxprune] [--budget 100] [--runs 3]

The pool is eval's diffuse problem (N = 2,000, d = 64; written as JSON files in a
temporary directory): its text i is "doc i" and the server scores it with the problem's
oracle score. Prints the median wall time of each q (the whole process, as a user sees it)
and the number of requests the server answered. Standard library only.
"""

import argparse
import http.server
import json
import math
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

LATENCY_S = 0.05


def problem(n, d, seed):
    """Topic clusters, a query between two topics, relevance a bump around each."""
    rng = random.Random(seed)

    def unit(v):
        s = math.sqrt(sum(x * x for x in v)) or 1.0
        return [x / s for x in v]

    centres = [unit([rng.gauss(0, 1) for _ in range(d)]) for _ in range(24)]
    q = unit([centres[0][k] + centres[1][k] for k in range(d)])
    docs = []
    for _ in range(n):
        c = centres[rng.randrange(24)]
        docs.append(unit([c[k] + rng.gauss(0, 1) / math.sqrt(d) for k in range(d)]))
    cos = lambda a, b: sum(x * y for x, y in zip(a, b))
    rel = [max(math.exp(6 * (cos(x, centres[0]) - 1)), 0.8 * math.exp(6 * (cos(x, centres[1]) - 1))) for x in docs]
    order = sorted(range(n), key=lambda i: (-(cos(docs[i], q) + rng.gauss(0, 0.05)), i))
    return [docs[i] for i in order], q, [min(1.0, max(0.0, rel[i])) for i in order]


def serve(scores, counter):
    class H(http.server.BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            texts = body["texts"]
            assert len(texts) <= 16, len(texts)
            time.sleep(LATENCY_S)
            counter[0] += 1
            out = [{"index": i, "score": scores[int(t.split()[1])]} for i, t in enumerate(texts)]
            data = json.dumps(out).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bin", nargs="?", default="target/release/ctxprune")
    ap.add_argument("--budget", type=int, default=100)
    ap.add_argument("--capacity", type=int, default=50)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--batches", default="1,8")
    a = ap.parse_args()
    docs, q, scores = problem(2000, 64, 7)
    counter = [0]
    srv = serve(scores, counter)
    url = f"http://127.0.0.1:{srv.server_address[1]}/rerank"
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        (t / "pool.jsonl").write_text("".join(json.dumps({"embedding": x}) + "\n" for x in docs))
        (t / "texts.jsonl").write_text("".join(json.dumps({"text": f"doc {i}"}) + "\n" for i in range(len(docs))))
        (t / "q.json").write_text(json.dumps(q))
        print(f"N = {len(docs)}, d = 64, B = {a.budget}, k = {a.capacity}, server {LATENCY_S * 1e3:.0f} ms per request")
        results = {}
        for q_ in [int(x) for x in a.batches.split(",")]:
            walls, reqs = [], []
            for _ in range(a.runs):
                before = counter[0]
                cmd = [a.bin, "rerank", "--method", "boundary-morph", "--embeddings", str(t / "pool.jsonl"),
                       "--query", str(t / "q.json"), "--texts", str(t / "texts.jsonl"), "--query-text", "q",
                       "--oracle-url", url, "--budget", str(a.budget), "--capacity", str(a.capacity),
                       "--batch", str(q_), "--backend", "cpu"]
                t0 = time.perf_counter()
                out = subprocess.run(cmd, capture_output=True, text=True)
                walls.append(time.perf_counter() - t0)
                if out.returncode != 0:
                    sys.exit(f"ctxprune failed: {out.stderr}")
                r = json.loads(out.stdout)
                reqs.append(counter[0] - before)
                sel = r["selected"]
            ce = sum(scores[i] for i in sel) / sum(sorted(scores, reverse=True)[: len(sel)])
            results[q_] = statistics.median(walls)
            print(f"q = {q_:>2}: wall {statistics.median(walls) * 1e3:8.0f} ms (median of {a.runs}), "
                  f"{reqs[-1]} requests, {r['oracle_calls']} documents scored, "
                  f"elapsed_ms (GP, no oracle) {r['elapsed_ms']:.0f}, CE-nCG@k {ce:.4f}")
        qs = sorted(results)
        if len(qs) >= 2:
            print(f"q = {qs[0]} / q = {qs[-1]} wall time: {results[qs[0]] / results[qs[-1]]:.2f}x")
    srv.shutdown()


if __name__ == "__main__":
    main()
