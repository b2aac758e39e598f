#!/usr/bin/env python3
"""Writes the events and configs of the extension vectors (the `loopguard` block).

usage: spec/extensions/generate.py            # rewrite events.jsonl, config.json5, README
The expected.jsonl files are reviewed by hand and kept; regenerate them with
  loopguard replay --config CASE/config.json5 CASE/events.jsonl > CASE/expected.jsonl
only after checking every changed line.
"""
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = {}


def case(name, readme, config, events):
    CASES[name] = (readme, config, events)


def call(i, tool, args, run="r1", session="s1", batch=None, agent=None):
    e = {"type": "call", "session": session, "run": run, "call_id": f"c{i}", "tool": tool, "args": args}
    if batch:
        e["batch"] = batch
    if agent:
        e["agent"] = agent
    return e


def result(i, tool, args, result=None, error=None, run="r1", session="s1", agent=None):
    e = {"type": "result", "session": session, "run": run, "call_id": f"c{i}", "tool": tool, "args": args}
    if error is not None:
        e["error"] = error
    else:
        e["result"] = result
    if agent:
        e["agent"] = agent
    return e


def text(t, details=None):
    r = {"content": [{"type": "text", "text": t}]}
    if details is not None:
        r["details"] = details
    return r


ON = "tools: { loopDetection: { enabled: true } }"

# consecutive_repeat -------------------------------------------------------------------
ev = []
for i in range(1, 8):
    ev += [call(i, "session_status", {}), result(i, "session_status", {}, text(f"tokens {i * 37} in / {i} out"))]
case("consecutive-repeat-levels",
     "session_status {} called 7 times in a row, every result different: consecutive_repeat warns at the 4th call (3 before it) and blocks the 6th (5); generic_repeat stays quiet below 10.",
     "{ %s, loopguard: { detectors: { consecutiveRepeat: { warningThreshold: 3, criticalThreshold: 5 } } } }" % ON, ev)

ev = []
n = 0
for rep in range(6):
    n += 1
    ev += [call(n, "session_status", {}), result(n, "session_status", {}, text(f"t{n}"))]
    if rep == 2:
        n += 1
        ev += [call(n, "read", {"path": "/a"}), result(n, "read", {"path": "/a"}, text("a"))]
case("consecutive-repeat-broken-by-another-call",
     "A different call in between breaks the run: 3 session_status, a read, 3 session_status never reach the warning threshold of 4.",
     "{ %s, loopguard: { detectors: { consecutiveRepeat: { warningThreshold: 4, criticalThreshold: 6 } } } }" % ON, ev)

ev = []
for i in range(1, 9):
    a = {"action": "poll", "sessionId": "p1"}
    ev += [call(i, "process", a), result(i, "process", a, text(f"line {i}", {"status": "running", "aggregated": f"line {i}"}))]
case("consecutive-repeat-polls-exempt",
     "Known polls are exempt: 8 process polls in a row with changing output are all allowed (consecutive_repeat thresholds 3/5).",
     "{ %s, loopguard: { detectors: { consecutiveRepeat: { warningThreshold: 3, criticalThreshold: 5 } } } }" % ON, ev)

# cycle --------------------------------------------------------------------------------
def cycle_events(reps, stable, tools=("read", "grep", "list"), extra=0):
    ev, n = [], 0
    for r in range(reps):
        for t in tools:
            n += 1
            a = {"target": t}
            out = text(f"{t} same") if stable else text(f"{t} {n}")
            ev += [call(n, t, a), result(n, t, a, out)]
    for _ in range(extra):
        n += 1
        t = tools[(n - 1) % len(tools)]
        a = {"target": t}
        ev += [call(n, t, a), result(n, t, a, text(f"{t} same") if stable else text(f"{t} {n}"))]
    return ev

case("cycle-three-step-warning-only",
     "read → grep → list repeated with new results each time: cycle warns from 3 repetitions on (count 3, 4) and never blocks.",
     "{ %s, loopguard: { detectors: { cycle: { warningRepeats: 3, criticalRepeats: 4 } } } }" % ON,
     cycle_events(5, stable=False, extra=1))

case("cycle-three-step-critical-stable",
     "read → grep → list with the same three results: warning at 3 repetitions, block at 4 (count 4, not terminal).",
     "{ %s, loopguard: { detectors: { cycle: { warningRepeats: 3, criticalRepeats: 4 } } } }" % ON,
     cycle_events(4, stable=True, extra=1))

ev, n = [], 0
for r in range(6):
    for t in ("read", "read", "grep"):
        n += 1
        a = {"target": t}
        ev += [call(n, t, a), result(n, t, a, text(f"{t} {n}"))]
