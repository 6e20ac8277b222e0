"""Every code block of README.md and of the user guide (docs/**/*.md) runs as written.

One fenced block is one example, named in every failure by its page and line. What runs
each kind of block:

- ```rust: rustdoc. src/guide.rs includes every page that has Rust blocks
  (`#[doc = include_str!("../docs/PAGE.md")]` under `#[cfg(doctest)]`), so `cargo test`
  (its doc tests) compiles and runs each one; this file checks that every such page is
  included and that no block opts out (`ignore`, `no_run`, `compile_fail`, `should_panic`).
- ```python: run here, the blocks of one page in order in one namespace, in a temporary
  working directory (the page's own, shared with its shell blocks), against the installed
  `ctxprune_rs`.
- ```sh: run here with `bash -euo pipefail`, in the same directory, with the `ctxprune`
  CLI this checkout built (found as conftest.cli_path() finds it) first on the PATH, then
  the directory of this Python (so `python3` has numpy, ctxprune_rs and the MiniLM wheel).
  Every line runs, except the lines that build or install, which .ci/run's own steps run
  before this test (they are counted apart, as "CI steps", and replaced by `:`):
  `cargo test ...`, `cargo install ...` and `pip install ...` (after any `VAR=value`
  prefixes). `cargo run --release -- ARGS` runs the already-built `ctxprune ARGS`. Any
  other `cargo` command in a shell block is an error: it would need a build.
  A server a block starts in the background (`ctxprune serve --addr 127.0.0.1:8080 &`) gets
  a free port here (every `127.0.0.1:8080` of the page is replaced by it), and every
  process a block leaves behind is killed when the block ends. `curl` is the system's;
  on a machine without it, a small stand-in (GET, -X, -d, -s, -H, over urllib) is put on
  the PATH, so the blocks still run.
- ```text and ```json: output and file examples, not executed.
- Any other info string, or none, fails: nothing is skipped without being counted.

The working directory holds `tests/data`, a link to the repository's test fixtures, so a
page may read them as a reader in a checkout does. The docs/integrations pages are run by
test_docs_examples.py (against the frameworks); here they are only checked to hold
nothing but Python blocks.

The test prints how many blocks of each kind ran and fails when any kind ran none.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from conftest import ROOT, cli_path, framework, minilm_dir

DOCS = ROOT / "docs"
KNOWN = {"rust", "python", "sh", "text", "json"}
OPT_OUT = {"ignore", "no_run", "compile_fail", "should_panic"}
ENV = r"(?:[A-Za-z_][A-Za-z0-9_]*=(?:\"[^\"]*\"|'[^']*'|[^\s\"'])*\s+)*"
CI_STEP = re.compile(rf"^{ENV}(?:cargo\s+(?:test|install)|pip3?\s+install)\b")
ANY_CARGO = re.compile(rf"(?:^|[;&|(]\s*){ENV}cargo\b")
CARGO_RUN = re.compile(r"^(\s*)cargo run --release -- ")
PORT = "127.0.0.1:8080"
BLOCK_TIMEOUT = 180


def guide_pages() -> list:
    """README.md and every page of the guide, but the integration pages (their own test)."""
    pages = [ROOT / "README.md"]
    for p in sorted(DOCS.rglob("*.md")):
        if "integrations" not in p.relative_to(DOCS).parts:
            pages.append(p)
    return pages


def rel(page: Path) -> str:
    return str(page.relative_to(ROOT))


def fenced_blocks(page: Path) -> list:
    """(line of the opening fence, info string, code) of each fenced block; the code
    dedented by the fence's indentation."""
    out, lines, i = [], page.read_text().splitlines(), 0
    while i < len(lines):
        m = re.match(r"^(\s*)(`{3,}|~{3,})(.*)$", lines[i])
        if not m:
            i += 1
            continue
        indent, fence, info = m.group(1), m.group(2), m.group(3).strip()
        body, j = [], i + 1
        while j < len(lines) and not re.match(rf"^\s*{re.escape(fence)}\s*$", lines[j]):
            line = lines[j]
            body.append(line[len(indent):] if line.startswith(indent) else line.lstrip())
            j += 1
        assert j < len(lines), f"{rel(page)}:{i + 1}: a code block is never closed"
        out.append((i + 1, info, "\n".join(body) + "\n"))
        i = j + 1
    return out


def included_in_guide_rs() -> set:
    text = (ROOT / "src" / "guide.rs").read_text()
    return {Path(p).as_posix() for p in re.findall(r'include_str!\("\.\./([^"]+)"\)', text)}


def shell_lines(code: str):
    """The block's logical lines (continuations joined), as (first line index, text)."""
    lines, i, out = code.splitlines(), 0, []
    while i < len(lines):
        start, text = i, lines[i]
        while text.endswith("\\") and i + 1 < len(lines):
            i += 1
            text = text[:-1] + " " + lines[i].strip()
        out.append((start, lines[start:i + 1], text))
        i += 1
    return out


