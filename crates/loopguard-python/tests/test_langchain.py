"""The LangChain adapter on a real `create_agent` agent, driven by LangChain's own fake
chat model: the scripted model calls the same tool 25 times."""

from __future__ import annotations

from typing import Any, Dict, List

import pytest
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.tools import tool

import loopguard
from loopguard.langchain import LoopGuardMiddleware

# Warn at 3, block at 5, stop the run at 7 identical no-progress outcomes.
CONFIG = {"tools": {"loopDetection": {"enabled": True, "warningThreshold": 3, "criticalThreshold": 5, "globalCircuitBreakerThreshold": 7}}}


class ScriptedModel(GenericFakeChatModel):
    """LangChain's fake chat model, recording every conversation it is shown."""

    seen: List[List[BaseMessage]] = []

    def bind_tools(self, tools: Any, **kwargs: Any) -> "ScriptedModel":
        return self

    def _generate(self, messages: List[BaseMessage], *args: Any, **kwargs: Any) -> Any:
        self.seen.append(list(messages))
        return super()._generate(messages, *args, **kwargs)


def script(args_of: Any, calls: int = 25) -> ScriptedModel:
    steps: List[AIMessage] = [
        AIMessage(content="", tool_calls=[{"name": "read_file", "args": args_of(i), "id": f"call_{i}"}]) for i in range(calls)
    ]
    steps.append(AIMessage(content="done"))
    return ScriptedModel(messages=iter(steps), seen=[])


def agent_with(model: ScriptedModel, ran: List[Dict[str, Any]]) -> Any:
    @tool
    def read_file(path: str) -> str:
        """Read a file."""
        ran.append({"path": path})
        return "TODO: write the report"

    return create_agent(model, [read_file], middleware=[LoopGuardMiddleware(loopguard.Guard(CONFIG))])


def tool_messages(messages: List[BaseMessage]) -> List[str]:
    return [str(m.content) for m in messages if isinstance(m, ToolMessage)]


def test_a_stuck_agent_is_warned_blocked_and_stopped(capsys: pytest.CaptureFixture[str]) -> None:
    ran: List[Dict[str, Any]] = []
    model = script(lambda i: {"path": "notes.txt"})
    out = agent_with(model, ran).invoke({"messages": [{"role": "user", "content": "write the report"}]}, {"configurable": {"thread_id": "t1"}})
    # Calls 1-5 run (the 4th is warned: 3 identical calls before it), 6 and 7 are blocked
    # (5 identical results, then 6 with the veto), the 8th trips the breaker (7) and the
    # run ends.
    assert len(ran) == 5
    results = tool_messages(out["messages"])
    assert len(results) == 8
    assert "[loopguard] WARNING: you have called read_file 3 times" in results[3]
    assert results[5].startswith("CRITICAL: read_file was called 5 times") and "blocked" in results[5]
    assert results[7].startswith("CRITICAL: read_file has repeated identical no-progress outcomes 7 times")
    final = out["messages"][-1]
    assert isinstance(final, AIMessage) and "stopped by loopguard" in str(final.content)
    # What the model read before its last turn: the warning and the block.
    last_seen = tool_messages(model.seen[-1])
    assert any("WARNING" in m for m in last_seen) and any(m.startswith("CRITICAL") for m in last_seen)
    assert len(model.seen) == 8, "the model is not called again after the run was stopped"
    for n, message in enumerate(tool_messages(out["messages"]), 1):
        print(f"tool call {n}: {message[:110]}")
    print(f"final: {final.content}")


def test_changing_arguments_are_never_warned() -> None:
    ran: List[Dict[str, Any]] = []
    model = script(lambda i: {"path": f"notes-{i}.txt"})
    out = agent_with(model, ran).invoke({"messages": [{"role": "user", "content": "read them all"}]})
    assert len(ran) == 25
    assert not any("loopguard" in m or "CRITICAL" in m for m in tool_messages(out["messages"]))
    assert out["messages"][-1].content == "done"


def usage_script(args_of: Any, calls: int = 25) -> ScriptedModel:
    """Like `script`, each response carrying LangChain's usage_metadata (1,000 input tokens,
    800 of them read from the cache, and 100 output) and its model."""
    steps: List[AIMessage] = [
        AIMessage(
            content="",
            id=f"resp_{i}",
            tool_calls=[{"name": "read_file", "args": args_of(i), "id": f"call_{i}"}],
            usage_metadata={
                "input_tokens": 1000,
                "output_tokens": 100,
                "total_tokens": 1100,
                "input_token_details": {"cache_read": 800},
            },
            response_metadata={"model_name": "gpt-4o-2024-08-06"},
        )
        for i in range(calls)
    ]
    steps.append(AIMessage(content="done"))
    return ScriptedModel(messages=iter(steps), seen=[])


def budget_agent(model: ScriptedModel, ran: List[Dict[str, Any]], budgets: Dict[str, Any]) -> Any:
    @tool
    def read_file(path: str) -> str:
        """Read a file."""
        ran.append({"path": path})
        return "TODO: write the report" if path == "notes.txt" else f"contents of {path}"

    config = {"tools": {"loopDetection": {"enabled": True}}, "loopguard": {"budgets": budgets}}
    return create_agent(model, [read_file], middleware=[LoopGuardMiddleware(loopguard.Guard(config))])


def test_a_cost_budget_stops_a_productive_agent() -> None:
    # Each response: 200 uncached input tokens at $2.50, 800 cached at $1.25, 100 output at
    # $10 per million: $0.0025. A run budget of $0.01 is used up by the 4th response.
    ran: List[Dict[str, Any]] = []
    model = usage_script(lambda i: {"path": f"file{i}.txt"})
    agent = budget_agent(model, ran, {"run": {"cost": 0.01}, "withoutProgress": {"enabled": False}})
    out = agent.invoke({"messages": [{"role": "user", "content": "read everything"}]}, {"configurable": {"thread_id": "cost"}})
    results = tool_messages(out["messages"])
    assert len(ran) == 3, "the 4th response used the budget up: its call was blocked"
    assert "run_budget" in results[3] and "cost budget" in results[3]
    final = out["messages"][-1]
    assert isinstance(final, AIMessage) and "stopped by loopguard" in str(final.content)
    assert len(model.seen) == 4


def test_a_without_progress_cap_stops_a_circling_agent_before_the_loop_detectors() -> None:
    # The same read for the same answer: the first is progress, then 5 more are allowed;
    # OpenClaw's detectors alone would block at 20 and stop the run at 30.
    ran: List[Dict[str, Any]] = []
    model = usage_script(lambda i: {"path": "notes.txt"}, calls=40)
    agent = budget_agent(model, ran, {"withoutProgress": {"calls": 5}})
    out = agent.invoke({"messages": [{"role": "user", "content": "write the report"}]}, {"configurable": {"thread_id": "wp"}})
    results = tool_messages(out["messages"])
    assert len(ran) == 6
    assert "no_progress_budget" in results[6]
    final = out["messages"][-1]
    assert isinstance(final, AIMessage) and "stopped by loopguard" in str(final.content)
