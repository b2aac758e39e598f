"""The OpenAI Agents SDK adapter on a real `Agent` and `Runner`, driven by the SDK's own
`agents.testing.ScriptedModel`: the scripted model calls the same tool 25 times."""

from __future__ import annotations

from typing import Any, Callable, Dict, List

import pytest
from agents import Agent, Runner, function_tool
from agents.exceptions import ToolInputGuardrailTripwireTriggered
from agents.items import ModelResponse
from agents.testing import ScriptedModel, assistant_message, function_call
from agents.usage import InputTokensDetails, Usage

import loopguard
from loopguard.openai_agents import LoopGuardrails, LoopStopped
from recording import Recording

CONFIG = {"tools": {"loopDetection": {"enabled": True, "warningThreshold": 3, "criticalThreshold": 5, "globalCircuitBreakerThreshold": 7}}}


def setup(args_of: Callable[[int], Dict[str, Any]]) -> "tuple[Agent[Any], ScriptedModel, List[str], LoopGuardrails]":
    ran: List[str] = []

    @function_tool
    def read_file(path: str) -> str:
        """Read a file."""
        ran.append(path)
        return "TODO: write the report"

    steps: List[Any] = [[function_call("read_file", args_of(i), call_id=f"call_{i}")] for i in range(25)]
    steps.append([assistant_message("done")])
    model = ScriptedModel(steps)
    rails = LoopGuardrails(loopguard.Guard(CONFIG), session="user-1")
    agent = Agent(name="worker", model=model, tools=rails.protect(read_file))
    return agent, model, ran, rails


def outputs(model: ScriptedModel) -> List[str]:
    """The tool outputs the model was shown, in order (from its last call's input)."""
    last = model.last_call
    assert last is not None
    return [str(item["output"]) for item in last.input if isinstance(item, dict) and item.get("type") == "function_call_output"]


def test_a_stuck_agent_is_warned_blocked_and_stopped() -> None:
    agent, model, ran, rails = setup(lambda i: {"path": "notes.txt"})
    with pytest.raises(ToolInputGuardrailTripwireTriggered) as caught:
        with rails.run():
            Runner.run_sync(agent, "write the report", max_turns=40)
    assert len(ran) == 5  # 1-5 run, 6 and 7 are blocked, the 8th stops the run
    stop = caught.value.output.output_info
    assert stop.terminal and stop.detector == "global_circuit_breaker" and stop.count == 7
    seen = outputs(model)
    assert len(seen) == 7
    assert "[loopguard] WARNING: you have called read_file 3 times" in seen[3]
    assert seen[5].startswith("CRITICAL: read_file was called 5 times") and "blocked" in seen[5]
    assert seen[6].startswith("CRITICAL: read_file was called 6 times")


def test_changing_arguments_are_never_warned() -> None:
    agent, model, ran, rails = setup(lambda i: {"path": f"notes-{i}.txt"})
    with rails.run():
        result = Runner.run_sync(agent, "read them all", max_turns=40)
    assert len(ran) == 25 and result.final_output == "done"
    assert not any("loopguard" in o or "CRITICAL" in o for o in outputs(model))


def test_each_run_starts_clean_and_is_forgotten() -> None:
    agent, model, ran, rails = setup(lambda i: {"path": "notes.txt"})
    guard = rails.guard
    with rails.run("first") as run:
        verdict = guard.before_call("read_file", {"path": "x"}, session="user-1", run=run)
        assert verdict.verdict == "allow"
    assert not guard.end_run(session="user-1", run="first"), "the run was ended on exit"


PRESET = {"tools": {"loopDetection": {"enabled": True}}, "loopguard": {"preset": "recommended"}}


def test_a_chanting_response_stops_the_run_before_its_tool_calls() -> None:
    ran: List[str] = []

    @function_tool
    def read_file(path: str) -> str:
        """Read a file."""
        ran.append(path)
        return "notes"

    chant = "I will read the notes once more to be completely sure. " * 12
    model = ScriptedModel([[assistant_message(chant), function_call("read_file", {"path": "notes.txt"}, call_id="c1")]])
    rails = LoopGuardrails(loopguard.Guard(PRESET), session="user-2")
    agent = Agent(name="worker", model=model, tools=rails.protect(read_file))
    with pytest.raises(LoopStopped) as caught:
        with rails.run():
            Runner.run_sync(agent, "write the report", hooks=rails.hooks)
    assert caught.value.verdict.detector == "content_chanting"
    assert caught.value.verdict.terminal
    assert ran == []


