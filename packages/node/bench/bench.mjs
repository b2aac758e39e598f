// Per-call cost of the host cycle (beforeCall, then afterCall when the call may run) on
// the small and medium workloads, several ways, interleaved in one run:
//
//   engine        the Rust engine alone (crates/loopguard-node/examples/engine_cycle, a
//                 process of its own, JSON already parsed)
//   engine text   the Rust side of the binding alone: each event line parsed and applied
//                 through the replay protocol (engine_cycle ... text)
//   node          @loopguard/node as shipped, the host cycle a host writes with it:
//                 `guard.begin(call)`, then `ticket.finish({ result })`; the call crosses
//                 as JSON text, the ticket comes back as a string of its bytes, the
//                 outcome crosses alone (its long strings beside its text)
//   protocol      the same package through `beforeCall` and `afterCall` (a call event,
//                 then a result event with the call's arguments again)
//   JS share      the same package with its two native calls replaced by stubs that
//                 answer at once: what the binding costs on the JavaScript side
//   V8 reading    JSON.stringify of the call's args and of its result, nothing else: what
//                 reading the event out of V8 as JSON text costs before anything is sent
//   node object   the same engine, events converted value by value through N-API into
//                 serde_json values
//   openclaw      OpenClaw's own detector (detectToolCallLoop, recordToolCall,
//                 recordToolCallOutcome from the installed openclaw package)
//   baseline      with LOOPGUARD_BENCH_BASELINE=DIR: another build of the package (DIR
//                 holds its index.js, native.js and libloopguard_node.so, copied before a
//                 change), through `begin` when it has it, else `beforeCall`/`afterCall`,
//                 so that old and new alternate in one run
//
// Times are CPU time per call (process.cpuUsage here, the thread's schedstat in
// engine_cycle): on a shared, loaded machine wall time mostly measures the scheduler.
// Every measurement runs in a process of its own (`bench.mjs --measure KIND WORKLOAD N`:
// the best of five passes over the calls, after two that warm up the JIT), and the table
// shows the median over the rounds: sharing one process, the ways disturbed each other
// (one's garbage collected during another's round, one copy of the package's code slowing
// another) by up to a third.
//
// Needs release builds and the workloads:
//   cargo build --release -p loopguard-node --lib --example engine_cycle
//   bench/workloads.sh   (or: python3 bench/gen_workloads.py target/bench-data --only small)
//   LOOPGUARD_PROFILE=release node packages/node/bench/bench.mjs [CALLS] [ROUNDS]
import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { loadavg } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

process.env.LOOPGUARD_PROFILE ??= 'release';
const { Guard, repoRoot } = await import('../test/support.mjs');
const require = createRequire(import.meta.url);
const native = require('../native.js');

// `bench.mjs --measure KIND WORKLOAD CALLS`: one measurement, for the run below.
const measureOnly = process.argv[2] === '--measure';
const CALLS = Number(process.argv[measureOnly ? 5 : 2] ?? 20_000);
const ROUNDS = Number(process.argv[3] ?? 5);
const CONFIG = '{ tools: { loopDetection: { enabled: true } } }';
const target = process.env.CARGO_TARGET_DIR ?? join(repoRoot, 'target');
const data = process.env.LOOPGUARD_BENCH_DATA ?? join(target, 'bench-data');
const engineCycle = join(target, 'release/examples/engine_cycle');

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

/** CPU time (user + system) of `run`, in µs per call. */
function cpuPerCall(calls, run) {
  const start = process.cpuUsage();
  run();
  const used = process.cpuUsage(start);
  return (used.user + used.system) / calls;
}

/** The first `n` (call, result) pairs of a workload, parsed. */
function workload(name, n) {
  const text = readFileSync(join(data, `${name}.jsonl`), 'utf8');
  const pairs = [];
  let start = 0;
  while (pairs.length < n) {
    const a = text.indexOf('\n', start);
    const b = text.indexOf('\n', a + 1);
    if (a < 0 || b < 0) break;
    const call = JSON.parse(text.slice(start, a));
    const result = JSON.parse(text.slice(a + 1, b));
    pairs.push({ run: call.run, callId: call.call_id, tool: call.tool, args: call.args, result: result.result });
    start = b + 1;
  }
  return pairs;
}

