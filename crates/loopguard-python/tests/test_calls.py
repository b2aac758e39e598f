"""The two ways into `before_call` and `after_call`: on Python 3.10 and later they are
vectorcall methods with their own argument parsing (`src/abi.rs`); the PyO3 methods that
Python 3.9 gets stay reachable as `_before_call_compat` / `_after_call_compat`. Both take
the same arguments, refuse the same mistakes and give the same answers."""

from __future__ import annotations

import json
import sys
from typing import Any, Callable, Dict, List

import pytest
from hypothesis import given, settings

import loopguard
from conftest import REPO
from driver import drive, views
from streams import CONFIG as STREAM_CONFIG, lines_of, steps

CONFIG = {"tools": {"loopDetection": {"enabled": True, "warningThreshold": 2, "criticalThreshold": 3}}}


class Compat:
    """A guard whose hot methods are the PyO3 ones (what Python 3.9 runs)."""

    def __init__(self, guard: loopguard.Guard) -> None:
        self.guard = guard

    def before_call(self, *args: Any, **kwargs: Any) -> loopguard.Verdict:
        return self.guard._before_call_compat(*args, **kwargs)  # type: ignore[attr-defined, no-any-return]

    def after_call(self, *args: Any, **kwargs: Any) -> loopguard.Recorded:
        return self.guard._after_call_compat(*args, **kwargs)  # type: ignore[attr-defined, no-any-return]

    def on_compaction(self, **kwargs: Any) -> int:
        return self.guard.on_compaction(**kwargs)


def ways() -> List[Callable[[], Any]]:
    return [lambda: loopguard.Guard(CONFIG), lambda: Compat(loopguard.Guard(CONFIG))]


def test_vectorcall_is_used_where_the_stable_abi_has_it() -> None:
    method = loopguard.Guard.before_call
    compat = loopguard.Guard._before_call_compat  # type: ignore[attr-defined]
    assert (method is not compat) == (sys.version_info >= (3, 10))
    # help() and inspect show the same signature either way.
    assert method.__text_signature__ == compat.__text_signature__
    assert method.__doc__ == compat.__doc__


def test_every_vector_is_answered_the_same_either_way() -> None:
    cases = [p for suite in ("conformance", "extensions") for p in sorted((REPO / "spec" / suite).iterdir())]
    cases = [c for c in cases if (c / "events.jsonl").exists() and not (c / "expected-exit").exists()]
    assert cases
    for case in cases:
        config = case / "config.json5"
        events = (case / "events.jsonl").read_text().splitlines()
        fast = drive(loopguard.Guard(config if config.exists() else None), events)
        compat = drive(Compat(loopguard.Guard(config if config.exists() else None)), events)
        assert views(fast, True) == views(compat, True), case.name


@pytest.mark.parametrize("way", ways(), ids=["vectorcall", "compat"])
def test_every_spelling_of_the_arguments(way: Callable[[], Any]) -> None:
    g = way()
    # Keyword names built at run time are not the interned ones: matched by their text.
    run_time = {"".join(["ses", "sion"]): "s", "".join(["ru", "n"]): "r"}
    answers = [
        g.before_call("t", {"a": 1}, session="s", run="r"),
        g.before_call(tool="t", args={"a": 1}, session="s", run="r"),
        g.before_call("t", args={"a": 1}, run="r", session="s", agent=None, call_id=None, batch=None),
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


@pytest.mark.parametrize("way", ways(), ids=["vectorcall", "compat"])
@pytest.mark.parametrize("mistake", MISTAKES, ids=[str(i) for i in range(len(MISTAKES))])
def test_the_same_mistakes_are_refused(way: Callable[[], Any], mistake: Dict[str, Any]) -> None:
    g = way()
    for method in (g.before_call, g.after_call):
        with pytest.raises(mistake["error"], match=mistake["match"]):
            method(*mistake["args"], **mistake["kwargs"])
    # The guard still answers afterwards.
    assert g.before_call("t", {}, session="s", run="r").verdict == "allow"


@pytest.mark.parametrize("way", ways(), ids=["vectorcall", "compat"])
def test_strings_that_are_not_ascii(way: Callable[[], Any]) -> None:
    """Names and values beyond ASCII are read as UTF-8 either way (in place on 3.10+)."""
    g = way()
    args = {"ключ": "значение 🚀", "k": ["ü" * 100]}
    for _ in range(2):
        g.before_call("инструмент", args, session="сессия", run="☃")
        g.after_call("инструмент", args, session="сессия", run="☃", result={"текст": "é"})
    # The keys in another order: the same call, a third time.
    assert g.before_call("инструмент", dict(reversed(list(args.items()))), session="сессия", run="☃").verdict == "warn"


@settings(max_examples=60, deadline=None)
@given(plan=steps)
def test_random_streams_are_answered_the_same_either_way(plan: List[Dict[str, Any]]) -> None:
    lines = lines_of(plan)
    fast = drive(loopguard.Guard(STREAM_CONFIG), lines)
    compat = drive(Compat(loopguard.Guard(STREAM_CONFIG)), lines)
    assert json.dumps(fast) == json.dumps(compat)
