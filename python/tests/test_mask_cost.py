"""mask, MaskSession, count_tokens and cost through the wheel equal the CLI on the same
inputs; messages go in and come out as plain lists of dicts."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest

import ctxprune_rs as ctxprune
from conftest import cli


def openai_trajectory(rng, turns: int) -> list:
    msgs = [{"role": "system", "content": "You are a research agent."},
            {"role": "user", "content": "Find the budget rule."}]
    for t in range(turns):
        tool = ["search", "open", "grep"][t % 3]
        cid = f"call_{t}"
        msgs.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": cid, "type": "function",
             "function": {"name": tool, "arguments": json.dumps({"q": f"topic {t}"})}}]})
        body = " ".join(f"line {i}: result {int(rng.integers(1e6))}" for i in range(int(rng.integers(5, 60))))
        msgs.append({"role": "tool", "tool_call_id": cid, "content": body})
    msgs.append({"role": "assistant", "content": "Done."})
    return msgs


def anthropic_trajectory(rng, turns: int) -> list:
    msgs = [{"role": "user", "content": "Find the budget rule."}]
    for t in range(turns):
        tid = f"toolu_{t}"
        msgs.append({"role": "assistant", "content": [
            {"type": "text", "text": f"Step {t}."},
            {"type": "tool_use", "id": tid, "name": ["search", "open"][t % 2], "input": {"q": t}}]})
        body = "\n".join(f"row {i} {int(rng.integers(1e6))}" for i in range(int(rng.integers(3, 40))))
        block = {"type": "tool_result", "tool_use_id": tid, "content": body}
        if t == 2:
            block["is_error"] = True
        msgs.append({"role": "user", "content": [block]})
    return msgs


def cli_mask(tmp_path, msgs, fmt, *flags):
    stats = tmp_path / "stats.json"
    out = cli("mask", "--format", fmt, "--stats", str(stats), *flags, stdin=json.dumps(msgs))
    return out, json.loads(stats.read_text())


@pytest.mark.parametrize("fmt,make", [("openai", openai_trajectory), ("anthropic", anthropic_trajectory)])
def test_mask_equals_the_cli(tmp_path, rng, fmt, make):
    msgs = make(rng, 11)
    original = copy.deepcopy(msgs)
    for opts, flags in [
        (dict(window=3), ["--window", "3"]),
        (dict(window=2, keep_first=True, tools_keep=["search"], tokenizer="approx"),
         ["--window", "2", "--keep-first", "--tools-keep", "search", "--tokenizer", "approx"]),
        (dict(window=1, keep_errors=False, placeholder="[{tool} x{tokens}]", step=2),
         ["--window", "1", "--keep-errors", "false", "--placeholder", "[{tool} x{tokens}]", "--step", "2"]),
    ]:
        want, want_stats = cli_mask(tmp_path, msgs, fmt, *flags)
        s = ctxprune.MaskSession(fmt, **opts)
        got = s.mask(msgs)
        assert got == want
        assert s.stats == want_stats
        assert ctxprune.mask(msgs, "auto", **opts) == want  # detection reads the same
        assert msgs == original  # the input is not changed
    assert isinstance(got, list) and isinstance(got[0], dict)


def test_a_session_follows_an_agent_loop(tmp_path, rng):
    full = openai_trajectory(rng, 9)
    session = ctxprune.MaskSession("openai", 2)
    for end in range(4, len(full) + 1, 2):
        prefix = full[:end]
        want, want_stats = cli_mask(tmp_path, prefix, "openai", "--window", "2")
        assert session.mask(prefix) == want
        assert session.stats == want_stats
    # Masked history handed back in is left as it is.
    again = session.mask(want)
    assert again == want


def test_a_dict_with_messages_keeps_its_shape(rng):
    doc = {"model": "gpt-x", "messages": openai_trajectory(rng, 7)}
    out = ctxprune.mask(doc, window=1)
    assert set(out) == {"model", "messages"} and out["model"] == "gpt-x"
    masked = [m for m in out["messages"] if m.get("role") == "tool" and "omitted" in m["content"]]
    assert len(masked) == 6


def test_count_tokens_equals_the_cli_accounting():
    text = "Deep-research agents retrieve far more than they can read."
    assert ctxprune.count_tokens(text) == ctxprune.count_tokens(text, "o200k_base") > 5
    assert ctxprune.count_tokens(text, "approx") == (len(text) + 3) // 4


def test_cost_equals_the_cli(tmp_path):
    want = cli("cost", "flops", "--layers", "28", "--hidden", "3584", "--ffn", "18944",
               "--q-heads", "28", "--kv-heads", "4", "--context", "4096")
    got = ctxprune.cost.flops(layers=28, hidden=3584, ffn=18944, q_heads=28, kv_heads=4, context=4096)
    assert got["gflops_per_token"] == want["gflops_per_token"]
    assert got["per_layer"] == want["per_layer"]
    config = {"num_hidden_layers": 6, "hidden_size": 512, "intermediate_size": 1536,
              "num_attention_heads": 8, "num_key_value_heads": 2, "hidden_act": "silu"}
    (tmp_path / "config.json").write_text(json.dumps(config))
    want = cli("cost", "flops", "--config", str(tmp_path / "config.json"), "--context", "777")
    assert ctxprune.cost.flops(config, context=777) == want
    assert ctxprune.cost.flops(tmp_path / "config.json", context=777) == want
    want = cli("cost", "etc", "--input-noncached", "1200", "--input-cached", "8000", "--output", "350")
    assert ctxprune.cost.etc(1200, 8000, 350) == want["etc"]
    want = cli("cost", "plan", "--depth", "100", "--window", "20", "--stride", "10")
    got = ctxprune.cost.plan(100)
    assert [list(w) for w in got["windows"]] == want["windows"]
    assert got["duplication"] == want["duplication"]
