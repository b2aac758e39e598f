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
case("cycle-step-repeated-inside-period",
     "read, read, grep repeated: a period of 3 whose steps are not all distinct is a cycle; it warns from 2 repetitions (count 2 at the 6th call) and never blocks, because every result is new (cycle 2/3, SPEC's repeat and ping-pong detectors off).",
     "{ tools: { loopDetection: { enabled: true, detectors: { genericRepeat: false, pingPong: false } } }, loopguard: { detectors: { cycle: { warningRepeats: 2, criticalRepeats: 3 } } } }",
     ev)

# A sweep of 8 views of one file (two steps the same view) with the same results, in a
# window of 10: three repetitions are 24 calls, beyond the window.
SWEEP = [("view", {"path": "f.py", "range": r}) for r in ("1-50", "50-100", "100-150", "1-50", "150-200", "200-250", "250-300", "300-350")]
ev, n = [], 0
for r in range(3):
    for t, a in SWEEP:
        n += 1
        ev += [call(n, t, a), result(n, t, a, text(f"lines {a['range']}"))]
case("cycle-long-period-beyond-the-window",
     "A sweep of 8 views (one view twice per sweep) repeated with the same results, historySize 10: the cycle warns at 2 repetitions (16th call) and blocks the 24th call, the last step of the 3rd repetition (count 3, not terminal), although only 10 calls fit in the window.",
     "{ tools: { loopDetection: { enabled: true, historySize: 10, detectors: { genericRepeat: false } } }, loopguard: { detectors: { cycle: { maxLength: 8, warningRepeats: 2, criticalRepeats: 3 } } } }",
     ev)

ev, n = [], 0
for r in range(4):
    for t in ("a", "b", "c", "d", "e", "f", "g"):
        n += 1
        ev += [call(n, t, {}), result(n, t, {}, text(t))]
case("cycle-period-capped-at-history-size",
     "A period of 7 with stable results never fires when historySize is 6: the longest period is capped at the history size (maxLength 16 asks for more).",
     "{ tools: { loopDetection: { enabled: true, historySize: 6 } }, loopguard: { detectors: { cycle: { maxLength: 16, warningRepeats: 2, criticalRepeats: 3 } } } }",
     ev)

ev = []
for i in range(1, 9):
    ev += [call(i, "read", {"p": 1}), result(i, "read", {"p": 1}, text("same"))]
case("cycle-run-of-one-call-is-not-a-cycle",
     "The same call 8 times in a row is a run, not a cycle of period 2 or 4: cycle stays quiet (SPEC's detectors off, cycle 2/3).",
     "{ tools: { loopDetection: { enabled: true, detectors: { genericRepeat: false, pingPong: false } } }, loopguard: { detectors: { cycle: { warningRepeats: 2, criticalRepeats: 3 } } } }",
     ev)

# stale_repeat --------------------------------------------------------------------------
ev, n = [], 0
for r in range(6):
    n += 1
    ev += [call(n, "read", {"path": "/a"}), result(n, "read", {"path": "/a"}, text("contents of a"))]
    n += 1
    ev += [call(n, "list", {"dir": f"/d{r}"}), result(n, "list", {"dir": f"/d{r}"}, text(f"listing {r}"))]
case("stale-repeat-levels",
     "read /a returns the same contents every time, with other calls in between: stale_repeat warns at the 4th read (3 earlier identical results) and blocks the 5th (4); the 6th is blocked too (count 4: vetoes do not count).",
     "{ %s, loopguard: { detectors: { staleRepeat: {} } } }" % ON, ev)

ev, n = [], 0
for r in range(5):
    n += 1
    a = {"command": "cp -r /in/* /out/"}
    ev += [call(n, "exec", a), result(n, "exec", a, error="cp: cannot stat '/in/*': No such file or directory")]
    n += 1
    ev += [call(n, "chat", {"to": "ops", "text": f"still empty ({r})"}), result(n, "chat", {"to": "ops", "text": f"still empty ({r})"}, text(f"reply {r}"))]
case("stale-repeat-failure-blocks-sooner",
     "The same failing command with the same error, a message in between each time: an identical failure blocks at 3 earlier ones (the 4th attempt), one step before an identical success would (failureThreshold 3, criticalThreshold 4).",
     "{ %s, loopguard: { detectors: { staleRepeat: { warningThreshold: 2 } } } }" % ON, ev)

ev = []
for i in range(1, 9):
    ev += [call(i, "read", {"path": "/log"}), result(i, "read", {"path": "/log"}, text(f"{i} lines"))]
case("stale-repeat-changing-results-never-fire",
     "The same read 8 times whose result changes every time (a growing log): stale_repeat never fires (SPEC's generic repeat off).",
     "{ tools: { loopDetection: { enabled: true, detectors: { genericRepeat: false } } }, loopguard: { detectors: { staleRepeat: {} } } }",
     ev)

# target_thrash -------------------------------------------------------------------------
ev, n = [], 0
for i in range(7):
    n += 1
    key = "file" if i == 3 else "path"
    a = {key: "src/app.py", "old": f"def f({i}):", "new": "def f(x):"}
    ev += [call(n, "edit", a), result(n, "edit", a, error=f"old text not found: def f({i}):")]
    if i == 1:
        n += 1
        b = {"path": "src/other.py", "old": "x", "new": "y"}
        ev += [call(n, "edit", b), result(n, "edit", b, error="old text not found: x")]
case("target-thrash-levels",
     "edit fails on src/app.py with a different old text each time (once given as `file` instead of `path`); a failure on src/other.py does not count: target_thrash warns at the call after 4 failures on src/app.py and blocks the one after 6.",
     "{ %s, loopguard: { detectors: { targetThrash: {} } } }" % ON, ev)

ev, n = [], 0
for i in range(4):
    n += 1
    a = {"url": "https://example.test/api", "attempt": i}
    ev += [call(n, "fetch", a), result(n, "fetch", a, error="503 Service Unavailable")]
    n += 1
    b = {"path": "/tmp/x", "attempt": i}
    ev += [call(n, "grep_logs", b), result(n, "grep_logs", b, error="no such file")]
