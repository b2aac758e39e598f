"""The Pydantic AI adapter on a real `Agent`, driven by Pydantic AI's own `FunctionModel`:
the scripted model calls the same tool 25 times."""

from __future__ import annotations

from typing import Any, Callable, Dict, List

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

import loopguard
from loopguard.pydantic_ai import LoopGuardCapability, RunStopped

CONFIG = {"tools": {"loopDetection": {"enabled": True, "warningThreshold": 3, "criticalThreshold": 5, "globalCircuitBreakerThreshold": 7}}}


def returns(messages: List[ModelMessage]) -> List[str]:
    return [str(p.content) for m in messages if isinstance(m, ModelRequest) for p in m.parts if isinstance(p, ToolReturnPart)]


def setup(args_of: Callable[[int], Dict[str, Any]]) -> "tuple[Agent[None, str], List[str], List[List[ModelMessage]]]":
    ran: List[str] = []
    seen: List[List[ModelMessage]] = []

    def script(messages: List[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(list(messages))
        n = len(returns(messages))
        if n >= 25:
            return ModelResponse(parts=[TextPart("done")])
        return ModelResponse(parts=[ToolCallPart("read_file", args_of(n), tool_call_id=f"call_{n}")])

    agent: Agent[None, str] = Agent(FunctionModel(script), capabilities=[LoopGuardCapability(loopguard.Guard(CONFIG))])

    @agent.tool_plain
    def read_file(path: str) -> str:
        """Read a file."""
        ran.append(path)
        return "TODO: write the report"

    return agent, ran, seen


def test_a_stuck_agent_is_warned_blocked_and_stopped() -> None:
    agent, ran, seen = setup(lambda i: {"path": "notes.txt"})
    with pytest.raises(RunStopped) as caught:
        agent.run_sync("write the report")
    assert len(ran) == 5  # 1-5 run, 6 and 7 are blocked, the 8th stops the run
    stop = caught.value.stop
    assert isinstance(stop, loopguard.Verdict) and stop.terminal and stop.count == 7
    shown = returns(seen[-1])
    assert len(shown) == 7
    assert "[loopguard] WARNING: you have called read_file 3 times" in shown[3]
    assert shown[5].startswith("CRITICAL: read_file was called 5 times") and "blocked" in shown[5]
    assert shown[6].startswith("CRITICAL: read_file was called 6 times")


def test_changing_arguments_are_never_warned() -> None:
    agent, ran, seen = setup(lambda i: {"path": f"notes-{i}.txt"})
    result = agent.run_sync("read them all")
    assert len(ran) == 25 and result.output == "done"
    assert not any("loopguard" in r or "CRITICAL" in r for r in returns(seen[-1]))


PRESET = {"tools": {"loopDetection": {"enabled": True}}, "loopguard": {"preset": "recommended"}}


def test_a_chanting_response_stops_the_run_before_its_tool_calls() -> None:
    ran: List[str] = []
    chant = "I will read the notes once more to be completely sure. " * 12

    def script(messages: List[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart(chant), ToolCallPart("read_file", {"path": "notes.txt"}, tool_call_id="c1")])

    agent: Agent[None, str] = Agent(FunctionModel(script), capabilities=[LoopGuardCapability(loopguard.Guard(PRESET))])

    @agent.tool_plain
    def read_file(path: str) -> str:
        """Read a file."""
        ran.append(path)
        return "notes"

    with pytest.raises(RunStopped) as caught:
        agent.run_sync("write the report")
    assert caught.value.stop.detector == "content_chanting"
    assert ran == []


def test_answers_the_framework_keeps_rejecting_stop_the_run() -> None:
    """An output validator that rejects every answer: the framework replies with the same
    retry prompt each time, the harness's feedback; no_tool_turns stops the run at 8."""
    calls: List[int] = []

    def script(messages: List[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls.append(len(messages))
        return ModelResponse(parts=[TextPart(f"I think the answer is {len(calls)}.")])

    agent: Agent[None, str] = Agent(
        FunctionModel(script), capabilities=[LoopGuardCapability(loopguard.Guard(PRESET))], retries=50
    )

    @agent.output_validator
    def needs_a_report(output: str) -> str:
        from pydantic_ai import ModelRetry

        raise ModelRetry("Write the report with the report tool, not in text.")

    with pytest.raises(RunStopped) as caught:
        agent.run_sync("write the report")
    assert caught.value.stop.detector == "no_tool_turns"
    assert len(calls) == 8
