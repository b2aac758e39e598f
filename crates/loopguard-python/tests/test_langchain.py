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
