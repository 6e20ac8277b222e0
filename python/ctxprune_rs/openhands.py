"""ctxprune in the OpenHands software-agent SDK (V1, `openhands-sdk`, which needs Python
3.12 or later; `pip install "ctxprune-rs[openhands]"`): observation masking as a
condenser, which the SDK does not have of its own.

    from openhands.sdk import LLM, Agent, Conversation
    from ctxprune_rs.openhands import CtxpruneCondenser

    agent = Agent(llm=llm, tools=tools,
                  condenser=CtxpruneCondenser(window=5, tokenizer="o200k_base"))
    Conversation(agent=agent, workspace=".").send_message("fix the failing test")

Before each model call the agent hands its condenser the conversation's `View`; this one
views the events as OpenAI chat messages (`to_messages`), masks them with the shared core
(`ctxprune_rs._agents.MaskCore`, i.e. `ctxprune_rs.MaskSession(format="openai",
**options)`) and returns a new `View`: the same events, in the same order, except that a
stale observation is a copy whose observation is the placeholder (a `MaskedObservation`),
and, with `clear_tool_inputs`, its action a copy whose call arguments are `{}`. The
conversation's events and its stored state are never changed, nothing is summarised and
no `Condensation` event is written: masking is recomputed from the whole history at each
step, so the agent's log keeps every observation. Token counts are those of the tokenizer
named (`tokenizer=`: o200k_base, cl100k_base, a HuggingFace tokenizer.json, or "approx"),
cached across the agent's steps.

Event mapping (`to_messages`), one chat message per event, in order, except that the
`ActionEvent`s of one model response (the same `llm_response_id`, parallel calls) are
one assistant message, as the SDK itself sends them:

- `ActionEvent` -> `{"role": "assistant", "content": thought, "tool_calls": [{"id":
  tool_call_id, "type": "function", "function": {"name": tool_name, "arguments":
  arguments}}]}`;
- `ObservationEvent` -> `{"role": "tool", "tool_call_id": ..., "content": text}` (the
  observation's text as the model sees it, with the context's extensions), with
  `"is_error": true` when the observation is an error;
- `AgentErrorEvent` and `UserRejectObservation` -> the same, always an error (kept while
  `keep_errors`);
- any other event (the system prompt, user and agent messages, summaries) -> its own
  message's role and text; such events are never masked.
"""

from __future__ import annotations

import asyncio
from typing import Any, Dict, List, Optional, Sequence, Tuple

from openhands.sdk.context.condenser.base import CondenserBase
from openhands.sdk.context.view import View
from openhands.sdk.event import ActionEvent, AgentErrorEvent, ObservationEvent, UserRejectObservation
from openhands.sdk.event.condenser import Condensation
from openhands.sdk.llm import LLM, TextContent
from openhands.sdk.tool.schema import Observation
from pydantic import Field, PrivateAttr

from ._agents import MaskCore, carry_back
from ._errors import InvalidInputError

__all__ = ["CtxpruneCondenser", "MaskedObservation", "to_messages"]


class MaskedObservation(Observation):
    """What a masked observation shows the model: the placeholder text alone."""


def _text(content: Sequence[Any]) -> str:
    return "\n".join(c.text for c in content if isinstance(c, TextContent))


def _event_text(e: Any) -> str:
    """The text the model sees for an observation-like event."""
    if isinstance(e, ObservationEvent):
        return _text(list(e.observation.to_llm_content) + list(e.extended_content))
    return _text(e.to_llm_message().content)


def _convert(events: Sequence[Any]) -> Tuple[List[Dict[str, Any]], List[List[int]]]:
    """The chat messages of `events` and, per message, the event indices it stands for
    (an assistant message of calls: one per call, in order)."""
    messages: List[Dict[str, Any]] = []
    where: List[List[int]] = []
    run_id: Optional[str] = None  # the llm_response_id of the current run of calls
    for i, e in enumerate(events):
        if isinstance(e, ActionEvent):
            call = {"id": e.tool_call_id, "type": "function",
                    "function": {"name": e.tool_name, "arguments": e.tool_call.arguments}}
            if run_id is not None and e.llm_response_id == run_id:
                messages[-1]["tool_calls"].append(call)
                thought = _text(e.thought)
                if thought:
                    messages[-1]["content"] = "\n".join(t for t in (messages[-1]["content"], thought) if t)
                where[-1].append(i)
                continue
            run_id = e.llm_response_id
            messages.append({"role": "assistant", "content": _text(e.thought) or None, "tool_calls": [call]})
            where.append([i])
            continue
        run_id = None
        if isinstance(e, (ObservationEvent, AgentErrorEvent, UserRejectObservation)):
            m: Dict[str, Any] = {"role": "tool", "tool_call_id": e.tool_call_id, "content": _event_text(e)}
            if not isinstance(e, ObservationEvent) or e.observation.is_error:
                m["is_error"] = True
        else:
            msg = e.to_llm_message()
            m = {"role": msg.role, "content": _text(msg.content)}
        messages.append(m)
        where.append([i])
    return messages, where