case("target-thrash-policy-target-names",
     "The policy names each tool's target: fetch's `url` counts (warning after 2 failures, block after 3), grep_logs has `target: []` and never fires although its `path` keeps failing.",
     "{ %s, loopguard: { policy: { tools: [ { match: 'fetch', target: ['url'] }, { match: 'grep_logs', target: [] } ] }, detectors: { targetThrash: { warningThreshold: 2, criticalThreshold: 3 } } } }" % ON, ev)

# escalation ----------------------------------------------------------------------------
ev, n = [], 0
steps = [("read", "grep", "list")[i % 3] for i in range(9)] + ["read", "write", "grep", "list", "read"]
for t in steps:
    n += 1
    a = {"path": "/notes"} if t == "write" else {"target": t}
    ev += [call(n, t, a), result(n, t, a, text("ok" if t == "write" else f"{t} same"))]
case("escalation-stops-a-continued-cycle",
     "read → grep → list with the same results is blocked by cycle at its 3rd repetition (9th call); the agent goes on: read is blocked again (escalation 1), a write outside the cycle is allowed, grep is blocked (escalation 2) and list, the 3rd attempt to continue the cycle, stops the run (terminal: the read after it is blocked with escalation too).",
     "{ %s, loopguard: { detectors: { cycle: { warningRepeats: 2, criticalRepeats: 3 }, escalation: {} } } }" % ON, ev)

ev, n = [], 0
for i in range(5):
    n += 1
    ev += [call(n, "read", {"path": "/same"}), result(n, "read", {"path": "/same"}, text("same"))]
for t in ("list", "grep", "search", "open"):
    n += 1
    ev += [call(n, t, {"q": t}), result(n, t, {"q": t}, text(t))]
case("escalation-lets-a-new-approach-through",
     "A read blocked by stale_repeat (the 5th, after 4 identical results) is not retried: the four different calls that follow are all allowed, and the run is not stopped (escalation stopAfter 2).",
     "{ %s, loopguard: { detectors: { staleRepeat: {}, escalation: { stopAfter: 2 } } } }" % ON, ev)

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

ev, n = [], 0
plan = ["F", "S", "S", "F", "F", "S", "S", "S", "F", "F", "S", "F", "F", "F"]
for k, outcome in enumerate(plan):
    n += 1
    a = {"command": f"step {k}"}
    if outcome == "F":
        ev += [call(n, "exec", a), result(n, "exec", a, error=f"failure {k}")]
    else:
        ev += [call(n, "exec", a), result(n, "exec", a, text(f"ok {k}"))]
for k in range(2):
    n += 1
    ev += [call(n, "exec", {"command": f"next {k}"})]
case("error-cascade-max-gap",
     "maxGap 2: failures separated by at most 2 successes are one run, live while the newest outcome failed. The 6th call warns (3 of the last 5 failed); a success makes the run quiet; 3 successes in a row end it; the second run warns at the 13th call (3 of the last 4), then blocks the 15th (5 of the last 6) and every call after it (thresholds 3/5).",
     "{ %s, loopguard: { detectors: { errorCascade: { warningThreshold: 3, criticalThreshold: 5, maxGap: 2 } } } }" % ON, ev)

ev, n = [], 0
for cmd in ["git status", "ls", "pytest -x", "python -c 'import app'", "make test", "cat setup.py", "pwd"]:
    n += 1
    a = {"command": cmd}
    ev += [call(n, "exec", a), result(n, "exec", a, error="sh: 0: getcwd() failed: No such file or directory")]
case("error-cascade-same-error-different-commands",
     "The agent deleted its working directory: every command after that fails with the same permanent error (getcwd: No such file or directory). With the recommended preset (errorCascade 5/8, repeats 3, permanentThreshold 5) the 6th command is blocked (5 failures, all with the same permanent error), not the 9th; the 7th is blocked too (escalation: it goes on with the loop). No repeat detector sees it: every command differs.",
     "{ %s, loopguard: { preset: 'recommended' } }" % ON, ev)

ev, n = [], 0
probes = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo"]
for word in probes:
    n += 1
    a = {"command": f"python -m {word}"}
    ev += [call(n, "exec", a), result(n, "exec", a, error=f"ModuleNotFoundError: No module named '{word}'")]
case("error-cascade-changing-errors-only-warn",
     "Eleven different commands fail with eleven different errors (an agent finding out which module exists): a count alone is no evidence of a loop, so error_cascade only warns (from the 6th call: 5 failures) and never blocks, past the critical count of 8, because no error repeats (repeats 3).",
     "{ %s, loopguard: { preset: 'recommended' } }" % ON, ev)

ev, n = [], 0
for k in range(4):
    n += 1
    a = {"path": "src/app.py", "old": f"def run(self, arg{'_' * k}):", "new": "def run(self, args):"}
    ev += [call(n, "edit", a), result(n, "edit", a, error="Could not find the exact text in src/app.py")]
n += 1
a = {"path": "src/app.py", "old": "def run(self, *args):", "new": "def run(self, args):"}
ev += [call(n, "edit", a), result(n, "edit", a, text("Successfully replaced text in src/app.py"))]
for k, err in enumerate(["AssertionError: expected 2, got 3", "TypeError: run() missing 1 required positional argument"]):
    n += 1
    a = {"command": f"pytest tests/test_app.py -k case{k}"}
    ev += [call(n, "exec", a), result(n, "exec", a, error=err)]
n += 1
ev += [call(n, "exec", {"command": "pytest tests/test_app.py"})]
case("error-cascade-iteration-ends-in-success",
     "Four failed edits of src/app.py (the same error) then one that succeeds on the same file: the failures were iteration towards that success and the run ends there. Two test failures after it make a new run of 2: the 8th call is allowed. Counted across the success instead (maxGap 3), they would make 6 failures, 4 with the same error: a block. The 4th and 5th edits are warned (3 and 4 failures; thresholds 3/5).",
     "{ %s, loopguard: { detectors: { errorCascade: { warningThreshold: 3, criticalThreshold: 5, maxGap: 3, repeats: 3 } } } }" % ON, ev)

