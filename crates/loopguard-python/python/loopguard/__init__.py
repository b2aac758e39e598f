"""loopguard: stop AI agents from burning tokens in tool-call loops.

The engine runs in this process (a Rust extension)::

    from loopguard import Guard

    guard = Guard({"tools": {"loopDetection": {"enabled": True}}})
    verdict = guard.before_call("read", {"path": "notes.txt"}, session="s1", run="r1")
    if verdict.blocked:
        ...  # do not run the tool; give the model verdict.blocked_result
    else:
        result = run_the_tool()
        guard.after_call("read", {"path": "notes.txt"}, session="s1", run="r1", result=result)

``Guard.remote(url)`` speaks to a ``loopguard serve`` sidecar with the same API. Adapters:
``loopguard.langchain``, ``loopguard.openai_agents``, ``loopguard.pydantic_ai``.
"""

from __future__ import annotations

from typing import Union

from ._errors import ConfigError, RemoteError
from ._native import MAX_NESTING, Abort, Guard, Recorded, Verdict
from .remote import RemoteGuard

#: Either kind of guard: the adapters take both.
AnyGuard = Union[Guard, RemoteGuard]

__all__ = [
    "Abort",
    "AnyGuard",
    "ConfigError",
    "Guard",
    "MAX_NESTING",
    "Recorded",
    "RemoteError",
    "RemoteGuard",
    "Verdict",
]
