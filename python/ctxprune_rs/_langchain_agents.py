"""Observation masking in LangChain 1.x agents and LangGraph: three thin adapters over
`ctxprune_rs._agents.MaskCore`.

- `CtxpruneMaskEdit`: a `ContextEdit` for `ContextEditingMiddleware(edits=[...])`;
- `CtxpruneMaskMiddleware`: an `AgentMiddleware` (`create_agent(middleware=[...])`);
- `CtxpruneMaskHook` / `ctxprune_pre_model_hook`: a `pre_model_hook` for LangGraph's
  `create_react_agent`, returning `{"llm_input_messages": masked}`.

Each converts the LangChain messages to OpenAI chat dicts (one per message, in order),
masks them with one `MaskCore`, and returns LangChain messages: the unchanged ones as the
same objects, the changed ones as copies (`model_copy`). The stored history is never
changed.

Conversion: `SystemMessage` -> system, `HumanMessage` -> user, `AIMessage` -> assistant
(its `tool_calls` as OpenAI calls with the args as JSON text, then its
`invalid_tool_calls` with their raw args), `ToolMessage` -> tool (`"is_error": true` when
its status is "error"), `ChatMessage` with role system, developer, user or assistant ->
that role. Content is the message's `.text`: a string as it is; a list of parts, its
string and "text" parts joined (images, reasoning and provider blocks such as
`tool_use` are not text: they are not counted, and a masked observation loses them with
its text). Any other message type is an error naming its index and type.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any, Awaitable, Callable, Dict, List, Optional, Sequence, Tuple

from langchain_core.messages import AIMessage, BaseMessage, ChatMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.runnables.config import run_in_executor

from ._agents import MaskCore
from ._errors import InvalidInputError

try:  # the middleware needs `langchain` 1.x; the edit's protocol is structural, the hook needs only langchain-core
    from langchain.agents.middleware.types import AgentMiddleware as _Middleware
except ImportError:  # pragma: no cover - exercised only without `langchain`
    _Middleware = None

__all__ = ["CtxpruneMaskEdit", "CtxpruneMaskMiddleware", "CtxpruneMaskHook", "ctxprune_pre_model_hook",
           "to_openai_dicts"]

_CHAT_ROLES = ("system", "developer", "user", "assistant")


def _call_dict(call: Dict[str, Any], i: int, k: int, where: str, arguments: str) -> Dict[str, Any]:
    cid = call.get("id")
    if not isinstance(cid, str) or not cid:
        raise InvalidInputError(f"messages[{i}].{where}[{k}]: the call has no id, so no ToolMessage can answer it")
    return {"id": cid, "type": "function", "function": {"name": call.get("name") or "", "arguments": arguments}}


def _json(args: Any, i: int, k: int) -> str:
    try:
        return json.dumps(args, ensure_ascii=False)
    except (TypeError, ValueError) as e:
        raise InvalidInputError(f"messages[{i}].tool_calls[{k}]: the args are not JSON ({e})") from None


def _to_dict(m: Any, i: int) -> Dict[str, Any]:
    if isinstance(m, ToolMessage):
        d: Dict[str, Any] = {"role": "tool", "tool_call_id": m.tool_call_id, "content": str(m.text)}
        if m.status == "error":
            d["is_error"] = True
        return d
    if isinstance(m, AIMessage):
        d = {"role": "assistant", "content": str(m.text)}
        calls = [_call_dict(c, i, k, "tool_calls", _json(c["args"], i, k)) for k, c in enumerate(m.tool_calls)]
        calls += [_call_dict(c, i, k, "invalid_tool_calls", c.get("args") or "")
                  for k, c in enumerate(m.invalid_tool_calls)]
        if calls:
            d["tool_calls"] = calls
        return d
    if isinstance(m, HumanMessage):
        return {"role": "user", "content": str(m.text)}
    if isinstance(m, SystemMessage):
        return {"role": "system", "content": str(m.text)}
    if isinstance(m, ChatMessage) and m.role in _CHAT_ROLES:
        return {"role": m.role, "content": str(m.text)}
    what = f"a ChatMessage with role {m.role!r}" if isinstance(m, ChatMessage) else f"a {type(m).__name__}"
    raise InvalidInputError(
        f"messages[{i}]: cannot convert {what} (expected SystemMessage, HumanMessage, AIMessage, ToolMessage, "
        f"or ChatMessage with role {', '.join(_CHAT_ROLES)})")


def to_openai_dicts(messages: Sequence[BaseMessage]) -> List[Dict[str, Any]]:
    """The OpenAI chat dicts the adapters mask, one per message, in order."""
    return [_to_dict(m, i) for i, m in enumerate(messages)]


def _args(text: str, i: int, k: int) -> Dict[str, Any]:
    try:
        args = json.loads(text)
    except ValueError:
        args = None
    if not isinstance(args, dict):
        raise InvalidInputError(f"messages[{i}].tool_calls[{k}]: masked arguments {text!r} are not a JSON object")
    return args


def _copy(m: BaseMessage, old: Dict[str, Any], new: Dict[str, Any], i: int) -> BaseMessage:
    """`m` with the fields masking changed (`old` -> `new`) set on a copy."""
    update: Dict[str, Any] = {}
    for key in sorted(set(old) | set(new)):
        if old.get(key) == new.get(key):
            continue
        if key == "content" and isinstance(new.get("content"), str):
            update["content"] = new["content"]
        elif key == "tool_calls" and isinstance(m, AIMessage) and 0 < len(old.get(key) or []) == len(new[key] or []):
            n = len(m.tool_calls)
            calls, invalid = list(m.tool_calls), list(m.invalid_tool_calls)
            for k, (a, b) in enumerate(zip(old[key], new[key])):
                if a == b:
                    continue
                if (a["id"], a["function"]["name"]) != (b.get("id"), (b.get("function") or {}).get("name")):
                    raise AssertionError(f"messages[{i}].tool_calls[{k}]: masking changed the call's id or name")
                text = b["function"].get("arguments", "")
                if k < n:
                    calls[k] = {**calls[k], "args": _args(text, i, k)}
                else:
                    invalid[k - n] = {**invalid[k - n], "args": text}
            update["tool_calls"], update["invalid_tool_calls"] = calls, invalid
        else:
            raise AssertionError(f"messages[{i}]: masking changed {key!r}, which the adapter cannot map back")
    return m.model_copy(update=update)


def _mask(core: MaskCore, messages: Sequence[BaseMessage]) -> List[Tuple[int, BaseMessage]]:
    """(index, masked copy) for each message of `messages` that masking changed."""
    dicts = to_openai_dicts(messages)
    return [(i, _copy(messages[i], dicts[i], new, i)) for i, new in core.changes(dicts)]


def _masked_list(core: MaskCore, messages: Sequence[BaseMessage]) -> List[BaseMessage]:
    out = list(messages)
    for i, m in _mask(core, messages):
        out[i] = m
    return out


class CtxpruneMaskEdit:
    """A LangChain `ContextEdit` (`ContextEditingMiddleware(edits=[CtxpruneMaskEdit(...)])`):
    `apply` replaces, in the list it is given, each stale observation by a masked copy.
    `options` are `MaskSession`'s. Tokens are counted by the crate's counter
    (`tokenizer=`); the middleware's `count_tokens` is not used."""

    def __init__(self, **options: Any):
        self.core = MaskCore(**options)

    def apply(self, messages: List[BaseMessage], *, count_tokens: Optional[Callable[..., int]] = None) -> None:
        """Masks `messages` in place (entries replaced by copies; the messages themselves
        are not changed). `count_tokens` is ignored."""
        for i, m in _mask(self.core, messages):
            messages[i] = m

    @property
    def stats(self) -> Optional[dict]:
        """The accounting of the latest call (`MaskSession.stats`)."""
        return self.core.stats


