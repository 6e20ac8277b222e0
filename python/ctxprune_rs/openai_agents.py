"""ctxprune in the OpenAI Agents SDK (`pip install "ctxprune-rs[openai-agents]"`):
observation masking as a `call_model_input_filter`.

    from agents import RunConfig, Runner
    from ctxprune_rs.openai_agents import CtxpruneInputFilter

    config = RunConfig(call_model_input_filter=CtxpruneInputFilter(window=5, tokenizer="o200k_base"))
    result = Runner.run_sync(agent, "fix the failing test", run_config=config)

Before each model call the filter reads the input items (Responses API items), views them
as OpenAI chat messages (`to_messages`), masks those with the shared core
(`ctxprune_rs._agents.MaskCore`, i.e. `ctxprune_rs.MaskSession(format="openai", **options)`)
and hands the model the original items with only the stale `function_call_output` items
replaced by copies carrying the placeholder (and, with `clear_tool_inputs`, their
`function_call` items by copies with the cleared arguments). The list the SDK passes in,
its items, the run's history and the session are never changed.

The SDK calls the filter with a `CallModelData` and awaits the result when it is
awaitable: `CtxpruneInputFilter(...)` itself answers synchronously;
`CtxpruneInputFilter(...).acall` is the async variant, which masks in a worker thread so
the event loop keeps running (a 500-turn history takes tens of milliseconds). Both work
under `Runner.run_sync`, `Runner.run` and `Runner.run_streamed`.

Item mapping (`to_messages`), one chat message per item, in order, except that a run of
consecutive `function_call` items is one assistant message (one turn, parallel calls):

- `function_call` -> `{"role": "assistant", "tool_calls": [{"id": call_id, "type":
  "function", "function": {"name": name, "arguments": arguments}}]}`; a namespaced tool
  is named `namespace.name` (as `tools_keep` / `tools_mask` must name it);
- `function_call_output` -> `{"role": "tool", "tool_call_id": call_id, "content": text}`
  (a list output: its `text` parts joined by newlines; images and files have no text),
  with `"is_error": true` when `is_error(item)` says so;
- a message (`role` user, assistant, system or developer, with or without
  `"type": "message"`) -> that role and its text (string content, or the `text` /
  `refusal` of its parts joined by newlines);
- `reasoning` -> an assistant message with its summary and content texts;
- any other item (hosted and built-in tool calls and their outputs, MCP items,
  compaction, item references) -> a message with the item's JSON as its text, role
  "user" for the client's answers (`*_output`, `mcp_approval_response`), "assistant"
  otherwise. Nothing is dropped or reordered; such items are never masked.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Mapping
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ._agents import MaskCore, carry_back
from ._errors import InvalidInputError

__all__ = ["CtxpruneInputFilter", "to_messages", "sdk_tool_error"]

_ROLES = ("user", "assistant", "system", "developer")
# The SDK's own failure outputs (agents 0.24: tool.default_tool_error_function,
# run_internal.turn_resolution._default_tool_not_found_message,
# tool.default_tool_timeout_error_message).
_SDK_TOOL_ERROR = "An error occurred while running the tool. Please try again."


def _plain(item: Any, i: int) -> Mapping[str, Any]:
    """The item as a mapping: a dict as it is, an SDK/pydantic object by its JSON dump."""
    if type(item) is dict or isinstance(item, Mapping):
        return item
    dump = getattr(item, "model_dump", None)
    if callable(dump):
        return dump(mode="json", exclude_none=True)
    raise InvalidInputError(f"invalid input[{i}]: expected a Responses input item (a dict), got {type(item).__name__}")


def _tool_name(v: Mapping[str, Any], i: int) -> str:
    name = v.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidInputError(f"invalid input[{i}]: the function_call has no \"name\"")
    ns = v.get("namespace")
    return f"{ns}.{name}" if isinstance(ns, str) and ns else name


def _call_id(v: Mapping[str, Any], i: int) -> str:
    cid = v.get("call_id")
    if not isinstance(cid, str) or not cid:
        raise InvalidInputError(f"invalid input[{i}]: the {v.get('type')} has no \"call_id\"")
    return cid


def _parts_text(parts: Any) -> str:
    """Text of a content value: a string, or the text (or refusal) of its parts."""
    if isinstance(parts, str):
        return parts
    if isinstance(parts, list):
        out = []
        for p in parts:
            if isinstance(p, str):
                out.append(p)
            elif isinstance(p, Mapping):
                t = p.get("text", p.get("refusal"))
                if isinstance(t, str):
                    out.append(t)
        return "\n".join(out)
    if parts is None:
        return ""
    return json.dumps(parts, ensure_ascii=False, default=str)


def _json(v: Mapping[str, Any]) -> str:
    return json.dumps(v, ensure_ascii=False, separators=(",", ":"), default=str)


def sdk_tool_error(item: Mapping[str, Any], name: Optional[str] = None) -> bool:
    """Whether a `function_call_output` item carries one of the SDK's own failure outputs:
    the default `failure_error_function`'s message (the tool raised), "Tool 'NAME' not
    found." or "Tool 'NAME' timed out after N seconds." (`name`: the call's tool). The SDK
    marks a failed call no other way; a custom `failure_error_function` or
    `tool_error_formatter` needs its own `is_error`."""
    out = item.get("output")
    if not isinstance(out, str):
        return False
    if out == _SDK_TOOL_ERROR:
        return True
    m = re.fullmatch(r"Tool '(.+)' (?:not found\.|timed out after [0-9.eE+-]+ seconds\.)", out)
    return bool(m) and (name is None or m.group(1) in (name, name.rsplit(".", 1)[-1]))


def _convert(
    items: Sequence[Any], is_error: Callable[[Mapping[str, Any]], bool] = sdk_tool_error
) -> Tuple[List[Dict[str, Any]], List[List[int]]]:
    """The chat messages of `items` and, per message, the item indices it stands for
    (a tool-call message: one per call, in order)."""
    messages: List[Dict[str, Any]] = []
    where: List[List[int]] = []
    names: Dict[str, str] = {}
    run: Optional[Dict[str, Any]] = None  # the assistant message of the current call run
    for i, item in enumerate(items):
        v = _plain(item, i)
        kind = v.get("type")
        role = v.get("role")
        if kind == "function_call":
            cid, name = _call_id(v, i), _tool_name(v, i)
            args = v.get("arguments", "")
            call = {"id": cid, "type": "function",
                    "function": {"name": name, "arguments": args if isinstance(args, str) else _json(args)}}
            names[cid] = name
            if run is None:
                run = {"role": "assistant", "content": None, "tool_calls": []}
                messages.append(run)
                where.append([])
            run["tool_calls"].append(call)
            where[-1].append(i)
            continue
        run = None
        if kind == "function_call_output":
            cid = _call_id(v, i)
            m: Dict[str, Any] = {"role": "tool", "tool_call_id": cid, "content": _parts_text(v.get("output"))}
            err = is_error(v) if is_error is not sdk_tool_error else sdk_tool_error(v, names.get(cid))
            if err:
                m["is_error"] = True
        elif role in _ROLES and kind in (None, "message"):
            m = {"role": role, "content": _parts_text(v.get("content"))}
        elif kind == "reasoning":
            texts = [_parts_text(v.get("summary")), _parts_text(v.get("content"))]
            m = {"role": "assistant", "content": "\n".join(t for t in texts if t)}
        else:
            answer = isinstance(kind, str) and (kind.endswith("_output") or kind == "mcp_approval_response")
            m = {"role": "user" if answer else "assistant", "content": _json(v)}
        messages.append(m)
        where.append([i])
    return messages, where


def to_messages(
    items: Sequence[Any], is_error: Optional[Callable[[Mapping[str, Any]], bool]] = None
) -> List[Dict[str, Any]]:
    """The OpenAI chat messages the filter masks for these Responses input items (see the
    module's docstring for the mapping); `is_error` as in `CtxpruneInputFilter`."""
    return _convert(items, is_error or sdk_tool_error)[0]


_NO_CALL = (" (a function_call_output needs its function_call earlier in the input; with previous_response_id"
            " or conversation_id the server holds the history and the filter has nothing to mask)")


def _replaced(item: Any, key: str, value: Any) -> Any:
    """A copy of `item` with `key` set (a dict stays a dict, an SDK object its type)."""
    if isinstance(item, Mapping):
        out = dict(item)
        out[key] = value
        return out
    return item.model_copy(update={key: value})


class CtxpruneInputFilter:
    """A `RunConfig.call_model_input_filter` that masks stale tool outputs in what the
    model sees: `options` are `ctxprune_rs.MaskSession`'s (window, keep_errors,
    keep_first, tools_keep, tools_mask, trigger_tokens, clear_at_least, step, placeholder,
    tokenizer, ...), checked here. `is_error(item) -> bool` says which
    `function_call_output` items are errors (kept while `keep_errors`); by default the
    SDK's own failure outputs (`sdk_tool_error`).

    Call it (the SDK does) with a `CallModelData`: returns a new `ModelInputData`, the
    same instructions and the items with stale outputs masked; `acall` is the same in a
    worker thread. `mask_items(items)` does it on a list of items. `stats` is the last
    call's accounting (turns, observations masked and kept, tokens before and after)."""

    def __init__(self, *, is_error: Optional[Callable[[Mapping[str, Any]], bool]] = None, **options: Any):
        if options.get("format", "openai") != "openai":
            raise InvalidInputError(
                f"invalid format: the SDK's items are masked as \"openai\", got {options['format']!r}")
        if is_error is not None and not callable(is_error):
            raise InvalidInputError(f"invalid is_error: expected a function of an item, got {type(is_error).__name__}")
        self._is_error = is_error or sdk_tool_error
        self._core = MaskCore(**options)

    @property
    def options(self) -> Dict[str, Any]:
        return dict(self._core.options)

    @property
    def stats(self) -> Optional[dict]:
        return self._core.stats

    def mask_items(self, items: Sequence[Any]) -> List[Any]:
        """The items with stale `function_call_output`s (and, with `clear_tool_inputs`,
        their calls' arguments) replaced by copies; `items` and its items are unchanged.
        An error names the item at fault as `input[i]`."""
        items = list(items)
        messages, where = _convert(items, self._is_error)
        return carry_back(
            self._core, items, messages, where, "input",
            output=lambda item, text: _replaced(item, "output", text),
            arguments=lambda item, args: _replaced(item, "arguments", args if isinstance(args, str) else _json(args)),
            hint=lambda text: text + _NO_CALL if "which no earlier call made" in text else text)

    def __call__(self, data: Any) -> Any:
        from agents.run_config import ModelInputData

        md = data.model_data
        return ModelInputData(input=self.mask_items(md.input), instructions=md.instructions)

    async def acall(self, data: Any) -> Any:
        """`__call__` in a worker thread (pass `filter.acall` to keep a busy event loop
        free while a long history is masked)."""
        return await asyncio.to_thread(self, data)

    def __repr__(self) -> str:
        opts = ", ".join(f"{k}={v!r}" for k, v in self._core.options.items() if k != "format")
        return f"CtxpruneInputFilter({opts})"

