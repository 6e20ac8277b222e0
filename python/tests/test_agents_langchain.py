"""ctxprune_rs.langchain's agent adapters in real agent loops: `create_agent` with
`ContextEditingMiddleware(edits=[CtxpruneMaskEdit])` and with `CtxpruneMaskMiddleware`,
LangGraph's `create_react_agent` with `ctxprune_pre_model_hook`, each driven by LangChain's
fake chat model through a 30-turn tool-using run (parallel calls, a failing tool, a final
answer). Every request the model receives equals `ctxprune_rs.MaskSession(...).mask` of
the same history as OpenAI dicts, keeps OpenAI's pairing rule, and is the same through
`ainvoke`; the agent's stored history stays whole."""

from __future__ import annotations

import asyncio
import json
import pickle
import threading
import warnings

import pytest
from agent_checks import openai_pairing
from conftest import framework

import ctxprune_rs

framework("langchain")
agents = framework("langchain.agents")
lc_mw = framework("langchain.agents.middleware")
prebuilt = framework("langgraph.prebuilt")
fake = framework("langchain_core.language_models.fake_chat_models")
lc_msgs = framework("langchain_core.messages")
lc_tools = framework("langchain_core.tools")
from ctxprune_rs import _langchain_agents  # noqa: E402
from ctxprune_rs._agents import MaskCore  # noqa: E402
from ctxprune_rs.langchain import (  # noqa: E402
    CtxpruneMaskEdit,
    CtxpruneMaskHook,
    CtxpruneMaskMiddleware,
    ctxprune_pre_model_hook,
)

AIMessage, HumanMessage, SystemMessage, ToolMessage = (
    lc_msgs.AIMessage, lc_msgs.HumanMessage, lc_msgs.SystemMessage, lc_msgs.ToolMessage)
SYSTEM = "You are a coding agent. Use the tools."
TASK = "Find where the parser handles time zones."
TURNS = 30
PLACEHOLDER = "[observation omitted:"
OPTIONS = {
    "window": dict(window=5, tokenizer="approx"),
    "step-trigger": dict(window=3, step=4, trigger_tokens=9000, clear_at_least=2000, tokenizer="o200k_base"),
}


def read_output(path: str) -> str:
    return "\n".join(f"{path}:{n}: let value_{n} = parse(input, {n * 7 % 13}); // {'x' * (n % 6)}" for n in range(40))


def grep_output(pattern: str) -> str:
    return "\n".join(f"src/mod{n}.rs:{n * 3}: {pattern} matched here" for n in range(12))


@lc_tools.tool
def read_file(path: str) -> str:
    """Read a source file."""
    return read_output(path)


@lc_tools.tool
def grep(pattern: str) -> str:
    """Search the sources for a pattern."""
    if pattern == "[":
        raise lc_tools.ToolException("invalid regex: unclosed character class '['")
    return grep_output(pattern)


grep.handle_tool_error = True  # the failure comes back as a ToolMessage with status "error"
TOOLS = [read_file, grep]
ERROR_TEXT = "invalid regex: unclosed character class '['"


def script():
    """The model's replies: a tool call each turn (two in parallel every fourth turn, a
    failing grep at turn 10), then the answer."""
    out = []
    for t in range(TURNS):
        calls = [{"id": f"call_{t}_0", "name": "read_file", "args": {"path": f"src/m{t}.rs"}}]
        if t % 4 == 3:
            calls.append({"id": f"call_{t}_1", "name": "grep", "args": {"pattern": f"fn tz_{t}"}})
        if t == 10:
            calls.append({"id": f"call_{t}_1", "name": "grep", "args": {"pattern": "["}})
        out.append(AIMessage(content=f"Turn {t}: looking further.", tool_calls=calls))
    out.append(AIMessage(content="The parser handles time zones in src/m7.rs."))
    return out


class ScriptedModel(fake.FakeMessagesListChatModel):
    """LangChain's fake chat model with `bind_tools` (the tools are ignored: the replies are
    scripted), recording a deep copy of every request it receives."""

    requests: list = []

    def bind_tools(self, tools, **kwargs):
        return self

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        self.requests.append([m.model_copy(deep=True) for m in messages])
        return super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)


