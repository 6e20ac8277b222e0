"""Provider pairing rules, checked directly on message dicts (independent of the crate's
parser): what OpenAI and Anthropic answer 400 to."""

from __future__ import annotations

import json
from typing import Any, Dict, List, Sequence


def openai_pairing(messages: Sequence[Dict[str, Any]]) -> List[str]:
    """Violations of OpenAI's rule: every assistant `tool_calls` id is answered by exactly
    one `tool` message, after it and before the next assistant message; every `tool`
    message answers an open call; call arguments are JSON text."""
    bad: List[str] = []
    open_ids: Dict[str, int] = {}
    for i, m in enumerate(messages):
        role = m.get("role")
        if role == "assistant":
            for cid, at in open_ids.items():
                bad.append(f"messages[{at}]: call {cid} unanswered before messages[{i}]")
            open_ids = {}
            for c in m.get("tool_calls") or []:
                cid = c.get("id")
                if cid in open_ids:
                    bad.append(f"messages[{i}]: call id {cid} twice")
                open_ids[cid] = i
                try:
                    json.loads(c["function"]["arguments"])
                except (KeyError, TypeError, ValueError) as e:
                    bad.append(f"messages[{i}]: call {cid} arguments not JSON ({e})")
        elif role == "tool":
            cid = m.get("tool_call_id")
            if cid not in open_ids:
                bad.append(f"messages[{i}]: tool message answers no open call ({cid})")
            else:
                del open_ids[cid]
        elif open_ids and role == "user":
            bad.append(f"messages[{i}]: user message while calls {sorted(open_ids)} are open")
    # a trailing open call is the pending request the agent is about to answer
    return bad


def anthropic_pairing(messages: Sequence[Dict[str, Any]]) -> List[str]:
    """Violations of Anthropic's rule: each `tool_use` id is answered by a `tool_result`
    with that id in the very next (user) message, and every `tool_result` answers a
    `tool_use` of the message just before it."""
    bad: List[str] = []
    for i, m in enumerate(messages):
        blocks = m.get("content") if isinstance(m.get("content"), list) else []
        uses = [b.get("id") for b in blocks if b.get("type") == "tool_use"]
        results = [b.get("tool_use_id") for b in blocks if b.get("type") == "tool_result"]
        if uses and m.get("role") != "assistant":
            bad.append(f"messages[{i}]: tool_use in a {m.get('role')} message")
        if results:
            prev = messages[i - 1] if i else {}
            pblocks = prev.get("content") if isinstance(prev.get("content"), list) else []
            puses = {b.get("id") for b in pblocks if b.get("type") == "tool_use"}
            for r in results:
                if r not in puses:
                    bad.append(f"messages[{i}]: tool_result {r} answers no tool_use of messages[{i - 1}]")
        if uses and i + 1 < len(messages):
            nxt = messages[i + 1]
            nblocks = nxt.get("content") if isinstance(nxt.get("content"), list) else []
            got = [b.get("tool_use_id") for b in nblocks if b.get("type") == "tool_result"]
            for u in uses:
                if got.count(u) != 1:
                    bad.append(f"messages[{i}]: tool_use {u} answered {got.count(u)} times in messages[{i + 1}]")
    return bad
