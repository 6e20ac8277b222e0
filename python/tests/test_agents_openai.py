"""ctxprune_rs.openai_agents.CtxpruneInputFilter in real OpenAI Agents SDK runs (installed
from PyPI; no network): a scripted model makes 30 tool turns (some with two parallel
calls, one failing, some with reasoning and commentary) and then answers. Every request
the model receives is exactly `ctxprune_rs.MaskSession(format="openai", **options)` on
the same items viewed as chat messages, keeps the OpenAI pairing rule, and is the same
under `Runner.run_sync`, `Runner.run`, `Runner.run_streamed` and the async filter; the
run's history and its session keep every tool output whole."""

from __future__ import annotations

import asyncio
import copy
import json
import pickle

import pytest
from agent_checks import openai_pairing
from conftest import framework

agents = framework("agents")

from agents import Agent, RunConfig, Runner, SQLiteSession, function_tool, set_tracing_disabled  # noqa: E402
from agents.items import ModelResponse  # noqa: E402
from agents.models.interface import Model  # noqa: E402
from agents.run_config import CallModelData, ModelInputData  # noqa: E402
from agents.tool import default_tool_error_function  # noqa: E402
from agents.usage import Usage  # noqa: E402
from openai.types.responses import (  # noqa: E402
    Response,
    ResponseCompletedEvent,
    ResponseFunctionToolCall,
    ResponseFunctionToolCallOutputItem,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseReasoningItem,
)
from openai.types.responses.response_reasoning_item import Summary  # noqa: E402

import ctxprune_rs  # noqa: E402
from ctxprune_rs.openai_agents import CtxpruneInputFilter, sdk_tool_error, to_messages  # noqa: E402

set_tracing_disabled(True)
TURNS = 30
TASK = "Find why test_parse_dates fails and fix it."


def search_text(query: str) -> str:
    lines = [f"{query} hit {k}: src/mod_{k % 7}.py:{10 + 3 * k}: def handle_{k}(value): return parse(value, tz={k})"
             for k in range(24)]
    return "\n".join(lines)


def file_text(path: str) -> str:
    return "\n".join(f"{n:4d}  # {path} line {n}: x_{n} = compute({n}, scale={n % 5})" for n in range(1, 36))


@function_tool
def search(query: str) -> str:
    """Searches the repository."""
    return search_text(query)


@function_tool
def read_file(path: str) -> str:
    """Reads a file of the repository."""
    if path == "missing.py":
        raise FileNotFoundError(path)
    return file_text(path)


def calls_of(turn: int):
    """The scripted model's calls at `turn` (1-based): (tool, arguments)."""
    if turn == 7:
        return [("read_file", {"path": "missing.py"})]  # fails: the SDK's error output
    if turn % 5 == 3:
        return [("search", {"query": f"parse_dates {turn}"}), ("read_file", {"path": f"src/mod_{turn}.py"})]
    return [("search", {"query": f"tz offset {turn}"}) if turn % 2 else ("read_file", {"path": f"tests/t_{turn}.py"})]


def tool_output(tool: str, args: dict) -> str:
    if tool == "read_file" and args["path"] == "missing.py":
        return default_tool_error_function(None, FileNotFoundError("missing.py"))
    return search_text(args["query"]) if tool == "search" else file_text(args["path"])


