"""The orphan property from Python: over random trajectories (hypothesis) in both provider
shapes, with parallel calls, errors and a pending last turn, every masking policy keeps
every message, its role and its ids, and the provider's pairing rule
(python/tests/agent_checks.py, read off the dicts, not the crate's parser)."""

from __future__ import annotations

import json

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings, strategies as st  # noqa: E402

import ctxprune_rs as ctxprune  # noqa: E402
from agent_checks import anthropic_pairing, openai_pairing  # noqa: E402

TOOLS = ["search", "open", "run"]
text = st.text(alphabet="abc xyz\n{}\"é", max_size=80)


@st.composite
def trajectories(draw, fmt):
    msgs = [{"role": "system", "content": "agent"}, {"role": "user", "content": draw(text)}]
    turns = draw(st.integers(1, 10))
    pending = draw(st.booleans())
    for t in range(turns):
        n = draw(st.integers(1, 3))
        calls = [(f"c{t}_{k}", draw(st.sampled_from(TOOLS)), {"q": draw(text)}) for k in range(n)]
        order = draw(st.permutations(range(n)))
        answered = not (pending and t == turns - 1)
        if fmt == "openai":
            msgs.append({"role": "assistant", "content": draw(st.one_of(st.none(), text)), "tool_calls": [
                {"id": i, "type": "function", "function": {"name": tool, "arguments": json.dumps(a)}}
                for i, tool, a in calls]})
            if answered:
                for k in order:
                    m = {"role": "tool", "tool_call_id": calls[k][0], "content": draw(text)}
                    if draw(st.integers(0, 6)) == 0:
                        m["is_error"] = True
                    msgs.append(m)
        else:
            msgs.append({"role": "assistant", "content": [{"type": "text", "text": draw(text)}] + [
                {"type": "tool_use", "id": i, "name": tool, "input": a} for i, tool, a in calls]})
            if answered:
                msgs.append({"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": calls[k][0], "content": draw(text),
                     **({"is_error": True} if draw(st.integers(0, 6)) == 0 else {})}
                    for k in order]})
    return msgs


policies = st.one_of(
    st.fixed_dictionaries({"edit": st.fixed_dictionaries({
        "type": st.just("clear_tool_uses_20250919"),
        "trigger": st.builds(lambda v: {"type": "input_tokens", "value": v}, st.integers(0, 200)),
        "keep": st.builds(lambda v: {"type": "tool_uses", "value": v}, st.integers(0, 4)),
        "clear_at_least": st.builds(lambda v: {"type": "input_tokens", "value": v}, st.integers(0, 50)),
        "clear_tool_inputs": st.booleans()})}),
    st.fixed_dictionaries({"preset": st.just("swe-agent"), "window": st.integers(0, 4), "step": st.integers(1, 4)}),
    st.fixed_dictionaries({
        "window": st.integers(0, 5), "unit": st.sampled_from(["turns", "tool_uses"]),
        "anchor": st.sampled_from(["window", "start"]), "step": st.integers(1, 4), "hold": st.booleans(),
        "trigger_tokens": st.one_of(st.none(), st.integers(0, 300)), "clear_at_least": st.integers(0, 60),
        "clear_tool_inputs": st.booleans(), "keep_first": st.booleans(), "keep_errors": st.booleans()}),
)


def skeleton(msgs):
    out = []
    for m in msgs:
        ids = [c["id"] for c in m.get("tool_calls") or []] + [m.get("tool_call_id")]
        if isinstance(m.get("content"), list):
            ids += [(b.get("type"), b.get("id"), b.get("tool_use_id")) for b in m["content"]]
        out.append((m["role"], ids))
    return out


@pytest.mark.parametrize("fmt", ["openai", "anthropic"])
@settings(max_examples=1000, deadline=None, derandomize=True)
@given(data=st.data())
def test_no_policy_orphans_a_tool_message(fmt, data):
    msgs = data.draw(trajectories(fmt))
    options = data.draw(policies)
    out = ctxprune.MaskSession(fmt, tokenizer="approx", **options).mask(msgs)
    assert len(out) == len(msgs)
    assert skeleton(out) == skeleton(msgs)
    check = openai_pairing if fmt == "openai" else anthropic_pairing
    assert check(out) == [], options
