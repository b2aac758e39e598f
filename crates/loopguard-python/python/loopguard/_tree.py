"""Which run is spawning sub-agents right now, for the adapters' agent-tree links.

While an adapter runs a tool of run ``run`` of session ``session``, it says so here
(:func:`spawning`); an agent whose run starts inside that tool (an agent called as a tool,
a LangGraph sub-agent) is that run's child: its events name the parent (``parent_session``,
``parent_run``) and it works in a session of its own, ``SESSION/agent-ID``, the name the
transcript readers and the hooks give a sub-agent. A context variable carries it, so
threads and asyncio tasks started inside the tool see it, and parallel tools do not mix.
"""

from __future__ import annotations

import contextvars
from contextlib import contextmanager
from typing import Dict, Iterator, NamedTuple, Optional


class Spawner(NamedTuple):
    """The run whose tool is running."""

    session: str
    run: Optional[str]


_spawner: contextvars.ContextVar[Optional[Spawner]] = contextvars.ContextVar("loopguard_spawner", default=None)


@contextmanager
def spawning(session: str, run: Optional[str]) -> Iterator[None]:
    """Runs of agents started inside the block are children of ``run`` of ``session``."""
    token = _spawner.set(Spawner(session, run))
    try:
        yield
    finally:
        _spawner.reset(token)


def spawner() -> Optional[Spawner]:
    """The run whose tool is running, if any."""
    return _spawner.get()


def child_session(parent: Spawner, child: str) -> str:
    """The session of sub-agent ``child`` of ``parent``'s session."""
    return f"{parent.session}/agent-{child.removeprefix('agent-')}"


def parent_fields(parent: Optional[Spawner]) -> Dict[str, Optional[str]]:
    """The ``parent_session`` and ``parent_run`` keywords of a child's events."""
    if parent is None:
        return {}
    return {"parent_session": parent.session, "parent_run": parent.run}
