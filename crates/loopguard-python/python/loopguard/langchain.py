"""LangChain (``langchain`` 1.x ``create_agent``): loopguard as an ``AgentMiddleware``.

    from langchain.agents import create_agent
    from loopguard import Guard
    from loopguard.langchain import LoopGuardMiddleware

    agent = create_agent(model, tools, middleware=[LoopGuardMiddleware(Guard("openclaw.json5"))])

``wrap_tool_call`` begins a ticket with the guard before each tool call. A blocked call does
not run: the model gets a ``ToolMessage`` (status ``error``) with the guard's message
instead. Otherwise the tool's message (or the exception it raised) finishes the ticket, and
a warning to surface is appended to the message. A terminal verdict (the global circuit
breaker) or a post-compaction abort ends the run: the agent jumps to its end with a final
``AIMessage`` saying why.

The session is the LangGraph thread (``configurable.thread_id``, else ``"default"``); each
``invoke`` is a run, ended (and forgotten by the guard) when the agent finishes.

``after_model`` reports each model response's ``usage_metadata`` (and its model, from
``response_metadata``) to the guard, for the spend budgets of the ``loopguard`` block: a
response that uses a budget up stops the run at its next tool call, as a terminal verdict
does. Usage the guard refuses is reported as a warning and counts nothing.
"""

from __future__ import annotations

import uuid
import warnings
from typing import Any, Awaitable, Callable, Dict, Optional, Union

from langchain.agents.middleware import AgentMiddleware, AgentState, hook_config
from langchain.agents.middleware.types import PrivateStateAttr
from langchain_core.messages import AIMessage, ToolMessage
from langgraph.config import get_config
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.runtime import Runtime
from langgraph.types import Command
from typing_extensions import Annotated, NotRequired

from . import AnyGuard, AnyTicket

Result = Union[ToolMessage, Command[Any]]


class LoopGuardState(AgentState[Any]):
    """The run id the guard knows this invocation by, and why it was stopped."""

    loopguard_run: NotRequired[Annotated[str, PrivateStateAttr]]
    loopguard_stop: NotRequired[Annotated[Optional[str], PrivateStateAttr]]


class LoopGuardMiddleware(AgentMiddleware[LoopGuardState, Any]):
    """Stops tool-call loops of a ``create_agent`` agent (see the module docs)."""

    state_schema = LoopGuardState

    def __init__(self, guard: AnyGuard, *, agent: Optional[str] = None) -> None:
        super().__init__()
        self.guard = guard
        self.agent = agent

    def before_agent(self, state: LoopGuardState, runtime: Runtime[Any]) -> Dict[str, Any]:
        return {"loopguard_run": uuid.uuid4().hex, "loopguard_stop": None}

    def after_agent(self, state: LoopGuardState, runtime: Runtime[Any]) -> None:
        run = state.get("loopguard_run")
        if run:
            self.guard.end_run(session=_session(), run=run)

    @hook_config(can_jump_to=["end"])
    def before_model(self, state: LoopGuardState, runtime: Runtime[Any]) -> Optional[Dict[str, Any]]:
        stop = state.get("loopguard_stop")
        if not stop:
            return None
        return {"jump_to": "end", "messages": [AIMessage(content=f"The run was stopped by loopguard. {stop}")]}

    def after_model(self, state: LoopGuardState, runtime: Runtime[Any]) -> None:
        messages = state.get("messages") or []
        message = messages[-1] if messages else None
        usage = getattr(message, "usage_metadata", None) if isinstance(message, AIMessage) else None
        if not usage:
            return
        details = usage.get("input_token_details") or {}
        cache_read = int(details.get("cache_read") or 0)
        cache_write = int(details.get("cache_creation") or 0)
        meta = message.response_metadata or {}  # type: ignore[union-attr]
        model = meta.get("model_name") or meta.get("model")
        try:
            self.guard.record_usage(
                session=_session(),
                run=state.get("loopguard_run"),
                agent=self.agent,
                id=message.id,  # type: ignore[union-attr]
                model=model if isinstance(model, str) else None,
                # LangChain counts cached input inside input_tokens; loopguard apart.
                input_tokens=max(int(usage.get("input_tokens") or 0) - cache_read - cache_write, 0),
                output_tokens=int(usage.get("output_tokens") or 0),
                cache_read_tokens=cache_read,
                cache_write_tokens=cache_write,
            )
        except ValueError as e:
            warnings.warn(f"loopguard: usage not counted: {e}", stacklevel=2)

    def _scope(self, request: ToolCallRequest) -> Dict[str, Any]:
        return {"session": _session(), "run": request.state.get("loopguard_run"), "agent": self.agent}

    def _before(self, request: ToolCallRequest) -> "tuple[AnyTicket, Optional[Result]]":
        call = request.tool_call
        ticket = self.guard.begin(call["name"], call["args"], call_id=call.get("id"), **self._scope(request))
        if not ticket.blocked:
            return ticket, None
        message = ToolMessage(
            content=ticket.verdict.message or "", tool_call_id=call.get("id") or "", name=call["name"], status="error"
        )
        if ticket.ends_run:
            return ticket, Command(update={"messages": [message], "loopguard_stop": ticket.ends_run})
        return ticket, message

    def _after(self, ticket: AnyTicket, out: Result) -> Result:
        if not isinstance(out, ToolMessage):
            ticket.cancel()  # a Command from the tool: its result is not ours to read
            return out
        outcome: Dict[str, Any] = {"error": out.content} if out.status == "error" else {"result": out.content}
        recorded = ticket.finish(**outcome)
        note = ticket.warning_note
        if note:
            content: Any = out.content
            content = content + "\n\n" + note if isinstance(content, str) else [*content, {"type": "text", "text": note}]
            out = out.model_copy(update={"content": content})
        if recorded.ends_run:
            return Command(update={"messages": [out], "loopguard_stop": recorded.ends_run})
        return out

    def wrap_tool_call(self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], Result]) -> Result:
        ticket, blocked = self._before(request)
        if blocked is not None:
            return blocked
        try:
            out = handler(request)
        except Exception as e:
            ticket.finish(error=e)
            raise
        return self._after(ticket, out)

    async def awrap_tool_call(
        self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], Awaitable[Result]]
    ) -> Result:
        ticket, blocked = self._before(request)
        if blocked is not None:
            return blocked
        try:
            out = await handler(request)
        except Exception as e:
            ticket.finish(error=e)
            raise
        return self._after(ticket, out)


def _session() -> str:
    """The LangGraph thread this step runs in, else ``"default"``."""
    try:
        configurable = get_config().get("configurable") or {}
    except RuntimeError:  # outside a graph
        return "default"
    return str(configurable.get("thread_id") or "default")
