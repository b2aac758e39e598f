"""The LangChain adapter on a real `create_agent` agent, driven by LangChain's own fake
chat model: the scripted model calls the same tool 25 times; it answers in text turn
after turn while a harness insists on a tool call; it chants inside one answer."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware, AgentState, hook_config
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool

import loopguard
from loopguard.langchain import LoopGuardMiddleware
from recording import Recording

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
    return agent_with_config(model, ran, CONFIG)


def agent_with_config(model: ScriptedModel, ran: List[Dict[str, Any]], config: Dict[str, Any]) -> Any:
    @tool
    def read_file(path: str) -> str:
        """Read a file."""
        ran.append({"path": path})
        return "TODO: write the report"

    return create_agent(model, [read_file], middleware=[LoopGuardMiddleware(loopguard.Guard(config))])


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


# Loops without tool calls: the preset's detectors of messages.
PRESET = {"tools": {"loopDetection": {"enabled": True}}, "loopguard": {"preset": "recommended"}}


class InsistOnTools(AgentMiddleware[AgentState[Any], Any]):
    """A harness that wants a tool call at every turn (as mini-swe-agent does): an answer
    without one gets "No tool calls found" and the model is asked again."""

    @hook_config(can_jump_to=["model"])
    def after_model(self, state: AgentState[Any], runtime: Any) -> Optional[Dict[str, Any]]:
        last = state["messages"][-1]
        if isinstance(last, AIMessage) and not last.tool_calls and "stopped by loopguard" not in str(last.content):
            return {"jump_to": "model", "messages": [HumanMessage(content=NO_TOOL)]}
        return None


NO_TOOL = "No tool calls found in the response. Every response MUST include at least one tool call."


def test_an_agent_that_never_calls_a_tool_is_stopped() -> None:
    answers = [AIMessage(content=f"I believe the report is written (attempt {i}).") for i in range(30)]
    model = ScriptedModel(messages=iter(answers), seen=[])

    @tool
    def read_file(path: str) -> str:
        """Read a file."""
        return "contents"

    # The guard's middleware first: its after_model runs after the harness's (LangChain runs
    # after_model hooks in reverse order), and its before_model sees the harness's reply.
    agent = create_agent(
        model, [read_file], middleware=[LoopGuardMiddleware(loopguard.Guard(PRESET)), InsistOnTools()]
    )
    out = agent.invoke({"messages": [{"role": "user", "content": "write the report"}]}, {"recursion_limit": 200})
    final = out["messages"][-1]
    assert isinstance(final, AIMessage) and "stopped by loopguard" in str(final.content)
    assert "no_tool_turns" in str(final.content)
    feedback = [m for m in out["messages"] if isinstance(m, HumanMessage) and m.content == NO_TOOL]
    # no_tool_turns blocks at the 8th reply in a row; the model is not called again.
    assert len(feedback) == 8
    assert len(model.seen) == 8
    # From the 3rd reply on, the model read the guard's warning with it.
    assert any("WARNING" in str(m.content) for m in model.seen[3] if isinstance(m, HumanMessage))
    assert not any("WARNING" in str(m.content) for m in model.seen[1] if isinstance(m, HumanMessage))


def test_an_agent_that_chants_is_stopped_before_its_tool_calls_run() -> None:
    chant = "Let me read the file again to make sure the report is correct. " * 12
    answers = [AIMessage(content=chant, tool_calls=[{"name": "read_file", "args": {"path": "notes.txt"}, "id": "call_1"}])]
    model = ScriptedModel(messages=iter(answers), seen=[])
    ran: List[Dict[str, Any]] = []
    out = agent_with_config(model, ran, PRESET).invoke({"messages": [{"role": "user", "content": "write the report"}]})
    final = out["messages"][-1]
    assert isinstance(final, AIMessage) and "content_chanting" in str(final.content)
    assert ran == [], "the chanting answer's tool call did not run"
    assert len(model.seen) == 1


def test_text_answers_of_a_conversation_are_not_loops() -> None:
    """A chat whose answers never call a tool (a Q&A session) ends each turn normally."""
    guard = loopguard.Guard(PRESET)

    @tool
    def read_file(path: str) -> str:
        """Read a file."""
        return "contents"

    for i, question in enumerate(["What is a branch?", "How do I rebase?", "What is a tag?"]):
        model = ScriptedModel(messages=iter([AIMessage(content=f"Answer {i}: it is explained in the Git book.")]), seen=[])
        agent = create_agent(model, [read_file], middleware=[LoopGuardMiddleware(guard)])
        out = agent.invoke({"messages": [{"role": "user", "content": question}]}, {"configurable": {"thread_id": "qa"}})
        assert "loopguard" not in str(out["messages"][-1].content)


def test_an_agent_called_as_a_tool_is_a_child_of_the_run_that_called_it() -> None:
    guard = Recording(loopguard.Guard(CONFIG))
    ran: List[Dict[str, Any]] = []

    def child_agent() -> Any:
        steps = [AIMessage(content="", tool_calls=[{"name": "read_file", "args": {"path": "a"}, "id": "c"}]), AIMessage(content="read it")]

        @tool
        def read_file(path: str) -> str:
            """Read a file."""
            ran.append({"path": path})
            return "contents"

        return create_agent(ScriptedModel(messages=iter(steps), seen=[]), [read_file], middleware=[LoopGuardMiddleware(guard)])  # type: ignore[arg-type]

    @tool
    def delegate(task: str) -> str:
        """Hand a task to a sub-agent."""
        out = child_agent().invoke({"messages": [{"role": "user", "content": task}]})
        return str(out["messages"][-1].content)

    parent_steps = [
        AIMessage(content="", tool_calls=[{"name": "delegate", "args": {"task": f"part {i}"}, "id": f"d{i}"}]) for i in range(2)
    ] + [AIMessage(content="all done")]
    parent = create_agent(ScriptedModel(messages=iter(parent_steps), seen=[]), [delegate], middleware=[LoopGuardMiddleware(guard)])  # type: ignore[arg-type]
    out = parent.invoke({"messages": [{"role": "user", "content": "split the work"}]}, {"configurable": {"thread_id": "t9"}})
    assert out["messages"][-1].content == "all done" and len(ran) == 2
    parents = [s for s in guard.scopes if s["session"] == "t9"]
    children = [s for s in guard.scopes if s["session"] != "t9"]
    parent_run = parents[0]["run"]
    assert all(s["run"] == parent_run and s["parent_session"] is None for s in parents)
    # Each invocation of the sub-agent is a session of its own, named for its run, and
    # every one of its events names the parent's session and run.
    assert {s["session"] for s in children} == {f"t9/agent-{s['run']}" for s in children}
    assert len({s["session"] for s in children}) == 2
    assert all(s["parent_session"] == "t9" and s["parent_run"] == parent_run for s in children if s["event"] != "end_run")
    assert {s["event"] for s in children} >= {"begin", "message", "end_run"}
