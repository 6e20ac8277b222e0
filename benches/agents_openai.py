"""The OpenAI Agents SDK's own `ToolOutputTrimmer` (agents.extensions) beside
`ctxprune_rs.openai_agents.CtxpruneInputFilter`, both at their defaults, as the
`call_model_input_filter` of one seeded 500-turn trajectory (not a test).

The trajectory is what the SDK hands the filter at the last model call: Responses API
items, one task message, then 500 model turns (a reasoning summary now and then, one call
or two in parallel, the tool outputs: file reads, grep hits, test logs with tracebacks,
directory listings, JSON bodies; 3% the SDK's own error output). A second shape puts a
user message before every turn (a chat), since `ToolOutputTrimmer` counts its
`recent_turns` in user messages.

Printed, per shape and filter: the median time of one call on the whole trajectory
(ctxprune cold: a new filter's first call; warm: its token counts cached, as in a run),
the median per call over the run (the call at every turn on the items so far), and the
tokens of the filtered input (o200k_base, `ctxprune_rs.count_tokens`, over the text the
model reads: message and reasoning text, call names and arguments, outputs).

    pip install openai-agents
    python benches/agents_openai.py [--turns 500] [--seed 7] [--repeats 9]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time

from agents import Agent
from agents.extensions import ToolOutputTrimmer
from agents.run_config import CallModelData, ModelInputData

import ctxprune_rs
from ctxprune_rs.openai_agents import CtxpruneInputFilter

SDK_ERROR = "An error occurred while running the tool. Please try again."
WORDS = ("value offset parse config handler request token cache index buffer schema retry "
         "timeout session client stream record column window batch").split()


def code(r: random.Random, path: str, n: int) -> str:
    out = [f"# {path}"]
    for i in range(n):
        w = r.sample(WORDS, 3)
        out.append(r.choice([
            f"def {w[0]}_{w[1]}(self, {w[2]}: int = {i}) -> dict:",
            f"    {w[0]} = self.{w[1]}.get('{w[2]}', {r.randint(0, 999)})",
            f"    if not {w[0]}:\n        raise ValueError(f'bad {w[1]}: {{{w[2]}}}')",
            f"    return {{'{w[0]}': {w[1]}, '{w[2]}': {i}}}",
            f"class {w[0].title()}{w[1].title()}({w[2].title()}Base):",
            "",
        ]))
    return "\n".join(out)


def output_for(r: random.Random, tool: str, args: dict) -> str:
    if tool == "read_file":
        return code(r, args["path"], int(r.lognormvariate(4.3, 0.7)))
    if tool == "grep":
        return "\n".join(f"src/{r.choice(WORDS)}/{r.choice(WORDS)}.py:{r.randint(1, 900)}: "
                         f"{r.choice(WORDS)} = {args['pattern']}({r.choice(WORDS)})" for _ in range(r.randint(3, 60)))
    if tool == "run_tests":
        lines = [f"tests/test_{r.choice(WORDS)}.py::test_{r.choice(WORDS)}_{k} {r.choice(['PASSED'] * 6 + ['FAILED'])}"
                 for k in range(r.randint(10, 120))]
        if r.random() < 0.5:
            lines += ["Traceback (most recent call last):"] + [
                f'  File "src/{r.choice(WORDS)}.py", line {r.randint(1, 500)}, in {r.choice(WORDS)}' for _ in range(8)
            ] + [f"AssertionError: expected {r.randint(0, 99)} got {r.randint(0, 99)}"]
        return "\n".join(lines + [f"== {r.randint(1, 9)} failed, {len(lines)} passed in {r.random() * 9:.2f}s =="])
    if tool == "list_dir":
        return "\n".join(f"{r.choice(WORDS)}_{k}.{r.choice(['py', 'md', 'json', 'toml'])}  {r.randint(90, 99999)}"
                         for k in range(r.randint(5, 90)))
    body = {"status": "ok", "items": [{w: r.randint(0, 10**6) for w in r.sample(WORDS, 5)} for _ in range(r.randint(2, 40))]}
    return json.dumps(body, indent=1)


TOOLS = {
    "read_file": lambda r, t: {"path": f"src/{r.choice(WORDS)}/{r.choice(WORDS)}_{t}.py"},
    "grep": lambda r, t: {"pattern": r.choice(WORDS), "path": "src"},
    "run_tests": lambda r, t: {"selector": f"tests/test_{r.choice(WORDS)}.py"},
    "list_dir": lambda r, t: {"path": f"src/{r.choice(WORDS)}"},
    "http_get": lambda r, t: {"url": f"https://api.example.com/{r.choice(WORDS)}/{t}"},
}


def trajectory(turns: int, seed: int, chat: bool) -> list:
    r = random.Random(seed)
    items: list = [{"role": "user", "content": "The nightly build fails in the parser: find the cause and fix it."}]
    for t in range(1, turns + 1):
        if chat and t > 1:
            items.append({"role": "user", "content": f"Step {t}: go on."})
        if r.random() < 0.3:
            items.append({"type": "reasoning", "id": f"rs_{t}",
                          "summary": [{"type": "summary_text", "text": f"Next, check the {r.choice(WORDS)} path."}]})
        calls = []
        for k in range(2 if r.random() < 0.15 else 1):
            tool = r.choice(list(TOOLS))
            args = TOOLS[tool](r, t)
            calls.append((f"call_{t}_{k}", tool, args))
            items.append({"type": "function_call", "id": f"fc_{t}_{k}", "call_id": f"call_{t}_{k}", "name": tool,
                          "arguments": json.dumps(args)})
        for cid, tool, args in calls:
            out = SDK_ERROR if r.random() < 0.03 else output_for(r, tool, args)
            items.append({"type": "function_call_output", "call_id": cid, "output": out})
    items.append({"type": "message", "role": "assistant", "id": "msg_end",
                  "content": [{"type": "output_text", "text": "The parser ignored the offset; fixed.", "annotations": []}]})
    return items


def model_text(item) -> str:
    """The text the model reads of one item."""
    t = item.get("type")
    if t == "function_call":
        return item["name"] + " " + item["arguments"]
    if t == "function_call_output":
        o = item["output"]
        return o if isinstance(o, str) else "\n".join(p.get("text", "") for p in o)
    c = item.get("content", item.get("summary", ""))
    return c if isinstance(c, str) else "\n".join(p.get("text", "") for p in c)


def tokens(items) -> int:
    return sum(ctxprune_rs.token_counter("o200k_base").count_many([model_text(i) for i in items]))


def median_ms(fn, repeats: int) -> float:
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--turns", type=int, default=500)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--repeats", type=int, default=9)
    a = ap.parse_args()
    agent = Agent(name="bench")

    def data(items):
        return CallModelData(model_data=ModelInputData(input=list(items), instructions="Fix it."), agent=agent, context=None)

    ctxprune_rs.count_tokens("load")  # the o200k tables, once
    print(f"{'shape':<6} {'filter':<28} {'call ms (full)':>15} {'per-call ms (run)':>18} {'input tokens':>13} {'masked/trimmed':>15}")
    for chat in (False, True):
        items = trajectory(a.turns, a.seed, chat)
        shape = "chat" if chat else "task"
        whole = tokens(items)
        outputs = sum(1 for i in items if i.get("type") == "function_call_output")
        print(f"{shape:<6} {'(none)':<28} {'':>15} {'':>18} {whole:>13,} {f'0/{outputs}':>15}")
        # The prefix the SDK passes at each model call: everything before each turn's reasoning/calls.
        starts = [k for k, it in enumerate(items) if it.get("type") in ("function_call", "reasoning")
                  and (k == 0 or items[k - 1].get("type") not in ("function_call", "reasoning"))] + [len(items)]

        trimmer = ToolOutputTrimmer()
        full = median_ms(lambda: trimmer(data(items)), a.repeats)
        run = statistics.median([median_ms(lambda s=s: trimmer(data(items[:s])), 1) for s in starts]) if starts else 0
        out = trimmer(data(items)).input
        changed = sum(1 for x, y in zip(items, out) if x is not y)
        print(f"{shape:<6} {'ToolOutputTrimmer()':<28} {full:>15.2f} {run:>18.2f} {tokens(out):>13,} {f'{changed}/{outputs}':>15}")

        cold = median_ms(lambda: CtxpruneInputFilter()(data(items)), 3)  # includes loading the counter
        f = CtxpruneInputFilter()
        t0 = time.perf_counter()
        CtxpruneInputFilter()
        make = (time.perf_counter() - t0) * 1e3
        runs = [median_ms(lambda s=s: f(data(items[:s])), 1) for s in starts]
        warm = median_ms(lambda: f(data(items)), a.repeats)
        out = f(data(items)).input
        changed = sum(1 for x, y in zip(items, out) if x is not y)
        print(f"{shape:<6} {'CtxpruneInputFilter()':<28} {warm:>15.2f} {statistics.median(runs):>18.2f} "
              f"{tokens(out):>13,} {f'{changed}/{outputs}':>15}")
        print(f"{'':<6} {'  (cold: new filter, 1st call)':<28} {cold - make:>15.2f}   (making the filter: {make:.0f} ms)")
        st = f.stats
        print(f"{'':<6} {'  (its own count, o200k)':<28} tokens_before {st['tokens_before']:,}  tokens_after {st['tokens_after']:,}")


if __name__ == "__main__":
    main()
