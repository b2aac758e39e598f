"""The exceptions of the package (the native module raises them too)."""

from __future__ import annotations

from typing import Any, Dict, List, Optional


class ConfigError(ValueError):
    """A config document that cannot be used. The message lists every problem; ``file``,
    ``path`` (the dotted key, ``tools.loopDetection.warningThreshold``), ``line`` and
    ``column`` locate the first one (positions are ``None`` for a dict); ``issues`` holds
    them all as dicts with ``path``, ``line``, ``column`` and ``message``."""

    def __init__(
        self,
        message: str,
        *,
        file: Optional[str] = None,
        path: Optional[str] = None,
        line: Optional[int] = None,
        column: Optional[int] = None,
        issues: Optional[List[Dict[str, Any]]] = None,
    ) -> None:
        super().__init__(message)
        self.file = file
        self.path = path
        self.line = line
        self.column = column
        self.issues: List[Dict[str, Any]] = issues or []


class ConfigWarning(UserWarning):
    """Something in a config document that is not wrong but does nothing: a key that looks
    like a misspelt block name (``tools.loopdetection``, ``tool``, ``loopGuard``), which
    neither loopguard nor OpenClaw reads. Issued when a ``Guard`` is made; the guard's
    ``config_warnings`` lists them as ``ConfigError.issues`` lists problems."""


class RemoteError(OSError):
    """A ``loopguard serve`` sidecar refused a request (``status`` is the HTTP status, 0 when
    it could not be reached). Hosts usually fail open: run the call as if allowed."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}" if status else message)
        self.status = status
