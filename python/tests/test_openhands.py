"""The example OpenHands-style condenser (examples/python/openhands_condenser.py) against
OpenHands' own ObservationMaskingCondenser rule, transcribed below from
openhands/memory/condenser/impl/observation_masking_condenser.py (OpenHands itself is not
installed: it pulls in an agent runtime)."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest

from conftest import ROOT

spec = importlib.util.spec_from_file_location(
    "openhands_condenser", ROOT / "examples" / "python" / "openhands_condenser.py")
example = importlib.util.module_from_spec(spec)
spec.loader.exec_module(example)


def openhands_condense(events, attention_window):
    """OpenHands' ObservationMaskingCondenser.condense on serialised events."""
    results = []
    for i, event in enumerate(events):
        if "observation" in event and i < len(events) - attention_window:
            results.append({"observation": "agent_condensation", "content": "<MASKED>", "source": "agent"})
        else:
            results.append(event)
    return results


def history(rng, turns):
    events = [{"id": 0, "source": "user", "message": "Fix the bug."}]
    for t in range(turns):
        a = 2 * t + 1
        events.append({"id": a, "source": "agent", "action": ["run", "read", "edit"][t % 3],
                       "args": {"path": f"f{t}.py"}})
        events.append({"id": a + 1, "source": "environment", "observation": "run", "cause": a,
                       "content": " ".join(str(x) for x in rng.integers(0, 1000, int(rng.integers(1, 80))))})
    return events


@pytest.mark.parametrize("turns", [1, 4, 9, 17])
@pytest.mark.parametrize("window", [1, 2, 5])
def test_masks_what_openhands_masks(turns, window):
    rng = np.random.default_rng(turns * 31 + window)
    events = history(rng, turns)
    before = json.dumps(events)
    got = example.MaskingCondenser(window=window).condense(events)
    assert got == openhands_condense(events, 2 * window)
    assert json.dumps(events) == before


def test_keeps_errors_and_exempt_tools_when_asked():
    rng = np.random.default_rng(2)
    events = history(rng, 6)
    events[4].update(observation="error", content="ERROR: file not found")
    c = example.MaskingCondenser(window=1, keep_errors=True, tools_keep=["edit"])
    got = c.condense(events)
    masked = [i for i, e in enumerate(got) if e.get("observation") == "agent_condensation"]
    # Observations at 2, 4 (the error: kept), 6 (edit: kept), 8, 10, 12 (inside the window).
    assert masked == [2, 8, 10]
    assert c.stats["tokens_after"] < c.stats["tokens_before"]
