"""Bad input gets a clear exception, never a crash: cycles, NaN, huge ints, non-str keys,
bytes, a 50 MB result, 10,000-deep nesting, bad configs."""

from __future__ import annotations

import json
import math
import time
import warnings
from pathlib import Path
from typing import Any, Dict

import pytest

import loopguard
from driver import replay

S = {"session": "s", "run": "r"}


def guard() -> loopguard.Guard:
    return loopguard.Guard({"tools": {"loopDetection": {"enabled": True}}})


def nested(depth: int) -> Any:
    value: Any = []
    for _ in range(depth - 1):
        value = [value]
    return value


def test_cycles_are_named() -> None:
    looped: Dict[str, Any] = {"a": [1]}
    looped["a"].append(looped)
    with pytest.raises(ValueError, match=r"args\[\"a\"\]\[1\].*contains itself"):
        guard().before_call("t", looped, **S)
    items: list = []
    items.append(items)
    with pytest.raises(ValueError, match="contains itself"):
        guard().after_call("t", {}, result=items, **S)


@pytest.mark.parametrize("x", [math.nan, math.inf, -math.inf])
def test_non_finite_numbers(x: float) -> None:
    with pytest.raises(ValueError, match=r"args\[\"x\"\]: .* is not a JSON number"):
        guard().before_call("t", {"x": x}, **S)


def test_ints_beyond_any_double() -> None:
    with pytest.raises(OverflowError, match=r"result\[0\]: the integer is too large"):
        guard().after_call("t", {}, result=[10**400], **S)


@pytest.mark.parametrize(
    "value, kind",
    [({1: "a"}, "keys must be str, not int"), ({("a",): 1}, "not tuple"), (b"bytes", "bytes"),
     ({"s": {1, 2}}, "set"), ({"o": object()}, "object"), ({"t": int}, "type")],
)
def test_what_json_cannot_say_is_a_type_error(value: Any, kind: str) -> None:
    with pytest.raises(TypeError, match=kind):
        guard().before_call("t", value, **S)


def test_model_dump_must_return_a_dict() -> None:
    class Odd:
        def model_dump(self, mode: str = "python") -> str:
            return "not a dict"

    with pytest.raises(TypeError, match="model_dump"):
        guard().before_call("t", Odd(), **S)


def test_a_dict_changed_while_converted_is_an_error() -> None:
    outer: Dict[str, Any] = {}

    class Grows:
        def model_dump(self, mode: str = "python") -> Dict[str, Any]:
            outer["added"] = 1
            return {}

    class Swaps:
        def model_dump(self, mode: str = "python") -> Dict[str, Any]:
            del outer["b"]
            outer["c"] = 3
            return {}

    outer.update({"a": Grows(), "b": 2})
    with pytest.raises(RuntimeError, match="changed size"):
        guard().before_call("t", outer, **S)
    outer.clear()
    outer.update({"a": Swaps(), "b": 2})
    # Same size, other keys: no crash; the entries read are the dict's size at most.
    guard().after_call("t", {}, result=outer, **S)


def test_bad_names() -> None:
    with pytest.raises(ValueError, match="non-blank"):
        guard().before_call("  ", {}, **S)
    with pytest.raises(TypeError):
        guard().before_call(5, {}, **S)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        guard().before_call("t", {}, session=None, run=None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="not both"):
        guard().after_call("t", {}, result=1, error="e", **S)


def test_ten_thousand_levels_deep() -> None:
    with pytest.raises(ValueError, match=f"nested deeper than {loopguard.MAX_NESTING} levels"):
        guard().before_call("t", nested(10_000), **S)
    with pytest.raises(ValueError, match="nested deeper"):
        guard().after_call("t", {}, result={"details": nested(10_000)}, **S)


def test_the_depth_limit_is_the_protocols(binary: Path, tmp_path: Path) -> None:
    """A value is accepted here up to the depth the event protocol once allowed; `loopguard
    replay` (which reads events into a tape, with no depth limit) accepts it too, and
    agrees on the verdict."""
    deepest = loopguard.MAX_NESTING
    value = nested(deepest)
    events = tmp_path / "events.jsonl"
    events.write_text(json.dumps({"type": "call", "tool": "t", "args": value}) + "\n")
    assert replay(binary, events)[0]["verdict"] == "allow"
    assert guard().before_call("t", value, **S).verdict == "allow"
    with pytest.raises(ValueError, match="nested deeper"):
        guard().before_call("t", nested(deepest + 1), **S)


