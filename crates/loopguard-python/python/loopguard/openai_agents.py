"""OpenAI Agents SDK (``openai-agents``): loopguard as tool input and output guardrails.

    from agents import Agent, Runner
    from loopguard import Guard
    from loopguard.openai_agents import LoopGuardrails

    rails = LoopGuardrails(Guard("openclaw.json5"), session="user-42")
    agent = Agent(name="worker", tools=rails.protect(read_file, run_tests))
    with rails.run():                      # one run of the guard per Runner.run
        Runner.run_sync(agent, "write the report")

The input guardrail begins a ticket with the guard before each call of a protected function
tool. A blocked call never runs: the guardrail rejects it and the model reads the guard's
message as the tool's output. A terminal verdict (the global circuit breaker) trips the
wire, so ``Runner.run`` raises ``ToolInputGuardrailTripwireTriggered``
(``output.output_info`` is the verdict). The output guardrail finishes the call's ticket
with what the tool returned, appends a warning to surface to it, and trips the wire when
the post-compaction guard aborts the run. (The SDK calls the two guardrails separately,
so the tickets of calls in flight are kept by call id in between.)

The model's messages are judged too (loops without tool calls, when the guard's
``loopguard`` block turns a detector of messages on), through the run hooks
``rails.hooks`` (``Runner.run(agent, input, hooks=rails.hooks)``): each model response
(its text, its reasoning summaries, whether it called tools) is sent when it arrives,
before its tool calls run. A blocked message stops the run: ``Runner.run`` raises
:class:`LoopStopped` (``verdict`` is the guard's).

Runs: ``with rails.run():`` gives the calls inside it a run of their own (a fresh id, or
the one given), and ends it on exit; calls outside any ``run()`` share the session's
history, like OpenClaw's. ``session`` is a string or a function of the ``ToolContext``
(the hooks, which have no tool context, use the string, else ``"default"``).

Sub-agents: a ``run()`` entered while another guarded run is in progress (a sub-agent's
``Runner.run`` inside a tool, wrapped in ``with rails.run():``; or inside a tool of a
LangChain or Pydantic AI agent guarded by loopguard) is that run's child. Its calls work in a
session of their own, ``SESSION/agent-RUN``, and name the run that spawned them
(``parent_session``, ``parent_run``), so the guard's agent tree counts it.
"""

from __future__ import annotations

import contextvars
import json
import threading
import uuid
from contextlib import contextmanager
from typing import Any, Callable, Dict, Iterator, List, NamedTuple, Optional, Tuple, Union

from agents import Agent, FunctionTool, RunContextWrapper, RunHooks
from agents.exceptions import AgentsException
from agents.items import ModelResponse
from agents.tool_context import ToolContext
from agents.tool_guardrails import (
    ToolGuardrailFunctionOutput,
    ToolInputGuardrail,
    ToolInputGuardrailData,
    ToolOutputGuardrail,
    ToolOutputGuardrailData,
)

from . import AnyGuard, AnyTicket, Recorded, Verdict
from ._tree import Spawner, child_session, parent_fields, spawner, spawning
from ._usage import record_usage

Session = Union[str, Callable[[ToolContext[Any]], str]]


class _Run(NamedTuple):
    """A run of :meth:`LoopGuardrails.run` in progress: its id, and for a sub-agent's run,
    its own session and the run that spawned it."""

    id: str
    session: Optional[str]
    parent: Optional[Spawner]


class LoopStopped(AgentsException):
    """The guard stopped the run on a message; ``verdict`` says why."""

    def __init__(self, verdict: Verdict) -> None:
        super().__init__(verdict.message or "the run was stopped by loopguard")
        self.verdict = verdict


class _MessageHooks(RunHooks[Any]):
    """Run hooks that send each model response to the guard."""

    def __init__(self, rails: "LoopGuardrails") -> None:
        self.rails = rails

    async def on_llm_end(self, context: RunContextWrapper[Any], agent: Agent[Any], response: ModelResponse) -> None:
        texts: List[str] = []
        reasoning: List[str] = []
        calls = False
        for item in response.output:
            kind = str(getattr(item, "type", ""))
            parts: List[Any] = list(getattr(item, "content", None) or []) if kind == "message" else []
            texts.extend(str(getattr(c, "text", "")) for c in parts if getattr(c, "type", None) == "output_text")
            if kind == "reasoning":
                reasoning.extend(str(getattr(s, "text", "")) for s in (getattr(item, "summary", None) or []))
            calls = calls or kind.endswith("_call")
        rails = self.rails
        scope = rails._scope(None)
        verdict = rails.guard.message(
            "\n".join(texts),
            role="assistant",
            reasoning="\n".join(reasoning) or None,
            has_tool_calls=calls,
            id=response.response_id,
            **scope,
        )
        # What the response spent counts whatever its words' verdict; after them, so that a
        # budget it uses up blocks its tool calls (with the budget's message).
        usage = response.usage
        details = usage.input_tokens_details
        record_usage(
            rails.guard,
            id=response.response_id,
            # The model's name: a string, or the provider model's own (`OpenAIResponsesModel.model`).
            model=agent.model if isinstance(agent.model, str) else getattr(agent.model, "model", None),
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cache_read_tokens=getattr(details, "cached_tokens", 0),
            cache_write_tokens=getattr(details, "cache_write_tokens", 0),
            **scope,
        )
        if verdict.blocked:
            raise LoopStopped(verdict)