ev, n = [], 0
for k in range(10):
    n += 1
    a = {"url": f"https://api.example.test/items?page={'abcdefghij'[k]}"}
    ev += [call(n, "web_fetch", a), result(n, "web_fetch", a, error="503 Service Unavailable")]
case("error-cascade-retryable-waits-for-critical",
     "Ten fetches of different pages fail with the same retryable error (503 Service Unavailable): a retry may pass, so permanentThreshold (5) does not apply; the run is warned from the 4th call (3 failures) and blocked at the 9th (8 failures, all with the same error; thresholds 3/8).",
     "{ %s, loopguard: { detectors: { errorCascade: { warningThreshold: 3, criticalThreshold: 8, permanentThreshold: 5 } } } }" % ON, ev)

ev = []
for i in range(1, 7):
    a = {"action": "poll", "sessionId": "warm-otter"}
    ev += [call(i, "process", a), result(i, "process", a, text("No session found for warm-otter", {"status": "failed"}))]
case("stale-repeat-failing-poll-blocks",
     "A known poll (process poll) is exempt from the repeat detectors while it reports progress, but one that keeps failing identically (OpenClaw's process tool: details.status failed, `No session found`) is a failing repeat: stale_repeat warns at the 3rd poll and blocks the 4th (3 earlier identical failures; failureThreshold 3), like any call.",
     "{ %s, loopguard: { detectors: { staleRepeat: { warningThreshold: 2 } } } }" % ON, ev)

ev, n = [], 0
steps = [
    ("process", {"action": "kill", "sessionId": "p1"}, text("Killed session p1.", {"status": "failed", "sessionId": "p1"})),
    ("web_fetch", {"url": "https://example.test/missing"}, text("Not Found", {"status": 404, "url": "https://example.test/missing"})),
    ("process", {"action": "poll", "sessionId": "p2"}, text("No session found for p2", {"status": "failed"})),
    ("browser", {"action": "snapshot", "targetId": "t9"}, {"ok": False, "error": "tab not found"}),
    ("sessions_send", {"sessionKey": "agent:ops", "message": "status?"}, text("", {"status": "forbidden", "error": "not allowed"})),
]
for tool, args, res in steps:
    n += 1
    ev += [call(n, tool, args), result(n, tool, args, res)]
n += 1
ev += [call(n, "exec", {"command": "ls"})]
case("failure-from-structured-results",
     "Failures read from OpenClaw's structured results (the policy's failure table), none of them flagged isError: web_fetch details.status 404, process details.status failed, browser ok false, sessions_send status forbidden. A process kill that reports status failed with `Killed session` did what it was asked and is no failure: the call after it is allowed although error_cascade warns from 1 failure. The next three calls are warned (1, 2, 3 failures) and the 6th is blocked (4; thresholds 1/4, repeats 0: every error differs).",
     "{ %s, loopguard: { detectors: { errorCascade: { warningThreshold: 1, criticalThreshold: 4, repeats: 0 } } } }" % ON, ev)

# digits masking ------------------------------------------------------------------------
def page(i):
    return text(f"[{1230 + i}]<button>Submit</button> [{1231 + i}]<a>Reports</a> scroll {i * 40}px")

ev = []
for i in range(1, 6):
    ev += [call(i, "browser_get_state", {}), result(i, "browser_get_state", {}, page(i))]
cfg_digits = "{ tools: { loopDetection: { enabled: true, warningThreshold: 2, criticalThreshold: 3 } }, loopguard: { masking: {}, policy: { tools: [ { match: 'browser_get_state', mask: ['digits'] } ] } } }"
case("masking-digits-per-tool",
     "Page states that differ only in renumbered element indices and a scroll offset are one outcome once `digits` masks them (policy mask ['digits'] on browser_get_state): generic_repeat warns at the 3rd call and blocks the 4th (identical streak 3, thresholds 2/3).",
     cfg_digits, ev)
case("masking-digits-is-opt-in",
     "The same stream with every default masking rule (masking: {}) but not digits: each page state is new, so generic_repeat only warns (repeat count 2, 3, 4).",
     "{ tools: { loopDetection: { enabled: true, warningThreshold: 2, criticalThreshold: 3 } }, loopguard: { masking: {} } }", ev)

# the recommended preset ----------------------------------------------------------------
ev, n = [], 0
VIEWS = [("view", {"path": "lookups.py", "range": r}) for r in ("359-380", "380-400", "210-230", "125-145")] + [("grep", {"q": "register_lookup"})] + [("view", {"path": "json.py", "range": "272-323"}), ("grep", {"q": "class In"})]
for r in range(4):
    for t, a in VIEWS:
        n += 1
        ev += [call(n, t, a), result(n, t, a, text(f"{t} {a}"))]
case("preset-recommended",
     "preset recommended, one line: a period-7 cycle of views and greps with the same results (SWE-agent's django loop) is blocked at its 3rd repetition (21st call, cycle count 3), the next two calls of the cycle are blocked again (escalation 1, 2) and the third stops the run (terminal).",
     "{ tools: { loopDetection: { enabled: true } }, loopguard: { preset: 'recommended' } }", ev)
case("preset-keys-override",
     "The same stream with the preset's cycle switched off in the block: nothing blocks it (stale_repeat warns, since each view came back the same; its threshold is overridden to 5 and it never blocks).",
     "{ tools: { loopDetection: { enabled: true } }, loopguard: { preset: 'recommended', detectors: { cycle: { enabled: false }, staleRepeat: { criticalThreshold: 5, failureThreshold: 5 } } } }", ev)

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

# budgets ------------------------------------------------------------------------------
def usage(inp, out, run="r1", session="s1", agent=None, uid=None, model=None, cost=None, **extra):
    e = {"type": "usage", "session": session, "run": run}
    if agent:
        e["agent"] = agent
    if uid:
        e["id"] = uid
    if model:
        e["model"] = model
    e["input_tokens"] = inp
    e["output_tokens"] = out
    if cost is not None:
        e["cost"] = cost
    e.update(extra)
    return e


