"""A third real-text retrieval set with graded relevance, from the documentation of the
Python that runs this script, its standard library and the packages installed beside it
(not a test): built after auto's rules were fixed, as a check on text none of them was
chosen on.

Passages: docstrings, each module read in its own interpreter (an import's side effects
stay there): the module's docstring, then each public class and function it defines
(or takes from a private module) with its signature and docstring, and each class's own
public methods and properties the same way. From the standard library, its public
modules (the top-level modules of `sys.stdlib_module_names` and the public submodules of
its packages; the IDLE, lib2to3, turtle demo, pydoc topic, distutils, ensurepip,
encodings, test, Windows-only and joke modules left out), each labelled with its module
(`urllib.parse`; the functions `os` takes from `posix` are documented under `posix`, so
the questions that grade `os` grade `posix` with it); from the interpreter's
site-packages, each package with its public submodules (those whose names start with `_`
or `test` not imported), labelled with its import name (`httpx`). A module that does not
import here, or has under 40 words of documentation, gives no passage (named on stderr).
Split as benches/corpus.py splits text, at most --per-module passages a label.
Queries: the hand-written QUERIES below, each with the modules that answer it (grade 2)
and the modules close to it (grade 1); every other passage is grade 0. Embedded by the crate's own MiniLM (`ctxprune embed`). Cached under
--cache. Nothing is downloaded. The measurement in docs/rerank.md ran it in the venv of
.ci/run (the frameworks of its `setup_py`, pinned by python/constraints-integrations.txt,
and their dependencies).

    python benches/pytext.py --ctxprune target/release/ctxprune --set target/pytext.safetensors
    ctxprune eval --set target/pytext.safetensors --noise 0.05,0.15,0.3 --no-peaks
"""

from __future__ import annotations

import os
import pkgutil
import site
import subprocess
import sys
import sysconfig
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from corpus import labelled  # noqa: E402
from realtext import set_builder_main  # noqa: E402

