"""The package as a Python user meets it: `dir()` and `__all__` show the API only, `repr`
shows the configuration, every docstring example runs (doctest), and the capability
table (docs/capabilities.md) names tests that exist."""

from __future__ import annotations

import doctest
import re

import numpy as np
import pytest
from conftest import ROOT

import ctxprune_rs as ctxprune
import ctxprune_rs.text


def test_dir_and_all_are_the_api():
    assert sorted(dir(ctxprune)) == sorted(set(ctxprune.__all__) | {"__version__"})
    for name in ctxprune.__all__:
        assert hasattr(ctxprune, name), name
    for leaked in ("np", "os", "json", "threading", "copyreg"):
        assert leaked not in dir(ctxprune)


def test_repr_shows_the_configuration():
    assert repr(ctxprune.Selector("mmr", k=10, lambda_=0.7)) == "Selector(method='mmr', k=10, lambda_=0.7)"
    assert repr(ctxprune.Selector("grn", mode="gate", threshold=0.4)) == (
        "Selector(method='grn', mode='gate', threshold=0.4)"
    )
    assert repr(ctxprune.Reranker(20, 5, kernel="rbf")) == "Reranker(budget=20, capacity=5, kernel='rbf')"
    assert repr(ctxprune.MaskSession("openai", 3, hold=True)) == "MaskSession(format='openai', window=3, hold=True)"
    assert repr(ctxprune.TokenCounter("approx")) == "TokenCounter(\"approx\")"
    p = ctxprune.Pool(np.eye(3, dtype=np.float32))
    assert "3" in repr(p)


@pytest.mark.parametrize("module", [ctxprune, ctxprune.text, ctxprune.cost], ids=lambda m: m.__name__)
def test_docstring_examples_run(module):
    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    tests = [t for t in finder.find(module, module.__name__) if t.examples]
    for t in tests:
        runner.run(t)
    r = runner.summarize(verbose=False)
    assert r.failed == 0
    if module is ctxprune:
        assert r.attempted >= 3


def test_the_capability_table_names_tests_that_exist():
    table = (ROOT / "docs" / "capabilities.md").read_text()
    names = set(re.findall(r"`([a-z_]+)::([a-z0-9_:]+)`", table))
    assert len(names) >= 20
    for file, path in names:
        test = path.split("::")[-1]
        if file.startswith("test_"):
            src = (ROOT / "python" / "tests" / f"{file}.py").read_text()
            assert f"def {test}(" in src, f"{file}::{test}"
        else:
            src = (ROOT / "tests" / f"{file}.rs").read_text()
            assert f"fn {test}(" in src, f"{file}::{path}"
    for file in re.findall(r"`([a-z_]+\.(?:rs|py))`", table):
        assert (ROOT / "tests" / file).exists() or (ROOT / "python" / "tests" / file).exists(), file
