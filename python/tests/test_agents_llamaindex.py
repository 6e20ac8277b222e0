"""ctxprune_rs.llamaindex.CtxpruneMaskedMemory as a real FunctionAgent's memory (a scripted
function-calling LLM, a real FunctionTool, 30 runs on one memory): every request the model
gets carries `ctxprune_rs.MaskSession(format="openai", **options).mask` of the stored
history (FunctionAgent sends the memory's `aget()`, then the run's own scratchpad), keeps
OpenAI's pairing rule, and the wrapped memory keeps every tool output."""

from __future__ import annotations

import asyncio
import json
import pickle
from typing import List

import pytest
from agent_checks import openai_pairing
from conftest import framework

import ctxprune_rs

li = framework("llama_index.core")
from llama_index.core.agent.workflow import FunctionAgent  # noqa: E402
from llama_index.core.base.llms.types import ToolCallBlock  # noqa: E402
from llama_index.core.llms import ChatMessage  # noqa: E402
from llama_index.core.llms.mock import MockFunctionCallingLLM  # noqa: E402
from llama_index.core.memory import BaseMemory, ChatMemoryBuffer  # noqa: E402
from llama_index.core.tools import FunctionTool  # noqa: E402

from ctxprune_rs import InvalidInputError  # noqa: E402
from ctxprune_rs.llamaindex import CtxpruneMaskedMemory  # noqa: E402