class CtxpruneMaskMiddleware(_Middleware or object):  # type: ignore[misc]
    """A LangChain `AgentMiddleware` (`create_agent(..., middleware=[...])`): each model
    call gets the request with stale observations masked (`request.override(messages=...)`);
    the agent's state keeps every message whole. `options` are `MaskSession`'s. The async
    path masks in a worker thread (the crate releases the GIL)."""

    def __init__(self, **options: Any):
        if _Middleware is None:
            raise ImportError("CtxpruneMaskMiddleware needs langchain 1.x (pip install 'langchain>=1,<2')")
        super().__init__()
        self.core = MaskCore(**options)

    def _masked(self, request: Any) -> Any:
        changed = _mask(self.core, request.messages) if request.messages else []
        if not changed:
            return request
        messages = list(request.messages)
        for i, m in changed:
            messages[i] = m
        return request.override(messages=messages)

    def wrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        """Calls `handler` with the masked request."""
        return handler(self._masked(request))

    async def awrap_model_call(self, request: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
        """Masks in a worker thread, then awaits `handler` with the masked request."""
        return await handler(await asyncio.to_thread(self._masked, request))

    @property
    def stats(self) -> Optional[dict]:
        """The accounting of the latest call (`MaskSession.stats`)."""
        return self.core.stats


class CtxpruneMaskHook(Runnable):
    """A LangGraph `pre_model_hook` (`create_react_agent(..., pre_model_hook=...)`): from
    the state's `messages` it returns `{"llm_input_messages": masked}`, which the model
    reads instead while the state keeps every message whole. `options` are
    `MaskSession`'s. `ainvoke` masks in a worker thread (the crate releases the GIL)."""

    def __init__(self, **options: Any):
        self.core = MaskCore(**options)

    def invoke(self, input: Any, config: Optional[RunnableConfig] = None, **kwargs: Any) -> Dict[str, Any]:
        """`{"llm_input_messages": [...]}` for the state `input` (a mapping or an object
        with `messages`)."""
        messages = input.get("messages") if isinstance(input, Mapping) else getattr(input, "messages", None)
        if messages is None:
            raise InvalidInputError(f"pre_model_hook: the state ({type(input).__name__}) has no 'messages'")
        return {"llm_input_messages": _masked_list(self.core, messages)}

    async def ainvoke(self, input: Any, config: Optional[RunnableConfig] = None, **kwargs: Any) -> Dict[str, Any]:
        """`invoke` in a worker thread (the config's executor, as LangChain runs sync code)."""
        return await run_in_executor(config, self.invoke, input, config)

    def __call__(self, state: Any) -> Dict[str, Any]:
        return self.invoke(state)

    @property
    def stats(self) -> Optional[dict]:
        """The accounting of the latest call (`MaskSession.stats`)."""
        return self.core.stats


def ctxprune_pre_model_hook(**options: Any) -> CtxpruneMaskHook:
    """A `pre_model_hook` for LangGraph's `create_react_agent` masking with `options`
    (`MaskSession`'s): `CtxpruneMaskHook(**options)`."""
    return CtxpruneMaskHook(**options)
