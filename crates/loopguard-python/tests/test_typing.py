"""`mypy --strict` passes on the package (its stubs and adapters), the examples and the
typing check, the stubs agree with the built module (`mypy.stubtest`) and with the
engine's closed sets, and the quick start runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]


def test_mypy_strict() -> None:
    targets = [str(HERE / "python" / "loopguard"), str(HERE / "examples"), str(HERE / "tests" / "typing_check.py")]
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


def test_the_stubs_agree_with_the_built_module() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mypy.stubtest", "loopguard._native",
         "--allowlist", str(HERE / "tests" / "stubtest-allowlist.txt"),
         "--mypy-config-file", str(HERE / "pyproject.toml")],
        capture_output=True, text=True, cwd=HERE, check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_stubs_name_the_engines_detectors_and_levels() -> None:
    """The stubs' `Detector` and `Level` are the engine's sets (the module exports them from
    the engine's tables), in its order."""
    import ast
    from loopguard import _native

    tree = ast.parse((HERE / "python" / "loopguard" / "_native.pyi").read_text())
    literals = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Subscript):
            name = node.targets[0].id  # type: ignore[attr-defined]
            elts = node.value.slice.elts if isinstance(node.value.slice, ast.Tuple) else [node.value.slice]
            literals[name] = tuple(e.value for e in elts)  # type: ignore[attr-defined]
    assert literals["Detector"] == _native.DETECTORS
    assert literals["Level"] == _native.LEVELS
    assert literals["Role"] == _native.ROLES