def step(i, run="r1", session="s1", agent=None, same=False):
    """A call and its result: a new read each time, or the same read with the same result."""
    args = {"path": "/same" if same else f"/f{i}"}
    out = text("same" if same else f"contents {i}")
    return [call(i, "read", args, run=run, session=session, agent=agent),
            result(i, "read", args, out, run=run, session=session, agent=agent)]


NO_WP = "withoutProgress: { enabled: false }"

ev = []
for i, (inp, out) in enumerate([(250, 50), (250, 50), (200, 50), (150, 50)], 1):
    ev += [usage(inp, out, uid=f"u{i}")] + step(i)
ev += [call(5, "read", {"path": "/f5"})]
case("budget-run-tokens-warn-then-stop",
     "budgets.run.tokens 1000, warnAt 0.8: after 850 tokens the next call is warned with what is left (150 tokens); the usage that brings the run to 1050 answers the stop (run_budget, 105%), and the next call is blocked, terminal; every later call of the run is blocked too.",
     "{ %s, loopguard: { budgets: { run: { tokens: 1000 }, %s } } }" % (ON, NO_WP), ev + [call(6, "list", {})])

ev = [usage(2000, 500, uid="a", model="gpt-4o-2024-08-06"),
      usage(1000, 1000, uid="b", model="anthropic/my-model"),
      usage(4000, 0, uid="c", model="no-such-model"),
      usage(10, 10, uid="d", model="no-such-model", cost=0.004),
      usage(100, 100, uid="e", model="claude-sonnet-4-5-20250929", cache_read_tokens=100000, cache_write_tokens=1000)]
ev += step(1)
case("budget-run-cost-prices",
     "budgets.run.cost 0.05: gpt-4o from the built-in table (2000 in, 500 out: $0.01), my-model from the config's prices ($1 and $3 per million: $0.004), an unknown model unpriced (cost null, its tokens still counted), the host's own cost ($0.004), Claude Sonnet 4.5 with cache reads and writes ($0.03555: 100 in at $3, 100 out at $15, 100k cache reads at $0.30, 1k cache writes at $3.75 per million): $0.05355 used up, the next call blocked.",
     "{ %s, loopguard: { budgets: { run: { cost: 0.05 }, %s }, prices: { 'my-model': { input: 1, output: 3 } } } }" % (ON, NO_WP), ev)

ev = [usage(300, 0, uid="u1"), usage(300, 0, uid="u1"), usage(301, 0, uid="u1"),
      usage(300, 0), usage(300, 0)]
ev += step(1)
ev += [usage(100, 0, uid="u2"), usage(100, 0, uid="u2")]
ev += step(2)
case("budget-retried-usage-counts-once",
     "A usage sent again with its id is answered the same and counts once; other figures under that id are refused (an error, nothing counted); usage without an id always counts. budgets.run.tokens 1000: 300 + 300 + 300 = 900 warns at the first call (90%), u2 brings the run to 1000 (counted once: used up), the next call is blocked.",
     "{ %s, loopguard: { budgets: { run: { tokens: 1000 }, %s } } }" % (ON, NO_WP), ev)

ev = []
ev += [usage(400, 0, run="r1", uid="a")] + step(1, run="r1")
ev += [usage(400, 0, run="r2", uid="a")] + step(2, run="r2")
ev += [usage(300, 0, run="r1", uid="b")]
ev += [call(3, "read", {"path": "/f3"}, run="r1"), call(4, "read", {"path": "/f4"}, run="r2"),
       call(5, "read", {"path": "/f5"}, run="r3"), call(6, "read", {"path": "/f6"}, run="r1", session="s2")]
case("budget-session-stops-every-run",
     "budgets.session.tokens 1000 across the runs of session s1 (the same usage id in two runs is two responses): 800 tokens warn r2's call, r1's next usage brings the session to 1100; then every call of every run of s1 is blocked (session_budget, terminal), a new run too; session s2 is untouched.",
     "{ %s, loopguard: { budgets: { session: { tokens: 1000 }, %s } } }" % (ON, NO_WP), ev)

ev = []
ev += [usage(600, 0, run="r1", agent="coder", uid="a")] + step(1, run="r1", agent="coder")
ev += [usage(600, 0, run="r2", agent="coder", uid="b")]
ev += [call(2, "read", {"path": "/f2"}, run="r2", agent="coder"), call(3, "read", {"path": "/f3"}, run="r3", agent="reviewer")]
ev += [usage(600, 0, run="r3", agent="reviewer", uid="c"), call(4, "read", {"path": "/f4"}, run="r3", agent="reviewer")]
case("budget-agent-in-a-session",
     "budgets.agent.tokens is per agent of a session: agent coder's two runs spend 1200 tokens of 1000 allowed (agent_budget stops coder's runs), agent reviewer in the same session is untouched until its own spend reaches the limit.",
     "{ %s, loopguard: { budgets: { agent: { tokens: 1000 }, %s } } }" % (ON, NO_WP), ev)

ev = [usage(700, 0, run="r1", uid="a")] + step(1, run="r1")
ev += [usage(700, 0, run="r2", uid="a"), call(2, "read", {"path": "/f2"}, run="r2"), call(3, "read", {"path": "/f3"}, run="r3")]
case("budget-day",
     "budgets.day.tokens 1000 with timeZone +02:00: the session's spend on one calendar day (replay's clock stands still, so every event is on one day) stops every run of the session (day_budget) until the day turns.",
     "{ %s, loopguard: { budgets: { day: { tokens: 1000 }, timeZone: '+02:00', %s } } }" % (ON, NO_WP), ev)

ev = []
for i in range(1, 7):
    ev += step(i)
case("budget-run-calls",
     "budgets.run.calls 5, warnAt 0.6: the 4th call is warned (3 of 5 used, 2 left), the 6th is blocked (5 of 5), terminal.",
     "{ %s, loopguard: { budgets: { run: { calls: 5 }, warnAt: 0.6, %s } } }" % (ON, NO_WP), ev)

