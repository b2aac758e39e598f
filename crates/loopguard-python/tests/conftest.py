"""Shared fixtures: the repository, the real `loopguard` binary, a live sidecar."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest
from hypothesis import settings

# No example database in the working tree: every run draws afresh.
settings.register_profile("loopguard", database=None)
settings.load_profile("loopguard")

sys.path.insert(0, str(Path(__file__).parent))

REPO = Path(__file__).resolve().parents[3]


def loopguard_bin() -> Path:
    """The CLI built from this checkout (`LOOPGUARD_BIN` overrides); built when missing."""
    given = os.environ.get("LOOPGUARD_BIN")
    if given:
        return Path(given)
    path = REPO / "target" / "debug" / "loopguard"
    if not path.exists():
        subprocess.run(["cargo", "build", "-q", "-p", "loopguard-cli"], cwd=REPO, check=True)
    return path


@pytest.fixture(scope="session")
def binary() -> Path:
    return loopguard_bin()


@pytest.fixture(scope="session")
def sidecar(binary: Path) -> Iterator[str]:
    """A `loopguard serve --memory` on a free loopback port, with rolling detectors on."""
    yield from serve(binary, REPO / "examples" / "openclaw.json5")


@pytest.fixture(scope="session")
def message_sidecar(binary: Path) -> Iterator[str]:
    """A sidecar with the recommended preset: the detectors of messages on."""
    yield from serve(binary, REPO / "spec" / "extensions" / "messages-preset-recommended" / "config.json5")


def serve(binary: Path, config: Path) -> Iterator[str]:
    """Runs `loopguard serve --memory --config CONFIG` on a free port while the caller needs it."""
    proc = subprocess.Popen(
        [str(binary), "serve", "--memory", "--listen", "127.0.0.1:0", "--config", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    match = re.search(r"listening on (http://\S+)", line)
    assert match, f"unexpected first line from loopguard serve: {line!r}"
    try:
        yield match.group(1)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
