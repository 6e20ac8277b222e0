#!/usr/bin/env python3
"""Checks the links of README.md and of the user guide (docs/**/*.md, an mdBook).

- Every relative link and image (`[text](target)`, `![alt](target)`, `[ref]: target`)
  names a file that exists; a link into docs/ from a page of the book stays inside docs/
  (the book is built from docs/ alone, so a link out of it would break there).
- Every `#anchor` (on a link to a page, or alone for the same page) is a heading of that
  page, slugged as mdBook and GitHub both slug it: lower case, letters, digits, `_` and `-`
  kept, spaces to `-`, everything else dropped, a repeated heading suffixed -1, -2, ...
- Every page under docs/ is in docs/SUMMARY.md (or in EXCEPTIONS below), and every page
  the summary lists exists.
- A path the pages write in backticks (`src/select/mod.rs`, `tests/data/...`) exists in
  the repository, so a page never points at a file that is not there; and no page names
  a file that lives outside it (the algorithm specification, the papers' text files).

Links inside code (fenced blocks, inline code) are not links. External links (http,
https, mailto) are not fetched.

    python3 scripts/doc_links.py        # exit 1 and one line per problem, or "ok"
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Pages under docs/ that are not chapters of the book (none today).
EXCEPTIONS: set = set()
# Top-level entries of the repository that a backticked path may start with.
REPO_DIRS = ("src", "tests", "benches", "scripts", "kernels", "python", "examples", "fuzz", "docs", "assets", ".ci")
REPO_FILES = ("Cargo.toml", "Cargo.lock", "build.rs", "pyproject.toml", "rustfmt.toml", "README.md")
# Files that are not in this repository, which no page may send a reader to.
OUTSIDE = re.compile(
    r"\bSPEC(?:\.md)?\s*§|\bSPEC\.md\b|\bDESIGN\.md\b|\.\./shared\b|"
    r"\b(?:marginal-value-pruning|observation-masking|boundarymorph-budgeted-reranking|rerank-effective-token-cost)\.txt\b|"
    r"\b[Ii]ssue\s+#?\d+"
)


def pages(root: Path) -> list:
    docs = root / "docs"
    return [root / "README.md"] + sorted(docs.rglob("*.md"))


def strip_code(text: str, inline: bool = True) -> str:
    """The text with fenced blocks blanked (lines kept, for line numbers) and, with
    `inline`, inline code spans removed."""
    out, fence = [], None
    for line in text.splitlines():
        m = re.match(r"^\s*(`{3,}|~{3,})", line)
        if fence is None and m:
            fence = m.group(1)
            out.append("")
            continue
        if fence is not None:
            if re.match(rf"^\s*{re.escape(fence)}\s*$", line):
                fence = None
            out.append("")
            continue
        out.append(re.sub(r"(`+)(?:(?!\1).)+?\1", "", line) if inline else line)
    return "\n".join(out)


def inline_code(text: str) -> list:
    """(line number, content) of every inline code span outside fenced blocks."""
    out, fence = [], None
    for n, line in enumerate(text.splitlines(), 1):
        m = re.match(r"^\s*(`{3,}|~{3,})", line)
        if fence is None and m:
            fence = m.group(1)
            continue
        if fence is not None:
            if re.match(rf"^\s*{re.escape(fence)}\s*$", line):
                fence = None
            continue
        for c in re.finditer(r"(`+)((?:(?!\1).)+?)\1", line):
            out.append((n, c.group(2).strip()))
    return out


def slug(heading: str) -> str:
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links keep their text
    text = text.replace("`", "").replace("*", "")
    text = re.sub(r"<[^>]+>", "", text)
    out = []
    for ch in text.strip():
        if ch.isalnum() or ch in "_-":
            out.append(ch.lower())
        elif ch.isspace():
            out.append("-")
    return "".join(out)


def anchors(page: Path) -> set:
    seen: dict = {}
    out = set()
    for line in strip_code(page.read_text(), inline=False).splitlines():
        m = re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        s = slug(m.group(2))
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.add(s if n == 0 else f"{s}-{n}")
    return out


def links(page: Path) -> list:
    """(line, target) of every link and image outside code."""
    out = []
    for n, line in enumerate(strip_code(page.read_text()).splitlines(), 1):
        for m in re.finditer(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)", line):
            out.append((n, m.group(1)))
        m = re.match(r"^\s*\[[^\]]+\]:\s*(\S+)", line)
        if m:
            out.append((n, m.group(1)))
    return out


def summary_pages(root: Path) -> list:
    summary = root / "docs" / "SUMMARY.md"
    return [t for _, t in links(summary)]


def check(root: Path = ROOT) -> list:
    problems = []
    docs = root / "docs"
    cache: dict = {}
    for page in pages(root):
        name = page.relative_to(root)
        in_book = docs in page.parents
        text = page.read_text()
        for n, target in links(page):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            dest = page if not path else (page.parent / path).resolve()
            if path:
                if not dest.exists():
                    problems.append(f"{name}:{n}: link to {target}: no such file")
                    continue
                if in_book and docs.resolve() not in dest.parents:
                    problems.append(f"{name}:{n}: link to {target}: outside docs/, which the book cannot follow")
                    continue
            if anchor:
                if dest.suffix != ".md":
                    problems.append(f"{name}:{n}: link to {target}: an anchor on a file that is not a page")
                    continue
                if dest not in cache:
                    cache[dest] = anchors(dest)
                if anchor not in cache[dest]:
                    problems.append(f"{name}:{n}: link to {target}: {dest.name} has no heading #{anchor}")
        for n, code in inline_code(text):
            code = code.rstrip(".,;:")
            first = code.split("/")[0]
            looks_like_path = (first in REPO_DIRS and "/" in code) or code in REPO_FILES
            if not looks_like_path or re.search(r"[\s*{}<>$]|\.\.\.", code):
                continue
            if any(seg.isupper() and len(seg) > 1 for seg in code.split("/")):  # a placeholder: TARGET
                continue
            if not (root / code).exists():
                problems.append(f"{name}:{n}: `{code}` is not a file or folder of the repository")
        for n, line in enumerate(strip_code(text).splitlines(), 1):
            m = OUTSIDE.search(line)
            if m:
                problems.append(f"{name}:{n}: {m.group(0)!r} points outside the repository (name the rule, not the file)")
    listed = set()
    for target in summary_pages(root):
        p = (docs / target.partition("#")[0]).resolve()
        if not p.exists():
            problems.append(f"docs/SUMMARY.md: lists {target}, which does not exist")
        listed.add(p)
    for p in sorted(docs.rglob("*.md")):
        r = p.relative_to(docs).as_posix()
        if r == "SUMMARY.md" or r in EXCEPTIONS:
            continue
        if p.resolve() not in listed:
            problems.append(f"docs/{r}: not in docs/SUMMARY.md (add it, or to EXCEPTIONS in scripts/doc_links.py)")
    return problems


def main() -> int:
    problems = check(ROOT)
    for p in problems:
        print(p)
    if not problems:
        print(f"ok: {len(pages(ROOT))} pages, every link, anchor and path resolves, every page is in the summary")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