class ScriptedModel(Model):
    """Answers by the script whatever it is sent (whole or streamed), and records each
    request's items."""

    def __init__(self):
        self.requests = []
        self.instructions = []

    def respond(self, system_instructions, input):
        assert not isinstance(input, str)
        self.requests.append(json.loads(json.dumps(input)))
        self.instructions.append(system_instructions)
        turn = len(self.requests)
        out = []
        if turn <= TURNS:
            if turn % 6 == 1:
                out.append(ResponseReasoningItem(id=f"rs_{turn}", type="reasoning",
                                                 summary=[Summary(type="summary_text", text=f"Plan for step {turn}.")]))
            if turn % 9 == 4:
                out.append(ResponseOutputMessage(id=f"msg_{turn}", type="message", role="assistant", status="completed",
                                                 content=[ResponseOutputText(type="output_text", annotations=[],
                                                                             text=f"Checking step {turn}.")]))
            for k, (tool, args) in enumerate(calls_of(turn)):
                out.append(ResponseFunctionToolCall(type="function_call", id=f"fc_{turn}_{k}", call_id=f"call_{turn}_{k}",
                                                    name=tool, arguments=json.dumps(args)))
        else:
            out.append(ResponseOutputMessage(id="msg_final", type="message", role="assistant", status="completed",
                                             content=[ResponseOutputText(type="output_text", annotations=[],
                                                                         text="Fixed: the parser ignored the offset.")]))
        return out

    async def get_response(self, system_instructions, input, model_settings, tools, output_schema, handoffs,
                           tracing, **_):
        return ModelResponse(output=self.respond(system_instructions, input), usage=Usage(), response_id=None)

    async def stream_response(self, system_instructions, input, model_settings, tools, output_schema, handoffs,
                              tracing, **_):
        out = self.respond(system_instructions, input)
        response = Response(id=f"resp_{len(self.requests)}", created_at=0, model="scripted", object="response",
                            output=out, tool_choice="auto", tools=[], parallel_tool_calls=True)
        yield ResponseCompletedEvent(type="response.completed", response=response, sequence_number=0)


def agent_with(model):
    return Agent(name="fixer", instructions="Fix the bug.", model=model, tools=[search, read_file])


OPTIONS = {
    "window": dict(window=5, tokenizer="approx"),
    "step": dict(window=5, step=3, tokenizer="o200k_base"),
    "trigger": dict(window=3, trigger_tokens=8000, clear_at_least=3000, tokenizer="o200k_base"),
    "clear_inputs": dict(window=4, clear_tool_inputs=True, tokenizer="approx"),
}


def run_sync(opts):
    model = ScriptedModel()
    f = CtxpruneInputFilter(**opts)
    result = Runner.run_sync(agent_with(model), TASK, run_config=RunConfig(call_model_input_filter=f), max_turns=50)
    return model, result


def run_async(opts, variant):
    """`await Runner.run` with the filter as a sync callable, its async variant with a
    session, or `Runner.run_streamed`."""

    async def go():
        model = ScriptedModel()
        f = CtxpruneInputFilter(**opts)
        if variant == "sync-filter":
            result = await Runner.run(agent_with(model), TASK, run_config=RunConfig(call_model_input_filter=f),
                                      max_turns=50)
            return model, result, None
        if variant == "streamed":
            result = Runner.run_streamed(agent_with(model), TASK, run_config=RunConfig(call_model_input_filter=f),
                                         max_turns=50)
            async for _ in result.stream_events():
                pass
            return model, result, None
        session = SQLiteSession("ctxprune-test")  # in memory
        result = await Runner.run(agent_with(model), TASK, run_config=RunConfig(call_model_input_filter=f.acall),
                                  max_turns=50, session=session)
        return model, result, await session.get_items()

    return asyncio.run(go())


def masked_outputs(request):
    return [it["call_id"] for it in request
            if it.get("type") == "function_call_output" and it["output"].startswith("[observation omitted")]


def assert_whole(history, what):
    """Every function_call_output in `history` is the tool's own output for its call."""
    calls = {it["call_id"]: it for it in history if it.get("type") == "function_call"}
    outs = [it for it in history if it.get("type") == "function_call_output"]
    assert len(outs) == len(calls) == sum(len(calls_of(t)) for t in range(1, TURNS + 1)), what
    for it in outs:
        c = calls[it["call_id"]]
        assert it["output"] == tool_output(c["name"], json.loads(c["arguments"])), f"{what}: {it['call_id']} changed"


@pytest.fixture(scope="module", params=list(OPTIONS))
def runs(request):
    opts = OPTIONS[request.param]
    model, result = run_sync(opts)
    amodel, aresult, _ = run_async(opts, "sync-filter")
    smodel, sresult, session_items = run_async(opts, "acall-session")
    tmodel, tresult, _ = run_async(opts, "streamed")
    return request.param, opts, (model, result), (amodel, aresult), (smodel, sresult, session_items), (tmodel, tresult)