def test_a_50_mb_result_is_fingerprinted() -> None:
    g = guard()
    text = "x" * (50 << 20)
    start = time.perf_counter()
    for _ in range(3):
        assert g.before_call("read", {"p": 1}, **S).verdict == "allow"
        assert g.after_call("read", {"p": 1}, result={"content": [{"type": "text", "text": text}]}, **S).recorded
    assert time.perf_counter() - start < 30
    other = g.after_call("read", {"p": 1}, result={"content": [{"type": "text", "text": text + "y"}]}, **S)
    assert other.recorded


def test_errors_from_exceptions_use_their_text() -> None:
    g = guard()
    for _ in range(10):
        g.before_call("gone", {}, **S)
        g.after_call("gone", {}, error=RuntimeError("Tool gone not found"), **S)
    verdict = g.before_call("gone", {}, **S)
    assert (verdict.verdict, verdict.detector) == ("block", "unknown_tool_repeat")


def test_config_errors_carry_file_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "openclaw.json5"
    path.write_text("{\n  tools: {\n    loopDetection: { enabled: true, warningThreshhold: 3 },\n  },\n}\n")
    with pytest.raises(loopguard.ConfigError) as caught:
        loopguard.Guard(path)
    e = caught.value
    assert (e.file, e.path, e.line, e.column) == (str(path), "tools.loopDetection.warningThreshhold", 3, 37)
    assert "did you mean `warningThreshold`" in str(e)
    with pytest.raises(loopguard.ConfigError) as caught:
        loopguard.Guard(str(path))
    assert caught.value.line == 3
    with pytest.raises(loopguard.ConfigError) as caught:
        loopguard.Guard("{ tools: { loopDetection: { historySize: 0 } } }")
    assert (caught.value.file, caught.value.line) == (None, 1)
    with pytest.raises(loopguard.ConfigError) as caught:
        loopguard.Guard({"tools": {"loopDetection": {"enabled": "yes"}}})
    assert (caught.value.path, caught.value.line) == ("tools.loopDetection.enabled", None)
    assert "expected true or false" in str(caught.value)
    with pytest.raises(loopguard.ConfigError, match="invalid JSON5"):
        loopguard.Guard("{ tools: ")
    with pytest.raises(FileNotFoundError):
        loopguard.Guard(tmp_path / "missing.json5")
    with pytest.raises(TypeError):
        loopguard.Guard(42)  # type: ignore[arg-type]


def test_a_misspelt_block_name_is_a_config_warning(tmp_path: Path) -> None:
    path = tmp_path / "openclaw.json5"
    path.write_text("{ tools: {\n  loopdetection: { enabled: true } } }\n")
    with pytest.warns(loopguard.ConfigWarning) as caught:
        g = loopguard.Guard(path)
    message = (
        "unknown key `loopdetection` in tools (did you mean `loopDetection`?): "
        "it is not read, so its settings do not apply"
    )
    assert [str(w.message) for w in caught] == [f"{path}:2:3: {message}"]
    assert caught[0].filename == __file__, "the warning points at the line that made the guard"
    assert g.config_warnings == [{"path": "tools.loopdetection", "line": 2, "column": 3, "message": message}]
    # The misspelt block does nothing: detection stays off.
    assert g.explain()["effective"]["enabled"] == "unset"
    # A dict has no lines; the text names the key.
    with pytest.warns(loopguard.ConfigWarning, match=r"^unknown key `tool` \(did you mean `tools`\?\)"):
        g = loopguard.Guard({"tool": {"loopDetection": {"enabled": True}}})
    assert g.config_warnings == [
        {
            "path": "tool",
            "line": None,
            "column": None,
            "message": "unknown key `tool` (did you mean `tools`?): the loopDetection block in it "
            "is not read, so its settings do not apply",
        }
    ]
    # Warnings are warnings: made errors, the guard is not made.
    with warnings.catch_warnings():
        warnings.simplefilter("error", loopguard.ConfigWarning)
        with pytest.raises(loopguard.ConfigWarning):
            loopguard.Guard("{ loopGuard: {} }")
        assert guard().config_warnings == []
        assert loopguard.Guard().config_warnings == []


def test_parent_ids_are_checked_like_the_protocol() -> None:
    g = guard()
    assert g.before_call("t", {}, parent_session="p", parent_run="r0", **S).verdict == "allow"
    with pytest.raises(ValueError, match="parent_run without parent_session"):
        g.before_call("t", {}, parent_run="r0", **S)
    with pytest.raises(ValueError, match="parent_run without parent_session"):
        g.message("hello", parent_run="r0", **S)
    with pytest.raises(ValueError, match="parent_run without parent_session"):
        g.record_usage(input_tokens=1, output_tokens=1, parent_run="r0", **S)
    with pytest.raises(TypeError, match="parent_session must be a str"):
        g.before_call("t", {}, parent_session=7, **S)  # type: ignore[arg-type]
