"""SPEC §2 through the binding: two arguments or results get the same fingerprint exactly
when they are equal JSON values, whatever their member order and number spelling, and the
binding fingerprints Python objects as the engine fingerprints the same JSON text."""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import loopguard
from driver import drive, replay, views
from jsongen import canonical, json_values, spellings

# A warning threshold of 1: a call whose signature is already in the run's history warns.
SAME_SIGNATURE_WARNS = {"tools": {"loopDetection": {"enabled": True, "warningThreshold": 1}}}


def same_fingerprint(a: Any, b: Any) -> bool:
    guard = loopguard.Guard(SAME_SIGNATURE_WARNS)
    guard.before_call("t", a, session="s", run="r")
    return guard.before_call("t", b, session="s", run="r").verdict == "warn"


def same_outcome(a: Any, b: Any) -> bool:
    """Two results of one call: the no-progress streak reaches 2 only if they are equal."""
    config = {"tools": {"loopDetection": {"enabled": True, "warningThreshold": 1, "criticalThreshold": 2}}}
    guard = loopguard.Guard(config)
    for result in (a, b):
        guard.before_call("t", {}, session="s", run="r")
        guard.after_call("t", {}, session="s", run="r", result={"details": {"v": result}})
    return guard.before_call("t", {}, session="s", run="r").verdict == "block"


@settings(max_examples=300, deadline=None)
@given(st.data(), json_values)
def test_order_and_spelling_never_change_a_fingerprint(data: st.DataObject, value: Any) -> None:
    respelled = json.loads(spellings(data.draw, value))
    assert same_fingerprint(value, respelled)
    assert same_outcome(value, respelled)


@settings(max_examples=300, deadline=None)
@given(json_values, json_values)
def test_different_values_get_different_fingerprints(a: Any, b: Any) -> None:
    assert same_fingerprint(a, b) == (canonical(a) == canonical(b))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), st.lists(json_values, min_size=1, max_size=6))
def test_objects_here_and_text_in_the_engine_agree(binary: Path, data: st.DataObject, values: List[Any]) -> None:
    """Each value is called twice, spelled two ways; the binding gets the Python objects
    `json.loads` makes of the texts, `loopguard replay` gets the texts themselves."""
    lines = []
    for i, value in enumerate(values):
        for copy in range(2):
            args = spellings(data.draw, value)
            lines.append(f'{{"type":"call","session":"s","run":"r","tool":"t{i % 2}","args":{args}}}')
            result = spellings(data.draw, value)
            lines.append(f'{{"type":"result","session":"s","run":"r","tool":"t{i % 2}","args":{args},"result":{result}}}')
    with tempfile.TemporaryDirectory() as tmp:
        events = Path(tmp) / "events.jsonl"
        events.write_text("\n".join(lines) + "\n")
        config = Path(tmp) / "config.json5"
        config.write_text(json.dumps({"tools": {"loopDetection": {"enabled": True, "warningThreshold": 1, "criticalThreshold": 2}}}))
        expected = replay(binary, events, config)
        got = drive(loopguard.Guard(config), lines)
    assert views(got, exact=True) == views(expected, exact=True)


def test_ints_beyond_64_bits_are_the_double_their_text_parses_to(binary: Path, tmp_path: Path) -> None:
    big = 2**70 + 1  # not a double: its text parses to 2**70
    assert same_fingerprint(big, float(2**70))
    assert same_fingerprint(2**64 - 1, 18446744073709551615)
    assert not same_fingerprint(2**64 - 1, float(2**64))
    lines = [f'{{"type":"call","session":"s","tool":"t","args":{{"n":{n}}}}}' for n in (big, big, 2**70)]
    events = tmp_path / "events.jsonl"
    events.write_text("\n".join(lines) + "\n")
    config = tmp_path / "c.json5"
    config.write_text(json.dumps(SAME_SIGNATURE_WARNS))
    assert drive(loopguard.Guard(config), lines) == replay(binary, events, config)


@dataclass
class Page:
    path: str
    lines: List[int] = field(default_factory=list)
    meta: Dict[str, Any] = field(default_factory=dict)


def test_models_and_dataclasses_fingerprint_as_their_fields() -> None:
    from pydantic import BaseModel

    class Query(BaseModel):
        path: str
        limit: int = 10
        pages: List[Page] = []

    plain = {"path": "/a", "limit": 10, "pages": [{"path": "p", "lines": [1, 2], "meta": {}}]}
    model = Query(path="/a", pages=[Page("p", [1, 2])])
    assert same_fingerprint(plain, model)
    assert same_fingerprint(plain["pages"][0], Page("p", [1, 2]))  # type: ignore[index]
    assert not same_fingerprint(plain, Query(path="/b"))


class DistinctKey(str):
    """A str subclass whose instances are distinct dict keys even with equal text."""

    def __hash__(self) -> int:
        return id(self)

    def __eq__(self, other: object) -> bool:
        return self is other


def test_keys_of_equal_text_count_once_the_last_winning() -> None:
    """As a key repeated in JSON text: the last member counts, in small objects (sorted on
    the stack) and large ones alike."""
    for size in (1, 15, 40):
        others = {f"k{i:02}": i for i in range(size)}
        repeated = {DistinctKey("a"): 1, **others, DistinctKey("a"): 2}
        assert len(repeated) == size + 2
        assert same_fingerprint(repeated, {**others, "a": 2})
        assert not same_fingerprint(repeated, {**others, "a": 1})
        # Keys sharing their first eight bytes are still told apart.
        long = {"same_prefix_a": 1, "same_prefix_b": 2, **others}
        assert same_fingerprint(long, dict(reversed(list(long.items()))))
        assert not same_fingerprint(long, {"same_prefix_a": 2, "same_prefix_b": 1, **others})
