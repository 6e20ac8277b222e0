"""ctxprune_rs.haystack.CtxpruneCompactor inside a real Haystack Agent (CompactionHook at
`before_llm`, a scripted chat generator, a real @tool): every request the model gets is
`ctxprune_rs.MaskSession(format="openai", **options).mask` of the unmasked conversation
(the same script run without the hook), keeps OpenAI's pairing rule, and the Agent's
messages keep every tool output (in the masked messages' meta, `restore` gives them back)."""

from __future__ import annotations

import asyncio

import pytest
from agent_checks import openai_pairing
from conftest import framework

import ctxprune_rs

hs = framework("haystack")
from haystack.components.agents import Agent  # noqa: E402
from haystack.dataclasses import ChatMessage, ToolCall  # noqa: E402
from haystack.hooks.compaction import CompactionHook  # noqa: E402
from haystack.token_counters import ApproximateTokenCounter  # noqa: E402
from haystack.tools import tool  # noqa: E402

from ctxprune_rs import InvalidInputError  # noqa: E402
from ctxprune_rs.haystack import CtxpruneCompactor  # noqa: E402

TURNS = 30
ERROR_TURN = 17
OUTPUTS: list = []

# CompactionHook is experimental in haystack-ai 3.4 and says so when made.
pytestmark = pytest.mark.filterwarnings("ignore:.*experimental component")


@tool
def lookup(q: str) -> str:
    """Looks q up in the index."""
    if q == "missing":
        raise ValueError("no entry named 'missing'")
    out = f"{q}:\n" + "\n".join(f"  row {i}: value {len(q) * i} for {q}" for i in range(24))
    OUTPUTS.append(out)
    return out


def script(turn: int):
    """The calls of one turn: two in parallel every fourth turn, one failing call."""
    calls = [ToolCall(tool_name="lookup", arguments={"q": "missing" if turn == ERROR_TURN else f"item {turn}"},
                      id=f"call_{turn}_a")]
    if turn % 4 == 2:
        calls.append(ToolCall(tool_name="lookup", arguments={"q": f"extra {turn}"}, id=f"call_{turn}_b"))
    return calls


@hs.component
class ScriptedGenerator:
    """A chat generator that answers with the script's tool calls, then a final answer, and
    records every conversation it is sent."""

    def __init__(self):
        self.requests = []

    @hs.component.output_types(replies=list[ChatMessage])
    def run(self, messages: list[ChatMessage], tools=None, **kwargs):
        self.requests.append(list(messages))
        turn = len(self.requests) - 1
        if turn < TURNS:
            return {"replies": [ChatMessage.from_assistant(tool_calls=script(turn))]}
        return {"replies": [ChatMessage.from_assistant("All items looked up.")]}


def every_step(compactor):
    """A hook that calls the compactor before every model call (the masking's own options
    decide what changes)."""
    return CompactionHook(compactor=compactor, context_window=1, compact_at=1.0, compact_to=0.5)


def agent(hook=None):
    gen = ScriptedGenerator()
    a = Agent(chat_generator=gen, tools=[lookup], system_prompt="Look things up.",
              hooks={"before_llm": [hook]} if hook else None, max_agent_steps=TURNS + 5)
    return a, gen


def openai(messages):
    """Haystack's own OpenAI conversion, plus the error flag (which OpenAI has no field for)."""
    out = []
    for m in messages:
        d = m.to_openai_dict_format()
        if m.tool_call_result is not None and m.tool_call_result.error:
            d["is_error"] = True
        out.append(d)
    return out


def run(hook=None):
    OUTPUTS.clear()
    a, gen = agent(hook)
    result = a.run(messages=[ChatMessage.from_user("Look up items 0 to 29.")])
    return result, gen, list(OUTPUTS)


OPTIONS = [
    dict(window=5, tokenizer="approx"),
    dict(window=5, step=3, tokenizer="o200k_base"),
    dict(window=4, trigger_tokens=2500, clear_at_least=400, tokenizer="approx"),
]


@pytest.fixture(scope="module")
def unmasked():
    """The same script without the hook: what the model would get without masking."""
    return run()


