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

The model's messages are judged too (loops without tool calls, when the guard's
``loopguard`` block turns a detector of messages on): ``after_model`` sends each answer
(its text, its reasoning blocks, whether it made tool calls), ``before_model`` the
messages added since (a ``HumanMessage`` right after an answer without tool calls is the
harness's feedback to it, ``tool_feedback``; any other is a prompt). A blocked message
stops the run: the agent jumps to its end with a final ``AIMessage`` saying why, and the
answer's tool calls do not run. A warning is added to the next model call's messages
(that call only; the state keeps no copy).

The session is the LangGraph thread (``configurable.thread_id``, else ``"default"``); each
``invoke`` is a run, ended (and forgotten by the guard) when the agent finishes.

Sub-agents: an agent with this middleware invoked inside a tool of another one (an agent
called as a tool) is that run's child. It works in a session of its own,
``SESSION/agent-RUN``, and its events name the run that spawned it (``parent_session``,
``parent_run``), so the guard's agent tree counts its children, their depth and their
respawns.

``after_model`` reports each model response's ``usage_metadata`` (and its model, from
``response_metadata``) to the guard, for the spend budgets of the ``loopguard`` block: a
response that uses a budget up stops the run at its next tool call, as a terminal verdict
does. Usage the guard refuses is reported as a warning and counts nothing.
"""

from __future__ import annotations

import uuid
from typing import Any, Awaitable, Callable, Dict, Optional, Union

from langchain.agents.middleware import AgentMiddleware, AgentState, hook_config
from langchain.agents.middleware.types import ModelRequest, ModelResponse, PrivateStateAttr
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langgraph.config import get_config
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.runtime import Runtime
from langgraph.types import Command
from typing_extensions import Annotated, NotRequired

from . import AnyGuard, AnyTicket
from ._tree import child_session, parent_fields, spawner, spawning
from ._usage import record_usage

Result = Union[ToolMessage, Command[Any]]


class LoopGuardState(AgentState[Any]):
    """The run id the guard knows this invocation by, why it was stopped, how many of the
    messages the guard has seen, and a warning for the next model call."""

    loopguard_run: NotRequired[Annotated[str, PrivateStateAttr]]
    loopguard_stop: NotRequired[Annotated[Optional[str], PrivateStateAttr]]
    loopguard_start: NotRequired[Annotated[int, PrivateStateAttr]]
    loopguard_seen: NotRequired[Annotated[int, PrivateStateAttr]]
    loopguard_note: NotRequired[Annotated[Optional[str], PrivateStateAttr]]
    loopguard_session: NotRequired[Annotated[Optional[str], PrivateStateAttr]]
    loopguard_parent: NotRequired[Annotated[Optional[Dict[str, Optional[str]]], PrivateStateAttr]]


class LoopGuardMiddleware(AgentMiddleware[LoopGuardState, Any]):
    """Stops tool-call loops of a ``create_agent`` agent (see the module docs)."""

    state_schema = LoopGuardState

    def __init__(self, guard: AnyGuard, *, agent: Optional[str] = None) -> None:
        super().__init__()
        self.guard = guard
        self.agent = agent

    def before_agent(self, state: LoopGuardState, runtime: Runtime[Any]) -> Dict[str, Any]:
        seen = len(state.get("messages") or [])
        run = uuid.uuid4().hex
        # Inside another guarded agent's tool: a sub-agent, in a session of its own.
        parent = spawner()
        return {
            "loopguard_run": run,
            "loopguard_stop": None,
            "loopguard_start": seen,
            "loopguard_seen": seen,
            "loopguard_note": None,
            "loopguard_session": child_session(parent, run) if parent else None,
            "loopguard_parent": parent_fields(parent) or None,
        }

    def after_agent(self, state: LoopGuardState, runtime: Runtime[Any]) -> None:
        run = state.get("loopguard_run")
        if run:
            self.guard.end_run(session=state.get("loopguard_session") or _session(), run=run)

    @hook_config(can_jump_to=["end"])
    def before_model(self, state: LoopGuardState, runtime: Runtime[Any]) -> Optional[Dict[str, Any]]:
        stop = state.get("loopguard_stop")
        if stop:
            return _stopped(stop)
        messages = state.get("messages") or []
        run_start = state.get("loopguard_start", len(messages))
        note = state.get("loopguard_note")
        for i in range(state.get("loopguard_seen", len(messages)), len(messages)):
            m = messages[i]
            if not isinstance(m, HumanMessage):
                continue
            # Right after an answer of this run that made no tool call: the harness's reply.
            before = messages[i - 1] if i - 1 >= run_start else None
            feedback = isinstance(before, AIMessage) and not before.tool_calls
            verdict = self.guard.message(
                _text(m), role="tool_feedback" if feedback else "user", **self._run_scope(state)
            )
            if verdict.blocked:
                return {**_stopped(verdict.message or ""), "loopguard_seen": len(messages)}
            note = verdict.warning_note or note
        return {"loopguard_seen": len(messages), "loopguard_note": note}

    @hook_config(can_jump_to=["end"])
    def after_model(self, state: LoopGuardState, runtime: Runtime[Any]) -> Optional[Dict[str, Any]]:
        messages = state.get("messages") or []
        answer = messages[-1] if messages else None
        if not isinstance(answer, AIMessage):
            return None
        verdict = self.guard.message(
            _text(answer),
            role="assistant",
            reasoning=_reasoning(answer),
            has_tool_calls=bool(answer.tool_calls),
            id=answer.id,
            **self._run_scope(state),
        )
        # What the response spent counts whatever its words' verdict; after them, so that a
        # budget it uses up blocks its tool calls (with the budget's message) rather than
        # the words themselves.
        self._record_usage(state, answer)
        if verdict.blocked:
            # The answer's tool calls do not run: the agent ends here.
            return {**_stopped(verdict.message or ""), "loopguard_seen": len(messages)}
        return {"loopguard_seen": len(messages), "loopguard_note": verdict.warning_note}

    def wrap_model_call(
        self, request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], ModelResponse[Any]]
    ) -> Any:
        return handler(_with_note(request))

    async def awrap_model_call(
        self, request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]]
    ) -> Any:
        return await handler(_with_note(request))

    def _run_scope(self, state: LoopGuardState) -> Dict[str, Any]:
        return {
            "session": state.get("loopguard_session") or _session(),
            "run": state.get("loopguard_run"),
            "agent": self.agent,
            **(state.get("loopguard_parent") or {}),
        }

    def _record_usage(self, state: LoopGuardState, message: AIMessage) -> None:
        usage = message.usage_metadata
        if not usage:
            return
        details = usage.get("input_token_details") or {}
        meta = message.response_metadata or {}
        record_usage(
            self.guard,
            **self._run_scope(state),
            id=message.id,
            model=meta.get("model_name") or meta.get("model"),
            input_tokens=usage.get("input_tokens"),
            output_tokens=usage.get("output_tokens"),
            cache_read_tokens=details.get("cache_read"),
            cache_write_tokens=details.get("cache_creation"),
        )

    def _scope(self, request: ToolCallRequest) -> Dict[str, Any]:
        return self._run_scope(request.state)

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
        scope = self._scope(request)
        try:
            with spawning(scope["session"], scope["run"]):
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
        scope = self._scope(request)
        try:
            with spawning(scope["session"], scope["run"]):
                out = await handler(request)
        except Exception as e:
            ticket.finish(error=e)
            raise
        return self._after(ticket, out)


def _stopped(why: str) -> Dict[str, Any]:
    """The state update that ends the run: to the end, with an answer that says why."""
    return {"jump_to": "end", "loopguard_stop": why, "messages": [AIMessage(content=f"The run was stopped by loopguard. {why}")]}


def _with_note(request: ModelRequest[Any]) -> ModelRequest[Any]:
    """The request with the guard's warning for this model call, if there is one."""
    note = (request.state or {}).get("loopguard_note")
    if not isinstance(note, str) or not note:
        return request
    return request.override(messages=[*request.messages, HumanMessage(content=note)])


def _text(message: BaseMessage) -> str:
    """A message's text: its content, or the text of its text blocks."""
    content = message.content
    if isinstance(content, str):
        return content
    return "\n".join(
        b.get("text", "") if isinstance(b, dict) else str(b)
        for b in content
        if isinstance(b, str) or (isinstance(b, dict) and b.get("type") == "text")
    )


def _reasoning(message: AIMessage) -> Optional[str]:
    """A model's reasoning, where the provider returns it (reasoning or thinking blocks,
    ``reasoning_content``)."""
    parts = [
        str(b.get("reasoning") or b.get("thinking") or "")
        for b in (message.content if isinstance(message.content, list) else [])
        if isinstance(b, dict) and b.get("type") in ("reasoning", "thinking")
    ]
    extra = message.additional_kwargs.get("reasoning_content")
    if isinstance(extra, str):
        parts.append(extra)
    text = "\n".join(p for p in parts if p)
    return text or None


def _session() -> str:
    """The LangGraph thread this step runs in, else ``"default"``."""
    try:
        configurable = get_config().get("configurable") or {}
    except RuntimeError:  # outside a graph
        return "default"
    return str(configurable.get("thread_id") or "default")
