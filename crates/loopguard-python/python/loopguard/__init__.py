"""loopguard: stop AI agents from burning tokens in tool-call loops.

The engine runs in this process (a Rust extension)::

    from loopguard import Guard

    guard = Guard({"tools": {"loopDetection": {"enabled": True}}})
    with guard.begin("read", {"path": "notes.txt"}, session="s1", run="r1") as ticket:
        if ticket.blocked:
            ...  # do not run the tool; give the model ticket.blocked_result
        else:
            ticket.finish(result=run_the_tool())  # an exception raised here is recorded too

The ticket holds the call as it was judged, so its outcome needs nothing else.
``before_call`` and ``after_call`` are the event protocol's call and result, and
``apply_event`` takes any event of it; ``record_usage`` reports what a model response used,
for the spend budgets of the ``loopguard`` block.

``Guard.remote(url)`` speaks to a ``loopguard serve`` sidecar with the same API. Adapters:
``loopguard.langchain``, ``loopguard.openai_agents``, ``loopguard.pydantic_ai``.
"""

from __future__ import annotations

from typing import Union

from ._errors import ConfigError, ConfigWarning, RemoteError
from ._native import MAX_NESTING, Abort, Counted, Guard, Recorded, Ticket, Verdict
from .remote import RemoteGuard, RemoteTicket

#: Either kind of guard: the adapters take both.
AnyGuard = Union[Guard, RemoteGuard]
#: Either kind of ticket (``Guard.begin`` or ``RemoteGuard.begin``).
AnyTicket = Union[Ticket, RemoteTicket]

__all__ = [
    "Abort",
    "AnyGuard",
    "AnyTicket",
    "ConfigError",
    "ConfigWarning",
    "Counted",
    "Guard",
    "MAX_NESTING",
    "Recorded",
    "RemoteError",
    "RemoteGuard",
    "RemoteTicket",
    "Ticket",
    "Verdict",
]
