// What the model spends and says, inside a real OpenClaw 2026.9.6: the scripted model
// reports usage on every response (OpenClaw prices it with the model's catalog cost), the
// plugin hands each response's usage and answer to the guard from `before_message_write`,
// and a budget or a detector of messages stops the run: its next tool call is blocked.
// With the in-process engine and again with a `loopguard serve` sidecar.
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';

import { scriptedRun, withBothEngines } from './openclaw.mjs';

// 10,000 tokens in, 1,000 out per response, at $3 and $15 per million: $0.045 each.
const USAGE = { prompt_tokens: 10000, completion_tokens: 1000 };
const COST = { input: 3, output: 15, cacheRead: 0, cacheWrite: 0 };

const BLOCKS = {
  loopDetection: { enabled: true },
  agents: {
    // $0.20 per run: warned at $0.16 (the fourth response), stopped at the fifth.
    main: { loopguard: { budgets: { run: { cost: 0.2 } } } },
    // 50,000 tokens without progress: stopped at the sixth response in a row of the same result.
    ops: { loopguard: { budgets: { withoutProgress: { tokens: 50000 } } } },
  },
  loopguard: { detectors: { contentChanting: {} } },
};

const lines = Array.from({ length: 30 }, (_, i) => `line ${i + 1}`).join('\n');
const withLines = (home) => writeFileSync(join(home.workspace, 'notes.txt'), lines);
const readAt = (i) => ({ tool: 'read', args: { path: 'notes.txt', offset: i + 1, limit: 1 } });

function where(results, pattern) {
  return results.flatMap((text, i) => (pattern.test(text) ? [i + 1] : []));
}

function assertRan(run) {
  assert.equal(run.code, 0, `openclaw failed:\n${run.stdout.slice(0, 2000)}\n${run.stderr.slice(-4000)}`);
}

const scenarios = {
  async 'a run cost budget priced from the responses usage stops the run at the fifth response'(config) {
    const steps = Array.from({ length: 10 }, (_, i) => readAt(i));
    const run = await scriptedRun({ steps, pluginConfig: config, prepare: withLines, usage: USAGE, cost: COST });
    assertRan(run);
    const results = run.toolResults;
    assert.deepEqual(where(results, /^line \d+/), [1, 2, 3, 4], results.join('\n---\n'));
    assert.deepEqual(where(results, /WARNING: this run has used \d+% of its cost budget/), [4], results[3]);
    const stops = where(results, /run_budget/);
    assert.equal(stops[0], 5, results.join('\n---\n'));
    assert.deepEqual(stops, Array.from({ length: results.length - 4 }, (_, i) => i + 5));
  },

  async 'a withoutProgress token cap stops a run that reads the same thing again and again'(config) {
    const steps = Array.from({ length: 12 }, () => readAt(0));
    const run = await scriptedRun({ steps, pluginConfig: config, agent: 'ops', prepare: withLines, usage: USAGE, cost: COST });
    assertRan(run);
    const results = run.toolResults;
    // The first read is progress; from the second on, 11,000 tokens a response without it.
    assert.deepEqual(where(results, /^line 1/), [1, 2, 3, 4, 5], results.join('\n---\n'));
    const stops = where(results, /no_progress_budget/);
    assert.equal(stops[0], 6, results.join('\n---\n'));
  },

  async 'an answer chanting one sentence stops the run: the call it came with is blocked'(config) {
    const chant = Array.from({ length: 14 }, () => 'I will read the notes file again to be sure.').join(' ');
    const steps = [readAt(0), readAt(1), { ...readAt(2), say: chant }, readAt(3)];
    const run = await scriptedRun({ steps, pluginConfig: config, prepare: withLines });
    assertRan(run);
    const results = run.toolResults;
    assert.deepEqual(where(results, /^line \d+/), [1, 2], results.join('\n---\n'));
    assert.deepEqual(where(results, /content_chanting/), [3, 4], results.join('\n---\n'));
  },
};

withBothEngines('spend and messages', scenarios, BLOCKS);