case("cycle-needs-distinct-patterns",
     "read, read, grep repeated: a period of 3 whose patterns are not distinct is not a cycle; nothing fires (cycle 2/3, generic off).",
     "{ tools: { loopDetection: { enabled: true, detectors: { genericRepeat: false, pingPong: false } } }, loopguard: { detectors: { cycle: { warningRepeats: 2, criticalRepeats: 3 } } } }",
     ev)

# error_cascade -----------------------------------------------------------------------
ev, n = [], 0
steps = [
    ("read", {"path": "/x"}, None, "ENOENT"),
    ("exec", {"command": "make"}, text("boom", {"status": "completed", "exitCode": 2, "aggregated": "boom"}), None),
    ("web_fetch", {"url": "u"}, {"isError": True, "content": [{"type": "text", "text": "503"}]}, None),
    ("edit", {"file": "f"}, text("", {"status": "error", "error": "Missing parameter"}), None),
    ("grep", {"q": "x"}, None, {"message": "regex parse error"}),
    ("list", {"dir": "/"}, text("ok", {"ok": True}), None),
] + [("read", {"path": f"/p{i}"}, None, "ENOENT") for i in range(6)]
for tool, args, res, err in steps:
    n += 1
    ev += [call(n, tool, args), result(n, tool, args, res, err)]
n += 1
ev += [call(n, "exec", {"command": "ls"}), call(n + 1, "read", {"path": "/q"})]
case("error-cascade-across-tools",
     "Failures of any kind across tools (an error, a non-zero exec exit, isError, status error) warn from the 4th on; a success resets the count; after 6 more failures the next calls are blocked (thresholds 4/6); warnings surface once per multiple of 4 for the whole run.",
     "{ %s, loopguard: { detectors: { errorCascade: { warningThreshold: 4, criticalThreshold: 6 } } } }" % ON, ev)

# batch_duplicates ----------------------------------------------------------------------
ev = [
    call(1, "read", {"path": "/a"}, batch="m1"),
    call(2, "read", {"path": "/a"}, batch="m1"),
    call(3, "list", {"dir": "/"}, batch="m1"),
    call(4, "read", {"path": "/a"}, batch="m1"),
    result(1, "read", {"path": "/a"}, text("a")),
    result(2, "read", {"path": "/a"}, text("a")),
    result(3, "list", {"dir": "/"}, text("l")),
    call(5, "read", {"path": "/a"}, batch="m2"),
    call(6, "read", {"path": "/a"}),
]
case("batch-duplicates",
     "Inside batch m1 the 2nd and 3rd identical reads are blocked (count 2, 3; their results are ignored); the same read in batch m2 or without a batch runs.",
     "{ %s, loopguard: { detectors: { batchDuplicates: {} } } }" % ON, ev)

# shadow mode ---------------------------------------------------------------------------
ev = []
for i in range(1, 33):
    ev += [call(i, "read", {"path": "/same"}), result(i, "read", {"path": "/same"}, text("same"))]
ev += [{"type": "compaction", "session": "s1", "run": "r1"}]
for i in range(33, 36):
    ev += [call(i, "read", {"path": "/same"}), result(i, "read", {"path": "/same"}, text("same"))]
case("shadow-mode-always-allows",
     "mode shadow: the 11th identical read would warn, the 21st would block, the 31st would trip the global breaker (terminal), and the compaction guard would abort: every call is allowed, results are recorded, and the answers say what would have fired.",
     "{ %s, loopguard: { mode: 'shadow' } }" % ON, ev)

# masking -------------------------------------------------------------------------------
def volatile(i):
    return text(f"job 550e8400-e29b-41d4-a716-4466554400{i:02d} finished at 2026-04-09T22:52:{i:02d}Z in {i}.5s (pid {4000 + i})")

ev = []
for i in range(1, 22):
    ev += [call(i, "exec_status", {"job": 7}), result(i, "exec_status", {"job": 7}, volatile(i))]
case("masking-volatile-tokens-critical",
     "Results that differ only by a UUID, a timestamp, a duration and a pid are the same outcome once masked: the 21st call is blocked (generic_repeat 20).",
     "{ %s, loopguard: { masking: {} } }" % ON, ev)
case("masking-off-warn-only",
     "The same stream without masking: every outcome is new, so generic_repeat only warns.",
     "{ %s }" % ON, ev)

ev = []
for i in range(1, 22):
    ev += [call(i, "exec_status", {"job": 7}), result(i, "exec_status", {"job": 7}, volatile(i))]
