"""Type-checked with ``mypy --strict`` by ``test_typing.py`` (never run): code that names
every detector and level, whose types the stubs generate from the engine's own tables
(crates/loopguard/tests/binding_types.rs). A detector the engine adds makes mypy fail here
until this code handles it, as a host's exhaustive code would have to."""

from __future__ import annotations

from typing import Optional, assert_never

from loopguard import Counted, Guard, Recorded, Ticket, Verdict
from loopguard._native import Detector, GuardConfig, Level, Role

CONFIG: GuardConfig = {
    "tools": {"loopDetection": {"enabled": True, "warningThreshold": 5, "detectors": {"pingPong": True}}},
    "loopguard": {"preset": "recommended", "mode": "shadow", "policy": {"tools": [{"match": "read*", "class": "read"}]}},
}


def advice(detector: Detector) -> str:
    match detector:
        case "generic_repeat" | "consecutive_repeat" | "stale_repeat":
            return "the same call again"
        case "known_poll_no_progress":
            return "a poll that does not move"
        case "ping_pong" | "cycle":
            return "calls going round"
        case "unknown_tool_repeat":
            return "a tool that does not exist"
        case "global_circuit_breaker" | "compaction_loop_persisted" | "escalation":
            return "the run is stopped"
        case "error_cascade" | "target_thrash":
            return "failures piling up"
        case "batch_duplicates":
            return "one call twice in a batch"
        case "run_budget" | "session_budget" | "agent_budget" | "day_budget":
            return "the money or tokens allowed are spent"
        case "no_progress_budget":
            return "spending without getting anywhere"
        case "repeated_message" | "content_chanting" | "no_tool_turns":
            return "the model repeating itself"
        case "run_storm":
            return "runs of a session failing the same way"
        case "agent_tree":
            return "sub-agents spawned past a limit"
        case _:
            assert_never(detector)


def severity(level: Level) -> int:
    match level:
        case "warning":
            return 1
        case "critical":
            return 2
        case _:
            assert_never(level)


def host_cycle(guard: Guard) -> Optional[str]:
    with guard.begin("read", {"path": "a"}, session="s", run="r") as ticket:
        checked: Ticket = ticket
        verdict: Verdict = checked.verdict
        if verdict.detector is not None and verdict.level is not None:
            print(advice(verdict.detector), severity(verdict.level))
        if ticket.blocked:
            return ticket.ends_run
        recorded: Recorded = ticket.finish(result={"text": "contents"})
    return recorded.ends_run


def model_turn(guard: Guard, answer: str, role: Role = "assistant") -> bool:
    verdict: Verdict = guard.message(answer, session="s", run="r", role=role, has_tool_calls=False, id="m1")
    piece: Verdict = guard.message(answer, session="s", run="r", delta=True, index=0, id="m2")
    return verdict.blocked or piece.blocked


host_cycle(Guard(CONFIG))


def report_usage(guard: Guard) -> Optional[str]:
    counted: Counted = guard.record_usage(
        session="s", run="r", id="resp-1", model="gpt-4o", input_tokens=1200, output_tokens=300
    )
    if counted.detector is not None:
        print(advice(counted.detector), counted.cost)
    return counted.ends_run


BUDGETS: GuardConfig = {
    "loopguard": {
        "budgets": {"run": {"cost": 2.0}, "day": {"tokens": 5_000_000}, "withoutProgress": {"calls": 25}, "warnAt": 0.9},
        "prices": {"my-model": {"input": 1.0, "output": 4.0}},
    }
}
report_usage(Guard(BUDGETS))
model_turn(Guard(CONFIG), "No tool calls found.", "tool_feedback")