def test_requests_are_the_core_masking(runs):
    name, opts, (model, result), *_ = runs
    history = result.to_input_list()
    assert len(model.requests) == TURNS + 1 and result.final_output.startswith("Fixed")
    assert set(model.instructions) == {"Fix the bug."}
    reference = ctxprune_rs.MaskSession(format="openai", **opts)  # one conversation: one session
    for n, req in enumerate(model.requests):
        unmasked = history[: len(req)]
        want = reference.mask(to_messages(unmasked))
        assert to_messages(req) == want, f"request {n}"
        # The same items, only stale outputs (and arguments) replaced: exactly the masked ones.
        expected = []
        for it, (m, k) in zip(unmasked, _by_item(unmasked, want)):
            if it.get("type") == "function_call_output":
                it = dict(it, output=m["content"])
            elif it.get("type") == "function_call":
                it = dict(it, arguments=m["tool_calls"][k]["function"]["arguments"])
            expected.append(it)
        assert req == expected, f"request {n}"
    masked_last = masked_outputs(model.requests[-1])
    assert masked_last, "nothing was masked in 30 turns"
    # The failed call (turn 7) is never masked: keep_errors and the SDK's error output.
    assert all(not c.startswith("call_7_") for r in model.requests for c in masked_outputs(r))
    # Inside the window (the last 5 or 3 turns) nothing is masked.
    latest = {f"call_{t}_{k}" for t in range(TURNS - opts["window"] + 1, TURNS + 1) for k in range(2)}
    assert not latest & set(masked_last)
    counts = [len(masked_outputs(r)) for r in model.requests]
    if name in ("window", "step"):  # request n (n turns made): turns 1..b masked, b = ⌊(n − K)/P⌋·P
        k, p = opts["window"], opts.get("step", 1)
        for n, req in enumerate(model.requests):
            b = (n - k) // p * p if n > k else 0
            stale = {f"call_{t}_{j}" for t in range(1, b + 1) for j in range(len(calls_of(t)))} - {"call_7_0"}
            assert set(masked_outputs(req)) == stale, f"request {n}"
    if name == "clear_inputs":  # a masked output's call is sent with its arguments cleared
        for req in model.requests:
            stale = set(masked_outputs(req))
            args = {it["call_id"]: it["arguments"] for it in req if it.get("type") == "function_call"}
            assert all(args[c] == "{}" for c in stale)
            assert all(json.loads(a) for c, a in args.items() if c not in stale)
    if name == "trigger":  # turns beyond the window, but below the trigger: nothing masked yet
        first = next(n for n, c in enumerate(counts) if c)
        assert first > opts["window"] + 3 and counts[first] > 1


def _by_item(items, messages):
    """Per item, its chat message and its place among the message's calls (a run of
    calls is one message)."""
    out, m, k = [], -1, 0
    prev_call = False
    for it in items:
        call = it.get("type") == "function_call"
        if call and prev_call:
            k += 1
        else:
            m, k = m + 1, 0
        out.append((messages[m], k))
        prev_call = call
    assert m == len(messages) - 1
    return out


def test_no_request_breaks_the_pairing_rule(runs):
    _, _, (model, _), (amodel, _), (smodel, _, _), (tmodel, _) = runs
    for reqs in (model.requests, amodel.requests, smodel.requests, tmodel.requests):
        for n, req in enumerate(reqs):
            assert openai_pairing(to_messages(req)) == [], f"request {n}"


def test_the_history_and_the_session_stay_whole(runs):
    _, _, (_, result), (_, aresult), (_, sresult, session_items), (_, tresult) = runs
    assert_whole(result.to_input_list(), "run_sync history")
    assert_whole(tresult.to_input_list(), "run_streamed history")
    assert_whole(aresult.to_input_list(), "Runner.run history")
    assert_whole(sresult.to_input_list(), "Runner.run (session) history")
    assert_whole(session_items, "SQLiteSession items")


def test_sync_async_and_streamed_runs_send_the_same_requests(runs):
    _, _, (model, _), (amodel, _), (smodel, _, _), (tmodel, _) = runs
    assert model.requests == amodel.requests == smodel.requests == tmodel.requests


