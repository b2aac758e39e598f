"""A guard that notes the scope of every event an adapter sends it, for the tests of the
adapters' agent-tree links."""

from __future__ import annotations

from typing import Any, Dict, List

import loopguard


class Recording:
    """A guard that notes the scope of every event it is sent, and passes it on."""

    def __init__(self, guard: loopguard.Guard) -> None:
        self.guard = guard
        self.scopes: List[Dict[str, Any]] = []

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.guard, name)

        def sent(*args: Any, **kwargs: Any) -> Any:
            keys = ("session", "run", "parent_session", "parent_run")
            self.scopes.append({"event": name, **{k: kwargs.get(k) for k in keys}})
            return method(*args, **kwargs)

        return sent