# Budgets: the run hooks report each response's usage, so a budget stops the agent.
def budget_setup(
    args_of: Callable[[int], Dict[str, Any]], budgets: Dict[str, Any]
) -> "tuple[Agent[Any], List[str], LoopGuardrails]":
    """Responses of gpt-4o that each used 1,000 input tokens (800 read from the cache) and
    100 output tokens."""
    ran: List[str] = []

    @function_tool
    def read_file(path: str) -> str:
        """Read a file."""
        ran.append(path)
        return "TODO: write the report" if path == "notes.txt" else f"contents of {path}"

    details = InputTokensDetails(cached_tokens=800, cache_write_tokens=0)
    usage = Usage(requests=1, input_tokens=1000, input_tokens_details=details, output_tokens=100, total_tokens=1100)
    # Each response with its own id, as the API gives them (usage is counted once per id).
    steps: List[Any] = [
        ModelResponse(output=[function_call("read_file", args_of(i), call_id=f"call_{i}")], usage=usage, response_id=f"resp_{i}")
        for i in range(40)
    ]
    steps.append([assistant_message("done")])
    model = ScriptedModel(steps)
    model.model = "gpt-4o-2024-08-06"  # type: ignore[attr-defined]  # the name a provider model carries
    config = {"tools": {"loopDetection": {"enabled": True}}, "loopguard": {"budgets": budgets}}
    rails = LoopGuardrails(loopguard.Guard(config), session="user-3")
    agent = Agent(name="worker", model=model, tools=rails.protect(read_file))
    return agent, ran, rails


def test_a_cost_budget_stops_a_productive_agent() -> None:
    # Each response: 200 uncached input tokens at $2.50, 800 cached at $1.25, 100 output at
    # $10 per million: $0.0025. A run budget of $0.01 is used up by the 4th response.
    agent, ran, rails = budget_setup(lambda i: {"path": f"file{i}.txt"}, {"run": {"cost": 0.01}, "withoutProgress": {"enabled": False}})
    with pytest.raises(ToolInputGuardrailTripwireTriggered) as caught:
        with rails.run():
            Runner.run_sync(agent, "read everything", hooks=rails.hooks, max_turns=60)
    assert len(ran) == 3, "the 4th response used the budget up: its call was blocked"
    assert caught.value.output.output_info.detector == "run_budget"


def test_a_without_progress_cap_stops_a_circling_agent_before_the_loop_detectors() -> None:
    # The same read for the same answer: the first is progress, then 5 more are allowed.
    agent, ran, rails = budget_setup(lambda i: {"path": "notes.txt"}, {"withoutProgress": {"calls": 5}})
    with pytest.raises(ToolInputGuardrailTripwireTriggered) as caught:
        with rails.run():
            Runner.run_sync(agent, "write the report", hooks=rails.hooks, max_turns=60)
    assert len(ran) == 6
    assert caught.value.output.output_info.detector == "no_progress_budget"


def test_a_run_inside_a_tool_of_another_run_is_its_child() -> None:
    guard = Recording(loopguard.Guard(CONFIG))
    rails = LoopGuardrails(guard, session="user-9")  # type: ignore[arg-type]

    @function_tool
    def read_file(path: str) -> str:
        """Read a file."""
        return "contents"

    child = Agent(name="reader", model=ScriptedModel([[function_call("read_file", {"path": "a"}, call_id="c")], [assistant_message("read it")]] * 2), tools=rails.protect(read_file))

    @function_tool
    async def delegate(task: str) -> str:
        """Hand a task to a sub-agent."""
        with rails.run():
            return str((await Runner.run(child, task, hooks=rails.hooks)).final_output)

    steps: List[Any] = [[function_call("delegate", {"task": f"part {i}"}, call_id=f"d{i}")] for i in range(2)]
    parent = Agent(name="lead", model=ScriptedModel([*steps, [assistant_message("all done")]]), tools=rails.protect(delegate))
    with rails.run() as parent_run:
        assert Runner.run_sync(parent, "split the work", hooks=rails.hooks).final_output == "all done"
    parents = [s for s in guard.scopes if s["session"] == "user-9"]
    children = [s for s in guard.scopes if s["session"] != "user-9"]
    assert all(s["run"] == parent_run and s["parent_session"] is None for s in parents)
    # Each sub-agent run is a session of its own, named for its run, and every one of its
    # events names the parent's session and run.
    assert len({s["session"] for s in children}) == 2
    assert {s["session"] for s in children} == {f"user-9/agent-{s['run']}" for s in children}
    assert all(s["parent_session"] == "user-9" and s["parent_run"] == parent_run for s in children if s["event"] != "end_run")
    assert {s["event"] for s in children} >= {"begin", "message", "end_run"}