def test_the_error_output_is_marked():
    items = [{"role": "user", "content": "go"},
             {"type": "function_call", "call_id": "a", "name": "read_file", "arguments": "{}"},
             {"type": "function_call_output", "call_id": "a", "output": default_tool_error_function(None, ValueError())},
             {"type": "function_call", "call_id": "b", "name": "read_file", "arguments": "{}"},
             {"type": "function_call_output", "call_id": "b", "output": "Tool 'read_file' not found."},
             {"type": "function_call", "call_id": "c", "name": "search", "arguments": "{}"},
             {"type": "function_call_output", "call_id": "c", "output": "Tool 'search' timed out after 2.5 seconds."},
             {"type": "function_call", "call_id": "d", "name": "search", "arguments": "{}"},
             {"type": "function_call_output", "call_id": "d", "output": "Tool 'read_file' not found."}]
    marks = [m.get("is_error", False) for m in to_messages(items) if m["role"] == "tool"]
    assert marks == [True, True, True, False]  # d's text names another tool
    custom = to_messages(items, is_error=lambda it: it["call_id"] == "d")
    assert [m.get("is_error", False) for m in custom if m["role"] == "tool"] == [False, False, False, True]
    assert not sdk_tool_error({"output": [{"type": "input_text", "text": "x"}]})


def data_for(items, instructions="be brief"):
    return CallModelData(model_data=ModelInputData(input=items, instructions=instructions),
                         agent=agent_with(ScriptedModel()), context=None)


def long_history(turns=12, parallel=()):
    items = [{"role": "user", "content": "go"}]
    for t in range(turns):
        ids = [f"c{t}"] + ([f"c{t}b"] if t in parallel else [])
        items += [{"type": "function_call", "call_id": c, "name": "search", "arguments": json.dumps({"q": c}),
                   "id": f"fc_{c}"} for c in ids]
        items += [{"type": "function_call_output", "call_id": c, "output": search_text(c)} for c in ids]
    return items


def test_the_input_list_and_items_are_not_changed():
    items = long_history(parallel={2, 5})
    before = copy.deepcopy(items)
    f = CtxpruneInputFilter(window=2, tokenizer="approx")
    out = f(data_for(items))
    assert isinstance(out, ModelInputData) and out.instructions == "be brief"
    assert items == before and out.input is not items
    assert masked_outputs(out.input) and f.stats["observations_masked"] == len(masked_outputs(out.input))
    # Unchanged items are the very objects given (the SDK tracks them by identity).
    assert all(a is b for a, b in zip(items, out.input) if a == b)
    assert len(out.input) == len(items) and [it.get("type") for it in out.input] == [it.get("type") for it in items]
    assert asyncio.run(f.acall(data_for(items))).input == out.input


def test_sdk_objects_in_and_out():
    items = long_history(turns=8)
    objs = [ResponseFunctionToolCall.model_validate(it) if it.get("type") == "function_call"
            else ResponseFunctionToolCallOutputItem.model_validate(dict(it, id=f"fco_{it['call_id']}", status="completed"))
            if it.get("type") == "function_call_output" else it for it in items]
    f = CtxpruneInputFilter(window=2, tokenizer="approx")
    out = f.mask_items(objs)
    assert [type(o) for o in out] == [type(o) for o in objs]
    plain = [o.model_dump(mode="json", exclude_none=True) if hasattr(o, "model_dump") else o for o in out]
    assert to_messages(plain) == to_messages(f.mask_items(items)) and masked_outputs(plain)


def test_one_filter_serves_many_conversations():
    """One filter in a RunConfig serves many runs: each request is masked as if alone
    (the same lengths, other tokens: no count of another conversation is reused)."""
    f = CtxpruneInputFilter(window=2, tokenizer="o200k_base")
    a = long_history(turns=9)
    b = [dict(it, output=it["output"].replace("hit", "HIT").replace("parse", "p_r_s"))
         if it.get("type") == "function_call_output" else it for it in a]
    for items in (a, b, a[:11], b):
        want = ctxprune_rs.MaskSession(format="openai", window=2, tokenizer="o200k_base").mask(to_messages(items))
        assert to_messages(f.mask_items(items)) == want


