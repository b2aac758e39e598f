"""Pydantic AI (``pydantic-ai``): loopguard as a capability, the framework's extension point.

    from pydantic_ai import Agent
    from loopguard import Guard
    from loopguard.pydantic_ai import LoopGuardCapability

    agent = Agent(model, tools=[read_file], capabilities=[LoopGuardCapability(Guard("openclaw.json5"))])

``wrap_tool_execute`` begins a ticket with the guard before each tool call. A blocked call
never runs: its result is the guard's message, which the model reads. Otherwise what the
tool returns (or raises) finishes the ticket, and a warning to surface is appended to the
tool's result. A terminal verdict (the global circuit breaker) or a post-compaction
abort ends the run with :class:`RunStopped`.

The model's messages are judged too (loops without tool calls, when the guard's
``loopguard`` block turns a detector of messages on): ``after_model_request`` sends each
response (its text, its thinking, whether it called tools) before its tool calls run,
``before_model_request`` the request about to be sent (retry feedback, or a retry prompt
without a tool: the framework's reply to an answer it could not use, is the harness's
feedback, ``tool_feedback``; a user prompt is a prompt). A blocked message ends the run with
:class:`RunStopped` before the response's tool calls run.

The session is the run's ``conversation_id`` (else ``"default"``), the run its ``run_id``;
the guard forgets the run when it ends.

Sub-agents: an agent with this capability run inside a tool of another one (agent
delegation: a tool that calls ``other_agent.run(...)``) is that run's child. It works in a
session of its own, ``SESSION/agent-RUN_ID``, and its events name the run that spawned it
(``parent_session``, ``parent_run``), so the guard's agent tree counts it.
"""

from __future__ import annotations

import threading
from typing import Any, Dict, Optional, Union

from pydantic_ai import RunContext
from pydantic_ai.capabilities import AbstractCapability, ValidatedToolArgs, WrapRunHandler, WrapToolExecuteHandler
from pydantic_ai.messages import (
    ModelRequest,
    ModelResponse,
    RetryFeedbackPart,
    RetryPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    UserPromptPart,
)
from pydantic_ai.models import ModelRequestContext
from pydantic_ai.run import AgentRunResult
from pydantic_ai.tools import ToolDefinition

from . import Abort, AnyGuard, Verdict
from ._tree import Spawner, child_session, parent_fields, spawner, spawning
from ._usage import record_usage


class RunStopped(RuntimeError):
    """The guard stopped the run; ``stop`` is the terminal verdict or the abort."""

    def __init__(self, stop: Union[Verdict, Abort]) -> None:
        super().__init__(stop.message)
        self.stop = stop


class LoopGuardCapability(AbstractCapability[Any]):
    """Stops tool-call loops of a Pydantic AI agent (see the module docs)."""

    def __init__(self, guard: AnyGuard, *, agent: Optional[str] = None) -> None:
        self.guard = guard
        self.agent = agent
        # The run that spawned each run in progress that is a sub-agent's, by run id.
        self._parents: Dict[str, Spawner] = {}
        self._lock = threading.Lock()

    def _session(self, ctx: RunContext[Any]) -> str:
        parent = self._parents.get(ctx.run_id or "")
        if parent is not None and ctx.run_id:
            return child_session(parent, ctx.run_id)
        return ctx.conversation_id or "default"

    def _scope(self, ctx: RunContext[Any]) -> Dict[str, Any]:
        return {
            "session": self._session(ctx),
            "run": ctx.run_id,
            "agent": self.agent,
            **parent_fields(self._parents.get(ctx.run_id or "")),
        }

    async def before_model_request(self, ctx: RunContext[Any], request_context: ModelRequestContext) -> ModelRequestContext:
        request = ctx.messages[-1] if ctx.messages else None
        if isinstance(request, ModelRequest):
            for part in request.parts:
                retry = isinstance(part, RetryFeedbackPart) or (
                    isinstance(part, RetryPromptPart) and part.tool_name is None
                )
                if isinstance(part, (RetryFeedbackPart, RetryPromptPart)) and retry:
                    verdict = self.guard.message(part.model_response(), role="tool_feedback", **self._scope(ctx))
                elif isinstance(part, UserPromptPart) and isinstance(part.content, str):
                    verdict = self.guard.message(part.content, role="user", **self._scope(ctx))
                else:
                    continue
                if verdict.blocked:
                    raise RunStopped(verdict)
        return request_context

    async def after_model_request(
        self, ctx: RunContext[Any], *, request_context: ModelRequestContext, response: ModelResponse
    ) -> ModelResponse:
        text = "\n".join(p.content for p in response.parts if isinstance(p, TextPart))
        thinking = "\n".join(p.content for p in response.parts if isinstance(p, ThinkingPart))
        calls = any(isinstance(p, ToolCallPart) for p in response.parts)
        scope = self._scope(ctx)
        verdict = self.guard.message(text, role="assistant", reasoning=thinking or None, has_tool_calls=calls, **scope)
        # What the response spent counts whatever its words' verdict; after them, so that a
        # budget it uses up blocks its tool calls (with the budget's message).
        usage = response.usage
        record_usage(
            self.guard,
            id=response.provider_response_id,
            model=response.model_name,
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cache_read_tokens=usage.cache_read_tokens,
            cache_write_tokens=usage.cache_write_tokens,
            **scope,
        )
        if verdict.blocked:
            raise RunStopped(verdict)
        return response

    async def wrap_run(self, ctx: RunContext[Any], *, handler: WrapRunHandler) -> AgentRunResult[Any]:
        # Inside another guarded agent's tool: a sub-agent's run.
        parent = spawner()
        if parent is not None and ctx.run_id:
            with self._lock:
                self._parents[ctx.run_id] = parent
        try:
            return await handler()
        finally:
            if ctx.run_id:
                self.guard.end_run(session=self._session(ctx), run=ctx.run_id)
                with self._lock:
                    self._parents.pop(ctx.run_id, None)

    async def wrap_tool_execute(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: ValidatedToolArgs,
        handler: WrapToolExecuteHandler,
    ) -> Any:
        scope = self._scope(ctx)
        ticket = self.guard.begin(call.tool_name, call.args_as_dict(), call_id=call.tool_call_id, **scope)
        if ticket.blocked:
            if ticket.ends_run:
                raise RunStopped(ticket.verdict)
            return ticket.verdict.message
        try:
            with spawning(scope["session"], scope["run"]):
                result = await handler(args)
        except Exception as e:
            ticket.finish(error=e)
            raise
        try:
            recorded = ticket.finish(result=result)
        except TypeError:  # a result that is not JSON: its text is what the model reads
            recorded = ticket.finish(result=str(result))
        if recorded.abort:
            raise RunStopped(recorded.abort)
        note = ticket.warning_note
        if note:
            return f"{result}\n\n{note}" if not isinstance(result, (dict, list)) else {"result": result, "loopguard": note}
        return result
