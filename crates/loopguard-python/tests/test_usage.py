"""``record_usage``: a model response's usage counted once, priced, refused when it cannot
be right, and a used-up budget stopping the run; the same through ``Guard.remote``."""

from __future__ import annotations

import re
import subprocess
import uuid
from pathlib import Path
from typing import Iterator, Union

import pytest

import loopguard

BUDGET = "{ tools: { loopDetection: { enabled: true } }, loopguard: { budgets: { run: { cost: 0.01 } } } }"


@pytest.fixture(scope="module")
def budget_sidecar(binary: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    config = tmp_path_factory.mktemp("budget") / "config.json5"
    config.write_text(BUDGET)
    proc = subprocess.Popen(
        [str(binary), "serve", "--memory", "--listen", "127.0.0.1:0", "--config", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    match = re.search(r"listening on (http://\S+)", proc.stdout.readline())
    assert match
    try:
        yield match.group(1)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def exercise(guard: Union[loopguard.Guard, loopguard.RemoteGuard]) -> None:
    session = f"py-{uuid.uuid4()}"
    scope = {"session": session, "run": "r"}
    first = guard.record_usage(**scope, id="resp-1", model="gpt-4o", input_tokens=1000, output_tokens=100)
    assert first.cost == pytest.approx(0.0035)
    assert first.detector is None and first.ends_run is None and not first.shadow
    again = guard.record_usage(**scope, id="resp-1", model="gpt-4o", input_tokens=1000, output_tokens=100)
    assert again.to_dict() == first.to_dict(), "a retry is answered the same and counts once"
    with pytest.raises(ValueError, match="already counted with other figures"):
        guard.record_usage(**scope, id="resp-1", model="gpt-4o", input_tokens=1000, output_tokens=101)
    for bad, says in [
        ({"input_tokens": -1, "output_tokens": 0}, "input_tokens must be a whole number"),
        ({"input_tokens": 1.5, "output_tokens": 0}, "input_tokens must be a whole number"),
        ({"input_tokens": "10", "output_tokens": 0}, "input_tokens must be a whole number"),
        ({"input_tokens": 10**12, "output_tokens": 0}, "from 0 to 100000000"),
        ({"input_tokens": 1, "output_tokens": 0, "cost": -0.5}, "cost must be"),
        ({"input_tokens": 1, "output_tokens": 0, "cost": float("inf")}, "cost"),
    ]:
        with pytest.raises(ValueError, match=says):
            guard.record_usage(**scope, **bad)  # type: ignore[arg-type]
    assert guard.before_call("read", {"n": 1}, **scope).verdict == "allow", "nothing bad was counted"
    over = guard.record_usage(**scope, id="resp-2", cost=0.02, input_tokens=1, output_tokens=1)
    assert over.cost == pytest.approx(0.02)
    assert over.detector == "run_budget"
    assert over.ends_run and over.ends_run == over.message
    assert over.to_dict()["stop"]["limit"] == pytest.approx(0.01)
    blocked = guard.before_call("read", {"n": 2}, **scope)
    assert (blocked.verdict, blocked.detector, blocked.terminal) == ("block", "run_budget", True)


def test_record_usage_in_process() -> None:
    guard = loopguard.Guard(BUDGET)
    exercise(guard)
    with pytest.raises(TypeError):
        guard.record_usage(session="s", run="r", input_tokens=1)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="session must be a str"):
        guard.record_usage(session=3, run="r", input_tokens=1, output_tokens=1)  # type: ignore[arg-type]
    answer = guard.apply_event({"type": "usage", "session": "s", "input_tokens": 1, "output_tokens": 1, "prompt_tokens": 5})
    assert "send it as input_tokens" in answer["error"]


def test_record_usage_through_a_sidecar(budget_sidecar: str) -> None:
    exercise(loopguard.Guard.remote(budget_sidecar))