def dicts(messages):
    """OpenAI chat dicts of LangChain messages (string content), written out here apart
    from the adapter's own conversion."""
    out = []
    for m in messages:
        if isinstance(m, SystemMessage):
            out.append({"role": "system", "content": m.content})
        elif isinstance(m, HumanMessage):
            out.append({"role": "user", "content": m.content})
        elif isinstance(m, AIMessage):
            d = {"role": "assistant", "content": m.content}
            if m.tool_calls:
                d["tool_calls"] = [
                    {"id": c["id"], "type": "function",
                     "function": {"name": c["name"], "arguments": json.dumps(c["args"], ensure_ascii=False)}}
                    for c in m.tool_calls]
            out.append(d)
        elif isinstance(m, ToolMessage):
            d = {"role": "tool", "tool_call_id": m.tool_call_id, "content": m.content}
            if m.status == "error":
                d["is_error"] = True
            out.append(d)
        else:
            raise AssertionError(f"unexpected {type(m).__name__}")
    return out


def build(kind, options):
    """(agent, model, adapter) for `kind`: "edit", "middleware" or "hook"."""
    model = ScriptedModel(responses=script(), requests=[])
    if kind == "edit":
        adapter = CtxpruneMaskEdit(**options)
        mw = [lc_mw.ContextEditingMiddleware(edits=[adapter])]
        agent = agents.create_agent(model, tools=TOOLS, system_prompt=SYSTEM, middleware=mw)
    elif kind == "middleware":
        adapter = CtxpruneMaskMiddleware(**options)
        agent = agents.create_agent(model, tools=TOOLS, system_prompt=SYSTEM, middleware=[adapter])
    else:
        adapter = ctxprune_pre_model_hook(**options)
        with warnings.catch_warnings():  # create_react_agent is deprecated in LangGraph 1.x, not removed
            warnings.simplefilter("ignore")
            agent = prebuilt.create_react_agent(model, tools=TOOLS, prompt=SYSTEM, pre_model_hook=adapter)
    return agent, model, adapter


def run(kind, options, mode):
    """The requests the model received, the final stored messages, and the threads the
    masking ran in."""
    agent, model, adapter = build(kind, options)
    threads = []
    changes = adapter.core.changes

    def spy(d):
        threads.append(threading.current_thread())
        return changes(d)

    adapter.core.changes = spy
    inputs = {"messages": [HumanMessage(TASK)]}
    config = {"recursion_limit": 500}
    state = agent.invoke(inputs, config) if mode == "sync" else asyncio.run(agent.ainvoke(inputs, config))
    return model.requests, state["messages"], threads


KINDS = ["edit", "middleware", "hook"]
_expected = {}


def expected_mask(name, history):
    """`MaskSession(format="openai", **options).mask` of `history` as dicts, on a fresh
    session (the three agents store the same histories: computed once)."""
    d = dicts(history)
    key = (name, json.dumps(d))
    if key not in _expected:
        _expected[key] = ctxprune_rs.MaskSession(format="openai", **OPTIONS[name]).mask(d)
    return _expected[key]


@pytest.fixture(scope="module")
def runs():
    cache = {}

    def get(kind, name, mode):
        key = (kind, name, mode)
        if key not in cache:
            cache[key] = run(kind, OPTIONS[name], mode)
        return cache[key]

    return get


@pytest.mark.parametrize("name", list(OPTIONS))
@pytest.mark.parametrize("kind", KINDS)
def test_each_request_is_the_masked_history(runs, kind, name):
    requests, stored, _ = runs(kind, name, "sync")
    assert len(requests) == TURNS + 1
    masked_counts = []
    for r, req in enumerate(requests):
        assert isinstance(req[0], SystemMessage) and req[0].content == SYSTEM
        history = stored[: len(req) - 1]  # the stored history is append-only: this request's
        # The system prompt is not among the messages the adapters see.
        expected = dicts(req[:1]) + expected_mask(name, history)
        got = dicts(req)
        assert len(got) == len(expected)
        for i, (g, e) in enumerate(zip(got, expected)):
            assert g == e, f"request {r}, message {i}"
        assert openai_pairing(got) == [], f"request {r}"
        # the failed grep is an error: never masked
        assert all(m.content == ERROR_TEXT for m in req if isinstance(m, ToolMessage) and m.status == "error")
        masked_counts.append(sum(isinstance(m, ToolMessage) and m.content.startswith(PLACEHOLDER) for m in req))
    turns_seen = [sum(isinstance(m, AIMessage) and bool(m.tool_calls) for m in req) for req in requests]
    if name == "window":
        # every turn more than 5 back has its observations masked (the error excepted)
        for req, t, n in zip(requests, turns_seen, masked_counts):
            calls = [c for m in req if isinstance(m, AIMessage) for c in m.tool_calls]
            old = [c for c in calls if int(c["id"].split("_")[1]) < t - 5 and c["args"].get("pattern") != "["]
            assert n == len(old)
    else:
        # the trigger holds masking off past the window, then it acts
        first = next(r for r, n in enumerate(masked_counts) if n)
        assert turns_seen[first] > 3 + 4 and masked_counts[-1] > 0
    assert masked_counts[-1] > 0


