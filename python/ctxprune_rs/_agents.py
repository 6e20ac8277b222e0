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
import threading
from collections import OrderedDict
from typing import Any, Dict, List, Optional, Sequence, Tuple

from . import MaskSession


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