@pytest.mark.parametrize("options", OPTIONS, ids=["window5", "step3", "trigger"])
def test_every_request_is_mask_session_of_the_whole_conversation(options, unmasked):
    base, base_gen, base_outputs = unmasked
    result, gen, outputs = run(every_step(CtxpruneCompactor(**options)))
    assert len(gen.requests) == len(base_gen.requests) == TURNS + 1
    reference = ctxprune_rs.MaskSession(format="openai", **options)
    masked_any = 0
    for k, (got, whole) in enumerate(zip(gen.requests, base_gen.requests)):
        expected = reference.mask(openai(whole))
        assert openai(got) == expected, f"request {k}"
        assert openai_pairing(openai(got)) == [], f"request {k}"
        masked_any += reference.stats["observations_masked"]
        # The originals ride along: the request restored is the unmasked one.
        assert openai(CtxpruneCompactor.restore(got)) == openai(whole)
    assert masked_any > 0
    # The last request: every observation older than the window masked, except the error.
    last = openai(gen.requests[-1])
    omitted = [d for d in last if d["role"] == "tool" and d["content"].startswith("[observation omitted")]
    assert len(omitted) == reference.stats["observations_masked"] > 0
    err = [d for d in last if d.get("is_error")]
    assert len(err) == 1 and "missing" in err[0]["content"]
    # The Agent's messages hold every tool output: in meta, and back with restore.
    assert sorted(outputs) == sorted(base_outputs) and len(outputs) == TURNS - 1 + sum(t % 4 == 2 for t in range(TURNS))
    stored = CtxpruneCompactor.restore(result["messages"])
    assert openai(stored) == openai(base["messages"])
    results = [m.tool_call_result.result for m in stored if m.tool_call_result and not m.tool_call_result.error]
    assert sorted(results) == sorted(outputs)
    for m in result["messages"]:
        mark = m.meta.get("context_compaction")
        if mark is not None:
            assert mark["strategy"] == "ctxprune_mask"
            assert ChatMessage.from_dict(mark["original"]).tool_call_result.result in outputs
    assert result["last_message"].text == "All items looked up."


def history(n=12, ids=True):
    msgs = [ChatMessage.from_system("sys"), ChatMessage.from_user("go")]
    for t in range(n):
        calls = [ToolCall(tool_name="lookup", arguments={"q": f"q{t}"}, id=f"c{t}" if ids else None)]
        if t % 3 == 0:
            calls.append(ToolCall(tool_name="grep", arguments={"p": f"p{t}"}, id=f"g{t}" if ids else None))
        msgs.append(ChatMessage.from_assistant(text=f"step {t}", tool_calls=calls))
        for c in calls:
            msgs.append(ChatMessage.from_tool(f"{c.tool_name} {t}\n" + "line of output\n" * 40, origin=c,
                                              error=(t == 2 and c.tool_name == "lookup")))
    return msgs


def test_compact_returns_copies_keeps_objects_and_leaves_its_input():
    msgs = history()
    before = list(msgs)
    snapshot = [m.to_dict() for m in msgs]
    c = CtxpruneCompactor(window=3, tokenizer="approx")
    out = c.compact(msgs, target_tokens=0, token_counter=ApproximateTokenCounter())
    assert msgs == before and [m.to_dict() for m in msgs] == snapshot
    assert len(out) == len(msgs)
    expected = ctxprune_rs.MaskSession(format="openai", window=3, tokenizer="approx").mask(openai(msgs))
    assert openai(out) == expected
    changed = [i for i, (a, b) in enumerate(zip(msgs, out)) if a is not b]
    assert changed and all(msgs[i].tool_call_result is not None for i in changed)
    assert [out[i] is msgs[i] for i in range(len(msgs))].count(True) == len(msgs) - len(changed)
    for i in changed:
        assert out[i].tool_call_result.origin == msgs[i].tool_call_result.origin
        assert out[i].tool_call_result.error == msgs[i].tool_call_result.error
    assert c.stats["observations_masked"] == len(changed)
    # The hook's async path (Agent.run_async) gives the same.
    assert openai(asyncio.run(c.compact_async(msgs, 0, ApproximateTokenCounter()))) == expected
    # Again on its own output: nothing more to change, so None (the protocol's rule 1);
    # a longer conversation masks more, from the originals.
    assert c.compact(out, 0, ApproximateTokenCounter()) is None
    longer = out + history(14)[len(msgs):]
    again = c.compact(longer, 0, ApproximateTokenCounter())
    assert openai(again) == ctxprune_rs.MaskSession(format="openai", window=3, tokenizer="approx").mask(
        openai(CtxpruneCompactor.restore(longer)))
    assert all(again[i] is out[i] for i in changed)


def test_calls_without_ids_are_paired_by_origin():
    msgs = history(ids=False)
    out = CtxpruneCompactor(window=2, tokenizer="approx").compact(msgs, 0, ApproximateTokenCounter())
    masked = [m for m in out if m.meta.get("context_compaction")]
    assert masked
    # The same decisions as on the same conversation with ids.
    with_ids = CtxpruneCompactor(window=2, tokenizer="approx").compact(history(), 0, ApproximateTokenCounter())
    assert [m.tool_call_result.result if m.tool_call_result else None for m in out] == \
           [m.tool_call_result.result if m.tool_call_result else None for m in with_ids]


def test_nothing_to_mask_is_none():
    c = CtxpruneCompactor(window=50, tokenizer="approx")
    assert c.compact(history(), 0, ApproximateTokenCounter()) is None
    # Masking that saves no tokens by the hook's counter is declined too.
    tiny = [ChatMessage.from_user("go")]
    for t in range(8):
        call = ToolCall(tool_name="lookup", arguments={"q": t}, id=f"c{t}")
        tiny += [ChatMessage.from_assistant(tool_calls=[call]), ChatMessage.from_tool("ok", origin=call)]
    assert CtxpruneCompactor(window=1, tokenizer="approx").compact(tiny, 0, ApproximateTokenCounter()) is None


