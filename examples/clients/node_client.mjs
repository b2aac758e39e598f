#!/usr/bin/env node
// A host runtime's tool loop, guarded by the loopguard sidecar. Node 18+ (global fetch),
// no packages.
//
//     loopguard serve --config examples/openclaw.json5 &
//     node examples/clients/node_client.mjs http://127.0.0.1:7671
//
// For every tool call the model asks for, the host asks the guard first (the parallel
// calls of one message go together, as an array, evaluated in order), does not run a
// blocked call (the model gets the guard's blocked result instead), runs the others and
// reports what each returned, appends warnings the guard says to surface, and ends the run
// when the guard aborts it.
//
// The "model" here is stuck: it polls a process that never changes. Exits 0 once the
// guard has stopped that loop, 2 if it never stepped in, 1 on an error. LOOPGUARD_TOKEN,
// when set, is sent as a bearer token.

import { randomUUID } from "node:crypto";

class GuardError extends Error {
  constructor(status, message) {
    super(`HTTP ${status}: ${message}`);
    this.status = status;
  }
}

class Guard {
  constructor(url, { session, token, agent } = {}) {
    this.url = url.replace(/\/+$/, "");
    this.session = session;
    this.agent = agent;
    this.headers = { "content-type": "application/json" };
    if (token) this.headers.authorization = `Bearer ${token}`;
  }

  async #request(method, path, body) {
    const response = await fetch(this.url + path, {
      method,
      headers: this.headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: AbortSignal.timeout(10_000),
    });
    const answer = await response.json().catch(() => ({}));
    if (!response.ok) throw new GuardError(response.status, answer.error ?? response.statusText);
    return answer;
  }

  #event(type, run, fields) {
    const event = { type, session: this.session, run, ...fields };
    if (this.agent) event.agent = this.agent;
    return event;
  }

  /** Verdicts on the calls of one assistant message: [{ id, tool, args }]. */
  beforeCalls(run, calls) {
    const events = calls.map((c) => this.#event("call", run, { call_id: c.id, tool: c.tool, args: c.args }));
    return this.#request("POST", "/v1/events", events);
  }

  /** Reports what a call returned; the answer says whether the run must end. */
  afterCall(run, callId, outcome) {
    return this.#request("POST", "/v1/events", this.#event("result", run, { call_id: callId, ...outcome }));
  }

  /** The host compacted the context and retries: arms the post-compaction guard. */
  compacted(run) {
    return this.#request("POST", "/v1/events", this.#event("compaction", run, {}));
  }

  endRun(run) {
    return this.#request("POST", "/v1/runs/end", { session: this.session, run });
  }
}

/** What the model sees instead of running a blocked call. */
function blockedResult(verdict) {
  return {
    content: [{ type: "text", text: verdict.message }],
    details: { status: "blocked", deniedReason: "tool-loop", detector: verdict.detector, count: verdict.count },
  };
}

/** The host's tools. The process never finishes, so polling it never makes progress. */
function runTool(tool, args) {
  if (tool === "process" && args.action === "poll") {
    return { content: [{ type: "text", text: "still running" }], details: { status: "running", aggregated: "building..." } };
  }
  if (tool === "exec") {
    return { content: [{ type: "text", text: "started" }], details: { status: "running", sessionId: "p1", tail: "" } };
  }
  throw new Error(`Tool ${tool} not found`);
}

async function main() {
  const url = process.argv[2] ?? process.env.LOOPGUARD_URL ?? "http://127.0.0.1:7671";
  const guard = new Guard(url, { session: `node-${randomUUID()}`, token: process.env.LOOPGUARD_TOKEN });
  const run = "run-1";
  let stopped = null;
  let step = 0;
  while (!stopped && step < 30) {
    step += 1;
    // What the model asks for: start a build, then poll it forever.
    const calls = step === 1
      ? [{ id: "c0", tool: "exec", args: { command: "make" } }]
      : [{ id: `c${step}`, tool: "process", args: { action: "poll", sessionId: "p1" } }];
    const verdicts = await guard.beforeCalls(run, calls);
    for (const [i, call] of calls.entries()) {
      const verdict = verdicts[i];
      if (verdict.verdict === "block") {
        const modelSees = blockedResult(verdict); // a real host hands it to the model
        void modelSees;
        console.log(`step ${step}: ${call.tool} blocked (${verdict.detector}, ${verdict.count}): ${verdict.message}`);
        stopped = verdict;
        continue;
      }
      let answer;
      let output;
      try {
        output = runTool(call.tool, call.args);
        answer = await guard.afterCall(run, call.id, { result: output });
      } catch (e) {
        if (e instanceof GuardError) throw e;
        output = { content: [{ type: "text", text: String(e.message) }] };
        answer = await guard.afterCall(run, call.id, { error: e.message });
      }
      if (verdict.verdict === "warn" && verdict.notify) {
        output = { ...output, content: [...output.content, { type: "text", text: verdict.message }] };
        console.log(`step ${step}: ${call.tool} ran with a warning (${verdict.detector}, ${verdict.count})`);
      } else {
        console.log(`step ${step}: ${call.tool} ${verdict.verdict}`);
      }
      if (answer.abort) {
        console.log(`step ${step}: run aborted: ${answer.abort.message}`);
        stopped = answer.abort;
      }
    }
  }
  await guard.endRun(run);
  if (!stopped) {
    console.log("the guard never stepped in: start the server with rolling detectors on, e.g. --config examples/openclaw.json5");
    return 2;
  }
  console.log(`loop stopped by ${stopped.detector} after ${step} steps`);
  return 0;
}

main().then(
  (code) => process.exit(code),
  (e) => {
    console.error(`node_client: ${e.message}`);
    process.exit(1);
  },
);