def test_errors_name_the_item():
    f = CtxpruneInputFilter(window=1, tokenizer="approx")
    orphan = [{"role": "user", "content": "go"},
              {"type": "function_call", "call_id": "a", "name": "search", "arguments": "{}"},
              {"type": "function_call_output", "call_id": "a", "output": "x"},
              {"type": "reasoning", "id": "rs", "summary": []},
              {"type": "function_call_output", "call_id": "zz", "output": "y"}]
    with pytest.raises(ctxprune_rs.InvalidInputError, match=r"^invalid input\[4\]: answers \"zz\", which no earlier call"):
        f(data_for(orphan))
    twice = [{"role": "user", "content": "go"}, {"type": "message", "role": "assistant", "content": "hm"},
             {"type": "function_call", "call_id": "a", "name": "search", "arguments": "{}"},
             {"type": "function_call", "call_id": "a", "name": "search", "arguments": "{}"}]
    with pytest.raises(ctxprune_rs.InvalidInputError, match=r"^invalid input\[3\]: call id \"a\" is also the id of input\[2\]"):
        f.mask_items(twice)
    with pytest.raises(ctxprune_rs.InvalidInputError, match=r"^invalid input\[1\]: the function_call has no \"call_id\""):
        f.mask_items([{"role": "user", "content": "go"}, {"type": "function_call", "name": "s", "arguments": "{}"}])
    with pytest.raises(ctxprune_rs.InvalidInputError, match=r"^invalid input\[0\]: expected a Responses input item"):
        f.mask_items([42])
    with pytest.raises(ctxprune_rs.InvalidInputError, match="window"):
        CtxpruneInputFilter(window=-1)
    with pytest.raises(ctxprune_rs.InvalidInputError, match="format"):
        CtxpruneInputFilter(format="anthropic")


def test_the_mapping_keeps_every_item():
    items = [{"role": "developer", "content": "rules"},
             {"role": "user", "content": [{"type": "input_text", "text": "look"}, {"type": "input_image", "image_url": "u"}]},
             {"type": "reasoning", "id": "rs", "summary": [{"type": "summary_text", "text": "plan"}]},
             {"type": "function_call", "call_id": "a", "name": "s", "namespace": "repo", "arguments": "{}"},
             {"type": "function_call", "call_id": "b", "name": "s", "arguments": "{\"q\": 1}"},
             {"type": "web_search_call", "id": "ws", "status": "completed", "action": {"type": "search", "query": "q"}},
             {"type": "function_call_output", "call_id": "a", "output": [{"type": "input_text", "text": "one"},
                                                                         {"type": "input_text", "text": "two"}]},
             {"type": "function_call_output", "call_id": "b", "output": "three"},
             {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "done", "annotations": []}]},
             {"type": "computer_call_output", "call_id": "cc", "output": {"type": "computer_screenshot"}}]
    msgs = to_messages(items)
    assert [m["role"] for m in msgs] == ["developer", "user", "assistant", "assistant", "assistant", "tool", "tool",
                                         "assistant", "user"]
    assert msgs[1]["content"] == "look" and msgs[2]["content"] == "plan"
    assert [c["function"]["name"] for c in msgs[3]["tool_calls"]] == ["repo.s", "s"]
    assert json.loads(msgs[4]["content"])["type"] == "web_search_call"
    assert msgs[5] == {"role": "tool", "tool_call_id": "a", "content": "one\ntwo"}
    assert msgs[7]["content"] == "done" and json.loads(msgs[8]["content"])["call_id"] == "cc"
    out = CtxpruneInputFilter(window=0, tokenizer="approx").mask_items(items)
    assert [type(o) for o in out] == [type(i) for i in items]
    assert [i for i, (a, b) in enumerate(zip(items, out)) if a != b] == [6, 7]  # only the outputs


def test_clear_tool_inputs_replaces_the_arguments():
    try:
        ctxprune_rs.MaskSession(format="openai", clear_tool_inputs=True)
    except TypeError:
        pytest.skip("this build's MaskSession has no clear_tool_inputs")
    items = long_history(turns=6, parallel={1})
    f = CtxpruneInputFilter(window=2, clear_tool_inputs=True, tokenizer="approx")
    out = f.mask_items(items)
    want = ctxprune_rs.MaskSession(format="openai", window=2, clear_tool_inputs=True, tokenizer="approx")
    assert to_messages(out) == want.mask(to_messages(items))
    changed = [it for a, it in zip(items, out) if a != it and it["type"] == "function_call"]
    assert changed and all(isinstance(it["arguments"], str) for it in changed)
    assert openai_pairing(to_messages(out)) == []


def test_the_filter_pickles():
    f = CtxpruneInputFilter(window=3, tools_keep=["read_file"], tokenizer="approx")
    g = pickle.loads(pickle.dumps(f))
    items = long_history()
    assert g.mask_items(items) == f.mask_items(items) and "window=3" in repr(g)
