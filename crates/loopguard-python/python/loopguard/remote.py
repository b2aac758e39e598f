"""``Guard.remote(url)``: the same API as :class:`loopguard.Guard`, answered by a
``loopguard serve`` sidecar, for hosts whose tool calls are spread over many processes.

Each thread keeps one keep-alive HTTP connection. Values are checked by the same walk as
the in-process guard before they are sent, so both guards accept and refuse the same
arguments and results, and the sidecar's answers come back as the same ``Verdict`` and
``Recorded`` objects. A failed request raises :class:`loopguard.RemoteError` and is not
retried (a retried event could count twice); hosts usually fail open.
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import math
import threading
import urllib.parse
from types import TracebackType
from typing import Any, Dict, Literal, Optional, Type, Union

from . import _native
from ._errors import RemoteError

_UNSET: Any = object()


def _jsonable(value: Any) -> Any:
    """``json.dumps``' fallback, for what the native walk accepts beyond plain JSON."""
    if hasattr(value, "model_dump") and not isinstance(value, type):
        return value.model_dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    raise TypeError(f"{type(value).__qualname__} is not a JSON value")


def _dumps(value: Any) -> str:
    return json.dumps(value, default=_jsonable, allow_nan=False, separators=(",", ":"))


class RemoteGuard:
    """A client of a ``loopguard serve`` sidecar with the API of :class:`loopguard.Guard`."""

    def __init__(self, url: str, token: Optional[str] = None, timeout: float = 10.0) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        self.url = url
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port
        self._base = parts.path.rstrip("/")
        self._timeout = timeout
        self._headers = {"Content-Type": "application/json"}
        if token:
            self._headers["Authorization"] = f"Bearer {token}"
        self._local = threading.local()

    def __repr__(self) -> str:
        return f"RemoteGuard({self.url!r})"

    def _connection(self) -> http.client.HTTPConnection:
        conn: Optional[http.client.HTTPConnection] = getattr(self._local, "conn", None)
        if conn is None:
            kind = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
            conn = kind(self._host, self._port, timeout=self._timeout)
            self._local.conn = conn
        return conn

    def _request(self, method: str, path: str, body: Union[str, bytes, None] = None) -> "tuple[int, bytes]":
        conn = self._connection()
        try:
            conn.request(method, self._base + path, body=body, headers=self._headers)
            response = conn.getresponse()
            data = response.read()
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            self._local.conn = None
            raise RemoteError(0, f"{self.url}: {e}") from e
        return response.status, data

    def _post(self, path: str, payload: str, ok: "tuple[int, ...]" = (200,)) -> bytes:
        status, data = self._request("POST", path, payload)
        if status not in ok:
            raise RemoteError(status, _error_text(data))
        return data

    @staticmethod
    def _event(kind: str, session: str, run: Optional[str], agent: Optional[str], **fields: Any) -> Dict[str, Any]:
        event: Dict[str, Any] = {"type": kind, "session": session}
        if run is not None:
            event["run"] = run
        if agent is not None:
            event["agent"] = agent
        event.update((k, v) for k, v in fields.items() if v is not None)
        return event

    def begin(
        self,
        tool: str,
        args: Any,
        *,
        session: str,
        run: Optional[str],
        agent: Optional[str] = None,
        call_id: Optional[str] = None,
        batch: Optional[str] = None,
        parent_session: Optional[str] = None,
        parent_run: Optional[str] = None,
    ) -> "RemoteTicket":
        """The call event, and a ticket whose ``finish`` sends the call's result event."""
        parents = {"parent_session": parent_session, "parent_run": parent_run}
        verdict = self.before_call(
            tool, args, session=session, run=run, agent=agent, call_id=call_id, batch=batch, **parents
        )
        call = {"tool": tool, "args": args, "session": session, "run": run, "agent": agent, "call_id": call_id, **parents}
        return RemoteTicket(self, call, verdict)

    def apply_event(self, event: Union[Dict[str, Any], str, bytes], seq: Optional[int] = None) -> Dict[str, Any]:
        """Any event of the protocol, answered by the sidecar as ``loopguard replay`` prints it
        (``seq`` is the request's)."""
        text = event if isinstance(event, (str, bytes)) else _dumps(event)
        status, data = self._request("POST", "/v1/events", text)
        if status not in (200, 400, 422):
            raise RemoteError(status, _error_text(data))
        answer: Dict[str, Any] = json.loads(data)
        if seq is not None:
            answer["seq"] = seq
        return answer

    def before_call(
        self,
        tool: str,
        args: Any,
        *,
        session: str,
        run: Optional[str],
        agent: Optional[str] = None,
        call_id: Optional[str] = None,
        batch: Optional[str] = None,
        parent_session: Optional[str] = None,
        parent_run: Optional[str] = None,
    ) -> _native.Verdict:
        _check_tool(tool)
        _native._convert_object(args)
        event = self._event(
            "call", session, run, agent, call_id=call_id, tool=tool, batch=batch,
            parent_session=parent_session, parent_run=parent_run,
        )
        event["args"] = args
        return _native.verdict_from_answer(self._post("/v1/events", _dumps(event)), tool)

    def after_call(
        self,
        tool: str,
        args: Any,
        *,
        session: str,
        run: Optional[str],
        agent: Optional[str] = None,
        call_id: Optional[str] = None,
        result: Any = _UNSET,
        error: Any = _UNSET,
        parent_session: Optional[str] = None,
        parent_run: Optional[str] = None,
    ) -> _native.Recorded:
        _check_tool(tool)
        _native._convert_object(args)
        event = self._event(
            "result", session, run, agent, call_id=call_id, tool=tool,
            parent_session=parent_session, parent_run=parent_run,
        )
        event["args"] = args
        if result is not _UNSET and error is not _UNSET:
            raise TypeError("after_call takes result= or error=, not both")
        if error is not _UNSET:
            event["error"] = str(error) if isinstance(error, BaseException) else error
            _native._convert_object(event["error"])
        elif result is not _UNSET:
            _native._convert_object(result)
            event["result"] = result
        return _native.recorded_from_answer(self._post("/v1/events", _dumps(event)))

    def on_compaction(
        self,
        *,
        session: str,
        run: Optional[str],
        agent: Optional[str] = None,
        parent_session: Optional[str] = None,
        parent_run: Optional[str] = None,
    ) -> int:
        event = self._event("compaction", session, run, agent, parent_session=parent_session, parent_run=parent_run)
        answer = json.loads(self._post("/v1/events", _dumps(event)))
        return int(answer["armed"])

    def record_usage(
        self,
        *,
        session: str,
        run: Optional[str],
        input_tokens: int,
        output_tokens: int,
        agent: Optional[str] = None,
        model: Optional[str] = None,
        cache_read_tokens: Optional[int] = None,
        cache_write_tokens: Optional[int] = None,
        cost: Optional[float] = None,
        id: Optional[str] = None,
        parent_session: Optional[str] = None,
        parent_run: Optional[str] = None,
    ) -> _native.Counted:
        """The usage event of one model response; figures the sidecar refuses raise
        ValueError, as the in-process guard does."""
        if isinstance(cost, float) and not math.isfinite(cost):
            # JSON cannot carry it; refused in the protocol's words.
            raise ValueError(f"cost must be a number of US dollars from 0 to 100000, not {cost}")
        event = self._event(
            "usage",
            session,
            run,
            agent,
            id=id,
            model=model,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            cache_read_tokens=cache_read_tokens,
            cache_write_tokens=cache_write_tokens,
            cost=cost,
            parent_session=parent_session,
            parent_run=parent_run,
        )
        status, data = self._request("POST", "/v1/events", _dumps(event))
        if status in (400, 422):
            raise ValueError(_error_text(data))
        if status != 200:
            raise RemoteError(status, _error_text(data))
        return _native.counted_from_answer(data)

    def message(
        self,
        text: str,
        *,
        session: str,
        run: Optional[str],
        role: str = "assistant",
        agent: Optional[str] = None,
        reasoning: Optional[str] = None,
        has_tool_calls: Optional[bool] = None,
        id: Optional[str] = None,
        delta: bool = False,
        index: Optional[int] = None,
        parent_session: Optional[str] = None,
        parent_run: Optional[str] = None,
    ) -> _native.Verdict:
        """The message event: what the model said (whole, or a piece of its stream with
        ``delta=True``) or what it was told, judged by the sidecar."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, not {type(text).__qualname__}")
        if role not in _native.ROLES:
            raise ValueError(f"role must be one of {', '.join(_native.ROLES)}, not {role!r}")
        event = self._event(
            "message", session, run, agent, role=role, text=text, reasoning=reasoning,
            has_tool_calls=has_tool_calls, id=id, index=index,
            parent_session=parent_session, parent_run=parent_run,
        )
        if delta:
            event["delta"] = True
        return _native.verdict_from_answer(self._post("/v1/events", _dumps(event)), role)

    def end_run(self, *, session: str, run: Optional[str]) -> bool:
        answer = json.loads(self._post("/v1/runs/end", _dumps({"session": session, "run": run or ""})))
        return bool(answer["ended"])

    def end_session(self, session: str) -> bool:
        status, data = self._request("DELETE", "/v1/sessions/" + urllib.parse.quote(session, safe=""))
        if status == 404:
            return False
        if status != 200:
            raise RemoteError(status, _error_text(data))
        return bool(json.loads(data).get("ended_runs", 0))

    def explain(self, agent: Optional[str] = None) -> Dict[str, Any]:
        raise NotImplementedError(
            "the sidecar does not publish its config: run `loopguard config explain FILE` "
            "on the file it was started with, or Guard(FILE).explain()"
        )

    def close(self) -> None:
        """Closes this thread's connection (others close when their thread ends)."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None


