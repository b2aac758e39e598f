// OpenClaw's own tool-loop detector on a loopguard workload, driven the way its wrapper
// drives it (agent-tools.before-tool-call: `admitSingleToolCallLoop`, then
// `recordLoopOutcome`): before each call `detectToolCallLoop`, and unless that says
// critical, `recordToolCall`; after it, `recordToolCallOutcome` with the result. One
// session state per round, `loopDetection: { enabled: true }` (its defaults), the call's
// run id as the scope. The workload's JSON is parsed before the clock starts: OpenClaw
// gets JavaScript objects, as it does in the gateway.
//
//   node bench/openclaw_detector.mjs WORKLOAD.jsonl [CALLS] [ROUNDS]
//
// Needs Node >= 24.16 and openclaw@2026.9.6 (scripts/setup/node24.sh, openclaw.sh;
// LOOPGUARD_OPENCLAW names openclaw.mjs). Prints one JSON line: the median time per call.
import { readFileSync, readdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { pathToFileURL } from "node:url";
import { performance } from "node:perf_hooks";

const [workload, callsArg = "20000", roundsArg = "10"] = process.argv.slice(2);
if (!workload) {
  console.error("usage: node bench/openclaw_detector.mjs WORKLOAD.jsonl [CALLS] [ROUNDS]");
  process.exit(2);
}
const entry = process.env.LOOPGUARD_OPENCLAW;
if (!entry) {
  console.error("LOOPGUARD_OPENCLAW is not set: source scripts/setup/node24.sh and scripts/setup/openclaw.sh");
  process.exit(2);
}
const dist = join(dirname(entry), "dist");
const file = readdirSync(dist).find((f) => /^tool-loop-detection-[\w-]+\.mjs$/.test(f));
if (!file) {
  console.error(`no tool-loop-detection module in ${dist}`);
  process.exit(2);
}
const detector = await import(pathToFileURL(join(dist, file)).href);
// The bundle exports its functions under short names; find them by their own names.
const named = (name) => {
  const f = Object.values(detector).find((v) => typeof v === "function" && v.name === name);
  if (!f) throw new Error(`${file} has no ${name}`);
  return f;
};
const detectToolCallLoop = named("detectToolCallLoop");
const recordToolCall = named("recordToolCall");
const recordToolCallOutcome = named("recordToolCallOutcome");

const version = JSON.parse(readFileSync(join(dirname(entry), "package.json"), "utf8")).version;
const limit = Number(callsArg);
const rounds = Number(roundsArg);
const lines = readFileSync(workload, "utf8").split("\n");
const pairs = [];
for (let i = 0; i + 1 < lines.length && pairs.length < limit; i += 2) {
  const call = JSON.parse(lines[i]);
  const result = JSON.parse(lines[i + 1]);
  pairs.push({ run: call.run, id: call.call_id, tool: call.tool, args: call.args, result: result.result });
}

const config = { enabled: true };

function cycle() {
  const state = {};
  let blocked = 0;
  for (const p of pairs) {
    const scope = { runId: p.run };
    const verdict = detectToolCallLoop(state, p.tool, p.args, config, scope);
    if (verdict.stuck && verdict.level === "critical") {
      blocked += 1;
      continue;
    }
    recordToolCall(state, p.tool, p.args, p.id, config, scope);
    recordToolCallOutcome(state, {
      toolName: p.tool,
      toolParams: p.args,
      toolCallId: p.id,
      result: p.result,
      error: undefined,
      config,
      runId: p.run,
    });
  }
  return blocked;
}

// One round to warm the JIT, then the measured ones.
const blocked = cycle();
const times = [];
for (let r = 0; r < rounds; r++) {
  const start = performance.now();
  cycle();
  times.push(((performance.now() - start) * 1000) / pairs.length);
}
times.sort((a, b) => a - b);
const median = times[Math.floor(times.length / 2)];
console.log(
  JSON.stringify({
    detector: `openclaw ${version}`,
    workload,
    calls: pairs.length,
    blocked,
    rounds,
    us_per_call_median: Number(median.toFixed(3)),
  }),
);
