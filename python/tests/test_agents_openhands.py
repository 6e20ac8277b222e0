"""ctxprune_rs.openhands.CtxpruneCondenser in real OpenHands software-agent SDK runs
(openhands-sdk from PyPI, which needs Python >= 3.12: .ci/run runs this file in its
Python 3.13 venv; no network). The SDK's own scripted model (`TestLLM`, recording what it
is sent) makes 30 tool turns, some with two parallel calls and one whose tool fails, then
answers. Every request the model receives equals `ctxprune_rs.MaskSession(format="openai",
**options)` applied to the request the same run makes without a condenser, keeps the
OpenAI pairing rule, and the conversation's stored events keep every observation whole.
On complete one-call turns the condenser masks what OpenHands V0's
ObservationMaskingCondenser(attention_window = 2 K) masks."""

from __future__ import annotations

import asyncio
import json
import os
import tempfile

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no fetch of litellm's price list
os.environ.setdefault("OPENHANDS_SUPPRESS_BANNER", "1")

import pytest  # noqa: E402
from agent_checks import openai_pairing  # noqa: E402
from conftest import framework  # noqa: E402

framework("openhands.sdk")

from openhands.sdk import LLM, Agent, Conversation, Message, TextContent  # noqa: E402
from openhands.sdk.context.view import View  # noqa: E402
from openhands.sdk.event import ActionEvent, LLMConvertibleEvent, ObservationEvent  # noqa: E402
from openhands.sdk.llm import MessageToolCall  # noqa: E402
from openhands.sdk.testing import TestLLM  # noqa: E402
from openhands.sdk.tool import Action, Observation, Tool, ToolDefinition, ToolExecutor, register_tool  # noqa: E402
from pydantic import Field, PrivateAttr  # noqa: E402

import ctxprune_rs  # noqa: E402
from ctxprune_rs.openhands import CtxpruneCondenser, MaskedObservation, to_messages  # noqa: E402

TURNS = 30
TASK = "Find why test_parse_dates fails and fix it."


class SearchAction(Action):
    query: str = Field(description="What to search the repository for.")


class SearchObservation(Observation):
    pass


class ReadAction(Action):
    path: str = Field(description="The file to read.")


class ReadObservation(Observation):
    pass


def search_text(query: str) -> str:
    return "\n".join(f"{query} hit {k}: src/mod_{k % 7}.py:{10 + 3 * k}: def handle_{k}(value): "
                     f"return parse(value, tz={k})" for k in range(24))


def file_text(path: str) -> str:
    return "\n".join(f"{n:4d}  # {path} line {n}: x_{n} = compute({n}, scale={n % 5})" for n in range(1, 36))


class SearchExecutor(ToolExecutor):
    def __call__(self, action, conversation=None):  # noqa: ARG002
        return SearchObservation.from_text(search_text(action.query))


class ReadExecutor(ToolExecutor):
    def __call__(self, action, conversation=None):  # noqa: ARG002
        if action.path == "missing.py":  # a failed tool: the SDK shows it with its error header
            return ReadObservation.from_text("read_file: missing.py: no such file", is_error=True)
        return ReadObservation.from_text(file_text(action.path))


class SearchTool(ToolDefinition[SearchAction, SearchObservation]):
    @classmethod
    def create(cls, conv_state=None, **params):  # noqa: ARG003
        return [cls(description="Searches the repository.", action_type=SearchAction,
                    observation_type=SearchObservation, executor=SearchExecutor())]


class ReadFileTool(ToolDefinition[ReadAction, ReadObservation]):
    @classmethod
    def create(cls, conv_state=None, **params):  # noqa: ARG003
        return [cls(description="Reads a file.", action_type=ReadAction,
                    observation_type=ReadObservation, executor=ReadExecutor())]


register_tool("SearchTool", SearchTool)
register_tool("ReadFileTool", ReadFileTool)


