"""The one core the agent-framework adapters share: a framework's history, converted by
the adapter to OpenAI chat messages (plain dicts, one per framework message, in order),
masked by one `MaskSession`, and the masked messages handed back by index.

Masking never adds, removes or reorders a message: it replaces the content of stale tool
observations (and, with `clear_tool_inputs`, the arguments of their calls). So an adapter
maps the result back by position, and copies only the framework messages that changed;
the stored history is never touched.
"""

from __future__ import annotations

import json
import re
import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from . import MaskSession
from ._errors import InvalidInputError


class MaskCore:
    """One masker for an adapter: `options` are `MaskSession`'s (window, tokenizer,
    trigger_tokens, clear_at_least, step, edit, preset, ...), checked when it is made.
    One adapter serves many conversations and threads: each conversation (told apart by
    its first messages) gets a session of its own, whose token counts are reused only
    while its history extends the one it saw last (the native session checks this byte
    for byte, so a wrong guess costs a recount, never a wrong count)."""

    _SESSIONS = 32

    def __init__(self, **options: Any):
        options.setdefault("format", "openai")
        self.options: Dict[str, Any] = dict(options)
        self._first = MaskSession(**options)  # checks the options now
        self._sessions: "OrderedDict[str, MaskSession]" = OrderedDict()
        self._lock = threading.Lock()
        self.stats: Optional[dict] = None

    def _session(self, messages: Sequence[Dict[str, Any]]) -> MaskSession:
        key = json.dumps(list(messages[:2]), sort_keys=True, default=str)
        s = self._sessions.pop(key, None)
        if s is None:
            s, self._first = (self._first, None) if self._first is not None else (MaskSession(**self.options), None)
        self._sessions[key] = s
        while len(self._sessions) > self._SESSIONS:
            self._sessions.popitem(last=False)
        return s

    def masked(self, messages: Sequence[Dict[str, Any]]) -> List[Dict[str, Any]]:
        """The masked messages (new dicts); `messages` is not changed."""
        with self._lock:
            s = self._session(messages)
            out = s.mask(list(messages))
            self.stats = s.stats
        return out

    def changes(self, messages: Sequence[Dict[str, Any]]) -> List[Tuple[int, Dict[str, Any]]]:
        """(index, masked message) for each message that masking changed, in order."""
        out = self.masked(messages)
        if len(out) != len(messages):  # masking never adds or removes a message
            raise AssertionError(f"masking returned {len(out)} messages for {len(messages)}")
        return [(i, m) for i, (d, m) in enumerate(zip(messages, out)) if m != d]

    def __reduce__(self):
        return (_rebuild, (self.options,))


def check_carried(i: int, d: Dict[str, Any], m: Dict[str, Any], carried: set, who: str) -> None:
    """Masking may change only the fields an adapter carries back into its framework's
    message; anything else is a bug to report, never to drop."""
    extra = {k for k in d.keys() | m.keys() if d.get(k) != m.get(k)} - carried
    if extra:
        raise AssertionError(f"masking changed messages[{i}] {sorted(extra)}, which {who} cannot carry back")


def _rebuild(options: Dict[str, Any]) -> MaskCore:
    return MaskCore(**options)



def without(d: Mapping[str, Any], key: str) -> Dict[str, Any]:
    """`d` without `key`, as a new dict."""
    return {k: v for k, v in d.items() if k != key}


def only_arguments(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Whether a tool-call message changed in its calls' arguments alone."""
    a, b = old["tool_calls"], new.get("tool_calls")
    if without(new, "tool_calls") != without(old, "tool_calls") or not isinstance(b, list) or len(a) != len(b):
        return False
    return all(isinstance(y, Mapping) and isinstance(y.get("function"), Mapping)
               and without(y, "function") == without(x, "function")
               and without(y["function"], "arguments") == without(x["function"], "arguments")
               for x, y in zip(a, b))


_AT = re.compile(r"messages\[(\d+)\](?:\.tool_calls\[(\d+)\])?")


def renamed(text: str, where: List[List[int]], label: str) -> str:
    """The core's message names (messages[m], messages[m].tool_calls[k]) as the
    framework's: `label[i]`, `i` the item that message (or that call) stands for."""

    def item(m: re.Match) -> str:
        msg, k = int(m.group(1)), m.group(2)
        if msg >= len(where):
            return m.group(0)
        ix = where[msg]
        return f"{label}[{ix[int(k)] if k is not None and int(k) < len(ix) else ix[0]}]"

    return _AT.sub(item, text)


def carry_back(
    core: MaskCore,
    items: Sequence[Any],
    messages: List[Dict[str, Any]],
    where: List[List[int]],
    label: str,
    output: Callable[[Any, Any], Any],
    arguments: Callable[[Any, Any], Any],
    hint: Callable[[str], str] = lambda text: text,
) -> List[Any]:
    """Masks `messages` (the chat view of the framework's `items`; `where[m]`: the items
    message m stands for, one per call for a message of calls) and returns the items with
    each change carried back into a copy: `output(item, content)` for a masked
    observation, `arguments(item, args)` for a call whose arguments were cleared. Errors
    name the item at fault as `label[i]` (then passed through `hint`)."""
    try:
        changes = core.changes(messages)
    except InvalidInputError as e:
        raise InvalidInputError(hint(renamed(str(e), where, label))) from None
    out = list(items)
    for m, new in changes:
        old = messages[m]
        if old["role"] == "tool" and without(new, "content") == without(old, "content"):
            i = where[m][0]
            out[i] = output(items[i], new["content"])
        elif old.get("tool_calls") and only_arguments(old, new):
            for k, (a, b) in enumerate(zip(old["tool_calls"], new["tool_calls"])):
                if a != b:
                    i = where[m][k]
                    out[i] = arguments(items[i], b["function"]["arguments"])
        else:  # masking changes only observations and call arguments
            raise AssertionError(f"masking changed {label}[{where[m][0]}] in a way no item can carry")
    return out
