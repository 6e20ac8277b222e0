#!/usr/bin/env python3
"""Peak memory of `ctxprune serve` on bodies built to blow up a JSON parser (issue 23):
32 MB of one-number rows (centroid, k = 1), then 32 MB of one-letter texts (lexical).

    python3 benches/serve_memory.py CTXPRUNE_BINARY [ANOTHER_BINARY ...]

Each binary serves on 127.0.0.1 (CPU engine, one compute slot); prints each request's
status and time, and the server's peak RSS (VmHWM, Linux) after both. Give the binaries
of two commits to compare them in one run.
"""
import json
import socket
import subprocess
import sys
import time

ROWS = 8_000_000
BODIES = [
    b'{"method": "centroid", "k": 1, "embeddings": [' + b",".join([b"[1]"] * ROWS) + b"]}",
    b'{"method": "lexical", "k": 1, "query_text": "a", "texts": [' + b",".join([b'"a"'] * ROWS) + b"]}",
]


def run(binary):
    p = subprocess.Popen([binary, "serve", "--addr", "127.0.0.1:0", "--backend", "cpu", "--quiet",
                          "--max-concurrent", "1"], stderr=subprocess.PIPE, text=True)
    host, port = json.loads(p.stderr.readline())["listening"].rsplit(":", 1)
    answers = []
    try:
        for body in BODIES:
            s = socket.create_connection((host, int(port)))
            t = time.time()
            s.sendall(b"POST /v1/select HTTP/1.1\r\nhost: x\r\nconnection: close\r\n"
                      b"content-length: %d\r\n\r\n" % len(body) + body)
            s.settimeout(300)
            out = b""
            while True:
                b = s.recv(65536)
                if not b:
                    break
                out += b
            status = out.split(b"\r\n")[0].decode()
            answers.append(f"{status} in {time.time() - t:.1f} s")
        with open(f"/proc/{p.pid}/status") as f:
            hwm_kib = int(next(l for l in f if l.startswith("VmHWM")).split()[1])
    finally:
        p.kill()
        p.wait()
    print(f"{binary}: {'; '.join(answers)}; peak RSS {hwm_kib // 1024} MiB")


if __name__ == "__main__":
    for b in sys.argv[1:]:
        run(b)