def test_bad_input_names_the_message():
    c = CtxpruneCompactor(window=1, tokenizer="approx")
    with pytest.raises(InvalidInputError, match=r"messages\[1\].*ChatMessage"):
        c.compact([ChatMessage.from_user("x"), {"role": "user"}], 0, ApproximateTokenCounter())
    orphan = ChatMessage.from_tool("out", origin=ToolCall(tool_name="t", arguments={}, id="nope"))
    with pytest.raises(InvalidInputError, match=r"messages\[1\]: answers \"nope\""):
        c.compact([ChatMessage.from_user("x"), orphan], 0, ApproximateTokenCounter())
    orphan = ChatMessage.from_tool("out", origin=ToolCall(tool_name="t", arguments={}))
    with pytest.raises(InvalidInputError, match=r"messages\[1\]: a result of t without a call id"):
        c.compact([ChatMessage.from_user("x"), orphan], 0, ApproximateTokenCounter())
    with pytest.raises(InvalidInputError, match="window"):
        CtxpruneCompactor(window=-1)
    with pytest.raises(InvalidInputError, match="format"):
        CtxpruneCompactor(format="anthropic")


def test_serialises_inside_an_agent():
    c = CtxpruneCompactor(window=4, step=2, tools_keep=["grep"], tokenizer="approx")
    data = c.to_dict()
    assert data == {"type": "ctxprune_rs.haystack.CtxpruneCompactor",
                    "init_parameters": {"window": 4, "step": 2, "tools_keep": ["grep"], "tokenizer": "approx"}}
    assert CtxpruneCompactor.from_dict(data).options == c.options
    a, _ = agent(every_step(c))
    pipe = hs.Pipeline()
    pipe.add_component("agent", a)
    again = hs.Pipeline.loads(pipe.dumps(), allowed_modules=["ctxprune_rs.haystack", __name__])
    hook = again.get_component("agent").hooks["before_llm"][0]
    assert isinstance(hook.compactor, CtxpruneCompactor) and hook.compactor.options == c.options
    # The loaded Agent runs and masks as the original does.
    OUTPUTS.clear()
    out = again.run({"agent": {"messages": [ChatMessage.from_user("go")]}})
    assert any(m.meta.get("context_compaction") for m in out["agent"]["messages"])


def test_fires_only_when_the_hook_says():
    # A realistic window: nothing is masked until the context reaches compact_at of it;
    # then the conversation is masked at once.
    hook = CompactionHook(compactor=CtxpruneCompactor(window=5, tokenizer="approx"), context_window=6_000,
                          compact_at=0.7, compact_to=0.4)
    result, gen, _ = run(hook)
    omitted = [sum(1 for m in r if m.tool_call_result and m.tool_call_result.result.startswith("[observation"))
               for r in gen.requests]
    first = next(k for k, n in enumerate(omitted) if n)
    assert first > 5 and all(n == 0 for n in omitted[:first]) and omitted[-1] > 0
    assert all(openai_pairing(openai(r)) == [] for r in gen.requests)


def cleared_inputs(dicts):
    """What `clear_tool_inputs` masking returns for stale turns: the calls' arguments
    replaced (here `{}`), the results' content too."""
    out = []
    for i, d in enumerate(dicts[:-6]):
        if d.get("tool_calls"):
            out.append((i, {**d, "tool_calls": [{**c, "function": {**c["function"], "arguments": "{}"}}
                                                for c in d["tool_calls"]]}))
        elif d["role"] == "tool":
            out.append((i, {**d, "content": "[cleared]"}))
    return out


def test_masked_call_arguments_are_carried_back(monkeypatch):
    c = CtxpruneCompactor(window=1, tokenizer="approx")
    monkeypatch.setattr(c._core, "changes", cleared_inputs)
    msgs = history(6)
    out = c.compact(msgs, 0, ApproximateTokenCounter())
    calls = [m for m in out[:-6] if m.tool_calls]
    assert calls and all(tc.arguments == {} for m in calls for tc in m.tool_calls)
    assert [tc.id for m in calls for tc in m.tool_calls] == [tc.id for m in msgs[:-6] if m.tool_calls
                                                             for tc in m.tool_calls]
    assert all(m.text.startswith("step") for m in calls)
    assert out[-6:] == msgs[-6:] and all(a is b for a, b in zip(out[-6:], msgs[-6:]))
    assert openai(CtxpruneCompactor.restore(out)) == openai(msgs)
    # A change the adapter cannot carry back is reported, not dropped.
    monkeypatch.setattr(c._core, "changes", lambda dicts: [(1, {**dicts[1], "name": "x"})])
    with pytest.raises(AssertionError, match=r"messages\[1\] \['name'\]"):
        c.compact(msgs, 0, ApproximateTokenCounter())