ev = step(1)
for i in range(2, 10):
    ev += step(i, same=True)
case("budget-without-progress-stops-a-circling-run",
     "budgets.withoutProgress.calls 5: new reads are progress; the same read with the same result is not (only its first success is). After 5 calls without progress the next is blocked (no_progress_budget, terminal), long before the loop detectors' thresholds; the 4th call without progress is warned (80%).",
     "{ %s, loopguard: { budgets: { withoutProgress: { calls: 5 } } } }" % ON, ev)

ev = []
for i in range(1, 31):
    ev += step(i)
    if i % 3 == 0:
        ev += [call(100 + i, "run_tests", {}), result(100 + i, "run_tests", {}, error="1 failed")]
case("budget-without-progress-spares-a-productive-run",
     "budgets.withoutProgress.calls 3 (tight): a run that reads something new at least every other call, with failing test runs in between, is never warned or stopped: every new success is progress.",
     "{ %s, loopguard: { budgets: { withoutProgress: { calls: 3 } } } }" % ON, ev)

ev = []
for i in range(1, 5):
    ev += [usage(300, 0, uid=f"u{i}")] + step(i)
case("budget-shadow",
     "mode shadow with budgets.run.tokens 1000: the warning and the stop are reported (shadow on the call, shadow_stop on the usage, stop null) and every call is allowed.",
     "{ %s, loopguard: { mode: 'shadow', budgets: { run: { tokens: 1000 }, %s } } }" % (ON, NO_WP), ev)

ev = [usage(-1, 0), usage(1.5, 0), usage("10", 0), usage(1, 0, prompt_tokens=5), usage(1, 0, cost=-0.01),
      usage(200000000, 0), {"type": "usage", "session": "s1", "run": "r1", "output_tokens": 1},
      usage(1, 0, model=5), usage(1, 0, cost="0.5")]
ev += step(1) + [usage(900, 0, uid="ok")] + step(2)
case("budget-bad-usage-is-refused",
     "Usage that cannot be right is refused with an error and counts nothing: a negative, fractional or string count, an unknown member (prompt_tokens: send it as input_tokens), a negative cost, a count above 100,000,000, no input_tokens, a model that is not a string, a cost that is a string. budgets.run.tokens 1000: only the valid 900 counts (the next call is warned, 100 left).",
     "{ %s, loopguard: { budgets: { run: { tokens: 1000 }, %s } } }" % (ON, NO_WP), ev)

# messages (loops without tool calls) ---------------------------------------------------
def msg(role, t, id=None, tools=None, delta=None, index=None, reasoning=None, run="r1", session="s1"):
    e = {"type": "message", "session": session, "run": run, "role": role, "text": t}
    if reasoning is not None:
        e["reasoning"] = reasoning
    if tools is not None:
        e["has_tool_calls"] = tools
    if id is not None:
        e["id"] = id
    if delta is not None:
        e["delta"] = delta
    if index is not None:
        e["index"] = index
    return e


STUCK = "I could not find the configuration file. Please check that config/settings.yaml exists and try again."
ev = []
for i in range(1, 7):
    ev += [msg("assistant", STUCK, id=f"m{i}", tools=False), msg("user", "Please continue.")]
case("repeated-message-levels",
     "The same answer six times with the same prompt after each: repeated_message warns at the 3rd and 4th copies (every copy in the window counts) and blocks the 5th: the prompt is new only the first time, so copies 2 to 5 have nothing new between them (critical 4). The block stops the run: the next answers and the next call are blocked (terminal).",
     "{ %s, loopguard: { detectors: { repeatedMessage: { warningThreshold: 3, criticalThreshold: 4 } } } }" % ON,
     ev + [call(1, "read", {"path": "config/settings.yaml"})])

ev = []
for i in range(1, 7):
    a = {"path": f"/src/module_{i}.py"}
    ev += [msg("assistant", STUCK, id=f"m{i}", tools=False), call(i, "read", a), result(i, "read", a, text(f"contents of module {i}"))]
case("repeated-message-progress-only-warns",
     "The same answer six times, each followed by a read with a new result (progress): repeated_message warns from the 3rd copy on (every copy in the window counts) but never blocks; answers that carry tool calls are never compared.",
     "{ %s, loopguard: { detectors: { repeatedMessage: { warningThreshold: 3, criticalThreshold: 4 } } } }" % ON,
     ev + [msg("assistant", STUCK, tools=True) for _ in range(4)])

ev = [
    msg("assistant", "Job 550e8400-e29b-41d4-a716-446655440000 failed at 2026-04-09T22:51:00Z; giving up."),
    msg("tool_feedback", "Please call a tool."),
    msg("assistant", "Job 550e8400-e29b-41d4-a716-446655440001 failed at 2026-04-09T22:52:01Z; retrying."),
    msg("tool_feedback", "Please call a tool."),
    msg("assistant", "\nJob  550e8400-e29b-41d4-a716-446655440002   failed at 2026-04-09T22:53:07Z;  retrying.  \n\n"),
    msg("tool_feedback", "Please call a tool."),
    msg("assistant", "Job 550e8400-e29b-41d4-a716-446655440003 failed at 2026-04-09T22:54:13Z; retrying."),
]
case("repeated-message-masked",
     "Answers that differ only by a UUID, a timestamp, runs of spaces and blank lines are one answer once masked (loopguard.masking on); the first answer, with other words, is not a copy. The 2nd copy warns (2) and the 3rd blocks (critical 3: the feedback between the copies is nothing new).",
     "{ %s, loopguard: { masking: {}, detectors: { repeatedMessage: { warningThreshold: 2, criticalThreshold: 3 } } } }" % ON, ev)