class RemoteTicket:
    """A call judged by the sidecar (``RemoteGuard.begin``), with the interface of
    :class:`loopguard.Ticket`: its ``finish`` sends the result event of the same call (the
    sidecar fingerprints the arguments it is sent again)."""

    def __init__(self, guard: RemoteGuard, call: Dict[str, Any], verdict: _native.Verdict) -> None:
        self._guard = guard
        self._call: Optional[Dict[str, Any]] = call
        self.verdict = verdict

    def __repr__(self) -> str:
        return f"RemoteTicket({self.verdict!r}, {'open' if self._call else 'closed'})"

    @property
    def blocked(self) -> bool:
        return self.verdict.blocked

    @property
    def blocked_result(self) -> Optional[Dict[str, Any]]:
        return self.verdict.blocked_result

    @property
    def warning_note(self) -> Optional[str]:
        return self.verdict.warning_note

    @property
    def ends_run(self) -> Optional[str]:
        return self.verdict.message if self.verdict.terminal else None

    def finish(self, *, result: Any = _UNSET, error: Any = _UNSET) -> _native.Recorded:
        call = self._call
        if call is None:
            raise RuntimeError("this ticket was already finished or cancelled")
        outcome: Dict[str, Any] = {}
        if result is not _UNSET:
            outcome["result"] = result
        if error is not _UNSET:
            outcome["error"] = error
        ids = {k: v for k, v in call.items() if k not in ("tool", "args")}
        # Closed once the sidecar has the outcome: a refused value or a failed request can
        # be given again (a retried result counts once).
        recorded = self._guard.after_call(call["tool"], call["args"], **ids, **outcome)
        self._call = None
        return recorded

    def cancel(self) -> None:
        self._call = None

    def __enter__(self) -> "RemoteTicket":
        return self

    def __exit__(
        self,
        kind: Optional[Type[BaseException]],
        error: Optional[BaseException],
        trace: Optional[TracebackType],
    ) -> Literal[False]:
        if self._call is None or self.blocked:
            return False
        if error is not None:
            self.finish(error=error)
            return False
        self.cancel()
        raise RuntimeError(
            "the call's outcome was not given: call ticket.finish(result=...) inside the with "
            "block (or ticket.cancel() when the call did not run)"
        )


def _check_tool(tool: str) -> None:
    if not isinstance(tool, str):
        raise TypeError(f"tool must be a str, not {type(tool).__qualname__}")
    if not tool.strip():
        raise ValueError("tool must be a non-blank string")


def _error_text(data: bytes) -> str:
    try:
        return str(json.loads(data).get("error", data[:200].decode("utf-8", "replace")))
    except ValueError:
        return data[:200].decode("utf-8", "replace")