# (query, grade-2 modules, grade-1 modules), written by hand before the set was built.
QUERIES = [
    ("Parse command-line options, flags and subcommands for a script",
     "argparse click", "optparse getopt"),
    ("Serialize Python objects to JSON text and read them back",
     "json json.decoder json.encoder orjson", "pickle marshal msgpack dataclasses_json marshmallow"),
    ("Run an external program and capture its output",
     "subprocess", "os posix shlex asyncio.subprocess"),
    ("Match text against regular expressions and substitute groups",
     "re regex", "fnmatch glob string"),
    ("Read and write CSV files with a header row",
     "csv", "io sqlite3 pandas"),
    ("Compress and decompress data with gzip, bzip2, LZMA or Zstandard",
     "gzip bz2 lzma zlib zstandard", "zipfile tarfile shutil"),
    ("Create and extract zip and tar archives",
     "zipfile tarfile", "shutil gzip zipapp"),
    ("Work with dates, times, time zones and durations",
     "datetime zoneinfo dateutil", "time calendar tzdata"),
    ("Run functions concurrently in a pool of threads or processes",
     "concurrent.futures concurrent.futures.thread concurrent.futures.process multiprocessing.pool",
     "multiprocessing threading queue joblib ray"),
    ("Write asynchronous network code with coroutines and an event loop",
     "asyncio asyncio.events asyncio.streams asyncio.base_events anyio",
     "selectors socket asyncio.tasks uvloop aiohttp"),
    ("Log messages to files with levels and rotating handlers",
     "logging logging.handlers", "logging.config warnings syslog"),
    ("Make HTTP requests and fetch the content of a URL",
     "urllib.request http.client requests httpx", "urllib.parse urllib.error http.cookiejar aiohttp urllib3"),
    ("Split a URL into its parts and encode query strings",
     "urllib.parse yarl", "urllib.request"),
    ("Serve files over HTTP with a simple web server",
     "http.server socketserver", "wsgiref.simple_server http uvicorn starlette"),
    ("Generate random numbers and shuffle or sample a sequence",
     "random", "secrets statistics"),
    ("Generate cryptographically secure tokens and passwords",
     "secrets", "random hashlib hmac cryptography"),
    ("Compute SHA-256 hashes and message authentication codes",
     "hashlib hmac", "secrets zlib binascii cryptography xxhash mmh3"),
    ("Compute the mean, median and standard deviation of data",
     "statistics", "math fractions decimal numpy pandas"),
    ("Exact decimal arithmetic for money with controlled rounding",
     "decimal", "fractions math numbers"),
    ("Copy, move and delete whole directory trees",
     "shutil", "os posix pathlib tempfile"),
    ("Manipulate filesystem paths in an object-oriented way",
     "pathlib", "posixpath os posix glob"),
    ("Store records in a small embedded SQL database",
     "sqlite3 sqlite3.dbapi2 aiosqlite", "shelve dbm dbm.dumb sqlalchemy"),
    ("Parse and build XML documents",
     "xml.etree.ElementTree xml.dom.minidom defusedxml", "xml.sax xml.dom xml.parsers.expat html.parser"),
    ("Write unit tests with assertions and mock objects",
     "unittest unittest.case unittest.mock pytest", "doctest unittest.main hypothesis"),
    ("Measure the execution time of small code snippets",
     "timeit", "time cProfile profile"),
    ("Profile a program to find which functions take the most time",
     "cProfile profile pstats", "timeit trace tracemalloc"),
    ("Send email with attachments through an SMTP server",
     "smtplib email.message email.mime.multipart", "email email.mime.base email.mime.text email.utils"),
    ("Make deep and shallow copies of objects",
     "copy", "copyreg pickle"),
    ("Efficient iterators for combinations, permutations and chaining sequences",
     "itertools more_itertools", "functools operator"),
    ("Cache the results of a function and create partial functions",
     "functools", "itertools operator"),
    ("Temporary files and directories that are removed automatically",
     "tempfile", "os posix shutil"),
    ("Define enumerations with named constant members",
     "enum", "typing"),
    ("Low-level network sockets for TCP and UDP",
     "socket", "socketserver ssl selectors"),
    ("Encode binary data as base64 or hexadecimal text",
     "base64 binascii", "codecs quopri"),
    ("Read configuration files in INI format",
     "configparser", "tomllib json yaml dotenv"),
    ("Debug a program interactively with breakpoints and stepping",
     "pdb", "bdb traceback"),
    ("Validate data against type-annotated models and report the fields in error",
     "pydantic pydantic_core", "marshmallow jsonschema attrs attr dataclasses"),
    ("Render HTML templates with variables, loops and inheritance",
     "jinja2", "string markupsafe"),
    ("Build a web API with routes, request validation and generated OpenAPI documentation",
     "fastapi", "starlette pydantic uvicorn"),
    ("Retry a failing operation with exponential backoff",
     "tenacity backoff", "time"),
    ("Show a progress bar for a long-running loop",
     "tqdm", ""),
    ("Analyze tabular data in data frames: group, join and aggregate",
     "pandas", "numpy pyarrow"),
    ("Find shortest paths and connected components in a graph",
     "networkx", "graphlib"),
    ("Tokenize text into words and sentences for natural language processing",
     "nltk", "tiktoken regex"),
    ("Encrypt data with a symmetric key and sign it",
     "cryptography", "hmac hashlib secrets ssl"),
    ("Watch a directory for changes to its files",
     "watchfiles", "os posix"),
    ("Read and write YAML documents",
     "yaml", "json configparser"),
]

# Left out: not documentation of a library a program uses (IDLE, the 2to3 fixers, the
# turtle demos, pydoc's topic data, the codecs of `encodings`, the test suite), deprecated
# or removed machinery (distutils, ensurepip), Windows-only modules, and the two jokes
# (which act on import).
SKIP = {"idlelib", "lib2to3", "turtledemo", "pydoc_data", "distutils", "ensurepip", "test",
        "msilib", "msvcrt", "nt", "ntpath", "nturl2path", "winreg", "winsound", "antigravity",
        "this", "encodings"}

