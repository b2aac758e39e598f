"""`mypy --strict` passes on the package (its stubs and adapters) and the examples, and the
quick start runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]


def test_mypy_strict() -> None:
    targets = [str(HERE / "python" / "loopguard"), str(HERE / "examples")]
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(Path(sys.prefix) / "mypy-cache"), *targets],
        capture_output=True, text=True, cwd=HERE, check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_quick_start_runs() -> None:
    done = subprocess.run([sys.executable, str(HERE / "examples" / "quickstart.py")], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert "the model is told: [loopguard] WARNING" in done.stdout
    assert "blocked (generic_repeat, 5)" in done.stdout
