#!/usr/bin/env python3
"""A host runtime's tool loop, guarded by the loopguard sidecar. Standard library only.

    loopguard serve --config examples/openclaw.json5 &
    python3 examples/clients/python_client.py http://127.0.0.1:7671

For every tool call the model asks for, the host:
  1. asks the guard first (a "call" event; the parallel calls of one message go together,
     as an array, and are evaluated in order);
  2. does not run a blocked call: the model gets the guard's blocked result instead;
  3. runs the others and reports what each returned (a "result" event);
  4. appends a warning to the result the model sees when the guard says `notify`;
  5. ends the run when the guard aborts it, and tells the guard when the run is over.

The "model" here is stuck: it reads the same file again and again. The script exits 0 once
the guard has stopped that loop, 2 if the guard never stepped in (is the server running
with rolling detectors on?), 1 on an error. LOOPGUARD_TOKEN, when set, is sent as a bearer
token.
"""

import json
import os
import sys
import urllib.error
import urllib.request
import uuid


class GuardError(Exception):
    """The sidecar refused a request; `status` and the server's own words."""

    def __init__(self, status, message):
        super().__init__(f"HTTP {status}: {message}")
        self.status = status


class Guard:
    """A client of one session of the loopguard sidecar."""

    def __init__(self, url, session, token=None, agent=None, timeout=10):
        self.url = url.rstrip("/")
        self.session = session
        self.agent = agent
        self.timeout = timeout
        self.headers = {"Content-Type": "application/json"}
        if token:
            self.headers["Authorization"] = f"Bearer {token}"

    def _request(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.url + path, data=data, method=method, headers=self.headers
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return json.load(response)
        except urllib.error.HTTPError as e:
            try:
                message = json.load(e).get("error", "")
            except ValueError:
                message = e.reason
            raise GuardError(e.code, message) from None

    def _event(self, kind, run, **fields):
        event = {"type": kind, "session": self.session, "run": run}
        if self.agent:
            event["agent"] = self.agent
        event.update(fields)
        return event

    def before_calls(self, run, calls):
        """Verdicts on the calls of one assistant message: [(call_id, tool, args)]."""
        events = [
            self._event("call", run, call_id=cid, tool=tool, args=args)
            for cid, tool, args in calls
        ]
        return self._request("POST", "/v1/events", events)

    def after_call(self, run, call_id, result=None, error=None):
        """Reports what a call returned; the answer says whether the run must end."""
        outcome = {"error": error} if error is not None else {"result": result}
        return self._request("POST", "/v1/events", self._event("result", run, call_id=call_id, **outcome))

    def compacted(self, run):
        """The host compacted the context and retries: arms the post-compaction guard."""
        return self._request("POST", "/v1/events", self._event("compaction", run))

    def end_run(self, run):
        return self._request("POST", "/v1/runs/end", {"session": self.session, "run": run})


def blocked_result(verdict):
    """What the model sees instead of running a blocked call."""
    return {
        "content": [{"type": "text", "text": verdict["message"]}],
        "details": {
            "status": "blocked",
            "deniedReason": "tool-loop",
            "detector": verdict["detector"],
            "count": verdict["count"],
        },
    }


def run_tool(tool, args):
    """The host's tools. This file never changes, so reading it never makes progress."""
    if tool == "read":
        return {"content": [{"type": "text", "text": "TODO: write the report"}]}
    if tool == "list":
        return {"content": [{"type": "text", "text": "notes.txt\nreport.md"}]}
    raise RuntimeError(f"Tool {tool} not found")


def main():
    url = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("LOOPGUARD_URL", "http://127.0.0.1:7671")
    guard = Guard(url, session=f"py-{uuid.uuid4()}", token=os.environ.get("LOOPGUARD_TOKEN"))
    run = "run-1"
    stopped = None
    for step in range(1, 31):
        # What the model asks for: first a listing and a read together, then the same
        # read over and over.
        calls = [(f"c{step}", "read", {"path": "notes.txt"})]
        if step == 1:
            calls.insert(0, ("c0", "list", {"dir": "."}))
        verdicts = guard.before_calls(run, calls)
        for (call_id, tool, args), verdict in zip(calls, verdicts):
            if verdict["verdict"] == "block":
                model_sees = blocked_result(verdict)
                print(f"step {step}: {tool} blocked ({verdict['detector']}, {verdict['count']}): {verdict['message']}")
                stopped = verdict
                continue
            try:
                output = run_tool(tool, args)
                answer = guard.after_call(run, call_id, result=output)
            except RuntimeError as e:
                output = {"content": [{"type": "text", "text": str(e)}]}
                answer = guard.after_call(run, call_id, error=str(e))
            model_sees = output
            if verdict["verdict"] == "warn" and verdict["notify"]:
                model_sees = dict(output, content=output["content"] + [{"type": "text", "text": verdict["message"]}])
                print(f"step {step}: {tool} ran with a warning ({verdict['detector']}, {verdict['count']})")
            else:
                print(f"step {step}: {tool} {verdict['verdict']}")
            if answer["abort"]:
                print(f"step {step}: run aborted: {answer['abort']['message']}")
                stopped = answer["abort"]
        del model_sees  # a real host hands it to the model
        if stopped:
            break
    guard.end_run(run)
    if not stopped:
        print("the guard never stepped in: start the server with rolling detectors on, e.g. --config examples/openclaw.json5")
        return 2
    print(f"loop stopped by {stopped['detector']} after {step} steps")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (GuardError, OSError) as e:
        print(f"python_client: {e}", file=sys.stderr)
        sys.exit(1)