@pytest.mark.parametrize("kind", KINDS)
def test_the_stored_history_stays_whole(runs, kind):
    _, stored, _ = runs(kind, "window", "sync")
    calls = {c["id"]: c for m in stored if isinstance(m, AIMessage) for c in m.tool_calls}
    tools = [m for m in stored if isinstance(m, ToolMessage)]
    assert len(tools) == len(calls) == TURNS + TURNS // 4 + 1
    for m in tools:
        c = calls[m.tool_call_id]
        if c["name"] == "read_file":
            assert m.content == read_output(c["args"]["path"])
        elif c["args"]["pattern"] == "[":
            assert m.status == "error" and m.content == ERROR_TEXT
        else:
            assert m.content == grep_output(c["args"]["pattern"])
    assert stored[-1].content == script()[-1].content


@pytest.mark.parametrize("name", list(OPTIONS))
@pytest.mark.parametrize("kind", KINDS)
def test_ainvoke_sends_the_same_requests(runs, kind, name):
    sync, _, _ = runs(kind, name, "sync")
    asyn, stored, threads = runs(kind, name, "async")
    assert [dicts(r) for r in asyn] == [dicts(r) for r in sync]
    assert len(threads) == len(sync)
    if kind != "edit":  # ContextEditingMiddleware runs its edits on the event loop itself
        assert all(t is not threading.main_thread() for t in threads)


def history(n_turns=8):
    msgs = [HumanMessage("go")]
    for t in range(n_turns):
        msgs.append(AIMessage(content="", tool_calls=[{"id": f"c{t}", "name": "read_file", "args": {"path": f"f{t}"}}]))
        msgs.append(ToolMessage(content=read_output(f"f{t}"), tool_call_id=f"c{t}", name="read_file"))
    return msgs


def test_unchanged_messages_are_the_same_objects_and_the_input_is_not_changed():
    msgs = history()
    before = [m.model_copy(deep=True) for m in msgs]
    out = CtxpruneMaskHook(window=2, tokenizer="approx").invoke({"messages": msgs})["llm_input_messages"]
    assert len(out) == len(msgs) and msgs == before
    changed = [i for i, (a, b) in enumerate(zip(msgs, out)) if a is not b]
    assert changed == [2 * t + 2 for t in range(6)]  # the observations of turns 1-6 of 8
    for i in changed:
        m, c = msgs[i], out[i]
        assert type(c) is ToolMessage and c.content.startswith(PLACEHOLDER)
        assert (c.id, c.tool_call_id, c.name, c.status) == (m.id, m.tool_call_id, m.name, m.status)

    edited = list(msgs)
    CtxpruneMaskEdit(window=2, tokenizer="approx").apply(edited, count_tokens=None)
    assert [m.content for m in edited] == [m.content for m in out] and msgs == before


def test_the_middleware_hands_on_the_request_it_got_when_nothing_changes():
    mw = CtxpruneMaskMiddleware(window=50, tokenizer="approx")
    req = lc_mw.ModelRequest(model=ScriptedModel(responses=[AIMessage("x")]), messages=history(3))
    assert mw.wrap_model_call(req, lambda r: r) is req
    empty = lc_mw.ModelRequest(model=ScriptedModel(responses=[AIMessage("x")]), messages=[])
    assert mw.wrap_model_call(empty, lambda r: r) is empty


def test_the_edit_ignores_langchains_token_counter():
    def count_tokens(messages):
        raise AssertionError("not used")

    msgs = history()
    CtxpruneMaskEdit(window=2, tokenizer="approx").apply(msgs, count_tokens=count_tokens)
    assert sum(isinstance(m, ToolMessage) and m.content.startswith(PLACEHOLDER) for m in msgs) == 6


def test_list_content_is_its_text():
    img = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    msgs = [HumanMessage(content=[{"type": "text", "text": "look at "}, img, "this"])]
    for t in range(4):
        msgs.append(AIMessage(content=[{"type": "text", "text": "reading"}, {"type": "tool_use", "id": f"c{t}"}],
                              tool_calls=[{"id": f"c{t}", "name": "read_file", "args": {"path": f"f{t}"}}]))
        msgs.append(ToolMessage(content=[{"type": "text", "text": read_output(f"f{t}")}, img], tool_call_id=f"c{t}"))
    d = _langchain_agents.to_openai_dicts(msgs)
    assert d[0] == {"role": "user", "content": "look at this"}
    assert d[1]["content"] == "reading" and d[2]["content"] == read_output("f0")
    out = CtxpruneMaskHook(window=1, tokenizer="approx").invoke({"messages": msgs})["llm_input_messages"]
    assert [i for i, (a, b) in enumerate(zip(msgs, out)) if a is not b] == [2, 4, 6]
    assert out[2].content == ctxprune_rs.MaskSession("openai", 1, tokenizer="approx").mask(d)[2]["content"]