def prepare_shell(code: str, where: str, counts: dict) -> str:
    """The block as it runs here: CI-step lines replaced by `:`, `cargo run --release --`
    by the built CLI."""
    out = []
    for _, raw, text in shell_lines(code):
        stripped = text.strip()
        if CI_STEP.match(stripped):
            counts["ci_step_lines"] += 1
            out.append(":  # run by .ci/run's own steps")
            continue
        if CARGO_RUN.match(text):
            counts["cargo_run_lines"] += 1
            raw = [CARGO_RUN.sub(r"\1ctxprune ", raw[0])] + raw[1:]
        elif ANY_CARGO.search(stripped):
            pytest.fail(f"{where}: `{stripped}` needs a build, which the guide's runner does not do; "
                        "write it as prose, or as a line .ci/run runs (cargo test, cargo install)")
        out.extend(raw)
    return "\n".join(out) + "\n"


CURL_STANDIN = r'''#!PYTHON
"""A stand-in for curl on machines without it (the guide's tests only): curl -s [-f] [-X M]
[-H 'K: V'] [-d BODY|@FILE] URL, printing the response body whatever the status, as curl does."""
import sys, urllib.request, urllib.error
args, method, data, headers, url, fail = sys.argv[1:], None, None, {}, None, False
i = 0
while i < len(args):
    a = args[i]
    if a in ("-s", "-S", "-sS", "-f", "-sf", "-fs"):
        fail = fail or "f" in a
    elif a.startswith("-X"):
        method = a[2:] or args[i + 1]
        i += 0 if a[2:] else 1
    elif a == "-d" or a == "--data":
        d = args[i + 1]
        data = open(d[1:], "rb").read() if d.startswith("@") else d.encode()
        i += 1
    elif a == "-H":
        k, v = args[i + 1].split(":", 1); headers[k.strip()] = v.strip(); i += 1
    else:
        url = a
    i += 1
req = urllib.request.Request(url, data=data, method=method or ("POST" if data else "GET"), headers=headers)
try:
    with urllib.request.urlopen(req, timeout=60) as r:
        sys.stdout.buffer.write(r.read())
except urllib.error.HTTPError as e:
    if fail:
        sys.exit(22)
    sys.stdout.buffer.write(e.read())
except OSError:
    sys.exit(7)
'''


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Page:
    """One page's working directory, namespace and environment."""

    def __init__(self, page: Path, tmp: Path, counts: dict):
        self.page, self.dir, self.counts = page, tmp, counts
        (tmp / "tests").mkdir()
        (tmp / "tests" / "data").symlink_to(ROOT / "tests" / "data")
        bindir = tmp / ".bin"
        bindir.mkdir()
        (bindir / "ctxprune").symlink_to(cli_path().resolve())
        if shutil.which("curl") is None:
            (bindir / "curl").write_text(CURL_STANDIN.replace("PYTHON", sys.executable, 1))
            (bindir / "curl").chmod(0o755)
        self.env = dict(os.environ)
        self.env["PATH"] = os.pathsep.join([str(bindir), str(Path(sys.executable).parent), os.environ.get("PATH", "")])
        self.env["PYTHONPATH"] = ""
        self.port = str(free_port())
        self.namespace = {"__name__": f"guide_{page.stem}"}

    def where(self, line: int) -> str:
        return f"{rel(self.page)}:{line}"

    def run_python(self, line: int, code: str):
        code = code.replace(PORT, f"127.0.0.1:{self.port}")
        out = io.StringIO()
        cwd = os.getcwd()
        os.chdir(self.dir)
        try:
            with contextlib.redirect_stdout(out):
                exec(compile(code, f"{self.where(line)} (python block)", "exec"), self.namespace)
        except Exception as e:  # noqa: BLE001 - reported with the page and line
            pytest.fail(f"{self.where(line)}: the Python block failed: {type(e).__name__}: {e}\n"
                        f"--- its output ---\n{out.getvalue()[-3000:]}")
        finally:
            os.chdir(cwd)

    def run_sh(self, line: int, code: str):
        script = prepare_shell(code, self.where(line), self.counts).replace(PORT, f"127.0.0.1:{self.port}")
        log = self.dir / ".block.log"
        with open(log, "wb") as f:
            p = subprocess.Popen(["bash", "-euo", "pipefail", "-c", script], cwd=self.dir, env=self.env,
                                 stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT,
                                 start_new_session=True)
            try:
                rc = p.wait(timeout=BLOCK_TIMEOUT)
            except subprocess.TimeoutExpired:
                rc = None
            finally:
                # Whatever the block left running (a server started with `&`) goes with it.
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGTERM)
                    time.sleep(0.2)
                    os.killpg(p.pid, signal.SIGKILL)
        output = log.read_text(errors="replace")
        if rc is None:
            pytest.fail(f"{self.where(line)}: the shell block ran past {BLOCK_TIMEOUT} s\n--- output ---\n{output[-3000:]}")
        if rc != 0:
            pytest.fail(f"{self.where(line)}: the shell block exited {rc}\n--- script ---\n{script}"
                        f"--- output ---\n{output[-3000:]}")