def calls_of(turn: int):
    """The scripted model's calls at `turn` (1-based): (tool, arguments)."""
    if turn == 7:
        return [("read_file", {"path": "missing.py"})]
    if turn % 5 == 3:
        return [("search", {"query": f"parse_dates {turn}"}), ("read_file", {"path": f"src/mod_{turn}.py"})]
    return [("search", {"query": f"tz offset {turn}"}) if turn % 2 else ("read_file", {"path": f"tests/t_{turn}.py"})]


def script():
    out = []
    for t in range(1, TURNS + 1):
        calls = [MessageToolCall(id=f"call_{t}_{k}", name=tool, arguments=json.dumps(args), origin="completion")
                 for k, (tool, args) in enumerate(calls_of(t))]
        out.append(Message(role="assistant", content=[TextContent(text=f"Checking step {t}.")], tool_calls=calls))
    out.append(Message(role="assistant", content=[TextContent(text="Fixed: the parser ignored the offset.")]))
    return out


class RecordingLLM(TestLLM):
    """The SDK's scripted model, keeping a copy of every request."""

    _requests: list = PrivateAttr(default_factory=list)

    def completion(self, messages, tools=None, **kwargs):
        self._requests.append([m.model_copy(deep=True) for m in messages])
        return super().completion(messages, tools, **kwargs)


def as_dicts(messages):
    """An SDK request as OpenAI chat dicts, read directly off its `Message`s (independent
    of the adapter's own view of the events): the text parts joined by newlines, the
    calls, and an error tool result (the SDK's error header) marked `is_error`."""
    out = []
    for m in messages:
        text = "\n".join(c.text for c in m.content if isinstance(c, TextContent))
        d = {"role": m.role, "content": text}
        if m.tool_calls:
            d["content"] = text or None
            d["tool_calls"] = [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                               for c in m.tool_calls]
        if m.role == "tool":
            d["tool_call_id"] = m.tool_call_id
            if text.startswith(Observation.ERROR_MESSAGE_HEADER):
                d["is_error"] = True
        out.append(d)
    return out


def plain_view(messages):
    return [{k: v for k, v in m.items() if k != "is_error"} for m in messages]


def run(condenser):
    llm = RecordingLLM.from_messages(script())
    agent = Agent(llm=llm, tools=[Tool(name="SearchTool"), Tool(name="ReadFileTool")], condenser=condenser)
    with tempfile.TemporaryDirectory() as d:
        conv = Conversation(agent=agent, workspace=d, visualizer=None)
        conv.send_message(TASK)
        conv.run()
        events = list(conv.state.events)
    return [as_dicts(r) for r in llm._requests], events


@pytest.fixture(scope="module")
def baseline():
    return run(None)


OPTIONS = {
    "window": dict(window=5, tokenizer="approx"),
    "step": dict(window=5, tokenizer="o200k_base", options={"step": 3}),
    "trigger": dict(window=3, tokenizer="o200k_base", options={"trigger_tokens": 4000, "clear_at_least": 1500}),
    "clear_inputs": dict(window=4, tokenizer="approx", options={"clear_tool_inputs": True}),
    "errors_masked": dict(window=2, tokenizer="cl100k_base", options={"keep_errors": False}),
    "anthropic_edit": dict(tokenizer="o200k_base", options={"edit": {
        "type": "clear_tool_uses_20250919", "trigger": {"type": "input_tokens", "value": 5000},
        "keep": {"type": "tool_uses", "value": 4}}}),
}


