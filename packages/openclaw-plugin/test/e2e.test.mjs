// The plugin inside a real OpenClaw 2026.9.6: `openclaw agent --local --json` runs an agent
// whose model is a local scripted server (no network, no real model), once per scenario,
// with the in-process engine and again with a `loopguard serve` sidecar. What is checked
// is what the model was shown (the tool results OpenClaw sent back to it) and how often
// the tools really ran.
import assert from 'node:assert/strict';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';

import { scriptedRun, withBothEngines } from './openclaw.mjs';
import { loopguardBin, openclawEntry } from './support.mjs';

const FILE_TEXT = 'loop fixture line\n';
const LOOP_DETECTION = {
  loopDetection: { enabled: true },
  agents: { ops: { loopDetection: { warningThreshold: 3, criticalThreshold: 6 } } },
};

const repeat = (n, step) => Array.from({ length: n }, () => step);
const READ = { tool: 'read', args: { path: 'notes.txt' } };
const withNotes = (home) => writeFileSync(join(home.workspace, 'notes.txt'), FILE_TEXT);

/** Indexes (1-based) of the tool results matching `pattern`. */
function where(results, pattern) {
  return results.flatMap((text, i) => (pattern.test(text) ? [i + 1] : []));
}

function assertRan(run) {
  assert.equal(run.code, 0, `openclaw failed:\n${run.stdout.slice(0, 2000)}\n${run.stderr.slice(-4000)}`);
  assert.ok(run.envelope, 'a JSON envelope on stdout');
}

const scenarios = {
  async 'identical reads: warned at call 11, blocked from call 21, read runs 20 times'(config) {
    const run = await scriptedRun({ steps: repeat(25, READ), pluginConfig: config, prepare: withNotes });
    assertRan(run);
    const results = run.toolResults;
    assert.equal(results.length, 25);
    assert.deepEqual(where(results, /^loop fixture line/), range(1, 20), 'read ran for calls 1 to 20');
    assert.deepEqual(where(results, /\[loopguard\] WARNING: you have called read 10 times/), [11]);
    assert.deepEqual(where(results, /^CRITICAL: read was called \d+ times/), range(21, 25));
    assert.match(results[20], /called 20 times with identical arguments and identical results/);
  },

  async 'agent ops has lower thresholds: warned at call 4, blocked from call 7'(config) {
    const run = await scriptedRun({ steps: repeat(10, READ), pluginConfig: config, agent: 'ops', prepare: withNotes });
    assertRan(run);
    const results = run.toolResults;
    assert.deepEqual(where(results, /^loop fixture line/), range(1, 6));
    assert.deepEqual(where(results, /\[loopguard\] WARNING: you have called read 3 times/), [4]);
    assert.deepEqual(where(results, /^CRITICAL: read was called/), range(7, 10));
  },

  async 'a process poll without progress is warned and blocked by known_poll_no_progress'(config) {
    const poll = { tool: 'process', args: { action: 'poll', sessionId: 'no-such-session' } };
    const run = await scriptedRun({ steps: repeat(25, poll), pluginConfig: config });
    assertRan(run);
    const results = run.toolResults;
    assert.deepEqual(where(results, /\[loopguard\] WARNING: you have polled process 10 times/), [11]);
    assert.deepEqual(where(results, /^CRITICAL: process was polled \d+ times/), range(21, 25));
  },

  async 'the global breaker stops the run: later calls, of any tool, are blocked'(config) {
    // exec appends to its own log each time it really runs.
    const exec = { tool: 'exec', args: { command: 'echo ran >> exec.log; echo same' } };
    const steps = [...repeat(33, exec), { tool: 'read', args: { path: 'notes.txt' } }];
    const run = await scriptedRun({ steps, pluginConfig: config, prepare: withNotes });
    assertRan(run);
    const results = run.toolResults;
    const log = readFileSync(join(run.home.workspace, 'exec.log'), 'utf8');
    assert.equal(log.split('\n').filter(Boolean).length, 20, 'exec ran exactly 20 times');
    assert.deepEqual(where(results, /^CRITICAL: exec has repeated identical no-progress outcomes 30 times/), [31]);
    assert.deepEqual(where(results, /this run was stopped by global_circuit_breaker/), [32, 33, 34]);
    assert.match(results[33], /read was not executed/);
  },

  async 'a context overflow compacts the session; the loop persists and the run is aborted'(config) {
    // A small context window and a 100-line file: after 9 reads the scripted model refuses
    // the 10th request as a context overflow, OpenClaw compacts and retries, the plugin
    // arms the post-compaction guard, and the same read 3 more times aborts the run.
    const lines = Array.from({ length: 100 }, (_, i) => `line ${i} of the same notes`).join('\n');
    const run = await scriptedRun({
      steps: repeat(18, READ),
      pluginConfig: config,
      overflowAt: 9,
      contextWindow: 32000,
      prepare: (home) => writeFileSync(join(home.workspace, 'notes.txt'), lines),
    });
    assertRan(run);
    assert.match(run.stderr, /auto-compaction succeeded/);
    assert.match(run.stderr, /loopguard: post-compaction guard armed for 3 attempts/);
    assert.match(run.stderr, /read repeated 3 times with identical arguments and identical results within 3 attempts after auto-compaction/);
    assert.ok(
      run.toolResults.some((t) => /this run was stopped by compaction_loop_persisted/.test(t)),
      run.toolResults.join('\n---\n').slice(-3000),
    );
  },

  async 'a healthy script (changing arguments) is never warned'(config) {
    const steps = Array.from({ length: 25 }, (_, i) => ({ tool: 'read', args: { path: 'notes.txt', offset: i + 1 } }));
    const lines = Array.from({ length: 30 }, (_, i) => `line ${i + 1}`).join('\n');
    const run = await scriptedRun({
      steps,
      pluginConfig: config,
      prepare: (home) => writeFileSync(join(home.workspace, 'notes.txt'), lines),
    });
    assertRan(run);
    assert.equal(run.toolResults.length, 25);
    assert.deepEqual(where(run.toolResults, /loopguard|CRITICAL|WARNING/), []);
    assert.doesNotMatch(run.stderr, /loopguard: (warning|blocked)/);
  },
};

function range(from, to) {
  return Array.from({ length: to - from + 1 }, (_, i) => from + i);
}

withBothEngines('OpenClaw', scenarios, LOOP_DETECTION);

test('OpenClaw and the loopguard binary are installed (scripts/setup/openclaw.sh)', () => {
  assert.ok(existsSync(openclawEntry), `${openclawEntry} is missing`);
  assert.ok(existsSync(loopguardBin), `${loopguardBin} is missing`);
});
