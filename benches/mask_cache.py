"""What each masking policy costs an agent at the provider, prompt cache included.

For seeded 500-turn tool-using trajectories, every request the agent makes (the history
before each assistant turn) is rendered under each policy, and compared with the request
before it: the provider serves the longest common prefix from its prompt cache (counted
at message granularity: the first message that differs and everything after it is new
input) and bills the rest as uncached input. Reported per policy, summed over requests:

- `prefix kept`: requests whose prompt extends the previous prompt byte for byte (the
  cached prefix survives whole), out of all requests;
- `rewrites`: requests that changed an earlier message (the cache is broken there);
- `uncached` / `cached`: input tokens (o200k) billed uncached and read from the cache;
- ETC (rerank-effective-token-cost.txt, eq. 1: input_nc + alpha * input_c + beta *
  output) and dollars at two providers' published prices: Anthropic Claude Sonnet 4.5
  ($3 input, $3.75 5-minute cache write: every uncached token is written, $0.30 cache read,
  $15 output per MTok) and OpenAI GPT-5 ($1.25 input, $0.125 cached input, $10 output per
  MTok), as listed in 2026 (recorded 2026-12-03).

Policies: no masking; ctxprune's paper window (last 5 turns), SWE-agent's polling preset,
Anthropic's clear_tool_uses_20250919 edit (its defaults, and with clear_at_least 50,000 as
Anthropic recommends), the cache-aware hold (trigger 100,000, clear_at_least 50,000); and
the frameworks' own built-ins run on the same trajectories: LangChain's ClearToolUsesEdit
with its defaults (inside ContextEditingMiddleware's apply, LangChain's approximate
counter) and openai-agents' ToolOutputTrimmer with its defaults.

Run: python benches/mask_cache.py [--turns 500] [--seeds 3]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
import ctxprune_rs as ctxprune  # noqa: E402

WORDS = ("retrieval agent context window token budget observation search result page latency "
         "cache summary evidence query report table figure method dataset error function file "
         "line test build version commit patch issue").split()

ANTHROPIC = {"input": 3.0, "write": 3.75, "read": 0.30, "output": 15.0}
OPENAI = {"input": 1.25, "read": 0.125, "output": 10.0}


def trajectory(seed: int, turns: int) -> list:
    """A research agent's history: a system prompt and a task, then `turns` turns of one
    or two tool calls with outputs of 50-2,500 words (log-uniform), an error now and then,
    and a short thought in each assistant message."""
    rng = random.Random(seed)
    w = lambda n: " ".join(rng.choice(WORDS) for _ in range(n))  # noqa: E731
    msgs = [{"role": "system", "content": "You are a research agent. " + w(300)},
            {"role": "user", "content": "Research: " + w(30)}]
    for t in range(turns):
        calls = []
        for k in range(1 if rng.random() < 0.7 else 2):
            tool = rng.choice(["search", "open", "run_code"])
            calls.append({"id": f"call_{t}_{k}", "type": "function",
                          "function": {"name": tool, "arguments": json.dumps({"q": w(4)})}})
        msgs.append({"role": "assistant", "content": w(rng.randint(10, 60)), "tool_calls": calls})
        for c in calls:
            n = int(round(10 ** rng.uniform(1.7, 3.4)))
            m = {"role": "tool", "tool_call_id": c["id"], "content": w(n)}
            if rng.random() < 0.05:
                m["is_error"] = True
            msgs.append(m)
    return msgs


def requests(msgs: list) -> list:
    """The histories the agent sends: everything before each assistant message."""
    return [msgs[:i] for i, m in enumerate(msgs) if m["role"] == "assistant"]


# --- the frameworks' built-ins, on their own message types -------------------------------

def langchain_default():
    from langchain.agents.middleware.context_editing import ClearToolUsesEdit
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
    from langchain_core.messages.utils import count_tokens_approximately

    edit = ClearToolUsesEdit()

    def to_lc(m):
        if m["role"] == "system":
            return SystemMessage(m["content"])
        if m["role"] == "user":
            return HumanMessage(m["content"])
        if m["role"] == "assistant":
            return AIMessage(m["content"], tool_calls=[
                {"id": c["id"], "name": c["function"]["name"], "args": json.loads(c["function"]["arguments"])}
                for c in m.get("tool_calls", [])])
        return ToolMessage(m["content"], tool_call_id=m["tool_call_id"], status="error" if m.get("is_error") else "success")

    def back(lc, m):
        out = dict(m)
        out["content"] = lc.content if isinstance(lc.content, str) else json.dumps(lc.content)
        if m["role"] == "assistant":
            out["tool_calls"] = [{"id": c["id"], "type": "function",
                                  "function": {"name": c["name"], "arguments": json.dumps(c["args"])}}
                                 for c in lc.tool_calls]
        return out

    def run(history):
        lc = [to_lc(m) for m in history]
        edit.apply(lc, count_tokens=count_tokens_approximately)
        return [back(a, m) for a, m in zip(lc, history)]

    return run


def openai_agents_default():
    from agents.extensions.tool_output_trimmer import ToolOutputTrimmer
    from agents.run_config import CallModelData, ModelInputData

    trimmer = ToolOutputTrimmer()

    def to_items(history):
        items = []
        for m in history:
            if m["role"] in ("system", "user"):
                items.append({"role": m["role"], "content": m["content"]})
            elif m["role"] == "assistant":
                items.append({"role": "assistant", "content": m["content"]})
                for c in m.get("tool_calls", []):
                    items.append({"type": "function_call", "call_id": c["id"], "name": c["function"]["name"],
                                  "arguments": c["function"]["arguments"]})
            else:
                items.append({"type": "function_call_output", "call_id": m["tool_call_id"], "output": m["content"]})
        return items

    def run(history):
        items = to_items(history)
        out = trimmer(CallModelData(model_data=ModelInputData(input=items, instructions=None), agent=None, context=None))
        # Back to one entry per message: an assistant message and its calls are one.
        outs = iter(out.input)
        res = []
        for m in history:
            it = next(outs)
            if m["role"] == "assistant":
                calls = [next(outs) for _ in m.get("tool_calls", [])]
                res.append({**m, "tool_calls": [{"id": c["call_id"], "type": "function",
                                                 "function": {"name": c["name"], "arguments": c["arguments"]}}
                                                for c in calls]})
            elif m["role"] == "tool":
                o = it["output"]
                res.append({**m, "content": o if isinstance(o, str) else json.dumps(o)})
            else:
                res.append(dict(m))
        return res

    return run


def ctxprune_policy(**options):
    def run(history):
        # Each request masked as the agent loop would: the whole history, a fresh session
        # per policy run is not needed (a session reuses counts only for histories that
        # extend the last one).
        return session.mask(history)

    session = ctxprune.MaskSession("openai", tokenizer="o200k_base", **options)
    return run


def policies():
    yield "no masking", lambda h: h
    yield "ctxprune paper (last 5 turns)", ctxprune_policy()
    yield "ctxprune last 3 tool uses", ctxprune_policy(window=3, unit="tool_uses")
    yield "ctxprune last 5 turns, step 10", ctxprune_policy(window=5, step=10)
    yield "ctxprune swe-agent (n 5, polling 10)", ctxprune_policy(preset="swe-agent", window=5, step=10)
    yield "ctxprune anthropic edit (defaults)", ctxprune_policy(edit={"type": "clear_tool_uses_20250919"})
    yield "ctxprune anthropic edit, clear_at_least 50k", ctxprune_policy(edit={
        "type": "clear_tool_uses_20250919", "clear_at_least": {"type": "input_tokens", "value": 50000}})
    yield "ctxprune hold (trigger 100k, clear 50k, K 5)", ctxprune_policy(hold=True, trigger_tokens=100000, clear_at_least=50000)
    yield "ctxprune hold (trigger 30k, clear 15k, K 5)", ctxprune_policy(hold=True, trigger_tokens=30000, clear_at_least=15000)
    yield "ctxprune hold (trigger 30k, clear 15k, keep 3 tool uses)", ctxprune_policy(
        hold=True, trigger_tokens=30000, clear_at_least=15000, window=3, unit="tool_uses")
    try:
        yield "LangChain ClearToolUsesEdit (defaults)", langchain_default()
    except ImportError as e:
        print(f"# LangChain not installed ({e}): its built-in is not measured", file=sys.stderr)
    try:
        yield "openai-agents ToolOutputTrimmer (defaults)", openai_agents_default()
    except ImportError as e:
        print(f"# openai-agents not installed ({e}): its built-in is not measured", file=sys.stderr)


_counts: dict = {}


def tokens(m: dict) -> int:
    """o200k tokens of a message as sent (its content and its tool calls)."""
    key = json.dumps(m, sort_keys=True)
    n = _counts.get(key)
    if n is None:
        text = (m.get("content") or "") + (json.dumps(m["tool_calls"]) if m.get("tool_calls") else "")
        n = _counts[key] = ctxprune.count_tokens(text)
    return n


def measure(run, msgs):
    reqs = requests(msgs)
    out_tokens = sum(tokens({"content": m["content"], "tool_calls": m.get("tool_calls")})
                     for m in msgs if m["role"] == "assistant")
    prev: list = []
    kept = rewrites = 0
    cached = uncached = 0
    times = []
    for h in reqs:
        t0 = time.perf_counter()
        p = run(h)
        times.append(time.perf_counter() - t0)
        assert len(p) == len(h), "a policy dropped a message"
        rendered = [json.dumps(m, sort_keys=True) for m in p]
        lcp = 0
        while lcp < min(len(prev), len(rendered)) and prev[lcp] == rendered[lcp]:
            lcp += 1
        if lcp == len(prev):
            kept += 1
        else:
            rewrites += 1
        toks = [tokens(m) for m in p]
        cached += sum(toks[:lcp])
        uncached += sum(toks[lcp:])
        prev = rendered
    return {"requests": len(reqs), "kept": kept, "rewrites": rewrites, "cached": cached,
            "uncached": uncached, "output": out_tokens, "ms": 1e3 * statistics.median(times)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--turns", type=int, default=500)
    ap.add_argument("--seeds", type=int, default=3)
    a = ap.parse_args()
    trajs = [trajectory(s, a.turns) for s in range(a.seeds)]
    print(f"# {a.seeds} seeded trajectories of {a.turns} turns; "
          f"{statistics.mean(len(t) for t in trajs):.0f} messages, "
          f"{statistics.mean(sum(tokens(m) for m in t) for t in trajs) / 1e3:.0f}k o200k tokens each (means)")
    print("| policy | prefix kept | rewrites | uncached input | cached input | ETC Anthropic | $ Anthropic | ETC OpenAI | $ OpenAI | ms / request |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, run in policies():
        rs = [measure(run, t) for t in trajs]
        s = {k: statistics.mean(r[k] for r in rs) for k in rs[0]}
        etc_a = ANTHROPIC["write"] / ANTHROPIC["input"] * s["uncached"] + ANTHROPIC["read"] / ANTHROPIC["input"] * s["cached"] \
            + ANTHROPIC["output"] / ANTHROPIC["input"] * s["output"]
        usd_a = (ANTHROPIC["write"] * s["uncached"] + ANTHROPIC["read"] * s["cached"] + ANTHROPIC["output"] * s["output"]) / 1e6
        etc_o = s["uncached"] + OPENAI["read"] / OPENAI["input"] * s["cached"] + OPENAI["output"] / OPENAI["input"] * s["output"]
        usd_o = (OPENAI["input"] * s["uncached"] + OPENAI["read"] * s["cached"] + OPENAI["output"] * s["output"]) / 1e6
        print(f"| {name} | {s['kept']:.0f} / {s['requests']:.0f} | {s['rewrites']:.0f} | {s['uncached'] / 1e6:.2f} M | "
              f"{s['cached'] / 1e6:.1f} M | {etc_a / 1e6:.2f} M | {usd_a:.2f} | {etc_o / 1e6:.2f} M | {usd_o:.2f} | {s['ms']:.1f} |",
              flush=True)


if __name__ == "__main__":
    main()