# Read in its own interpreter (one module, so an import's side effects stay there): the
# module's docstring, then what it defines (or takes from a private module, as
# concurrent.futures from concurrent.futures._base), in `__all__` or `dir` order, each
# piece printed as it is read (a timeout keeps what was read); a name whose reading
# raises is left out, not the module. With `words`, a package's public submodules follow
# (depth first in name order, private and test subpackages not imported), until that
# many words or 60 s. A value's address in a signature (`<function copy2 at 0x7f...>`) is
# left out, so a build reads the same text as the last.
READER = r"""
import importlib, inspect, pkgutil, re, sys, time
words = 0
def put(text):
    global words
    text = re.sub(r" at 0x[0-9a-fA-F]+", "", text)  # a default's address: not the same twice
    if text:
        words += len(text.split())
        sys.stdout.write(text + "\n\n")
        sys.stdout.flush()
def doc(name, o):
    d = inspect.getdoc(o)
    if d:
        try:
            sig = str(inspect.signature(o))
        except Exception:
            sig = ""
        put(f"{name}{sig}\n{d}")
def module(m):
    put(inspect.getdoc(m) or "")
    for name in getattr(m, "__all__", None) or dir(m):
        try:
            if not isinstance(name, str) or name.startswith("_"):
                continue
            o = getattr(m, name, None)
            if not (inspect.isclass(o) or inspect.isroutine(o)):
                continue
            home = getattr(o, "__module__", None) or m.__name__
            if home != m.__name__ and not any(p.startswith("_") for p in home.split(".")):
                continue  # documented where it is defined
            doc(name, o)
            if inspect.isclass(o):
                for k, v in vars(o).items():
                    if not k.startswith("_") and (inspect.isroutine(v) or isinstance(v, property)):
                        doc(f"{name}.{k}", getattr(o, k, v))
        except Exception:
            continue
def walk(m, budget, t0):
    for info in sorted(pkgutil.iter_modules(getattr(m, "__path__", None) or []), key=lambda i: i.name):
        if words >= budget or time.monotonic() - t0 > 60:
            return
        if info.name.startswith(("_", "test")):
            continue
        try:
            sub = importlib.import_module(f"{m.__name__}.{info.name}")
        except BaseException:
            continue
        module(sub)
        if info.ispkg:
            walk(sub, budget, t0)
m = importlib.import_module(sys.argv[1])
module(m)
if len(sys.argv) > 2:
    walk(m, int(sys.argv[2]), time.monotonic())
"""


def modules() -> list[str]:
    """The public standard-library modules, found on disk (nothing imported here)."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    dynload = stdlib / "lib-dynload"
    names = set(sys.builtin_module_names)
    for info in pkgutil.iter_modules([str(stdlib), str(dynload)]):
        names.add(info.name)
    top = sorted(n for n in names & set(sys.stdlib_module_names)
                 if not n.startswith("_") and n not in SKIP)
    out = []

    def walk(name: str, path: Path):
        out.append(name)
        if not path.is_dir():
            return
        for info in sorted(pkgutil.iter_modules([str(path)]), key=lambda i: i.name):
            if info.name.startswith("_") or info.name in SKIP or info.name.startswith("test"):
                continue
            walk(f"{name}.{info.name}", path / info.name)

    for n in top:
        walk(n, stdlib / n)
    return out


def packages() -> list[str]:
    """The third-party packages importable from this interpreter's site-packages (found
    on disk: a directory with an `__init__.py` or a top-level module), ctxprune's own
    left out."""
    out = set()
    for site_dir in site.getsitepackages():
        for info in pkgutil.iter_modules([site_dir]):
            if info.name.isidentifier() and not info.name.startswith("_") \
                    and info.name not in ("ctxprune_rs", "ctxprune"):
                out.add(info.name)
    return sorted(out)


def read(name: str, words: int = 0) -> str:
    """`name`'s documentation, read in its own interpreter; with `words`, a package's
    submodules too until that many words. What was read before a failure or the
    timeout is kept."""
    # A fixed environment and hash seed: signatures print `os.environ` defaults, and
    # some modules build `__all__` from a set, so either would make two builds differ.
    env = {"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/"), "LC_ALL": "C.UTF-8",
           "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONWARNINGS": "ignore"}
    argv = [sys.executable, "-c", READER, name] + ([str(words)] if words else [])
    try:
        r = subprocess.run(argv, capture_output=True, env=env, timeout=120, stdin=subprocess.DEVNULL)
        out = r.stdout
    except subprocess.TimeoutExpired as e:
        out = e.stdout or b""
    return out.decode("utf-8", "replace")


def collect(per_module: int) -> list[dict]:
    """Labelled passages: at most `per_module` from each standard-library module and
    each third-party package (a package's label is its import name); exact duplicates
    dropped, the first kept."""
    names = [(n, 0) for n in modules()] + [(n, 300 * per_module) for n in packages()]
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as ex:
        texts = list(ex.map(lambda nw: read(*nw), names))
    out, empty = labelled(((n, text) for (n, _), text in zip(names, texts)), "module", per_module)
    print(f"no passage from {len(empty)} of {len(names)} (no import here, or under 40 words of "
          f"documentation, or all of it read before): {' '.join(empty)}", file=sys.stderr)
    return out


def main():
    set_builder_main(collect, QUERIES, "module", "modules", "target/pytext", "--per-module", 60,
                     "modules this Python lacks")


if __name__ == "__main__":
    main()