@pytest.mark.parametrize("name", OPTIONS)
def test_every_request_is_the_mask_session_of_the_unmasked_one(baseline, name):
    opts = OPTIONS[name]
    plain, plain_events = baseline
    requests, events = run(CtxpruneCondenser(**opts))
    assert len(requests) == len(plain) == TURNS + 1
    session_opts = dict(opts.get("options", {}), tokenizer=opts["tokenizer"])
    if "window" in opts:
        session_opts["window"] = opts["window"]
    masked_total = 0
    for j, (got, unmasked) in enumerate(zip(requests, plain)):
        want = ctxprune_rs.MaskSession(format="openai", **session_opts).mask(unmasked)
        # (`is_error` is read off the error header, which a masked error no longer shows.)
        assert plain_view(got) == plain_view(want), f"{name}: request {j}"
        assert openai_pairing(got) == [], f"{name}: request {j}"
        masked_total += sum(1 for a, b in zip(got, unmasked) if a != b)
    assert masked_total > TURNS, f"{name}: masking never acted"
    # The stored conversation keeps every observation whole: the same as without a condenser.
    obs = [e for e in events if isinstance(e, ObservationEvent)]
    assert [e.observation.text for e in obs] == [e.observation.text for e in plain_events
                                                 if isinstance(e, ObservationEvent)]
    assert not any(isinstance(e.observation, MaskedObservation) for e in obs)
    assert all(json.loads(e.tool_call.arguments) for e in events if isinstance(e, ActionEvent))


def test_the_last_request_masks_the_stale_turns_and_keeps_errors(baseline):
    requests, _ = run(CtxpruneCondenser(window=5, tokenizer="o200k_base"))
    last = requests[-1]
    tools = [m for m in last if m["role"] == "tool"]
    masked = [m for m in tools if m["content"].startswith("[observation omitted")]
    kept = [m for m in tools if not m["content"].startswith("[observation omitted")]
    # 30 turns, the last 5 kept whole (turns 26..30: 26, 27, 29, 30 one call, 28 two), the
    # failed read of turn 7 kept as an error; every other observation masked.
    assert [m["tool_call_id"] for m in kept] == ["call_7_0"] + [
        f"call_{t}_{k}" for t in range(26, 31) for k in range(len(calls_of(t)))]
    assert len(masked) == len(tools) - len(kept) > 20
    assert all("returned" in m["content"] for m in masked)


def test_it_masks_what_openhands_v0_masks_with_twice_the_window(baseline):
    """OpenHands V0's ObservationMaskingCondenser.condense (transcribed from
    openhands/memory/condenser/impl/observation_masking_condenser.py): every observation
    more than `attention_window` events from the end is masked. On one-call turns (an
    action, then its observation) a window of K turns is 2 K events."""
    _, events = baseline
    view = [e for e in events if isinstance(e, LLMConvertibleEvent)]
    # The turns up to the first two-call turn (turn 3) are one-call turns.
    upto = next(i for i, e in enumerate(view) if isinstance(e, ActionEvent) and e.tool_call_id == "call_3_0")
    view = view[:upto]
    for k in (1, 2):
        v0 = [isinstance(e, ObservationEvent) and i < len(view) - 2 * k for i, e in enumerate(view)]
        ours = CtxpruneCondenser(window=k, tokenizer="approx", options={"keep_errors": False}).mask_events(view)
        assert [isinstance(e, ObservationEvent) and isinstance(e.observation, MaskedObservation)
                for e in ours] == v0


def test_condense_returns_a_new_view_and_leaves_the_given_one(baseline):
    _, events = baseline
    view = View(events=[e for e in events if isinstance(e, LLMConvertibleEvent)])
    before = view.model_dump_json()
    c = CtxpruneCondenser(window=3, tokenizer="approx", options={"clear_tool_inputs": True})
    out = c.condense(view)
    assert isinstance(out, View) and out is not view and len(out.events) == len(view.events)
    assert view.model_dump_json() == before
    assert [type(e) for e in out.events] == [type(e) for e in view.events]
    cleared = [e for e in out.events if isinstance(e, ActionEvent) and e.tool_call.arguments == "{}"]
    assert cleared and c.stats["observations_masked"] == len(
        [e for e in out.events if isinstance(e, ObservationEvent) and isinstance(e.observation, MaskedObservation)])
    assert asyncio.run(c.acondense(view)).model_dump_json() == out.model_dump_json()
    # Nothing stale yet: the same view back.
    few = View(events=view.events[:4])
    assert c.condense(few) is few


