#!/usr/bin/env python3
"""Soak test of `ctxprune serve` against hostile clients (issue 23), on 127.0.0.1 only.

    scripts/serve_soak.py CTXPRUNE_BINARY [--seconds 25] [--p99-ms 250] [--json OUT]

Starts the server (CPU engine, 4 compute slots sharing 2 threads, a 2 s request
deadline, 2 s header and body timeouts, a 3 s grace period), measures the cheap
requests' latency alone, then runs for --seconds, all at once:
  - cheap clients: MMR k = 5 over 200 x 32 inline rows, back to back;
  - expensive clients: coverage over 40,000 rows (admitted, stopped at its deadline:
    504) and over 200,000 rows (refused by its estimate: 422), back to back;
  - slow-header clients: half a request head, a byte every 0.4 s (closed by the server);
  - slow-body clients: a head, then a body a byte every 0.4 s (408);
  - clients that send half a body and disconnect;
  - clients that send a malformed request line (400 from the HTTP layer, as JSON);
then sends SIGTERM while all of them run, and keeps them running until the server is gone.

Fails (exit 1) unless:
  - every request got exactly one complete answer, or a connection closed without one
    (never a partial answer, two answers, or garbage), and each answer has the status
    its kind expects (after SIGTERM, a cheap request may also find the server closed);
  - every error answer is {"error": "..."} JSON;
  - the cheap requests' p99 under load is at most --p99-ms (and it prints it beside the
    p99 alone);
  - the server exits within the grace period (plus 1.5 s of slack) after SIGTERM.
Bounded: about --seconds + 15 s in all; every socket has a timeout.
"""

import argparse
import base64
import json
import os
import random
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

GRACE = 3.0


def rows_b64(n, d, seed):
    rng = random.Random(seed)
    raw = struct.pack(f"<{n * d}f", *(rng.gauss(0, 1) for _ in range(n * d)))
    return {"base64": base64.b64encode(raw).decode(), "dtype": "f32", "shape": [n, d]}


def read_answer(sock, deadline):
    """Reads until the server closes: ("answer", status, body) for exactly one HTTP
    answer, ("closed",) for none, ("bad", why) for anything else."""
    data = b""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return ("bad", f"no close within the deadline after {len(data)} bytes")
        sock.settimeout(left)
        try:
            b = sock.recv(65536)
        except socket.timeout:
            return ("bad", f"no close within the deadline after {len(data)} bytes")
        except (ConnectionResetError, BrokenPipeError):
            b = b""
            if data:
                break
            return ("closed",)
        if not b:
            break
        data += b
    if not data:
        return ("closed",)
    head, sep, body = data.partition(b"\r\n\r\n")
    if not sep:
        return ("bad", f"a partial head: {data[:80]!r}")
    lines = head.decode("latin-1").split("\r\n")
    try:
        status = int(lines[0].split(" ")[1])
    except (IndexError, ValueError):
        return ("bad", f"not an HTTP answer: {lines[0]!r}")
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    length = int(headers.get("content-length", "-1"))
    if length != len(body):
        return ("bad", f"{status}: content-length {length} but {len(body)} bytes (two answers, or a partial one)")
    if status >= 400:
        if not headers.get("content-type", "").startswith("application/json"):
            return ("bad", f"{status} is not JSON: {headers.get('content-type')}")
        try:
            msg = json.loads(body)["error"]
            assert isinstance(msg, str) and msg and "\n" not in msg
        except Exception as e:  # noqa: BLE001
            return ("bad", f"{status}: not an error object ({e}): {body[:80]!r}")
    return ("answer", status, body)


