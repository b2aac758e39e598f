"""`Guard.remote`: the same API answered by a real `loopguard serve` sidecar, with the
same answers as the in-process guard on the same config."""

from __future__ import annotations

import uuid
from typing import Any, Dict, List

import pytest

import loopguard
from conftest import REPO
from driver import drive
from streams import RESULTS


def stream(session: str) -> List[str]:
    """A stuck read, a ping-pong, an unknown tool and a compaction loop, in one session."""
    import json

    lines = []
    for i in range(12):
        args = {"path": "/notes"}
        lines.append(json.dumps({"type": "call", "session": session, "run": "r1", "call_id": f"a{i}", "tool": "read", "args": args}))
        lines.append(json.dumps({"type": "result", "session": session, "run": "r1", "call_id": f"a{i}", "tool": "read", "args": args, **RESULTS[0]}))
    for i in range(8):
        tool = ("list", "read")[i % 2]
        lines.append(json.dumps({"type": "call", "session": session, "run": "r2", "tool": tool, "args": {"i": 0}}))
        lines.append(json.dumps({"type": "result", "session": session, "run": "r2", "tool": tool, "args": {"i": 0}, "result": "same"}))
    for i in range(12):
        lines.append(json.dumps({"type": "call", "session": session, "run": "r3", "agent": "patient", "tool": "nope", "args": {}}))
        lines.append(json.dumps({"type": "result", "session": session, "run": "r3", "tool": "nope", "args": {}, "error": "Tool nope not found"}))
    lines.append(json.dumps({"type": "compaction", "session": session, "run": "r4"}))
    for i in range(3):
        lines.append(json.dumps({"type": "call", "session": session, "run": "r4", "tool": "exec", "args": {"c": 1}}))
        lines.append(json.dumps({"type": "result", "session": session, "run": "r4", "tool": "exec", "args": {"c": 1}, "result": None}))
    return lines


def test_remote_answers_as_the_guard_in_process(sidecar: str) -> None:
    session = f"py-{uuid.uuid4()}"
    remote = loopguard.Guard.remote(sidecar)
    local = loopguard.Guard(REPO / "examples" / "openclaw.json5")
    got = drive(remote, stream(session))
    assert got == drive(local, stream(session))
    kinds = {(a.get("verdict"), a.get("detector")) for a in got}
    assert ("block", "generic_repeat") in kinds and ("warn", "ping_pong") in kinds
    assert ("block", "unknown_tool_repeat") in kinds
    assert any(a.get("abort") for a in got)
    assert remote.end_run(session=session, run="r1") and not remote.end_run(session=session, run="r1")
    assert remote.end_session(session) and not remote.end_session(session)


def message_stream(session: str) -> List[str]:
    """Loops without tool calls: a format-error loop, a chanting stream, a repeated answer."""
    import json

    def line(run: str, role: str, text: str, **more: Any) -> str:
        return json.dumps({"type": "message", "session": session, "run": run, "role": role, "text": text, **more})

    lines = []
    for i in range(9):
        lines.append(line("r1", "assistant", f"Done (try {i}).", has_tool_calls=False, id=f"a{i}"))
        lines.append(line("r1", "tool_feedback", "No tool calls found in the response."))
    for i in range(24):
        lines.append(line("r2", "assistant", "I will run the tests again " if i % 2 == 0 else "to be sure they pass.\n", delta=True, index=i, id="s"))
    lines.append(line("r2", "assistant", "I will run the tests again " * 3, delta=True, index=3, id="s"))
    for i in range(6):
        lines.append(line("r3", "assistant", "I cannot find the file, please check the path."))
        lines.append(line("r3", "user", "Try again."))
    return lines


def test_remote_answers_messages_as_the_guard_in_process(message_sidecar: str) -> None:
    session = f"py-{uuid.uuid4()}"
    remote = loopguard.Guard.remote(message_sidecar)
    config = REPO / "spec" / "extensions" / "messages-preset-recommended" / "config.json5"
    got = drive(remote, message_stream(session))
    assert got == drive(loopguard.Guard(config), message_stream(session))
    fired = {(a.get("verdict"), a.get("detector")) for a in got}
    assert {("block", "no_tool_turns"), ("block", "content_chanting"), ("block", "repeated_message")} <= fired
    with pytest.raises(ValueError, match="role"):
        remote.message("x", session=session, run="r", role="robot")
    with pytest.raises(TypeError):
        remote.message(b"x", session=session, run="r")  # type: ignore[arg-type]
    with pytest.raises(loopguard.RemoteError) as caught:
        remote.message("x", session=session, run="r", role="user", delta=True)
    assert caught.value.status == 400


def test_remote_verdicts_are_full_verdicts(sidecar: str) -> None:
    remote = loopguard.Guard.remote(sidecar)
    session = f"py-{uuid.uuid4()}"
    verdicts = []
    for _ in range(6):
        v = remote.before_call("read", {"p": 1}, session=session, run="r")
        verdicts.append(v)
        if not v.blocked:
            remote.after_call("read", {"p": 1}, session=session, run="r", result={"same": True})
    warn, block = verdicts[3], verdicts[5]
    assert warn.warning_note and warn.warning_note.startswith("[loopguard] WARNING")
    assert block.blocked and block.blocked_result == {
        "content": [{"type": "text", "text": block.message}],
        "details": {"status": "blocked", "deniedReason": "tool-loop", "detector": "generic_repeat", "count": 5},
    }


def test_remote_refuses_what_the_local_guard_refuses_and_reports_http_errors(sidecar: str) -> None:
    remote = loopguard.Guard.remote(sidecar)
    with pytest.raises(ValueError, match="nested deeper"):
        nested: Any = []
        for _ in range(200):
            nested = [nested]
        remote.before_call("t", nested, session="s", run=None)
    with pytest.raises(TypeError):
        remote.after_call("t", {}, session="s", run=None, result=b"x")
    wrong = loopguard.Guard.remote(sidecar + "/nothing-here")
    with pytest.raises(loopguard.RemoteError) as caught:
        wrong.before_call("t", {}, session="s", run=None)
    assert caught.value.status == 404
    closed = loopguard.Guard.remote("http://127.0.0.1:9")
    with pytest.raises(loopguard.RemoteError) as caught:
        closed.before_call("t", {}, session="s", run=None)
    assert caught.value.status == 0