class LoopGuardrails:
    """The two guardrails of a guard, for the function tools given to :meth:`protect`,
    and the run hooks that judge the model's messages (:attr:`hooks`)."""

    def __init__(self, guard: AnyGuard, *, session: Session = "default", agent: Optional[str] = None) -> None:
        self.guard = guard
        self.session = session
        self.agent = agent
        self.input: ToolInputGuardrail[Any] = ToolInputGuardrail(self._before, name="loopguard")
        self.output: ToolOutputGuardrail[Any] = ToolOutputGuardrail(self._after, name="loopguard")
        self._run: contextvars.ContextVar[Optional[_Run]] = contextvars.ContextVar("loopguard_run", default=None)
        # Tickets of the calls in flight, by call id and tool, until their output.
        self._pending: Dict[Tuple[str, str], AnyTicket] = {}
        self._lock = threading.Lock()
        self.hooks: RunHooks[Any] = _MessageHooks(self)

    def protect(self, *tools: FunctionTool) -> List[FunctionTool]:
        """Adds the guardrails to each tool (in place) and returns the tools as a list."""
        for t in tools:
            t.tool_input_guardrails = [*(t.tool_input_guardrails or []), self.input]
            t.tool_output_guardrails = [*(t.tool_output_guardrails or []), self.output]
        return list(tools)

    @contextmanager
    def run(self, run_id: Optional[str] = None) -> Iterator[str]:
        """Scopes the calls made inside to one run; ends it on exit. Inside another guarded
        run, the run is a sub-agent's (see the module docs)."""
        run = run_id or uuid.uuid4().hex
        parent = spawner()
        session = child_session(parent, run) if parent else None
        token = self._run.set(_Run(run, session, parent))
        name = session or self._session_name(None)
        try:
            with spawning(name, run):
                yield run
        finally:
            self._run.reset(token)
            self.guard.end_run(session=name, run=run)

    def _session_name(self, context: Optional[ToolContext[Any]]) -> str:
        if isinstance(self.session, str) or context is None:
            return self.session if isinstance(self.session, str) else "default"
        return self.session(context)

    def _scope(self, context: Optional[ToolContext[Any]]) -> Dict[str, Any]:
        run = self._run.get()
        if run is None:
            return {"session": self._session_name(context), "run": None, "agent": self.agent}
        session = run.session or self._session_name(context)
        return {"session": session, "run": run.id, "agent": self.agent, **parent_fields(run.parent)}

    @staticmethod
    def _args(context: ToolContext[Any]) -> Any:
        try:
            return json.loads(context.tool_arguments or "{}")
        except ValueError:
            return context.tool_arguments  # what the model sent, as text

    def _before(self, data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
        ctx = data.context
        ticket = self.guard.begin(ctx.tool_name, self._args(ctx), call_id=ctx.tool_call_id, **self._scope(ctx))
        verdict = ticket.verdict
        if ticket.blocked:
            if ticket.ends_run:
                return ToolGuardrailFunctionOutput.raise_exception(output_info=verdict)
            return ToolGuardrailFunctionOutput.reject_content(verdict.message or "", output_info=verdict)
        with self._lock:
            self._pending[(ctx.tool_call_id, ctx.tool_name)] = ticket
        return ToolGuardrailFunctionOutput.allow(output_info=verdict)

    def _after(self, data: ToolOutputGuardrailData) -> ToolGuardrailFunctionOutput:
        ctx = data.context
        with self._lock:
            ticket = self._pending.pop((ctx.tool_call_id, ctx.tool_name), None)
        try:
            recorded = self._record(ctx, ticket, data.output)
        except TypeError:  # an output that is not JSON: its text is what the model reads
            recorded = self._record(ctx, ticket, str(data.output))
        if recorded.abort:
            return ToolGuardrailFunctionOutput.raise_exception(output_info=recorded.abort)
        note = ticket.warning_note if ticket else None
        if ticket is not None and note:
            return ToolGuardrailFunctionOutput.reject_content(f"{data.output}\n\n{note}", output_info=ticket.verdict)
        return ToolGuardrailFunctionOutput.allow()

    def _record(self, ctx: ToolContext[Any], ticket: Optional[AnyTicket], output: Any) -> Recorded:
        if ticket is not None:
            return ticket.finish(result=output)
        # A call the input guardrail did not see: its result event, with its arguments.
        scope = self._scope(ctx)
        return self.guard.after_call(ctx.tool_name, self._args(ctx), call_id=ctx.tool_call_id, result=output, **scope)