def test_to_messages_is_what_the_model_is_sent(baseline):
    plain, events = baseline
    view = [e for e in events if isinstance(e, LLMConvertibleEvent)]
    ours = to_messages(view)
    # The model's last request is the view before the final answer, as the SDK renders it.
    assert ours[: len(plain[-1])] == plain[-1]


def test_the_agent_with_it_serialises_and_loads():
    c = CtxpruneCondenser(window=4, tokenizer="o200k_base", options={"keep_errors": False, "step": 2})
    agent = Agent(llm=LLM(model="test-model", usage_id="t"), tools=[Tool(name="SearchTool")], condenser=c)
    again = Agent.model_validate_json(agent.model_dump_json())
    assert isinstance(again.condenser, CtxpruneCondenser)
    assert repr(again.condenser) == repr(c) == "CtxpruneCondenser(keep_errors=False, step=2, tokenizer='o200k_base', window=4)"


def test_bad_options_are_refused_naming_them():
    """As pydantic models refuse a bad field: a ValidationError (a ValueError) whose text
    is the crate's one line naming the option."""
    for kwargs, text in [
        (dict(window=-1), "invalid window: -1 is negative"),
        (dict(options={"format": "anthropic"}), "invalid options.format"),
        (dict(options={"window": 3}), "invalid options.window"),
        (dict(tokenizer="no-such-tokenizer"), "tokenizer"),
        (dict(options={"edit": {"type": "clear_tool_uses_20250919", "keep": {"type": "tool_uses", "value": -2}}}),
         "edit.keep.value"),
    ]:
        with pytest.raises(ValueError, match=text):
            CtxpruneCondenser(**kwargs)
    with pytest.raises(TypeError, match="bogus"):
        CtxpruneCondenser(options={"bogus": 1})


def test_rejections_and_agent_errors_are_kept_as_errors_and_masked_as_observations(baseline):
    """A user's (or hook's) rejection and a scaffold error answer their calls as errors:
    kept while `keep_errors`; masked, each shows the placeholder alone (a rejection becomes
    an observation of it, since the SDK would prefix "Action rejected: ")."""
    from openhands.sdk.event import AgentErrorEvent, UserRejectObservation

    _, events = baseline
    view = [e for e in events if isinstance(e, LLMConvertibleEvent)]
    obs = [i for i, e in enumerate(view) if isinstance(e, ObservationEvent)]
    first, second = view[obs[0]], view[obs[1]]
    view[obs[0]] = UserRejectObservation(tool_name=first.tool_name, tool_call_id=first.tool_call_id,
                                         action_id=first.action_id, rejection_reason="not in this repository " * 20)
    view[obs[1]] = AgentErrorEvent(tool_name=second.tool_name, tool_call_id=second.tool_call_id,
                                   error="the tool crashed: " + "trace line\n" * 30)
    kept = CtxpruneCondenser(window=3, tokenizer="approx").mask_events(view)
    assert kept[obs[0]] is view[obs[0]] and kept[obs[1]] is view[obs[1]]
    masked = CtxpruneCondenser(window=3, tokenizer="approx", options={"keep_errors": False}).mask_events(view)
    rej, err = masked[obs[0]], masked[obs[1]]
    assert isinstance(rej, ObservationEvent) and isinstance(rej.observation, MaskedObservation)
    assert (rej.tool_call_id, rej.action_id) == (first.tool_call_id, first.action_id)
    want = ctxprune_rs.MaskSession(format="openai", window=3, tokenizer="approx", keep_errors=False).mask(
        to_messages(view))
    sent = as_dicts(LLMConvertibleEvent.events_to_messages(masked))
    assert plain_view(sent) == plain_view(want)
    assert rej.to_llm_message().content[0].text.startswith("[observation omitted")
    assert isinstance(err, AgentErrorEvent) and err.error.startswith("[observation omitted")
