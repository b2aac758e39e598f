"""Drives a guard (in process or remote) with replay-protocol events, answering each line
as `loopguard replay` does, so the binding can be compared with the real binary.

The driver does only what the protocol itself defines around the API (JSON lines, event
shapes, which fields must be strings); every answer comes from the guard, and every
value or name the guard refuses (a blank tool, a value it cannot fingerprint) becomes an
error line, as `replay` reports it.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from loopguard import AnyGuard, AnyTicket

IDS = ("session", "run", "agent", "parent_session", "parent_run", "call_id", "tool", "batch", "id")
_UNSET: Any = object()


def _id(event: Dict[str, Any], key: str) -> Optional[str]:
    value = event.get(key)
    if value is None and key not in event:
        return None
    if not isinstance(value, str):
        raise ValueError(f"{key} must be a string")
    return value.strip() or None


#: Tickets a driver in tickets mode holds: the call event that began each, by call id.
Tickets = Dict[str, Tuple[Dict[str, Any], AnyTicket]]


def _held(event: Dict[str, Any], tickets: Optional[Tickets]) -> Optional[AnyTicket]:
    """The ticket a result event finishes: the one its call_id's call began, when the result
    names the same call (scope, tool, arguments); forgotten either way."""
    call_id = event.get("call_id")
    if tickets is None or not isinstance(call_id, str) or call_id not in tickets:
        return None
    call, ticket = tickets.pop(call_id)
    same = all(call.get(k) == event.get(k) for k in ("session", "run", "agent", "parent_session", "parent_run", "tool"))
    return ticket if same and json.dumps(call.get("args", {}), sort_keys=True) == json.dumps(event.get("args", {}), sort_keys=True) else None


def answer(guard: AnyGuard, seq: int, event: Any, tickets: Optional[Tickets] = None) -> Dict[str, Any]:
    """The answer to one event. With `tickets`, calls begin tickets (kept by call id) and a
    result of the same call finishes its ticket: the engine's ticket path instead of the
    protocol's call and result events."""
    if not isinstance(event, dict):
        return {"seq": seq, "error": "event must be a JSON object"}
    kind = event.get("type")
    if kind not in ("call", "result", "compaction", "usage", "message"):
        return {"seq": seq, "error": f"bad event type {kind!r}"}
    try:
        ids = {key: _id(event, key) for key in IDS}
        scope = {
            "session": ids["session"] or "default",
            "run": ids["run"],
            "agent": ids["agent"],
            "parent_session": ids["parent_session"],
            "parent_run": ids["parent_run"],
        }
        head = {"seq": seq, "type": kind, "session": scope["session"], "run": scope["run"]}
        if kind == "compaction":
            return {**head, "armed": guard.on_compaction(**scope)}
        if kind == "usage":
            figures = {k: v for k, v in event.items() if k not in ("type", "ts", *scope)}
            return {**head, **guard.record_usage(**scope, **figures).to_dict()}
        if kind == "message":
            return {**head, **_message(guard, event, ids["id"], scope).to_dict()}
        tool = event.get("tool")
        if tool is None:
            return {"seq": seq, "error": f"{kind} without tool"}
        args = event.get("args", {})
        if kind == "call" and tickets is not None:
            ticket = guard.begin(tool, args, call_id=ids["call_id"], batch=ids["batch"], **scope)
            if isinstance(event.get("call_id"), str):
                tickets[event["call_id"]] = (event, ticket)
            return {**head, **ticket.verdict.to_dict()}
        if kind == "call":
            verdict = guard.before_call(tool, args, call_id=ids["call_id"], batch=ids["batch"], **scope)
            return {**head, **verdict.to_dict()}
        outcome: Dict[str, Any] = {}
        if "error" in event:
            outcome["error"] = event["error"]
        elif "result" in event:
            outcome["result"] = event["result"]
        held = _held(event, tickets)
        if held is not None:
            return {**head, **held.finish(**outcome).to_dict()}
        recorded = guard.after_call(tool, args, call_id=ids["call_id"], **scope, **outcome)
        return {**head, **recorded.to_dict()}
    except (TypeError, ValueError) as e:
        return {"seq": seq, "error": str(e)}


def _message(guard: AnyGuard, event: Dict[str, Any], id: Optional[str], scope: Dict[str, Any]) -> Any:
    """A message event through ``guard.message``: the protocol's field shapes checked here,
    everything else (role names, delta with index) by the guard."""
    role = event.get("role")
    if role is None:
        raise ValueError("message without role")
    if not isinstance(role, str):
        raise ValueError("role must be a string")
    fields: Dict[str, Any] = {"id": id}
    for key in ("text", "reasoning"):
        if key in event and not isinstance(event[key], str):
            raise ValueError(f"{key} must be a string")
    for key in ("has_tool_calls", "delta"):
        if key in event and not isinstance(event[key], bool):
            raise ValueError(f"{key} must be true or false")
    index = event.get("index")
    if index is not None and (isinstance(index, bool) or not isinstance(index, int) or index < 0):
        raise ValueError("index must be a whole number from 0")
    return guard.message(
        event.get("text", ""),
        role=role,
        reasoning=event.get("reasoning"),
        has_tool_calls=event.get("has_tool_calls"),
        delta=event.get("delta", False),
        index=index,
        **fields,
        **scope,
    )


def drive(guard: AnyGuard, lines: Iterable[str], tickets: bool = False) -> List[Dict[str, Any]]:
    """Every line's answer; with `tickets`, through the ticket path (see `answer`)."""
    held: Optional[Tickets] = {} if tickets else None
    out = []
    for seq, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except ValueError:
            out.append({"seq": seq, "error": "invalid JSON"})
            continue
        out.append(answer(guard, seq, event, held))
    return out


def replay(binary: Path, events: Path, config: Optional[Path] = None) -> List[Dict[str, Any]]:
    """What the real `loopguard replay` answers."""
    cmd = [str(binary), "replay"]
    if config is not None:
        cmd += ["--config", str(config)]
    done = subprocess.run(cmd + [str(events)], capture_output=True, text=True, check=False)
    assert done.returncode in (0, 2), done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


#: The fields SPEC's conformance README says must match (message wording is free there).
CONFORMANCE_FIELDS = (
    "seq", "type", "session", "run", "verdict", "level", "detector", "count", "notify",
    "terminal", "paired_tool", "recorded", "armed",
)


def conformance_view(answer: Dict[str, Any]) -> Dict[str, Any]:
    if "error" in answer:
        return {"seq": answer["seq"], "error": True}
    view = {k: answer[k] for k in CONFORMANCE_FIELDS if k in answer}
    if "abort" in answer:
        abort = answer["abort"]
        view["abort"] = abort and {k: abort[k] for k in ("detector", "tool", "count")}
    for key in ("counted", "cost"):
        if key in answer:
            view[key] = answer[key]
    for key in ("stop", "shadow_stop"):
        if key in answer:
            stop = answer[key]
            view[key] = stop and {k: stop[k] for k in ("detector", "count", "measure", "used", "limit")}
    return view


def exact_view(answer: Dict[str, Any]) -> Dict[str, Any]:
    """Everything, messages included; error lines by position only (their words differ:
    the driver parses JSON with Python)."""
    if "error" in answer:
        return {"seq": answer["seq"], "error": True}
    return answer


def views(answers: Sequence[Dict[str, Any]], exact: bool) -> List[Dict[str, Any]]:
    return [(exact_view if exact else conformance_view)(a) for a in answers]