def request(addr, raw, deadline_s=15.0, trickle=None, stop_after=None):
    """Sends `raw` (the first `stop_after` bytes at once, then a byte every `trickle` s
    until the server answers or closes; or, without `trickle`, only those bytes before
    disconnecting), then reads the answer."""
    import select

    deadline = time.monotonic() + deadline_s
    try:
        s = socket.create_connection(addr, timeout=5)
    except OSError:
        return ("closed",)
    try:
        try:
            s.sendall(raw if stop_after is None else raw[:stop_after])
        except OSError:
            return read_answer(s, deadline)
        if stop_after is not None and trickle is None:
            return ("closed",)  # the client gives up mid-body; nothing to read
        if trickle is not None:
            for b in raw[stop_after:]:
                # Stop sending once the server has said something (or closed).
                if select.select([s], [], [], trickle)[0]:
                    break
                try:
                    s.sendall(bytes([b]))
                except OSError:
                    break
        return read_answer(s, deadline)
    finally:
        s.close()


def http(method, path, body=b"", extra=""):
    return (
        f"{method} {path} HTTP/1.1\r\nhost: soak\r\nconnection: close\r\n"
        f"content-type: application/json\r\ncontent-length: {len(body)}\r\n{extra}\r\n"
    ).encode() + body


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--seconds", type=float, default=25.0)
    ap.add_argument("--p99-ms", type=float, default=250.0)
    ap.add_argument("--json")
    a = ap.parse_args()

    proc = subprocess.Popen(
        [a.binary, "serve", "--addr", "127.0.0.1:0", "--backend", "cpu", "--quiet",
         "--max-concurrent", "4", "--threads", "2", "--timeout", "2", "--header-timeout", "2",
         "--body-timeout", "2", "--grace", str(GRACE)],
        stderr=subprocess.PIPE, text=True)
    line = proc.stderr.readline()
    addr_s = json.loads(line)["listening"]
    host, port = addr_s.rsplit(":", 1)
    addr = (host, int(port))
    threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()

    rows = [[random.Random(i).gauss(0, 1) for _ in range(32)] for i in range(200)]
    cheap = http("POST", "/v1/select", json.dumps({"method": "mmr", "k": 5, "embeddings": rows, "query": rows[0]}).encode())
    slow_work = http("POST", "/v1/select", json.dumps({"method": "coverage", "k": 5, "embeddings": rows_b64(40_000, 2, 1)}).encode())
    refused_work = http("POST", "/v1/select", json.dumps({"method": "coverage", "k": 5, "embeddings": rows_b64(200_000, 2, 2)}).encode())
    body = json.dumps({"method": "mmr", "k": 1, "embeddings": [[1, 0]], "query": [1, 0]}).encode()
    slow_body = http("POST", "/v1/select", body)
    head_only = http("POST", "/v1/select", body)[:30]

    lock = threading.Lock()
    outcomes = []  # (kind, outcome, seconds, after_sigterm)
    failures = []
    term_at = [None]
    stop = threading.Event()

    def record(kind, out, took):
        after = term_at[0] is not None
        with lock:
            outcomes.append((kind, out, took, after))
        expect = {
            "cheap": {200},
            "expensive": {504, 422},
            "slow-body": {408},
            "garbage": {400},
            "slow-header": set(),
            "gone-mid-body": set(),
        }[kind]
        if out[0] == "bad":
            failures.append(f"{kind}: {out[1]}")
        elif out[0] == "answer" and out[1] not in expect:
            # After SIGTERM a request may also be refused for the shutdown.
            if not (after and out[1] in (503,)):
                failures.append(f"{kind}: status {out[1]}: {out[2][:120]!r}")
        elif out[0] == "closed" and expect and not after:
            failures.append(f"{kind}: closed without an answer before SIGTERM")

    def paced(out):
        # The quick kinds at most ~50 a second each, so the client's own CPU stays small.
        time.sleep(0.02)
        return out

    def loop(kind, make):
        while not stop.is_set():
            t = time.monotonic()
            out = make()
            record(kind, out, time.monotonic() - t)
            if out[0] == "closed" and term_at[0] is not None:
                time.sleep(0.05)

    # The cheap requests' latency alone.
    alone = []
    t_end = time.monotonic() + 3
    while time.monotonic() < t_end:
        t = time.monotonic()
        out = request(addr, cheap)
        alone.append(time.monotonic() - t)
        if out[0] != "answer" or out[1] != 200:
            failures.append(f"cheap alone: {out}")

    kinds = [
        ("cheap", lambda: request(addr, cheap)),
        ("cheap", lambda: request(addr, cheap)),
        ("expensive", lambda: request(addr, slow_work)),
        ("expensive", lambda: request(addr, random.choice([slow_work, refused_work]))),
        ("slow-header", lambda: request(addr, head_only, trickle=0.4, stop_after=5)),
        ("slow-header", lambda: request(addr, head_only, trickle=0.4, stop_after=5)),
        ("slow-body", lambda: request(addr, slow_body, trickle=0.4, stop_after=len(slow_body) - len(body) + 3)),
        ("gone-mid-body", lambda: paced(request(addr, slow_body, stop_after=len(slow_body) - 10))),
        ("garbage", lambda: paced(request(addr, b"NOT HTTP AT ALL\r\n\r\n"))),
    ]
    threads = [threading.Thread(target=loop, args=k, daemon=True) for k in kinds]
    for th in threads:
        th.start()
    time.sleep(a.seconds)
    term_at[0] = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(timeout=GRACE + 5)
    except subprocess.TimeoutExpired:
        proc.kill()
        code = None
    exit_after = time.monotonic() - term_at[0]
    time.sleep(0.5)
    stop.set()
    for th in threads:
        th.join(timeout=20)

    def p99(xs):
        xs = sorted(xs)
        return xs[min(len(xs) - 1, int(0.99 * len(xs)))] * 1e3 if xs else float("nan")

    under = [o[2] for o in outcomes if o[0] == "cheap" and o[1][0] == "answer" and not o[3]]
    counts = {}
    for kind, out, _, after in outcomes:
        key = f"{kind}:{out[1] if out[0] == 'answer' else out[0]}{' (after SIGTERM)' if after else ''}"
        counts[key] = counts.get(key, 0) + 1
    report = {
        "cheap_alone": {"n": len(alone), "p50_ms": round(sorted(alone)[len(alone) // 2] * 1e3, 2), "p99_ms": round(p99(alone), 2)},
        "cheap_under_load": {"n": len(under), "p50_ms": round(sorted(under)[len(under) // 2] * 1e3, 2) if under else None,
                             "p99_ms": round(p99(under), 2), "bound_ms": a.p99_ms},
        "sigterm": {"exit_code": code, "exit_after_s": round(exit_after, 2), "grace_s": GRACE},
        "outcomes": counts,
        "failures": failures[:20],
    }
    print(json.dumps(report, indent=1))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(report, f, indent=1)
    ok = True
    if failures:
        print(f"FAIL: {len(failures)} requests without exactly one proper answer", file=sys.stderr)
        ok = False
    if not under or p99(under) > a.p99_ms:
        print(f"FAIL: cheap p99 under load {p99(under):.1f} ms > {a.p99_ms} ms", file=sys.stderr)
        ok = False
    if code is None or exit_after > GRACE + 1.5:
        print(f"FAIL: the server took {exit_after:.2f} s to exit after SIGTERM (code {code})", file=sys.stderr)
        ok = False
    if code not in (0, 3):
        print(f"FAIL: exit code {code} (0 drained, 3 requests abandoned)", file=sys.stderr)
        ok = False
    needed = ["cheap:200", "expensive:504", "expensive:422", "slow-body:408", "garbage:400", "slow-header:closed"]
    missing = [k for k in needed if k not in counts]
    if missing:
        print(f"FAIL: no outcome of {missing} seen", file=sys.stderr)
        ok = False
    print("soak: " + ("ok" if ok else "FAILED"))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