def to_messages(events: Sequence[Any]) -> List[Dict[str, Any]]:
    """The OpenAI chat messages the condenser masks for these events (see the module's
    docstring for the mapping)."""
    return _convert(events)[0]


def _masked(e: Any, text: str) -> Any:
    """A copy of the observation-like event `e` that shows `text` instead."""
    if isinstance(e, ObservationEvent):
        return e.model_copy(update={"observation": MaskedObservation.from_text(text), "extended_content": []})
    if isinstance(e, AgentErrorEvent):
        return e.model_copy(update={"error": text})
    # A rejection renders as "Action rejected: <reason>": the masked one is an observation
    # of the placeholder alone, answering the same call.
    return ObservationEvent(observation=MaskedObservation.from_text(text), action_id=e.action_id,
                            tool_name=e.tool_name, tool_call_id=e.tool_call_id, source=e.source)


def _arguments(e: Any, args: str) -> Any:
    """A copy of the `ActionEvent` `e` whose call carries `args`."""
    return e.model_copy(update={"tool_call": e.tool_call.model_copy(update={"arguments": args})})


class CtxpruneCondenser(CondenserBase):
    """An OpenHands condenser that masks stale tool observations (observation masking,
    docs/masking.md): the observations of all but the latest `window` agent turns are replaced by
    the placeholder. `tokenizer` names the exact token counter; `options` holds any other
    `ctxprune_rs.MaskSession` option (keep_errors, keep_first, tools_keep, tools_mask,
    trigger_tokens, clear_at_least, step, preset, edit, hold, clear_tool_inputs,
    placeholder, ...), checked when the condenser is made. `window=None` takes the
    crate's default (or the preset's).

    It is a pydantic model like the SDK's own condensers, so an `Agent` carrying it
    serialises and loads again (with this module imported). `stats` is the last
    condensation's accounting (turns, observations masked and kept, tokens before and
    after)."""

    window: Optional[int] = Field(default=None, description="Agent turns whose observations stay whole.")
    tokenizer: str = Field(default="o200k_base", description="The token counter: o200k_base, cl100k_base, "
                                                             "a tokenizer.json path, or approx.")
    options: Dict[str, Any] = Field(default_factory=dict,
                                    description="Other ctxprune_rs.MaskSession options, by name.")
    _core: MaskCore = PrivateAttr()

    def model_post_init(self, context: Any, /) -> None:
        if "format" in self.options:
            raise InvalidInputError("invalid options.format: OpenHands' events are masked as \"openai\"")
        for k in ("window", "tokenizer"):
            if k in self.options:
                raise InvalidInputError(f"invalid options.{k}: {k} is a field of CtxpruneCondenser; pass {k}=... itself")
        opts: Dict[str, Any] = dict(self.options, tokenizer=self.tokenizer)
        if self.window is not None:
            opts["window"] = self.window
        self._core = MaskCore(**opts)

    @property
    def stats(self) -> Optional[dict]:
        return self._core.stats

    def mask_events(self, events: Sequence[Any]) -> List[Any]:
        """The events with stale observations (and, with `clear_tool_inputs`, their
        actions' arguments) replaced by copies; `events` and its events are unchanged.
        An error names the event at fault as `view.events[i]`."""
        events = list(events)
        messages, where = _convert(events)
        return carry_back(self._core, events, messages, where, "view.events", output=_masked, arguments=_arguments)

    def condense(self, view: View, agent_llm: LLM | None = None) -> View | Condensation:  # noqa: ARG002
        """The view with stale observations masked (a new `View`; `view` is not changed)."""
        out = self.mask_events(view.events)
        if all(a is b for a, b in zip(out, view.events)):
            return view
        return view.model_copy(update={"events": out})

    async def acondense(self, view: View, agent_llm: LLM | None = None) -> View | Condensation:
        """`condense` in a worker thread, so a long history does not hold the event loop."""
        return await asyncio.to_thread(self.condense, view, agent_llm)

    def __repr__(self) -> str:
        opts = ", ".join(f"{k}={v!r}" for k, v in self._core.options.items() if k != "format")
        return f"CtxpruneCondenser({opts})"