def run_page(page: Path, counts: dict):
    blocks = fenced_blocks(page)
    for line, info, _ in blocks:
        words = set(re.split(r"[,\s]+", info)) - {""}
        kind = info.split(",")[0].split()[0] if info else ""
        if kind not in KNOWN:
            pytest.fail(f"{rel(page)}:{line}: a code block with info string {info!r}: the guide's runner "
                        f"knows {sorted(KNOWN)} (output examples are text or json)")
        if words & OPT_OUT:
            pytest.fail(f"{rel(page)}:{line}: a block that opts out of running ({info!r}); every block runs")
    if any(info.startswith("rust") for _, info, _ in blocks):
        assert rel(page) in included_in_guide_rs(), (
            f"{rel(page)} has Rust blocks but src/guide.rs does not include it: add "
            f'#[cfg(doctest)] #[doc = include_str!("../{rel(page)}")] pub struct ...;')
    with tempfile.TemporaryDirectory(prefix=f"guide-{page.stem}-") as tmp:
        state = Page(page, Path(tmp), counts)
        for line, info, code in blocks:
            kind = info.split(",")[0].split()[0]
            if kind == "rust":
                counts["rust"] += 1  # run by `cargo test` (doc tests of src/guide.rs)
            elif kind == "python":
                state.run_python(line, code)
                counts["python"] += 1
            elif kind == "sh":
                state.run_sh(line, code)
                counts["sh"] += 1
            else:
                counts["not executed (text, json)"] += 1


def test_every_block_of_the_readme_and_the_guide_runs(capsys):
    minilm_dir()  # the text-in pages need the model (CI: CTXPRUNE_REQUIRE_MODEL=1)
    counts = {"rust": 0, "python": 0, "sh": 0, "not executed (text, json)": 0,
              "ci_step_lines": 0, "cargo_run_lines": 0}
    t0 = time.time()
    per_page = []
    failures = []
    for page in guide_pages():
        before = dict(counts)
        t = time.time()
        try:
            run_page(page, counts)
        except pytest.fail.Exception as e:  # every page runs; the failures are reported together
            failures.append(str(e))
        per_page.append((rel(page), {k: counts[k] - before[k] for k in ("rust", "python", "sh")}, time.time() - t))
    with capsys.disabled():
        print(f"\nguide: {len(per_page)} pages in {time.time() - t0:.1f} s; blocks run: "
              f"{counts['python']} python (here), {counts['sh']} sh (here), {counts['rust']} rust (doc tests "
              f"of src/guide.rs, run by `cargo test`); {counts['not executed (text, json)']} output examples "
              f"(text, json); in the sh blocks, {counts['cargo_run_lines']} `cargo run --release --` lines run as "
              f"the built ctxprune and {counts['ci_step_lines']} build/install/test lines left to .ci/run's "
              f"own steps; none skipped" + (f"; {len(failures)} page(s) FAILED" if failures else ""))
        for name, c, secs in per_page:
            print(f"  {name:32s} python {c['python']:2d}  sh {c['sh']:2d}  rust {c['rust']:2d}  {secs:5.1f} s")
    if failures:
        pytest.fail(f"{len(failures)} page(s) failed:\n\n" + "\n\n".join(failures), pytrace=False)
    assert counts["python"] > 0 and counts["sh"] > 0 and counts["rust"] > 0, counts


def test_the_integration_pages_hold_only_python_blocks():
    """Their Python blocks run in test_docs_examples.py; nothing else may hide there."""
    for page in sorted((DOCS / "integrations").glob("*.md")):
        for line, info, _ in fenced_blocks(page):
            assert info == "python", f"{rel(page)}:{line}: a {info!r} block; the integration pages hold Python only"


def test_links_and_anchors_resolve_and_every_page_is_in_the_summary():
    spec = importlib.util.spec_from_file_location("doc_links", ROOT / "scripts" / "doc_links.py")
    doc_links = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(doc_links)
    problems = doc_links.check(ROOT)
    assert not problems, "\n".join(problems)


def test_the_python_api_page_is_generated_from_the_installed_package():
    for module in ("langchain_core", "llama_index.core", "haystack", "agents"):
        framework(module)  # the integration classes' signatures come from their frameworks
    spec = importlib.util.spec_from_file_location("python_api", ROOT / "scripts" / "python_api.py")
    python_api = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(python_api)
    want = python_api.render()
    have = (DOCS / "python-api.md").read_text()
    assert have == want, ("docs/python-api.md differs from what scripts/python_api.py writes from the "
                          "installed ctxprune_rs: run `python scripts/python_api.py` and commit the page")
