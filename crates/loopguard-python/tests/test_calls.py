"""The ways into the guard: `begin` and its ticket, and the protocol's `before_call` and
`after_call`. PyO3's own methods (vectorcall with the stable ABI of Python 3.10) take
every spelling of the arguments Python allows, refuse the same mistakes with Python's own
messages, read strings beyond ASCII in place, and give the same answers either way."""

from __future__ import annotations

import json
from typing import Any, Dict, List

import pytest
from hypothesis import given, settings

import loopguard
from conftest import REPO
from driver import drive, views
from streams import CONFIG as STREAM_CONFIG, lines_of, steps

CONFIG = {"tools": {"loopDetection": {"enabled": True, "warningThreshold": 2, "criticalThreshold": 3}}}


def test_every_vector_is_answered_the_same_through_tickets() -> None:
    cases = [p for suite in ("conformance", "extensions") for p in sorted((REPO / "spec" / suite).iterdir())]
    cases = [c for c in cases if (c / "events.jsonl").exists() and not (c / "expected-exit").exists()]
    assert cases
    for case in cases:
        config = case / "config.json5"
        events = (case / "events.jsonl").read_text().splitlines()
        protocol = drive(loopguard.Guard(config if config.exists() else None), events)
        tickets = drive(loopguard.Guard(config if config.exists() else None), events, tickets=True)
        assert views(protocol, True) == views(tickets, True), case.name


def test_every_spelling_of_the_arguments() -> None:
    g = loopguard.Guard(CONFIG)
    # Keyword names built at run time are not the interned ones: matched by their text.
    run_time = {"".join(["ses", "sion"]): "s", "".join(["ru", "n"]): "r"}
    answers = [
        g.before_call("t", {"a": 1}, session="s", run="r"),
        g.before_call(tool="t", args={"a": 1}, session="s", run="r"),
        g.begin("t", args={"a": 1}, run="r", session="s", agent=None, call_id=None, batch=None).verdict,
        g.before_call("t", {"a": 1}, **run_time),
    ]
    # The same call four times (generic repeats only warn).
    assert [a.verdict for a in answers] == ["allow", "allow", "warn", "warn"]
    assert g.after_call("t", {"a": 1}, session="s", run="r").recorded is False
    assert g.after_call("u", {}, session="s", run=None, result=None).recorded is True
    assert g.after_call("u", {}, session="s", run=None, error=ValueError("boom")).recorded is True


MISTAKES: List[Dict[str, Any]] = [
    {"args": ("t", {}), "kwargs": {"session": "s"}, "error": TypeError, "match": "missing 1 required.*'run'"},
    {"args": ("t",), "kwargs": {"session": "s", "run": "r"}, "error": TypeError, "match": "missing 1 required.*'args'"},
    {"args": (), "kwargs": {}, "error": TypeError, "match": "missing 2 required.*'tool'"},
    {"args": ("t", {}, "s"), "kwargs": {"run": "r"}, "error": TypeError, "match": "takes 2 positional arguments but 3"},
    {"args": ("t", {}), "kwargs": {"session": "s", "run": "r", "bogus": 1}, "error": TypeError, "match": "unexpected keyword argument 'bogus'"},
    {"args": ("t", {}), "kwargs": {"tool": "t", "session": "s", "run": "r"}, "error": TypeError, "match": "multiple values for argument 'tool'"},
    {"args": (5, {}), "kwargs": {"session": "s", "run": "r"}, "error": TypeError, "match": None},
    {"args": ("t", {}), "kwargs": {"session": None, "run": "r"}, "error": TypeError, "match": None},
    {"args": ("t", {}), "kwargs": {"session": "s", "run": 7}, "error": TypeError, "match": None},
    {"args": ("t", {}), "kwargs": {"session": "s", "run": "r", "call_id": b"x"}, "error": TypeError, "match": None},
    {"args": (" ", {}), "kwargs": {"session": "s", "run": "r"}, "error": ValueError, "match": "non-blank"},
    {"args": ("t", {}), "kwargs": {"session": "\ud800", "run": "r"}, "error": UnicodeEncodeError, "match": None},
]