# Making a FunctionAgent, llama-index-workflows walks the agent with inspect.getmembers,
# which touches pydantic's deprecated attributes (thousands of warnings that are not ours).
pytestmark = [pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecatedSince20"),
              pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecatedSince211")]

TURNS = 30
ERROR_TURN = 17
SYSTEM = "Look things up."
OUTPUTS: list = []


def lookup(q: str) -> str:
    """Looks q up in the index."""
    if q == "missing":
        raise ValueError("no entry named 'missing'")
    out = f"{q}:\n" + "\n".join(f"  row {i}: value {len(q) * i} for {q}" for i in range(24))
    OUTPUTS.append(out)
    return out


def script(turn: int):
    """The calls of one turn: two in parallel every fourth turn, one failing call."""
    calls = [ToolCallBlock(tool_call_id=f"call_{turn}_a", tool_name="lookup",
                           tool_kwargs={"q": "missing" if turn == ERROR_TURN else f"item {turn}"})]
    if turn % 4 == 2:
        calls.append(ToolCallBlock(tool_call_id=f"call_{turn}_b", tool_name="lookup",
                                   tool_kwargs={"q": f"extra {turn}"}))
    return calls


class Script:
    """The LLM's answers: each run's first request gets that turn's tool calls, the second
    (after the tool results) a final answer. Records every request with the number of
    stored messages at the time."""

    def __init__(self, store: BaseMemory):
        self.store, self.requests, self.turn = store, [], 0

    def __call__(self, messages, **kwargs):
        self.requests.append((list(messages), len(self.store.get_all())))
        if messages[-1].role.value == "tool":
            self.turn += 1
            return ChatMessage(role="assistant", content=f"Done with turn {self.turn - 1}.")
        return ChatMessage(role="assistant", blocks=script(self.turn))


def openai(messages):
    """The test's own OpenAI view of llama-index messages (text content, ToolCallBlocks)."""
    out = []
    for m in messages:
        if m.role.value == "tool":
            out.append({"role": "tool", "tool_call_id": m.additional_kwargs["tool_call_id"], "content": m.content})
            continue
        d = {"role": m.role.value, "content": m.content}
        calls = [b for b in m.blocks if isinstance(b, ToolCallBlock)]
        if calls:
            d["tool_calls"] = [{"id": b.tool_call_id, "type": "function",
                                "function": {"name": b.tool_name,
                                             "arguments": json.dumps(b.tool_kwargs, ensure_ascii=False)}}
                               for b in calls]
        out.append(d)
    return out


def run(options=None):
    """30 runs of one FunctionAgent on one memory (wrapped when options are given)."""
    OUTPUTS.clear()
    store = ChatMemoryBuffer.from_defaults(token_limit=10**7)
    memory = store if options is None else CtxpruneMaskedMemory(store, **options)
    llm_script = Script(store)
    agent = FunctionAgent(tools=[FunctionTool.from_defaults(lookup)], system_prompt=SYSTEM,
                          llm=MockFunctionCallingLLM(response_generator=llm_script))

    async def main():
        for t in range(TURNS):
            out = await agent.run(f"Look up item {t}.", memory=memory)
            assert str(out.response.content) == f"Done with turn {t}."

    asyncio.run(main())
    return store, llm_script, list(OUTPUTS)


OPTIONS = [
    dict(window=5, tokenizer="approx"),
    dict(window=5, step=3, tokenizer="o200k_base"),
    dict(window=4, trigger_tokens=2500, clear_at_least=400, tokenizer="approx"),
]


@pytest.fixture(scope="module")
def unmasked():
    """The same 30 runs on a plain memory: what the model would get without masking."""
    return run()


@pytest.mark.parametrize("options", OPTIONS, ids=["window5", "step3", "trigger"])
def test_every_request_carries_mask_session_of_the_stored_history(options, unmasked):
    base_store, base, base_outputs = unmasked
    store, got, outputs = run(options)
    assert len(got.requests) == len(base.requests) == 2 * TURNS
    reference = ctxprune_rs.MaskSession(format="openai", **options)
    masked_any = 0
    for k, ((sent, n), (whole, n_base)) in enumerate(zip(got.requests, base.requests)):
        assert n == n_base
        # [system] + the memory's aget() + the run's scratchpad (never in memory yet).
        assert sent[0].content == SYSTEM
        expected = openai(whole[:1]) + reference.mask(openai(whole[1:1 + n])) + openai(whole[1 + n:])
        assert openai(sent) == expected, f"request {k}"
        assert openai_pairing(openai(sent)) == [], f"request {k}"
        masked_any += reference.stats["observations_masked"]
    assert masked_any > 0
    last = openai(got.requests[-1][0])
    omitted = [d for d in last if d["role"] == "tool" and d["content"].startswith("[observation omitted")]
    assert len(omitted) == reference.stats["observations_masked"] > 0
    # The stored history is whole: every tool result is the tool's own output.
    assert openai(store.get_all()) == openai(base_store.get_all())
    results = [m.content for m in store.get_all() if m.role.value == "tool"]
    assert sorted(r for r in results if "no entry named" not in r) == sorted(outputs) == sorted(base_outputs)
    assert len(outputs) == TURNS - 1 + sum(t % 4 == 2 for t in range(TURNS))


def history(n=12):
    msgs = [ChatMessage(role="user", content="go")]
    for t in range(n):
        calls = [{"id": f"c{t}", "type": "function",
                  "function": {"name": "lookup", "arguments": json.dumps({"q": f"q{t}"})}}]
        msgs.append(ChatMessage(role="assistant", content=f"step {t}", additional_kwargs={"tool_calls": calls}))
        kw = {"tool_call_id": f"c{t}", **({"is_error": True} if t == 1 else {})}
        msgs.append(ChatMessage(role="tool", content=f"out {t}\n" + "line\n" * 60, additional_kwargs=kw))
    return msgs


def test_get_masks_and_everything_else_passes_through():
    store = ChatMemoryBuffer.from_defaults(token_limit=10**7)
    memory = CtxpruneMaskedMemory(store, window=3, tokenizer="approx")
    msgs = history()
    memory.put_messages(msgs)
    got = memory.get()
    # OpenAI-shaped additional_kwargs["tool_calls"] and an is_error flag are read too.
    dicts = [{"role": m.role.value, "content": m.content,
              **({"tool_calls": m.additional_kwargs["tool_calls"]} if "tool_calls" in m.additional_kwargs else {}),
              **({"tool_call_id": m.additional_kwargs["tool_call_id"]} if m.role.value == "tool" else {}),
              **({"is_error": True} if m.additional_kwargs.get("is_error") else {})} for m in msgs]
    expected = ctxprune_rs.MaskSession(format="openai", window=3, tokenizer="approx").mask(dicts)
    assert [m.content for m in got] == [d["content"] for d in expected]
    assert memory.stats["observations_masked"] == 8  # 12 turns, 3 kept, one error kept
    changed = [i for i, (a, b) in enumerate(zip(store.get_all(), got)) if a is not b]
    assert len(changed) == 8 and all(got[i].additional_kwargs == msgs[i].additional_kwargs for i in changed)
    assert asyncio.run(memory.aget()) == got
    # The stored history stays whole.
    assert memory.get_all() == store.get_all() == msgs
    assert asyncio.run(memory.aget_all()) == msgs
    memory.put(ChatMessage(role="user", content="more"))
    asyncio.run(memory.aput(ChatMessage(role="assistant", content="ok")))
    assert [m.content for m in store.get_all()[-2:]] == ["more", "ok"]
    memory.set(msgs[:3])
    assert store.get_all() == msgs[:3]
    memory.reset()
    assert store.get_all() == [] and memory.get() == []


class ListMemory(BaseMemory):
    """A memory whose to_dict / from_dict round-trip (ChatMemoryBuffer.to_dict and
    Memory.from_dict fail in llama-index-core 0.14.25 themselves)."""

    messages: List[ChatMessage] = []

    @classmethod
    def class_name(cls):
        return "TestListMemory"

    @classmethod
    def from_defaults(cls, **kwargs):
        return cls(**kwargs)

    def get(self, input=None, **kwargs):
        return list(self.messages)

    def get_all(self):
        return list(self.messages)

    def put(self, message):
        self.messages.append(message)

    def set(self, messages):
        self.messages = list(messages)

    def reset(self):
        self.messages = []


def test_serialises_and_pickles():
    memory = CtxpruneMaskedMemory(ListMemory(), window=2, tools_keep=["grep"], tokenizer="approx")
    memory.put_messages(history(6))
    data = memory.to_dict()
    assert data["class_name"] == "CtxpruneMaskedMemory"
    assert data["options"] == {"window": 2, "tools_keep": ["grep"], "tokenizer": "approx"}
    again = CtxpruneMaskedMemory.from_dict(json.loads(json.dumps(data)))
    assert isinstance(again.memory, ListMemory) and again.options == memory.options
    assert [m.content for m in again.get()] == [m.content for m in memory.get()]
    store = ChatMemoryBuffer.from_defaults(token_limit=10**7)
    wrapped = CtxpruneMaskedMemory(store, window=2, tokenizer="approx")
    wrapped.put_messages(history(6))
    back = pickle.loads(pickle.dumps(wrapped))
    assert back.options == wrapped.options and back.get() == wrapped.get() and back.get_all() == store.get_all()
    d = CtxpruneMaskedMemory.from_defaults(window=3)
    assert d.options == {"window": 3} and d.get() == []


def test_bad_input_names_the_message():
    memory = CtxpruneMaskedMemory(ListMemory(), window=1, tokenizer="approx")
    memory.set([ChatMessage(role="user", content="x"), ChatMessage(role="tool", content="y")])
    with pytest.raises(InvalidInputError, match=r"messages\[1\]: a tool message without .*tool_call_id"):
        memory.get()
    memory.set([ChatMessage(role="user", content="x"),
                ChatMessage(role="tool", content="y", additional_kwargs={"tool_call_id": "nope"})])
    with pytest.raises(InvalidInputError, match=r"messages\[1\]: answers \"nope\""):
        memory.get()
    memory.set([ChatMessage(role="assistant", blocks=[ToolCallBlock(tool_name="lookup", tool_kwargs={})])])
    with pytest.raises(InvalidInputError, match=r"messages\[0\]: tool call 0 has no id"):
        memory.get()
    with pytest.raises(InvalidInputError, match="window"):
        CtxpruneMaskedMemory(ListMemory(), window=-1)
    with pytest.raises(InvalidInputError, match="memory"):
        CtxpruneMaskedMemory([], window=1)


def cleared_inputs(dicts):
    """What `clear_tool_inputs` masking returns for stale turns: the calls' arguments
    replaced (here `{}`), the results' content too."""
    out = []
    for i, d in enumerate(dicts[:-4]):
        if d.get("tool_calls"):
            out.append((i, {**d, "tool_calls": [{**c, "function": {**c["function"], "arguments": "{}"}}
                                                for c in d["tool_calls"]]}))
        elif d["role"] == "tool":
            out.append((i, {**d, "content": "[cleared]"}))
    return out


def test_masked_call_arguments_are_carried_back(monkeypatch):
    memory = CtxpruneMaskedMemory(ListMemory(), window=1, tokenizer="approx")
    monkeypatch.setattr(memory._core, "changes", cleared_inputs)
    # OpenAI-shaped additional_kwargs["tool_calls"]: the arguments stay JSON text.
    msgs = history(6)
    memory.set(msgs)
    out = memory.get()
    calls = [m for m in out[:-4] if m.role.value == "assistant"]
    assert [c["function"]["arguments"] for m in calls for c in m.additional_kwargs["tool_calls"]] == ["{}"] * 4
    assert [c["id"] for m in calls for c in m.additional_kwargs["tool_calls"]] == [f"c{t}" for t in range(4)]
    assert all(m.content == "[cleared]" for m in out[:-4] if m.role.value == "tool")
    assert memory.get_all() == msgs
    assert msgs[1].additional_kwargs["tool_calls"][0]["function"]["arguments"] == '{"q": "q0"}'
    # ToolCallBlocks: the arguments stay a dict.
    blocks = [ChatMessage(role="user", content="go")]
    for t in range(3):
        blocks += [ChatMessage(role="assistant", blocks=[ToolCallBlock(tool_call_id=f"b{t}", tool_name="lookup",
                                                                       tool_kwargs={"q": t})]),
                   ChatMessage(role="tool", content="x" * 300, additional_kwargs={"tool_call_id": f"b{t}"})]
    memory.set(blocks)
    out = memory.get()
    assert out[1].blocks[0].tool_kwargs == {} and out[1].blocks[0].tool_call_id == "b0"
    assert blocks[1].blocks[0].tool_kwargs == {"q": 0}
    # A change the adapter cannot carry back is reported, not dropped.
    monkeypatch.setattr(memory._core, "changes", lambda dicts: [(1, {**dicts[1], "name": "x"})])
    with pytest.raises(AssertionError, match=r"messages\[1\] \['name'\]"):
        memory.get()