function nodeText(pairs, GuardClass = Guard, protocol = false) {
  const guard = new GuardClass(CONFIG);
  if (protocol || typeof guard.begin !== 'function') {
    return cpuPerCall(pairs.length, () => {
      for (const p of pairs) {
        const v = guard.beforeCall({ session: 'perf', run: p.run, tool: p.tool, args: p.args, callId: p.callId });
        if (v.verdict !== 'block') guard.afterCall({ session: 'perf', run: p.run, callId: p.callId, tool: p.tool, args: p.args, result: p.result });
      }
    });
  }
  return cpuPerCall(pairs.length, () => {
    for (const p of pairs) {
      const ticket = guard.begin({ session: 'perf', run: p.run, tool: p.tool, args: p.args, callId: p.callId });
      if (!ticket.blocked) ticket.finish({ result: p.result });
    }
  });
}

/** The package's Guard over native calls that answer at once (allow, recorded). */
function stubbedGuard() {
  const nativePath = require.resolve('../native.js');
  const indexPath = require.resolve('../index.js');
  const [real, realIndex] = [require.cache[nativePath], require.cache[indexPath]];
  const stub = { ...real.exports, beginText: () => '', finishText: () => true, callText: () => null, resultText: () => true };
  require.cache[nativePath] = { ...real, exports: stub, loaded: true };
  delete require.cache[indexPath];
  try {
    return require(indexPath).Guard;
  } finally {
    require.cache[nativePath] = real;
    require.cache[indexPath] = realIndex;
  }
}

function v8Reading(pairs) {
  let chars = 0;
  const cpu = cpuPerCall(pairs.length, () => {
    for (const p of pairs) chars += JSON.stringify(p.args).length + JSON.stringify(p.result).length;
  });
  if (chars === 0) throw new Error('nothing was read');
  return cpu;
}

function nodeObject(pairs) {
  const guard = native.newGuard(CONFIG, undefined);
  return cpuPerCall(pairs.length, () => {
    for (const p of pairs) {
      const v = native.callObject(guard, { type: 'call', session: 'perf', run: p.run, call_id: p.callId, tool: p.tool, args: p.args });
      if (v?.verdict !== 'block') {
        native.resultObject(guard, { type: 'result', session: 'perf', run: p.run, call_id: p.callId, tool: p.tool, args: p.args, result: p.result });
      }
    }
  });
}

/** OpenClaw's detector module, found by what it exports. */
async function openclawDetector() {
  const dist = join(target, 'openclaw/node_modules/openclaw/dist');
  const file = readdirSync(dist).find((f) => /^tool-loop-detection-.*\.mjs$/.test(f));
  const mod = await import(pathToFileURL(join(dist, file)).href);
  const byName = Object.fromEntries(Object.values(mod).map((f) => [f.name, f]));
  for (const name of ['detectToolCallLoop', 'recordToolCall', 'recordToolCallOutcome']) {
    if (typeof byName[name] !== 'function') throw new Error(`${file} has no ${name}`);
  }
  return byName;
}

function openclaw(detector, pairs) {
  const { detectToolCallLoop, recordToolCall, recordToolCallOutcome } = detector;
  const config = { enabled: true };
  const state = {};
  return cpuPerCall(pairs.length, () => {
    for (const p of pairs) {
      const scope = { runId: p.run };
      const found = detectToolCallLoop(state, p.tool, p.args, config, scope);
      if (found.stuck && found.level === 'critical') continue;
      recordToolCall(state, p.tool, p.args, p.callId, config, scope);
      recordToolCallOutcome(state, { toolName: p.tool, toolParams: p.args, toolCallId: p.callId, result: p.result, runId: p.run });
    }
  });
}

/** The package over stubs, loaded once (each load is a fresh copy of its code). */
let Stubbed;

/** The ways measured in JavaScript, each given the calls of a workload. */
const WAYS = {
  node: (pairs) => nodeText(pairs),
  protocol: (pairs) => nodeText(pairs, Guard, true),
  js: (pairs) => nodeText(pairs, (Stubbed ??= stubbedGuard())),
  v8: (pairs) => v8Reading(pairs),
  object: (pairs) => nodeObject(pairs),
  openclaw: async (pairs) => {
    const detector = await openclawDetector();
    return openclaw(detector, pairs);
  },
  baseline: (pairs) => nodeText(pairs, baselineGuard()),
};

