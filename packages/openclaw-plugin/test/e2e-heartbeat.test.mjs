// A heartbeat that fails the same way every run, inside a real OpenClaw 2026.9.6: each
// turn is a fresh `openclaw agent` run of one session that reads a file that is not there
// and gives up. The guard is a `loopguard serve` sidecar on SQLite with `run_storm` on, and
// it is restarted between the second and the third heartbeat, as a host restarts: the
// second heartbeat is warned, the third has its read blocked at once, before it runs.
// Then `loopguard scan` finds the storm in the database OpenClaw wrote.
//
// Only the sidecar: the in-process engine keeps a session's runs in the gateway's memory,
// and each `openclaw agent --local` turn is a process of its own (docs/openclaw-plugin.md).
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';

import { engineDocument } from '../src/config.js';
import { scriptedTurns } from './openclaw.mjs';
import { loopguardBin, openclawEntry, startSidecar } from './support.mjs';

const BLOCKS = { loopDetection: { enabled: true }, loopguard: { detectors: { runStorm: {} } } };

// Every heartbeat: read the checklist (it is missing), then answer in text.
const STEPS = [{ tool: 'read', args: { path: 'CHECKLIST.md' } }, { text: 'The checklist is missing; nothing to do.' }];

const skip = !(existsSync(openclawEntry) && existsSync(loopguardBin)) && 'OpenClaw or loopguard missing';

describe('a heartbeat failing the same way every run, with a loopguard serve sidecar on SQLite', { skip }, () => {
  const dir = mkdtempSync(join(tmpdir(), 'loopguard-heartbeat-'));
  const config = join(dir, 'loopguard.json5');
  const db = join(dir, 'loopguard.db');
  let sidecar;
  before(async () => {
    writeFileSync(config, JSON.stringify(engineDocument(BLOCKS), null, 2));
    sidecar = await startSidecar(config, { db });
  });
  after(() => sidecar?.stop());

  test('is warned at its second run and blocked at its third, across a restart of the guard', async () => {
    const url = sidecar.url;
    const turns = await scriptedTurns({
      turns: 3,
      steps: STEPS,
      pluginConfig: { engine: 'sidecar', sidecar: { url } },
      sessionKey: 'agent:main:heartbeat',
      message: 'Heartbeat: read CHECKLIST.md and follow it.',
      beforeTurn: async (i) => {
        if (i !== 2) return;
        // The guard restarts on the same file and port; the session's history is on disk.
        await sidecar.stop();
        sidecar = await startSidecar(config, { db, listen: new URL(url).host });
      },
    });
    const shown = turns.map((t) => t.toolResults);
    for (const [i, t] of turns.entries()) {
      assert.equal(t.code, 0, `heartbeat ${i + 1}: openclaw failed:\n${t.stdout.slice(0, 2000)}\n${t.stderr.slice(-4000)}`);
      assert.equal(t.toolResults.length, 1, `heartbeat ${i + 1} shown ${JSON.stringify(shown)}`);
    }
    const [first, second, third] = shown.map(([text]) => text);
    // The first heartbeat fails on its own, the guard says nothing.
    assert.doesNotMatch(first, /run_storm|\[loopguard\]/, first);
    // The second fails the same way and is warned that it is a storm.
    assert.match(second, /File not found[\s\S]*\[loopguard\] WARNING: the last 1 run of this session ended the same way[\s\S]*\(run_storm\)/, second);
    // The third's read never runs: the guard's message is its result.
    assert.match(third, /^CRITICAL: the last 2 runs of this session ended the same way[\s\S]*blocked[\s\S]*\(run_storm\)/, third);
    assert.doesNotMatch(third, /File not found/, third);

    // `loopguard scan` over the agent database OpenClaw wrote, with the same config,
    // finds the storm in the session's runs: one tree for the session, its run storm.
    const database = join(turns[0].home.state, 'agents/main/agent/openclaw-agent.sqlite');
    const scan = spawnSync(loopguardBin, ['scan', database, '--config', config, '--json'], { encoding: 'utf8' });
    const report = JSON.parse(scan.stdout);
    assert.equal(report.files[0].status, 'scanned', scan.stdout.slice(0, 2000));
    const [session] = report.sessions;
    assert.equal(report.sessions.length, 1, scan.stdout.slice(0, 2000));
    assert.equal(session.runs, 3, JSON.stringify(session));
    assert.ok(report.summary.run_storms >= 1, JSON.stringify(report.summary));
    assert.ok(session.findings.some((f) => f.detector === 'run_storm'), JSON.stringify(session.findings));
  });
});
