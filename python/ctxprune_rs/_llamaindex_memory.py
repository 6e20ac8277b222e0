"""ctxprune's observation masking as a LlamaIndex memory (imported by
`ctxprune_rs.llamaindex` on first use of `CtxpruneMaskedMemory`): any `BaseMemory`
wrapped, its `get()` / `aget()` masked, everything else passed through."""

from __future__ import annotations

import json
from typing import Any, Dict, List, Optional, Sequence

from llama_index.core.base.llms.types import ChatMessage, TextBlock, ToolCallBlock
from llama_index.core.bridge.pydantic import Field, PrivateAttr, SerializeAsAny
from llama_index.core.memory import BaseMemory

from ._agents import MaskCore, check_carried
from ._errors import InvalidInputError

__all__ = ["CtxpruneMaskedMemory"]

# Roles some integrations give the assistant (Gemini's "model", Cohere's "chatbot").
_ASSISTANT = {"model": "assistant", "chatbot": "assistant"}


def _get(x: Any, key: str) -> Any:
    return x.get(key) if isinstance(x, dict) else getattr(x, key, None)


def _set(x: Any, key: str, value: Any) -> Any:
    return {**x, key: value} if isinstance(x, dict) else x.model_copy(update={key: value})


def _json(v: Any) -> str:
    return v if isinstance(v, str) else json.dumps(v if v is not None else {}, ensure_ascii=False)


def _calls(m: ChatMessage) -> List[Any]:
    """The message's tool calls: its `ToolCallBlock`s, else `additional_kwargs["tool_calls"]`
    (OpenAI's shape, `{"id", "function": {"name", "arguments"}}`; Anthropic's, `{"id",
    "name", "input"}`; or `ToolSelection`s)."""
    blocks = [b for b in m.blocks if isinstance(b, ToolCallBlock)]
    return blocks or list(m.additional_kwargs.get("tool_calls") or [])


def _call(i: int, j: int, c: Any) -> Dict[str, Any]:
    if isinstance(c, ToolCallBlock):
        cid, name, args = c.tool_call_id, c.tool_name, c.tool_kwargs
    elif _get(c, "function") is not None:
        cid, name, args = _get(c, "id"), _get(_get(c, "function"), "name"), _get(_get(c, "function"), "arguments")
    elif _get(c, "tool_id") is not None:
        cid, name, args = _get(c, "tool_id"), _get(c, "tool_name"), _get(c, "tool_kwargs")
    else:
        cid, name, args = _get(c, "id"), _get(c, "name"), _get(c, "input")
    if not cid or not isinstance(cid, str):
        raise InvalidInputError(f"invalid messages[{i}]: tool call {j} has no id (a tool message could not answer it)")
    if not isinstance(name, str):
        raise InvalidInputError(f"invalid messages[{i}]: tool call {j} has no tool name")
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": _json(args)}}


def _to_dicts(messages: Sequence[ChatMessage]) -> List[Dict[str, Any]]:
    """OpenAI chat dicts, one per message (text content; the calls' arguments as JSON)."""
    out: List[Dict[str, Any]] = []
    for i, m in enumerate(messages):
        if not isinstance(m, ChatMessage):
            raise InvalidInputError(f"invalid messages[{i}]: expected a llama_index ChatMessage, "
                                    f"got {type(m).__name__}")
        role = m.role.value
        if role == "tool":
            cid = m.additional_kwargs.get("tool_call_id")
            if not cid or not isinstance(cid, str):
                raise InvalidInputError(f"invalid messages[{i}]: a tool message without "
                                        "additional_kwargs['tool_call_id']")
            d: Dict[str, Any] = {"role": "tool", "tool_call_id": cid, "content": m.content or ""}
            if m.additional_kwargs.get("is_error") is True:
                d["is_error"] = True
        else:
            d = {"role": _ASSISTANT.get(role, role), "content": m.content}
            calls = _calls(m)
            if calls:
                d["tool_calls"] = [_call(i, j, c) for j, c in enumerate(calls)]
        out.append(d)
    return out