CHANT = "I will now run the test suite again to make sure that everything passes. "
case("content-chanting-whole-answer",
     "One answer chanting a sentence 12 times: content_chanting counts 12 occurrences and blocks (critical 10), stopping the run; an answer quoting the sentence 3 times among other text is allowed.",
     "{ %s, loopguard: { detectors: { contentChanting: { warningThreshold: 6, criticalThreshold: 10 } } } }" % ON,
     [msg("assistant", "First, the fix. " + CHANT + "Then the docs. " + CHANT + "Last, the changelog. " + CHANT, id="a1"),
      msg("assistant", "Let me look at the failing test first. " + CHANT * 12, id="a2"),
      msg("assistant", "Done.", id="a3")])

ev = []
for i in range(12):
    ev.append(msg("assistant", CHANT[:40] if i % 2 == 0 else CHANT[40:] + "\n", id="s1", delta=True, index=i))
    if i == 3:
        ev.append(msg("assistant", CHANT[40:] + "\n", id="s1", delta=True, index=3))
case("content-chanting-stream",
     "A streamed answer (delta: true, pieces numbered by index) chanting one line: each line is judged once complete, so the 6th copy warns (piece 11, warning 6) and would block at 10; piece 3 sent twice is a retry, answered the same and counted once. Pieces cut mid-line are judged as the whole answer would be.",
     "{ %s, loopguard: { detectors: { contentChanting: { warningThreshold: 6, criticalThreshold: 10 } } } }" % ON,
     ev + [msg("assistant", "", id="s1")])

ev = []
for i in range(24):
    ev.append(msg("assistant", CHANT[:30] if i % 2 == 0 else CHANT[30:] + "\n", id="s2", delta=True))
case("content-chanting-stream-blocked",
     "A streamed answer without indexes chanting one line: the 10th complete copy blocks (critical 10) and stops the run; the pieces after it and the next call are blocked (terminal).",
     "{ %s, loopguard: { detectors: { contentChanting: { warningThreshold: 6, criticalThreshold: 10 } } } }" % ON,
     ev + [call(1, "bash", {"command": "pytest"})])

TABLE = "| test | linux | macos | windows |\n|---|---|---|---|\n" + "| passes on every platform we build | yes | yes | yes |\n" * 20
CODE = "Here is the test file:\n```python\n" + "    assert parse('1') == 1  # the parser returns the same value\n" * 30 + "```\n"
REPORT = "".join(f"### Test case {i}\n**Result:** passed without errors or warnings.\n\n" for i in range(1, 16))
LIST = "".join(f"{i}. Checked module_{i}.py for the bug: no changes were needed there.\n" for i in range(1, 21))
RULES = ("-" * 60 + "\n") * 20 + ("=" * 60 + "\n") * 20
ev = [msg("assistant", t, id=f"a{i}") for i, t in enumerate([TABLE, CODE, REPORT, LIST, RULES, TABLE + CODE + REPORT], 1)]
case("content-chanting-structure-never-fires",
     "Markdown structure repeats lines by nature and never chants: a table of 20 identical rows, a code block of 30 identical lines, a report whose 15 sections share a result line, a list whose 20 items share a sentence, rules and dividers: all allowed (thresholds 3/4).",
     "{ %s, loopguard: { detectors: { contentChanting: { warningThreshold: 3, criticalThreshold: 4 } } } }" % ON, ev)

NO_TOOL = "No tool calls found in the response. Every response MUST include exactly one bash code block."
ev = []
for i in range(1, 8):
    ev += [msg("assistant", f"I have finished the task (attempt {i}). The fix is in place.", id=f"a{i}", tools=False), msg("tool_feedback", NO_TOOL)]
case("no-tool-turns-levels",
     "mini-swe-agent's format-error loop: the model answers in text, the harness replies with the same format error, seven times. no_tool_turns warns at the 3rd feedback in a row and blocks the 6th (critical 6), which stops the run: the 7th answer is blocked.",
     "{ %s, loopguard: { detectors: { noToolTurns: { warningThreshold: 3, criticalThreshold: 6 } } } }" % ON, ev[:13])

ev = []
for i in range(1, 5):
    ev += [msg("assistant", "Let me think about this.", tools=False), msg("tool_feedback", NO_TOOL)]
ev += [msg("assistant", "Running the tests.", tools=True), call(1, "bash", {"command": "pytest"}), result(1, "bash", {"command": "pytest"}, text("2 passed"))]
for i in range(1, 3):
    ev += [msg("assistant", "Let me think again.", tools=False), msg("tool_feedback", NO_TOOL)]
ev += [msg("tool_feedback", "Found 2 code blocks; expected exactly one."), msg("tool_feedback", NO_TOOL), msg("user", "Go on."), msg("tool_feedback", NO_TOOL)]
case("no-tool-turns-broken-by-a-call",
     "The row of identical feedback is broken by a tool call, by another feedback and by a prompt: 4 in a row warn (3/5), 2 more after the call, then rows of 1: never blocked.",
     "{ %s, loopguard: { detectors: { noToolTurns: { warningThreshold: 3, criticalThreshold: 5 } } } }" % ON, ev)

ev = []
for i in range(1, 4):
    m = msg("assistant", STUCK, id=f"m{i}", tools=False)
    ev += [m, m, msg("tool_feedback", NO_TOOL, id=f"f{i}"), msg("tool_feedback", NO_TOOL, id=f"f{i}")]
case("messages-retried-count-once",
     "Every message sent twice with its id: the copy is a retry, answered the same and counted once, so the 3rd answer is the 3rd copy (repeated_message warning 3) and the 3rd feedback the 3rd in a row (no_tool_turns warning 3).",
     "{ %s, loopguard: { detectors: { repeatedMessage: { warningThreshold: 3, criticalThreshold: 5 }, noToolTurns: { warningThreshold: 3, criticalThreshold: 5 } } } }" % ON, ev)

ev = []
for i in range(1, 6):
    ev += [msg("assistant", STUCK, tools=False), msg("tool_feedback", NO_TOOL)]
