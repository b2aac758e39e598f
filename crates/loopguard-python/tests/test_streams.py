"""The binding agrees with the Rust engine (`loopguard replay`, the real binary) on random
event streams, answer for answer, messages included."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List

from hypothesis import HealthCheck, given, settings

import loopguard
from driver import drive, replay, views
from streams import CONFIG, lines_of, steps


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(plan=steps)
def test_random_streams_answer_as_replay(binary: Path, tmp_path: Path, plan: List[Dict[str, Any]]) -> None:
    lines = lines_of(plan)
    events = tmp_path / "events.jsonl"
    events.write_text("\n".join(lines) + "\n")
    config = tmp_path / "config.json5"
    config.write_text(json.dumps(CONFIG))
    expected = replay(binary, events, config)
    assert views(drive(loopguard.Guard(CONFIG), lines), exact=True) == views(expected, exact=True)
