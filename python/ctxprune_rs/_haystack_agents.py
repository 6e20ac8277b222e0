"""ctxprune's observation masking as a Haystack 3.x `Compactor` (imported by
`ctxprune_rs.haystack` on first use of `CtxpruneCompactor`).

Haystack's `CompactionHook` (a `before_llm` Agent hook) decides *when*: before each chat
generator call it estimates the context and, at `compact_at` of `context_window`, calls
`compactor.compact(messages, target_tokens, token_counter)` and writes what comes back into
the Agent's `State`. This compactor decides *what*: the masking of `ctxprune_rs.MaskSession`
with the options given, on the whole conversation.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Dict, List, Optional, Sequence

from haystack import default_from_dict, default_to_dict
from haystack.dataclasses import ChatMessage, TextContent, ToolCall, ToolCallResult
from haystack.hooks.compaction.types import Compactor
from haystack.token_counters import TokenCounter

from ._agents import MaskCore, check_carried
from ._errors import InvalidInputError

__all__ = ["CtxpruneCompactor"]

# Haystack's meta key for a message a compactor wrote (haystack.hooks.compaction.utils), so
# its other compactors (ToolResultPruningCompactor, ...) leave these messages alone.
_META = "context_compaction"
_STRATEGY = "ctxprune_mask"


def _original(m: ChatMessage) -> ChatMessage:
    if not isinstance(m, ChatMessage):
        return m  # named by _to_dicts
    mark = m.meta.get(_META)
    if isinstance(mark, dict) and mark.get("strategy") == _STRATEGY and isinstance(mark.get("original"), dict):
        return ChatMessage.from_dict(mark["original"])
    return m


def _result_text(result: Any) -> Any:
    if isinstance(result, str):
        return result
    return [{"type": "text", "text": p.text} for p in result if isinstance(p, TextContent)]


def _to_dicts(messages: Sequence[ChatMessage]) -> List[Dict[str, Any]]:
    """OpenAI chat dicts, one per message. A call without an id (some generators make
    none) gets one from its position; its result is matched to it by `origin`, as Haystack
    matches them."""
    out: List[Dict[str, Any]] = []
    open_calls: List[tuple] = []  # (ToolCall, id) not yet answered, oldest first
    for i, m in enumerate(messages):
        if not isinstance(m, ChatMessage):
            raise InvalidInputError(f"invalid messages[{i}]: expected a haystack ChatMessage, got {type(m).__name__}")
        results = m.tool_call_results
        if results:
            if len(results) != 1:
                raise InvalidInputError(f"invalid messages[{i}]: {len(results)} tool results in one message "
                                        "(one a message, as the Agent's ToolInvoker writes them)")
            r = results[0]
            cid = r.origin.id
            if cid is None:
                k = next((k for k, (c, _) in enumerate(open_calls) if c == r.origin), None)
                if k is None:
                    raise InvalidInputError(f"invalid messages[{i}]: a result of {r.origin.tool_name} without a call "
                                            "id, answering no earlier call")
                cid = open_calls.pop(k)[1]
            d: Dict[str, Any] = {"role": "tool", "tool_call_id": cid, "content": _result_text(r.result)}
            if r.error:
                d["is_error"] = True
        else:
            d = {"role": m.role.value, "content": "\n".join(m.texts)}
            if m.tool_calls:
                calls = []
                for j, c in enumerate(m.tool_calls):
                    cid = c.id if c.id is not None else f"ctxprune-{i}-{j}"
                    if c.id is None:
                        open_calls.append((c, cid))
                    calls.append({"id": cid, "type": "function",
                                  "function": {"name": c.tool_name,
                                               "arguments": json.dumps(c.arguments, ensure_ascii=False)}})
                d["tool_calls"] = calls
        out.append(d)
    return out


def _changed_keys(i: int, d: Dict[str, Any], m: Dict[str, Any], carried: set) -> None:
    check_carried(i, d, m, carried, "CtxpruneCompactor")


def _masked(i: int, orig: ChatMessage, d: Dict[str, Any], m: Dict[str, Any]) -> ChatMessage:
    """A copy of `orig` with the masked content (or call arguments), its original kept in
    its meta."""
    if orig.tool_call_results:
        _changed_keys(i, d, m, {"content"})
        r = orig.tool_call_result
        c = m["content"]
        result = c if isinstance(c, str) else [TextContent(text=p.get("text", "")) for p in c]
        content: List[Any] = [ToolCallResult(result=result, origin=r.origin, error=r.error)]
    else:
        _changed_keys(i, d, m, {"tool_calls"})
        new_calls: List[ToolCall] = []
        for j, (c, mc) in enumerate(zip(orig.tool_calls, m["tool_calls"])):
            args = mc["function"]["arguments"]
            if args == d["tool_calls"][j]["function"]["arguments"]:
                new_calls.append(c)
                continue
            parsed = json.loads(args)
            if not isinstance(parsed, dict):
                raise AssertionError(f"masking left messages[{i}].tool_calls[{j}] arguments that are not a JSON object")
            new_calls.append(dataclasses.replace(c, arguments=parsed))
        it = iter(new_calls)
        content = [next(it) if isinstance(p, ToolCall) else p for p in orig._content]
    meta = {**orig.meta, _META: {"strategy": _STRATEGY, "original": orig.to_dict()}}
    return dataclasses.replace(orig, _content=content, _meta=meta)


class CtxpruneCompactor(Compactor):
    """Masks stale tool observations of a Haystack Agent's conversation: every tool result
    older than the last `window` tool-calling turns is replaced by a placeholder (errors
    and `tools_keep` kept, ...), exactly as `ctxprune_rs.MaskSession(format="openai",
    **options).mask` does on the conversation as OpenAI chat messages. Use it in a
    `CompactionHook`:

        from haystack.hooks.compaction import CompactionHook
        from ctxprune_rs.haystack import CtxpruneCompactor
        hook = CompactionHook(compactor=CtxpruneCompactor(window=5), context_window=128_000)
        agent = Agent(chat_generator=..., tools=[...], hooks={"before_llm": [hook]})

    `options`: `MaskSession`'s (window, keep_errors, keep_first, tools_keep, tools_mask,
    trigger_tokens, clear_at_least, step, placeholder, tokenizer, ...), checked here.

    No message is dropped, added or reordered; a masked message is a copy whose
    `meta["context_compaction"]` is `{"strategy": "ctxprune_mask", "original": ...}` (the
    message as it was, `ChatMessage.to_dict()`), so the Agent's `messages` still hold every
    tool output: `CtxpruneCompactor.restore(messages)` gives them back, and each call masks
    from the originals (never a placeholder of a placeholder). `target_tokens` is the
    protocol's goal, not a rule: what is masked is what the options say, whether that lands
    above or below it (the hook's `compact_at` says when). `compact` returns None when
    masking changes nothing or saves no tokens by `token_counter`, as the protocol asks."""

    def __init__(self, **options: Any):
        if options.get("format", "openai") != "openai":
            raise InvalidInputError(f"invalid format: {options['format']!r} (the compactor masks OpenAI messages)")
        self.options: Dict[str, Any] = {k: v for k, v in options.items() if k != "format"}
        self._core = MaskCore(**self.options)

    @property
    def stats(self) -> Optional[dict]:
        """The accounting of the last call (`MaskSession.stats`)."""
        return self._core.stats

    @staticmethod
    def restore(messages: Sequence[ChatMessage]) -> List[ChatMessage]:
        """The messages with every message this compactor masked back as it was (the others
        the same objects)."""
        return [_original(m) for m in messages]

    def compact(self, messages: List[ChatMessage], target_tokens: int,
                token_counter: TokenCounter) -> Optional[List[ChatMessage]]:
        """The conversation with stale observations masked (a new list; `messages` is not
        changed), or None when that changes nothing or saves no tokens."""
        originals = self.restore(messages)
        dicts = _to_dicts(originals)
        out = list(originals)
        for i, m in self._core.changes(dicts):
            new = _masked(i, originals[i], dicts[i], m)
            out[i] = messages[i] if new == messages[i] else new
        changed = [i for i, (a, b) in enumerate(zip(messages, out)) if a is not b]
        if not changed:
            return None
        before = token_counter.count(messages=[messages[i] for i in changed])
        after = token_counter.count(messages=[out[i] for i in changed])
        return out if after < before else None

    def to_dict(self) -> Dict[str, Any]:
        return default_to_dict(self, **self.options)

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "CtxpruneCompactor":
        return default_from_dict(cls, data)


# Serialised (and pickled) under the public module, the one a Haystack allowlist names.
CtxpruneCompactor.__module__ = "ctxprune_rs.haystack"
