"""An OpenHands-style condenser on ctxprune's observation masking.

OpenHands keeps an agent's history as a list of events: actions (`"action"`, with an `id`)
and the observations they caused (`"observation"`, with `"cause"` the action's id). Its
`ObservationMaskingCondenser(attention_window)` replaces every observation more than
`attention_window` events from the end with `AgentCondensationObservation('<MASKED>')`.

`MaskingCondenser` does the same job with ctxprune's rule (SPEC §2): the window counts
agent turns rather than events, error observations can be kept, tools can be exempt, and
masking can wait until the context is large (`trigger_tokens`), while a `MaskSession`
caches token counts across the agent loop. On a history of complete action/observation
pairs, `MaskingCondenser(window=K)` masks exactly what OpenHands' condenser masks with
`attention_window = 2 K` (python/tests/test_openhands.py checks this).

    condenser = MaskingCondenser(window=5)
    for step in agent_loop:
        view = condenser.condense(events)      # list of event dicts, masked
        ...

Run this file for a small demonstration.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Optional, Sequence

import ctxprune_rs as ctxprune

PLACEHOLDER = "<MASKED>"


def to_messages(events: Sequence[Dict[str, Any]]):
    """OpenAI messages for `events`: each action an assistant tool call (the call id is the
    action's id), each observation caused by an action that call's tool message (an
    `"observation": "error"` marked `is_error`), anything
    else a user or assistant text message. Returns the messages and, for each event, the
    index of its message."""
    msgs: List[Dict[str, Any]] = []
    where: List[int] = []
    calls = set()
    for e in events:
        if "action" in e and "id" in e:
            cid = str(e["id"])
            calls.add(cid)
            msgs.append({"role": "assistant", "content": e.get("message") or None, "tool_calls": [{
                "id": cid, "type": "function",
                "function": {"name": str(e["action"]), "arguments": json.dumps(e.get("args", {}))},
            }]})
        elif "observation" in e and str(e.get("cause")) in calls:
            m = {"role": "tool", "tool_call_id": str(e["cause"]), "content": str(e.get("content", ""))}
            if e["observation"] == "error":  # OpenHands' ErrorObservation
                m["is_error"] = True
            msgs.append(m)
        else:
            role = "user" if e.get("source") == "user" else "assistant"
            msgs.append({"role": role, "content": str(e.get("content") or e.get("message") or "")})
        where.append(len(msgs) - 1)
    return msgs, where


class MaskingCondenser:
    """Masks the observations of all but the latest `window` agent turns; see the module
    docstring. Keyword options are `ctxprune.MaskSession`'s (by default errors are masked
    too and the placeholder is OpenHands' `<MASKED>`)."""

    def __init__(self, window: int = 5, *, keep_errors: bool = False, placeholder: str = PLACEHOLDER,
                 tokenizer: str = "approx", **options: Any):
        self.session = ctxprune.MaskSession("openai", window, keep_errors=keep_errors,
                                            placeholder=placeholder, tokenizer=tokenizer, **options)

    @property
    def stats(self) -> Optional[dict]:
        """The accounting of the latest `condense`."""
        return self.session.stats

    def condense(self, events: Sequence[Dict[str, Any]]) -> List[Dict[str, Any]]:
        """`events` with masked observations replaced by agent-condensation observations;
        the input is not changed."""
        msgs, where = to_messages(events)
        masked = self.session.mask(msgs)
        out = []
        for e, m in zip(events, where):
            if "observation" in e and masked[m].get("content") != msgs[m].get("content"):
                out.append({"observation": "agent_condensation", "content": masked[m]["content"],
                            "source": "agent"})
            else:
                out.append(e)
        return out


if __name__ == "__main__":
    events: List[Dict[str, Any]] = [{"id": 0, "source": "user", "message": "Fix the failing test."}]
    for t in range(8):
        events.append({"id": 2 * t + 1, "source": "agent", "action": "run", "args": {"command": f"pytest -k case{t}"}})
        events.append({"id": 2 * t + 2, "source": "environment", "observation": "run", "cause": 2 * t + 1,
                       "content": "\n".join(f"test_case{t}_{i} PASSED" for i in range(40))})
    condenser = MaskingCondenser(window=3)
    view = condenser.condense(events)
    masked = sum(e.get("observation") == "agent_condensation" for e in view)
    print(f"{masked} of 8 observations masked; tokens {condenser.stats['tokens_before']} -> "
          f"{condenser.stats['tokens_after']}")
