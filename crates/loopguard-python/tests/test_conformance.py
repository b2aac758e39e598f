"""Every vector of spec/conformance (SPEC's public set) and spec/extensions (this project's
own) answered through the binding as `loopguard replay` answers it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import loopguard
from conftest import REPO
from driver import drive, replay, views

CASES = sorted(
    p for suite in ("conformance", "extensions") for p in (REPO / "spec" / suite).iterdir() if p.is_dir()
)


def guard_for(case: Path) -> loopguard.Guard:
    config = case / "config.json5"
    return loopguard.Guard(config if config.exists() else None)


@pytest.mark.parametrize("case", CASES, ids=[f"{c.parent.name}/{c.name}" for c in CASES])
def test_vector(case: Path) -> None:
    if (case / "expected-exit").exists():
        with pytest.raises(loopguard.ConfigError) as caught:
            guard_for(case)
        assert caught.value.file == str(case / "config.json5")
        assert caught.value.issues
        return
    got = drive(guard_for(case), (case / "events.jsonl").read_text().splitlines())
    expected = [json.loads(line) for line in (case / "expected.jsonl").read_text().splitlines()]
    # Message wording is free in the vectors (as in the Rust suite that runs them); the
    # random streams of test_streams.py compare messages word for word with the binary.
    assert views(got, False) == views(expected, False)


def test_the_real_binary_agrees_with_the_expected_files(binary: Path) -> None:
    """The comparison above is with the committed files; they are still what the binary says."""
    for case in CASES:
        if (case / "expected-exit").exists():
            continue
        config = case / "config.json5"
        got = replay(binary, case / "events.jsonl", config if config.exists() else None)
        expected = [json.loads(line) for line in (case / "expected.jsonl").read_text().splitlines()]
        assert views(got, False) == views(expected, False), case.name
