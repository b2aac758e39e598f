"""The Pydantic AI adapter on a real `Agent`, driven by Pydantic AI's own `FunctionModel`:
the scripted model calls the same tool 25 times."""

from __future__ import annotations

from typing import Any, Callable, Dict, List

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage

import loopguard
from loopguard.pydantic_ai import LoopGuardCapability, RunStopped
from recording import Recording

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


# Budgets: each response reports what it used, so a budget stops the agent.
def budget_agent(args_of: Callable[[int], Dict[str, Any]], budgets: Dict[str, Any]) -> "tuple[Agent[None, str], List[str]]":
    """An agent whose responses each used 1,000 input tokens (800 read from the cache) and
    100 output tokens of gpt-4o."""
    ran: List[str] = []

    def script(messages: List[ModelMessage], info: AgentInfo) -> ModelResponse:
        n = len(returns(messages))
        usage = RequestUsage(input_tokens=1000, output_tokens=100, cache_read_tokens=800)
        if n >= 40:
            return ModelResponse(parts=[TextPart("done")], usage=usage)
        return ModelResponse(parts=[ToolCallPart("read_file", args_of(n), tool_call_id=f"call_{n}")], usage=usage)

    config = {"tools": {"loopDetection": {"enabled": True}}, "loopguard": {"budgets": budgets}}
    model = FunctionModel(script, model_name="gpt-4o-2024-08-06")
    agent: Agent[None, str] = Agent(model, capabilities=[LoopGuardCapability(loopguard.Guard(config))])

    @agent.tool_plain
    def read_file(path: str) -> str:
        """Read a file."""
        ran.append(path)
        return "TODO: write the report" if path == "notes.txt" else f"contents of {path}"

    return agent, ran


def test_a_cost_budget_stops_a_productive_agent() -> None:
    # Each response: 200 uncached input tokens at $2.50, 800 cached at $1.25, 100 output at
    # $10 per million: $0.0025. A run budget of $0.01 is used up by the 4th response.
    agent, ran = budget_agent(lambda i: {"path": f"file{i}.txt"}, {"run": {"cost": 0.01}, "withoutProgress": {"enabled": False}})
    with pytest.raises(RunStopped) as caught:
        agent.run_sync("read everything")
    assert len(ran) == 3, "the 4th response used the budget up: its call was blocked"
    stop = caught.value.stop
    assert isinstance(stop, loopguard.Verdict) and stop.detector == "run_budget"


def test_a_without_progress_cap_stops_a_circling_agent_before_the_loop_detectors() -> None:
    # The same read for the same answer: the first is progress, then 5 more are allowed.
    agent, ran = budget_agent(lambda i: {"path": "notes.txt"}, {"withoutProgress": {"calls": 5}})
    with pytest.raises(RunStopped) as caught:
        agent.run_sync("write the report")
    assert len(ran) == 6
    stop = caught.value.stop
    assert isinstance(stop, loopguard.Verdict) and stop.detector == "no_progress_budget"


def test_an_agent_run_inside_a_tool_is_a_child_of_the_run_that_called_it() -> None:
    guard = Recording(loopguard.Guard(CONFIG))

    def child_script(messages: List[ModelMessage], info: AgentInfo) -> ModelResponse:
        if returns(messages):
            return ModelResponse(parts=[TextPart("read it")])
        return ModelResponse(parts=[ToolCallPart("read_file", {"path": "a"}, tool_call_id="c")])

    child: Agent[None, str] = Agent(FunctionModel(child_script), capabilities=[LoopGuardCapability(guard)])  # type: ignore[arg-type]

    @child.tool_plain
    def read_file(path: str) -> str:
        """Read a file."""
        return "contents"

    def parent_script(messages: List[ModelMessage], info: AgentInfo) -> ModelResponse:
        n = len(returns(messages))
        if n >= 2:
            return ModelResponse(parts=[TextPart("all done")])
        return ModelResponse(parts=[ToolCallPart("delegate", {"task": f"part {n}"}, tool_call_id=f"d{n}")])

    parent: Agent[None, str] = Agent(FunctionModel(parent_script), capabilities=[LoopGuardCapability(guard)])  # type: ignore[arg-type]

    @parent.tool_plain
    async def delegate(task: str) -> str:
        """Hand a task to a sub-agent."""
        return (await child.run(task)).output

    assert parent.run_sync("split the work").output == "all done"
    parents = [s for s in guard.scopes if "/agent-" not in str(s["session"])]
    children = [s for s in guard.scopes if "/agent-" in str(s["session"])]
    parent_session, parent_run = parents[0]["session"], parents[0]["run"]
    assert all(s["run"] == parent_run and s["parent_session"] is None for s in parents)
    # Each run of the sub-agent is a session of its own, named for its run, and every one of
    # its events names the parent's session and run.
    assert len({s["session"] for s in children}) == 2
    assert {s["session"] for s in children} == {f"{parent_session}/agent-{s['run']}" for s in children}
    assert all(s["parent_session"] == parent_session and s["parent_run"] == parent_run for s in children if s["event"] != "end_run")
    assert {s["event"] for s in children} >= {"begin", "message", "end_run"}
