"""A host's tool loop guarded in process: the model is stuck reading the same file."""

from __future__ import annotations

from typing import Any, Dict

from loopguard import Guard


def read(path: str) -> Dict[str, Any]:
    return {"content": [{"type": "text", "text": "TODO: write the report"}]}


def main() -> int:
    guard = Guard({"tools": {"loopDetection": {"enabled": True, "warningThreshold": 3, "criticalThreshold": 5}}})
    scope: Dict[str, Any] = {"session": "example", "run": "run-1"}
    for step in range(1, 30):
        args = {"path": "notes.txt"}
        verdict = guard.before_call("read", args, call_id=f"c{step}", **scope)
        if verdict.blocked:
            print(f"step {step}: blocked ({verdict.detector}, {verdict.count}): {verdict.message}")
            return 0
        result = read(**args)
        guard.after_call("read", args, call_id=f"c{step}", result=result, **scope)
        print(f"step {step}: ran{'; the model is told: ' + verdict.warning_note if verdict.warning_note else ''}")
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