def _changed_keys(i: int, d: Dict[str, Any], m: Dict[str, Any], carried: set) -> None:
    check_carried(i, d, m, carried, "CtxpruneMaskedMemory")


def _with_args(c: Any, text: str) -> Any:
    """Call `c` with the masked arguments `text` (JSON), in the shape it had."""
    if isinstance(c, ToolCallBlock):
        return c.model_copy(update={"tool_kwargs": text if isinstance(c.tool_kwargs, str) else json.loads(text)})
    fn = _get(c, "function")
    if fn is not None:
        args = text if isinstance(_get(fn, "arguments"), str) else json.loads(text)
        return _set(c, "function", _set(fn, "arguments", args))
    key = "tool_kwargs" if _get(c, "tool_id") is not None else "input"
    return _set(c, key, text if isinstance(_get(c, key), str) else json.loads(text))


def _masked(i: int, orig: ChatMessage, d: Dict[str, Any], m: Dict[str, Any]) -> ChatMessage:
    """A copy of `orig` with the masked content (or call arguments)."""
    kwargs = dict(orig.additional_kwargs)
    if d["role"] == "tool":
        _changed_keys(i, d, m, {"content"})
        c = m["content"]
        blocks: List[Any] = ([TextBlock(text=c)] if isinstance(c, str)
                             else [TextBlock(text=p.get("text", "")) for p in c])
        return orig.model_copy(update={"blocks": blocks, "additional_kwargs": kwargs})
    _changed_keys(i, d, m, {"tool_calls"})
    new = {mc["id"]: mc["function"]["arguments"] for dc, mc in zip(d["tool_calls"], m["tool_calls"])
           if mc["function"]["arguments"] != dc["function"]["arguments"]}

    def rewrite(c: Any) -> Any:
        cid = c.tool_call_id if isinstance(c, ToolCallBlock) else (_get(c, "id") or _get(c, "tool_id"))
        return _with_args(c, new[cid]) if cid in new else c

    # Every copy of a call's arguments in the message is rewritten (blocks and kwargs).
    blocks = [rewrite(b) if isinstance(b, ToolCallBlock) else b for b in orig.blocks]
    if kwargs.get("tool_calls"):
        kwargs["tool_calls"] = [rewrite(c) for c in kwargs["tool_calls"]]
    return orig.model_copy(update={"blocks": blocks, "additional_kwargs": kwargs})


def _memory_class(name: Any) -> type:
    """The loaded `BaseMemory` subclass whose `class_name()` is `name` (no module is imported
    from serialised data)."""
    todo, seen = list(BaseMemory.__subclasses__()), set()
    while todo:
        c = todo.pop()
        if c in seen:
            continue
        seen.add(c)
        todo.extend(c.__subclasses__())
        try:
            if c.class_name() == name:
                return c
        except Exception:  # an abstract class_name
            continue
    raise InvalidInputError(f"invalid memory: no loaded BaseMemory subclass named {name!r} (import its module first)")