ev += [msg("assistant", "Let me look at the failing test first. " + CHANT * 12), call(1, "read", {"path": "/a"})]
case("messages-shadow-mode",
     "mode shadow: repeated_message, no_tool_turns and content_chanting would warn and block (terminal), but every message and the next call are allowed, with what would have fired.",
     "{ %s, loopguard: { mode: 'shadow', detectors: { repeatedMessage: { warningThreshold: 2, criticalThreshold: 3 }, contentChanting: { warningThreshold: 4, criticalThreshold: 8 }, noToolTurns: { warningThreshold: 2, criticalThreshold: 4 } } } }" % ON, ev)

ev = []
for i in range(1, 9):
    ev += [msg("assistant", STUCK, tools=False), msg("tool_feedback", NO_TOOL)]
ev += [msg("assistant", "Let me look at the failing test first. " + CHANT * 12)]
case("messages-without-the-detectors",
     "Without a detector of messages in the loopguard block (here only consecutiveRepeat) every message is allowed, however often it repeats, and changes nothing.",
     "{ %s, loopguard: { detectors: { consecutiveRepeat: {} } } }" % ON, ev)

ev = []
for i in range(1, 8):
    ev += [msg("assistant", STUCK, id=f"m{i}", tools=False), msg("tool_feedback", NO_TOOL)]
case("messages-preset-recommended",
     "preset recommended: the same answer and the same format error in a row: repeated_message warns at the 3rd answer (3), no_tool_turns at the 3rd feedback (3); the 5th answer is blocked (repeated_message critical 4: the 4 copies since the feedback was new) and stops the run.",
     "{ tools: { loopDetection: { enabled: true } }, loopguard: { preset: 'recommended' } }", ev)

BAD = [
    {"type": "message", "session": "s1", "run": "r1", "text": "no role"},
    {"type": "message", "session": "s1", "run": "r1", "role": "robot", "text": "x"},
    {"type": "message", "session": "s1", "run": "r1", "role": "assistant", "text": 5},
    {"type": "message", "session": "s1", "run": "r1", "role": "assistant", "text": "x", "has_tool_calls": "no"},
    {"type": "message", "session": "s1", "run": "r1", "role": "user", "text": "x", "delta": True},
    {"type": "message", "session": "s1", "run": "r1", "role": "assistant", "text": "x", "index": 2},
    {"type": "message", "session": "s1", "run": "r1", "role": "assistant", "text": "x", "delta": True, "index": -1},
    msg("assistant", "A valid answer after the bad lines."),
]
case("messages-invalid",
     "Message events the guard cannot read are error lines (exit 2) and change nothing: no role, an unknown role, text not a string, has_tool_calls not a boolean, a user message as a stream piece, an index without delta, a negative index; the valid answer after them is allowed.",
     "{ %s, loopguard: { detectors: { noToolTurns: {} } } }" % ON, BAD)

# invalid configs -----------------------------------------------------------------------
case("config-invalid-extension-key",
     "An unknown key in the loopguard block (detectors.cycles) is a load error: exit 1, nothing on stdout.",
     "{ %s, loopguard: { detectors: { cycles: {} } } }" % ON, [call(1, "read", {})])
case("config-invalid-mask-rule",
     "An unknown masking rule name is a load error: exit 1.",
     "{ %s, loopguard: { masking: { rules: ['uuid', 'phone'] } } }" % ON, [call(1, "read", {})])
case("config-invalid-tool-mask-rule",
     "An unknown rule in a tool rule's mask list is a load error: exit 1.",
     "{ %s, loopguard: { policy: { tools: [ { match: 'browser_*', mask: ['digitz'] } ] } } }" % ON, [call(1, "read", {})])
case("config-invalid-preset",
     "An unknown preset name is a load error: exit 1.",
     "{ %s, loopguard: { preset: 'recomended' } }" % ON, [call(1, "read", {})])

case("config-invalid-budget",
     "Budget limits must be positive numbers in range, prices not negative, warnAt at most 1, the time zone an offset: each wrong value is a load error (exit 1).",
     "{ %s, loopguard: { budgets: { run: { cost: -1, tokens: 1.5 }, warnAt: 2, timeZone: 'Mars/Olympus' }, prices: { 'm': { input: -1 } } } }" % ON, [call(1, "read", {})])


# run_storm: runs of one session that end the same way ----------------------------------
STORM = "detectors: { runStorm: { cooldownMinutes: 0 } }"
DEPLOY = {"command": "deploy --prod"}


def failing_run(i, run, session="s1"):
    """A heartbeat-like run: the same read as every run (the same result), then the same deploy
    failing."""
    args = {"path": "/HEARTBEAT.md"}
    return [call(i, "read", args, run=run, session=session),
            result(i, "read", args, text("check the deploy"), run=run, session=session),
            call(i + 1, "exec", DEPLOY, run=run, session=session),
            result(i + 1, "exec", DEPLOY, error="permission denied", run=run, session=session)]


ev = []
for n in range(1, 5):
    ev += failing_run(2 * n - 1, f"r{n}")
ev += [call(9, "read", {"path": "/HEARTBEAT.md"}, run="r5"), call(10, "exec", DEPLOY, run="r5", session="s2")]
case("run-storm-warn-block-stop",
     "runStorm with its default levels (cooldownMinutes 0: until reset): each run of s1 reads the same file (the first run's read is progress, later ones are not) and ends on the same failing deploy. r2 is the first run in a row to end so (r1 made progress); r3's deploy is warned at once (2nd run), r4's deploy is blocked at once (3rd run, not terminal: the read before it runs), and once r4 has ended that way too r5's first call is blocked: the session is stopped (terminal) until it is reset. Session s2 is untouched.",
     "{ %s, loopguard: { %s } }" % (ON, STORM), ev)

ev = []
ev += failing_run(1, "r1") + failing_run(3, "r2") + failing_run(5, "r3")
ev += [call(7, "read", {"path": "/NEW.md"}, run="r4"), result(7, "read", {"path": "/NEW.md"}, text("new work"), run="r4")]
ev += failing_run(8, "r5") + failing_run(10, "r6") + failing_run(12, "r7")
case("run-storm-progress-resets",
     "A run that makes progress (r4 reads something no recent run of the session saw) ends the row: r3's deploy was warned, but after r4 the row begins again, r6 is warned and r7 is blocked at its deploy as r3 and r4 would have been.",
     "{ %s, loopguard: { %s } }" % (ON, STORM), ev)

