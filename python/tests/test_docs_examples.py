"""Every Python block of the integration guides (docs/integrations/*.md) runs as written,
against the real frameworks and the real MiniLM model."""

from __future__ import annotations

import contextlib
import io
import re

import pytest
from conftest import ROOT, framework, minilm_dir

PAGES = sorted((ROOT / "docs" / "integrations").glob("*.md"))
NEEDS = {
    "langchain": "langchain_classic", "llamaindex": "llama_index.core", "haystack": "haystack",
    "agents-langchain": "langchain", "agents-llamaindex": "llama_index.core",
    "agents-haystack": "haystack", "agents-openai": "agents", "agents-openhands": "openhands.sdk",
}


def blocks(page):
    return re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S)


def test_every_page_has_an_example():
    assert {p.stem for p in PAGES} == set(NEEDS)
    assert all(blocks(p) for p in PAGES)


@pytest.mark.parametrize("page", PAGES, ids=[p.stem for p in PAGES])
def test_the_pages_examples_run(page):
    framework(NEEDS[page.stem])
    minilm_dir()
    for i, code in enumerate(blocks(page)):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(code, f"{page.name} (block {i})", "exec"), {"__name__": f"doc_{page.stem}_{i}"})
        assert out.getvalue().strip(), f"{page.name} block {i} printed nothing"