@pytest.mark.parametrize("mistake", MISTAKES, ids=[str(i) for i in range(len(MISTAKES))])
def test_the_same_mistakes_are_refused(mistake: Dict[str, Any]) -> None:
    g = loopguard.Guard(CONFIG)
    for method in (g.before_call, g.after_call, g.begin):
        with pytest.raises(mistake["error"], match=mistake["match"]):
            method(*mistake["args"], **mistake["kwargs"])
    # The guard still answers afterwards.
    assert g.before_call("t", {}, session="s", run="r").verdict == "allow"


def test_strings_that_are_not_ascii() -> None:
    """Names and values beyond ASCII are read as UTF-8, in place."""
    g = loopguard.Guard(CONFIG)
    args = {"ключ": "значение 🚀", "k": ["ü" * 100]}
    for _ in range(2):
        with g.begin("инструмент", args, session="сессия", run="☃") as ticket:
            ticket.finish(result={"текст": "é"})
    # The keys in another order: the same call, a third time.
    assert g.before_call("инструмент", dict(reversed(list(args.items()))), session="сессия", run="☃").verdict == "warn"


def test_a_ticket_finishes_once_and_a_with_block_records_what_it_raises() -> None:
    g = loopguard.Guard(CONFIG)
    scope: Dict[str, Any] = {"session": "t", "run": "r"}
    ticket = g.begin("read", {"p": 1}, **scope)
    assert ticket.verdict is g.begin("other", {}, **scope).verdict, "allow verdicts are one shared object"
    assert ticket.finish(result="same").recorded is True
    with pytest.raises(RuntimeError, match="already finished"):
        ticket.finish(result="same")
    with pytest.raises(TypeError, match="result= or error=, not both"):
        g.begin("read", {"p": 1}, **scope).finish(result=1, error=2)
    # An exception raised in the block is the call's error, and goes on.
    with pytest.raises(OSError, match="disk full"):
        with g.begin("write", {"p": 1}, **scope):
            raise OSError("disk full")
    # Leaving the block without an outcome is a mistake (the call was not cancelled).
    with pytest.raises(RuntimeError, match="outcome was not given"):
        with g.begin("write", {"p": 2}, **scope):
            pass
    with g.begin("write", {"p": 3}, **scope) as cancelled:
        cancelled.cancel()
    # A blocked ticket has no outcome: the block may end without one.
    for _ in range(4):
        with g.begin("loop", {}, **scope) as t:
            if not t.blocked:
                t.finish(result="same")
    assert t.blocked and t.blocked_result is not None and t.ends_run is None
    # The protocol records the same error for the same call.
    twin = loopguard.Guard(CONFIG)
    twin.before_call("write", {"p": 1}, **scope)
    assert twin.after_call("write", {"p": 1}, **scope, error=OSError("disk full")).recorded
    assert "Ticket(" in repr(t)


def test_apply_event_answers_as_replay_prints() -> None:
    g = loopguard.Guard(CONFIG)
    assert g.apply_event({"type": "call", "tool": "read", "call_id": "c1"}) == {
        "seq": 1, "type": "call", "session": "default", "run": None, "verdict": "allow",
    }
    assert g.apply_event('{"type":"result","call_id":"c1","result":"x"}')["recorded"] is True
    assert g.apply_event(b'not json', seq=9)["seq"] == 9
    assert "error" in g.apply_event({"type": "bogus"})
    with pytest.raises(TypeError, match="dict, or a line"):
        g.apply_event(5)  # type: ignore[arg-type]


@settings(max_examples=60, deadline=None)
@given(plan=steps)
def test_random_streams_are_answered_the_same_through_tickets(plan: List[Dict[str, Any]]) -> None:
    lines = lines_of(plan)
    protocol = drive(loopguard.Guard(STREAM_CONFIG), lines)
    tickets = drive(loopguard.Guard(STREAM_CONFIG), lines, tickets=True)
    assert json.dumps(protocol) == json.dumps(tickets)