ev = []
for n in range(1, 5):
    ev += failing_run(2 * n - 1, f"r{n}")
case("run-storm-shadow",
     "runStorm in shadow mode: the same runs as run-storm-warn-block-stop are reported (shadow verdicts with the warning and the blocks they would be) and every call runs.",
     "{ %s, loopguard: { mode: 'shadow', %s } }" % (ON, STORM), ev + [call(9, "read", {"path": "/HEARTBEAT.md"}, run="r5")])

# agent_tree: the limits of a tree of sub-agents ------------------------------------------
def child(e, parent="s1", parent_run="r1"):
    """`e` as an event of a sub-agent's session, spawned by run `parent_run` of `parent`."""
    return {**e, "parent_session": parent, "parent_run": parent_run}


def child_step(i, session, tool, args, out="ok", parent="s1", parent_run="r1", run="r1", error=None):
    return [child(call(i, tool, args, run=run, session=session), parent, parent_run),
            child(result(i, tool, args, None if error else text(out), error=error, run=run, session=session), parent, parent_run)]


ev = [call(1, "task", {"prompt": "split the work"}), result(1, "task", {"prompt": "split the work"}, text("spawned"))]
for k in range(1, 5):
    ev += child_step(10 * k, f"s1/agent-{k}", "read", {"path": f"part{k}.md"})
ev += [child(call(45, "read", {"path": "part4b.md"}, session="s1/agent-4"))]
ev += child_step(50, "s1/agent-5", "read", {"path": "other.md"}, parent_run="r2")
case("agent-tree-children-warn-then-block",
     "agentTree with maxChildren 3: run r1 of s1 spawns four sub-agents (sessions naming s1 and r1 as their parent). The 3rd sub-agent's first call is warned (child 3, at the limit); the 4th's first call is blocked past it (terminal: the sub-agent may not run), and so is its next call. A sub-agent of another run of s1 (r2) has a count of its own and is allowed.",
     "{ %s, loopguard: { detectors: { agentTree: { maxChildren: 3 } } } }" % ON, ev)

ev = [call(1, "task", {"prompt": "go deep"}), result(1, "task", {"prompt": "go deep"}, text("spawned"))]
ev += child_step(10, "s1/a", "read", {"path": "a.md"})
ev += child_step(20, "s1/a/b", "read", {"path": "b.md"}, parent="s1/a")
ev += child_step(30, "s1/a/b/c", "read", {"path": "c.md"}, parent="s1/a/b")
case("agent-tree-depth",
     "agentTree with maxDepth 2: s1 spawns s1/a (depth 1), which spawns s1/a/b (depth 2: warned at its first call), which spawns s1/a/b/c (depth 3: blocked). Depth is counted from the root of the tree, which each sub-agent learns from its parent's link.",
     "{ %s, loopguard: { detectors: { agentTree: { maxDepth: 2 } } } }" % ON, ev)

LOW = "tools: { loopDetection: { enabled: true, warningThreshold: 2, criticalThreshold: 3, globalCircuitBreakerThreshold: 50 } }"
ev = [call(1, "task", {"prompt": "deploy"}), result(1, "task", {"prompt": "deploy"}, text("spawned"))]
for k in range(1, 4):
    for j in range(4):
        ev += child_step(100 * k + j, f"s1/agent-{k}", "exec", DEPLOY, error="permission denied")
case("agent-tree-respawn-after-the-same-failure",
     "agentTree with respawn 2 (its default): three sub-agents are spawned for the same task (the same agent, the same first call) and each retries a failing deploy. The 1st is blocked by generic_repeat at its 4th deploy: the task failed once. The 2nd's first call is warned (spawned again after one failure the same way) and it is blocked the same way: the task failed twice. The 3rd's first call is blocked (agent_tree, terminal): the task is not spawned a third time.",
     "{ %s, loopguard: { detectors: { agentTree: {} } } }" % LOW, ev)

ev = [call(1, "task", {"prompt": "review four modules"}), result(1, "task", {"prompt": "review four modules"}, text("spawned"))]
for k in range(1, 5):
    for j in range(3):
        ev += child_step(10 * k + j, f"s1/agent-{k}", ("read", "grep", "read")[j], {"path": f"mod{k}/f{j}.py"})
ev += [call(90, "write", {"path": "REVIEW.md"}), result(90, "write", {"path": "REVIEW.md"}, text("written"))]
case("agent-tree-planned-fan-out-is-clean",
     "preset recommended: a planned fan-out, four sub-agents of one run each reading their own module, then the parent writes the review. No verdict: four children are within every limit.",
     "{ %s, loopguard: { preset: 'recommended' } }" % ON, ev)

first = child(call(10, "read", {"path": "a.md"}, session="s1/agent-1"))
ev = [call(1, "task", {"prompt": "two parts"}), first, first]
ev += child_step(20, "s1/agent-2", "read", {"path": "b.md"})
case("agent-tree-sent-twice-counts-once",
     "agentTree with maxChildren 2: the first call of sub-agent 1 is sent twice (a client retrying it); the sub-agent is counted once, so sub-agent 2 is child 2 (warned at the limit), not child 3.",
     "{ %s, loopguard: { detectors: { agentTree: { maxChildren: 2 } } } }" % ON, ev)

ev = [call(1, "task", {"prompt": "split"})]
for k in range(1, 4):
    ev += child_step(10 * k, f"s1/agent-{k}", "read", {"path": f"p{k}.md"})
case("agent-tree-shadow",
     "agentTree with maxChildren 2 in shadow mode: the 2nd sub-agent's first call is reported as the warning it would be, the 3rd's as the block it would be, and every call runs.",
     "{ %s, loopguard: { mode: 'shadow', detectors: { agentTree: { maxChildren: 2 } } } }" % ON, ev)

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