case("masking-per-tool",
     "Masking switched on for one tool only (policy mask: true): the 21st exec_status is blocked.",
     "{ %s, loopguard: { policy: { tools: [ { match: 'exec_*', mask: true } ] } } }" % ON, ev)

# tool policy ---------------------------------------------------------------------------
ev = []
for i in range(1, 12):
    a = {"query": "status of build", "title": f"Attempt {i}"}
    ev += [call(i, "search", a), result(i, "search", a, text(f"result {i}"))]
case("policy-ignore-args",
     "ignoreArgs ['title']: searches that differ only by a cosmetic title are one call pattern, so the 11th warns (generic_repeat 10).",
     "{ %s, loopguard: { policy: { tools: [ { match: 'search', ignoreArgs: ['title'] } ] } } }" % ON, ev)

ev = []
for i in range(1, 22):
    r = text("nothing new", {"items": [], "meta": {"requestId": f"r-{i}", "served": "edge"}})
    ev += [call(i, "inbox", {}), result(i, "inbox", {}, r)]
case("policy-ignore-result-path",
     "ignoreResult ['details.meta.requestId']: results that differ only by a request id are the same outcome, so the 21st call is blocked.",
     "{ %s, loopguard: { policy: { tools: [ { match: 'inbox', ignoreResult: ['details.meta.requestId'] } ] } } }" % ON, ev)

ev = []
for i in range(1, 22):
    a = {"channel": "ops", "body": "deploy finished"}
    r = text(f"posted {i}", {"ok": True, "messageId": f"m{i}", "ts": f"17000000{i:02d}"})
    ev += [call(i, "post_update", a), result(i, "post_update", a, r)]
case("policy-class-send",
     "A tool the policy marks as a send gets SPEC's send hashing: message ids and timestamps are stripped, so the 21st identical post is blocked.",
     "{ %s, loopguard: { policy: { tools: [ { match: 'post_*', class: 'send' } ] } } }" % ON, ev)

ev = []
for i in range(1, 12):
    a = {"job": "build-42"}
    ev += [call(i, "job_status", a), result(i, "job_status", a, text("running"))]
case("policy-class-poll-thresholds",
     "A tool the policy marks as a poll, with its own thresholds (3/5): known_poll_no_progress warns at the 4th call and blocks the 6th.",
     "{ %s, loopguard: { policy: { tools: [ { match: 'job_status', class: 'poll', warningThreshold: 3, criticalThreshold: 5 } ] } } }" % ON, ev)

# per-agent override --------------------------------------------------------------------
ev = []
for i in range(1, 13):
    ev += [call(i, "read", {"path": "/same"}, agent="quiet"), result(i, "read", {"path": "/same"}, text("same"), agent="quiet")]
for i in range(13, 25):
    ev += [call(i, "read", {"path": "/same"}, session="s2", agent="loud"), result(i, "read", {"path": "/same"}, text("same"), session="s2", agent="loud")]
case("agent-overlay",
     "The global block turns consecutiveRepeat on (3/20); agent quiet switches it off and agent loud runs in shadow mode: quiet only gets generic warnings from the 11th call, loud's verdicts are all allow with what would have fired.",
     "{ %s, loopguard: { detectors: { consecutiveRepeat: { warningThreshold: 3, criticalThreshold: 20 } } }, agents: { list: [ { id: 'quiet', loopguard: { detectors: { consecutiveRepeat: { enabled: false } } } }, { id: 'loud', loopguard: { mode: 'shadow' } } ] } }" % ON, ev)

# invalid configs -----------------------------------------------------------------------
case("config-invalid-extension-key",
     "An unknown key in the loopguard block (detectors.cycles) is a load error: exit 1, nothing on stdout.",
     "{ %s, loopguard: { detectors: { cycles: {} } } }" % ON, [call(1, "read", {})])
case("config-invalid-mask-rule",
     "An unknown masking rule name is a load error: exit 1.",
     "{ %s, loopguard: { masking: { rules: ['uuid', 'phone'] } } }" % ON, [call(1, "read", {})])


def main():
    for name, (readme, config, events) in CASES.items():
        d = os.path.join(HERE, name)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "README"), "w") as f:
            f.write(readme + "\n")
        with open(os.path.join(d, "config.json5"), "w") as f:
            f.write(config + "\n")
        with open(os.path.join(d, "events.jsonl"), "w") as f:
            for e in events:
                f.write(json.dumps(e, separators=(",", ":")) + "\n")
        if name.startswith("config-invalid"):
            with open(os.path.join(d, "expected-exit"), "w") as f:
                f.write("1\n")
    print(f"{len(CASES)} cases")


if __name__ == "__main__":
    main()
