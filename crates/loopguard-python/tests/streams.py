"""Random event streams over a small alphabet, so that loops (and every detector) happen."""

from __future__ import annotations

import json
from typing import Any, Dict, List

from hypothesis import strategies as st

CONFIG: Dict[str, Any] = {
    "tools": {"loopDetection": {
        "enabled": True, "historySize": 12, "warningThreshold": 2, "criticalThreshold": 4,
        "globalCircuitBreakerThreshold": 6, "unknownToolThreshold": 3,
        "postCompactionGuard": {"windowSize": 2},
    }},
    "agents": {"list": [{"id": "calm", "tools": {"loopDetection": {"warningThreshold": 3, "detectors": {"pingPong": False}}}}]},
}

ARGS = {
    "read": [{"path": "/a"}, {"path": "/b"}, {"path": "/a", "limit": 1.0}],
    "exec": [{"command": "make"}, {"command": "make test"}],
    "process": [{"action": "poll", "sessionId": "p1"}, {"action": "log", "sessionId": "p1"}],
    "command_status": [{"commandId": "c1"}],
    "message": [{"action": "send", "to": "x", "text": "hi"}],
    "nope": [{}],
}
RESULTS: List[Dict[str, Any]] = [
    {"result": {"content": [{"type": "text", "text": "same"}]}},
    {"result": {"content": [{"type": "text", "text": "other"}]}},
    {"result": {"details": {"status": "running", "tail": "..."}}},
    {"result": {"details": {"status": "completed", "exitCode": 1, "aggregated": "fail", "durationMs": 3}}},
    {"result": {"details": {"ok": True, "messageId": "m1"}}},
    {"result": "plain text"},
    {"result": None},
    {"error": "Tool nope not found"},
    {"error": {"message": "ENOENT"}},
    {},
]

call = st.fixed_dictionaries({
    "kind": st.just("call"),
    "session": st.sampled_from(["s1", "s2", " s1 "]),
    "run": st.sampled_from(["r1", "r2", None, ""]),
    "agent": st.sampled_from([None, "calm"]),
    "tool": st.sampled_from(sorted(ARGS)),
    "variant": st.integers(0, 2),
    "outcome": st.sampled_from(RESULTS + [None]),  # None: the result never comes
    "with_id": st.booleans(),
})
compaction = st.fixed_dictionaries({
    "kind": st.just("compaction"),
    "session": st.sampled_from(["s1", "s2"]),
    "run": st.sampled_from(["r1", "r2", None]),
})
steps = st.lists(st.one_of(call, call, call, call, call, compaction), min_size=1, max_size=120)


def lines_of(plan: List[Dict[str, Any]]) -> List[str]:
    """The plan as replay-protocol lines: each call, then its result when it has one."""
    lines = []
    for n, step in enumerate(plan):
        scope: Dict[str, Any] = {"session": step["session"]}
        if step["run"] is not None:
            scope["run"] = step["run"]
        if step["kind"] == "compaction":
            lines.append(json.dumps({"type": "compaction", **scope}))
            continue
        if step["agent"]:
            scope["agent"] = step["agent"]
        tool = step["tool"]
        args = ARGS[tool][step["variant"] % len(ARGS[tool])]
        ids = {"call_id": f"c{n}"} if step["with_id"] else {}
        lines.append(json.dumps({"type": "call", **scope, **ids, "tool": tool, "args": args}))
        if step["outcome"] is not None:
            lines.append(json.dumps({"type": "result", **scope, **ids, "tool": tool, "args": args, **step["outcome"]}))
    return lines