if (measureOnly) {
  const [kind, name] = [process.argv[3], process.argv[4]];
  const pairs = workload(name, CALLS);
  // Two passes warm up the JIT; the best of the next five is the measurement (as in the
  // Python binding's benchmark): a pass that met a full collection charges marking the
  // heap the workload itself holds (40 to 64 MB) to a few thousand calls.
  for (let i = 0; i < 2; i++) await WAYS[kind](pairs);
  let best = Infinity;
  for (let i = 0; i < 5; i++) best = Math.min(best, await WAYS[kind](pairs));
  console.log(best);
  process.exit(0);
}

/** One measurement of `kind` on the first `n` calls of a workload, by a process of its own. */
function measure(kind, name, n) {
  const script = fileURLToPath(import.meta.url);
  const out = execFileSync(process.execPath, [script, '--measure', kind, name, String(n)], {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'ignore'], // OpenClaw's detector logs its warnings
  });
  return Number(out);
}

function engine(name, n, mode = []) {
  const out = execFileSync(engineCycle, [join(data, `${name}.jsonl`), String(n), ...mode], { encoding: 'utf8' });
  return Number(/([\d.]+) µs CPU per call/.exec(out)[1]);
}

/** The Guard of the baseline build, when one is named. */
function baselineGuard() {
  const dir = process.env.LOOPGUARD_BENCH_BASELINE;
  if (!dir) return null;
  const current = process.env.LOOPGUARD_NODE_ADDON;
  process.env.LOOPGUARD_NODE_ADDON = join(dir, 'libloopguard_node.so');
  try {
    return require(join(dir, 'index.js')).Guard;
  } finally {
    process.env.LOOPGUARD_NODE_ADDON = current;
  }
}

const withBaseline = Boolean(process.env.LOOPGUARD_BENCH_BASELINE);
await openclawDetector(); // fails early when OpenClaw is not installed
console.log(`calls ${CALLS} per workload, ${ROUNDS} interleaved rounds, load ${loadavg().map((l) => l.toFixed(2)).join(' ')}`);
const baselineHead = withBaseline ? ' baseline node | node / baseline |' : '';
console.log(`| workload (CPU µs per call) | engine (Rust) | engine text (Rust) | node | protocol | JS share | V8 reading | node object | OpenClaw detector | node / engine | OpenClaw / node | OpenClaw / 10 |${baselineHead}`);
console.log(`|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|${withBaseline ? '---:|---:|' : ''}`);
for (const name of ['small', 'medium']) {
  const n = name === 'small' ? CALLS : Math.ceil(CALLS / 5);
  const kinds = ['node', 'protocol', 'js', 'v8', 'object', 'openclaw', ...(withBaseline ? ['baseline'] : [])];
  const times = { engine: [], engineText: [], ...Object.fromEntries(kinds.map((k) => [k, []])) };
  for (let r = 0; r < ROUNDS; r++) {
    times.engine.push(engine(name, n));
    times.engineText.push(engine(name, n, ['text']));
    for (const kind of kinds) times[kind].push(measure(kind, name, n));
  }
  const m = Object.fromEntries(Object.entries(times).map(([k, v]) => [k, median(v)]));
  const us = (x) => `${x.toFixed(2)} µs`;
  const baseline = withBaseline ? ` ${us(m.baseline)} | ${(m.node / m.baseline).toFixed(2)}× |` : '';
  console.log(
    `| ${name} (${n} calls) | ${us(m.engine)} | ${us(m.engineText)} | ${us(m.node)} | ${us(m.protocol)} | ${us(m.js)} | ${us(m.v8)} | ${us(m.object)} | ${us(m.openclaw)} | ${(m.node / m.engine).toFixed(2)}× | ${(m.openclaw / m.node).toFixed(1)}× | ${us(m.openclaw / 10)} |${baseline}`,
  );
}
console.log(`load after: ${loadavg().map((l) => l.toFixed(2)).join(' ')}`);
