"""The README's Python example runs as written."""

from __future__ import annotations

import contextlib
import io

from conftest import ROOT


def test_the_readme_example_runs():
    text = (ROOT / "README.md").read_text()
    start = text.index("```python", text.index("## Python")) + len("```python")
    code = text[start:text.index("```", start)]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md (Python)", "exec"), {})
    assert "gflops_per_token" in out.getvalue()