class CtxpruneMaskedMemory(BaseMemory):
    """Any LlamaIndex memory with its stale tool observations masked on the way out:
    `get()` / `aget()` return the wrapped memory's messages with every tool result older
    than the last `window` tool-calling turns replaced by a placeholder, exactly as
    `ctxprune_rs.MaskSession(format="openai", **options).mask` does on them as OpenAI chat
    messages. `get_all()`, `put()`, `set()`, `reset()` (and their async forms) pass through,
    so the stored history stays whole. Give it to an agent as its memory:

        from ctxprune_rs.llamaindex import CtxpruneMaskedMemory
        memory = CtxpruneMaskedMemory(Memory.from_defaults(session_id="s1"), window=5)
        await agent.run("...", memory=memory)

    `options`: `MaskSession`'s (window, keep_errors, keep_first, tools_keep, tools_mask,
    trigger_tokens, clear_at_least, step, placeholder, tokenizer, ...), checked here. The
    messages come back in order, the unchanged ones the same objects, the masked ones
    copies. Tool calls are read from `ToolCallBlock`s, else `additional_kwargs["tool_calls"]`;
    a tool message answers `additional_kwargs["tool_call_id"]` and is an error when
    `additional_kwargs["is_error"]` is true."""

    memory: SerializeAsAny[BaseMemory] = Field(description="The memory wrapped (it stores the whole history).")
    options: Dict[str, Any] = Field(default_factory=dict, description="ctxprune_rs.MaskSession's options.")

    _core: Any = PrivateAttr(default=None)

    def __init__(self, memory: BaseMemory, options: Optional[Dict[str, Any]] = None, **more: Any):
        opts = {**(options or {}), **more}
        if opts.get("format", "openai") != "openai":
            raise InvalidInputError(f"invalid format: {opts['format']!r} (the memory masks OpenAI messages)")
        opts.pop("format", None)
        if not isinstance(memory, BaseMemory):
            raise InvalidInputError(f"invalid memory: expected a llama_index BaseMemory, got {type(memory).__name__}")
        super().__init__(memory=memory, options=opts)
        self._core = MaskCore(**opts)

    @classmethod
    def class_name(cls) -> str:
        return "CtxpruneMaskedMemory"

    @classmethod
    def from_defaults(cls, memory: Optional[BaseMemory] = None, **options: Any) -> "CtxpruneMaskedMemory":
        """`memory` (a new `Memory.from_defaults()` when None) with `options`."""
        if memory is None:
            from llama_index.core.memory import Memory

            memory = Memory.from_defaults()
        return cls(memory, **options)

    @classmethod
    def from_dict(cls, data: Dict[str, Any], **kwargs: Any) -> "CtxpruneMaskedMemory":
        data = {**data, **kwargs}
        data.pop("class_name", None)
        inner = data.get("memory")
        if isinstance(inner, dict):
            inner = _memory_class(inner.get("class_name")).from_dict(inner)
        return cls(inner, data.get("options") or {})

    @property
    def stats(self) -> Optional[dict]:
        """The accounting of the last `get()` / `aget()` (`MaskSession.stats`)."""
        return self._core.stats

    def mask(self, messages: Sequence[ChatMessage]) -> List[ChatMessage]:
        """`messages` masked (a new list; `messages` is not changed)."""
        messages = list(messages)
        dicts = _to_dicts(messages)
        out = list(messages)
        for i, m in self._core.changes(dicts):
            out[i] = _masked(i, messages[i], dicts[i], m)
        return out

    def get(self, input: Optional[str] = None, **kwargs: Any) -> List[ChatMessage]:
        """The wrapped memory's `get()`, masked."""
        return self.mask(self.memory.get(input=input, **kwargs))

    async def aget(self, input: Optional[str] = None, **kwargs: Any) -> List[ChatMessage]:
        """The wrapped memory's `aget()`, masked."""
        return self.mask(await self.memory.aget(input=input, **kwargs))

    def get_all(self, **kwargs: Any) -> List[ChatMessage]:
        return self.memory.get_all(**kwargs)

    async def aget_all(self, **kwargs: Any) -> List[ChatMessage]:
        return await self.memory.aget_all(**kwargs)

    def put(self, message: ChatMessage) -> None:
        self.memory.put(message)

    async def aput(self, message: ChatMessage) -> None:
        await self.memory.aput(message)

    def put_messages(self, messages: List[ChatMessage]) -> None:
        self.memory.put_messages(messages)

    async def aput_messages(self, messages: List[ChatMessage]) -> None:
        await self.memory.aput_messages(messages)

    def set(self, messages: List[ChatMessage]) -> None:
        self.memory.set(messages)

    async def aset(self, messages: List[ChatMessage]) -> None:
        await self.memory.aset(messages)

    def reset(self, **kwargs: Any) -> None:
        self.memory.reset(**kwargs)

    async def areset(self, **kwargs: Any) -> None:
        await self.memory.areset(**kwargs)