def test_a_message_that_cannot_be_converted_is_named():
    msgs = history(1) + [lc_msgs.FunctionMessage(content="x", name="f")]
    with pytest.raises(ctxprune_rs.InvalidInputError, match=r"messages\[3\]: cannot convert a FunctionMessage"):
        CtxpruneMaskEdit().apply(msgs, count_tokens=None)
    bad_role = r"messages\[0\]: cannot convert a ChatMessage with role 'tool'"
    with pytest.raises(ctxprune_rs.InvalidInputError, match=bad_role):
        _langchain_agents.to_openai_dicts([lc_msgs.ChatMessage(content="x", role="tool")])
    no_id = AIMessage(content="", tool_calls=[{"id": None, "name": "read_file", "args": {}}])
    with pytest.raises(ctxprune_rs.InvalidInputError, match=r"messages\[0\]\.tool_calls\[0\]: the call has no id"):
        _langchain_agents.to_openai_dicts([no_id])


def test_a_history_the_api_would_refuse_is_named():
    msgs = history(2) + [ToolMessage(content="late", tool_call_id="c9")]
    orphan = r"messages\[5\]: answers \"c9\", which no earlier call made"
    with pytest.raises(ctxprune_rs.InvalidInputError, match=orphan):
        CtxpruneMaskMiddleware(tokenizer="approx")._masked(
            lc_mw.ModelRequest(model=ScriptedModel(responses=[AIMessage("x")]), messages=msgs))


def test_bad_options_fail_when_the_adapter_is_made():
    for make in (CtxpruneMaskEdit, CtxpruneMaskMiddleware, ctxprune_pre_model_hook):
        with pytest.raises(ctxprune_rs.InvalidInputError, match="step"):
            make(step=0, tokenizer="approx")


def test_the_adapters_pickle():
    msgs = history()
    want = CtxpruneMaskHook(window=2, tokenizer="approx").invoke({"messages": msgs})["llm_input_messages"]
    for make in (CtxpruneMaskEdit, CtxpruneMaskMiddleware, CtxpruneMaskHook):
        back = pickle.loads(pickle.dumps(make(window=2, tokenizer="approx")))
        assert type(back) is make and back.core.options == {"format": "openai", "window": 2, "tokenizer": "approx"}
        assert [m.content for m in _langchain_agents._masked_list(back.core, msgs)] == [m.content for m in want]


class ClearingCore(MaskCore):
    """MaskCore whose masked calls also have their arguments cleared to "{}", standing in
    for `clear_tool_inputs` to test how cleared arguments map back."""

    def changes(self, messages):
        out = dict(super().changes(messages))
        ids = {messages[i]["tool_call_id"] for i in out if messages[i].get("role") == "tool"}
        for i, m in enumerate(messages):
            calls = m.get("tool_calls") or []
            if any(c["id"] in ids for c in calls):
                new = dict(m, tool_calls=[
                    {**c, "function": {**c["function"], "arguments": "{}"}} if c["id"] in ids else c for c in calls])
                out[i] = new
        return sorted(out.items())


def test_cleared_arguments_set_the_calls_args():
    msgs = history(4)
    edit = CtxpruneMaskEdit(window=2, tokenizer="approx")
    edit.core = ClearingCore(window=2, tokenizer="approx")
    edited = list(msgs)
    edit.apply(edited)
    args = [m.tool_calls[0]["args"] for m in edited if isinstance(m, AIMessage)]
    assert args == [{}, {}, {"path": "f2"}, {"path": "f3"}]
    assert edited[1] is not msgs[1] and msgs[1].tool_calls[0]["args"] == {"path": "f0"}
    assert edited[5] is msgs[5]


def test_clear_tool_inputs_through_the_crate():
    try:
        core = MaskCore(window=2, tokenizer="approx", clear_tool_inputs=True)
    except TypeError:
        pytest.skip("this build's MaskSession has no clear_tool_inputs")
    msgs = history(4)
    hook = CtxpruneMaskHook(window=2, tokenizer="approx")
    hook.core = core
    out = hook.invoke({"messages": msgs})["llm_input_messages"]
    expected = core.masked(_langchain_agents.to_openai_dicts(msgs))
    for m, e in zip(out, expected):
        if isinstance(m, AIMessage) and m.tool_calls:
            want = [json.loads(c["function"]["arguments"]) for c in e["tool_calls"]]
            assert [c["args"] for c in m.tool_calls] == want
        assert m.content == e["content"]
