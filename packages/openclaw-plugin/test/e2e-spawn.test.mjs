// Sub-agents spawned by a real OpenClaw 2026.9.6: a turn sent through its Gateway asks
// `sessions_spawn` for three sub-agents, each of which reads a file. With the plugin's
// in-process engine (it lives in the Gateway, which runs every session) and
// `agentTree.maxChildren: 2`, the plugin's `subagent_spawned` link puts each sub-agent
// under the run that spawned it: the first sub-agent's read runs, the second's runs with
// a warning that it is at the limit, the third's is blocked before it runs. Then
// `loopguard scan` reads the agent database OpenClaw wrote (2026.9 keeps transcripts in
// SQLite) and draws the same tree.
//
// Both engines: the in-process one and a `loopguard serve` sidecar (whose store keeps the
// tree's record in the root session's state).
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';

import { engineDocument } from '../src/config.js';
import { gatewayTurn } from './openclaw.mjs';
import { loopguardBin, openclawEntry, startSidecar } from './support.mjs';

const skip = !(existsSync(openclawEntry) && existsSync(loopguardBin)) && 'OpenClaw or loopguard missing';

const CHILDREN = 3;
const text = (m) => (typeof m.content === 'string' ? m.content : (m.content ?? []).map((c) => c.text ?? '').join('\n'));
/** The sub-agent whose conversation this is (its first prompt is its task), or -1 for the
 * parent (whose later prompts may quote a task: OpenClaw reports each sub-agent's end). */
const childOf = (messages) => {
  const first = messages.find((m) => m.role === 'user');
  const found = first && /SUBTASK (\d+)/.exec(text(first));
  return found ? Number(found[1]) : -1;
};
const PROMPT = 'Split the summary between sub-agents.';
/** The parent spawns the sub-agents one after the other; each reads its part and reports.
 * Any other conversation (a heartbeat the Gateway might start) is answered in text. */
const choose = (messages) => {
  const child = childOf(messages);
  if (child < 0) {
    if (!messages.some((m) => m.role === 'user' && text(m).includes(PROMPT))) return [];
    return [
      ...Array.from({ length: CHILDREN }, (_, k) => ({
        tool: 'sessions_spawn',
        args: { task: `SUBTASK ${k}: read part${k}.md and summarise it.` },
      })),
      { text: 'The sub-agents are at work.' },
    ];
  }
  return [{ tool: 'read', args: { path: `part${child}.md` } }, { text: `Sub-agent ${child} is done.` }];
};
/** What each sub-agent was shown for its read: the tool result of its newest request. */
const shownToChildren = (model) => {
  const shown = new Map();
  for (const request of model.requests) {
    const child = childOf(request.messages);
    const result = request.messages.find((m) => m.role === 'tool');
    if (child >= 0 && result) shown.set(child, text(result));
  }
  return shown;
};

const BLOCKS = { loopDetection: { enabled: true }, loopguard: { detectors: { agentTree: { maxChildren: 2 } } } };

/** The turn through a Gateway whose plugin is configured with `pluginConfig`, and what
 * the sub-agents were shown and `loopguard scan` made of the database. */
async function spawnsThreeSubagents(pluginConfig) {
  const turn = await gatewayTurn({
    choose,
    pluginConfig,
    sessionKey: 'agent:main:main',
    message: PROMPT,
    settled: (model) => shownToChildren(model).size === CHILDREN,
  });
  const log = `${turn.stdout.slice(0, 2000)}\n${turn.stderr.slice(-2000)}\n${turn.gatewayLog.slice(-6000)}`;
  assert.equal(turn.code, 0, `openclaw agent failed:\n${log}`);
  assert.ok(turn.settled, `the sub-agents did not all read:\n${log}`);
  // The parent was told of three sub-agents started.
  const parentResults = turn.model.requests
    .filter((r) => childOf(r.messages) < 0)
    .flatMap((r) => r.messages.filter((m) => m.role === 'tool').map(text));
  assert.equal(new Set(parentResults.map((t) => /agent:main:subagent:[\w-]+/.exec(t)?.[0])).size, CHILDREN, parentResults.join('\n'));
  // The sub-agents run at once, so which is first depends on the Gateway: one of each.
  const shown = [...shownToChildren(turn.model).values()];
  const ran = shown.filter((t) => /not found/i.test(t) && !/\[loopguard\]|agent_tree/.test(t));
  const warned = shown.filter((t) => /not found/i.test(t) && /WARNING: this read call comes from a sub-agent that is child 2 of the run that spawned it, at the limit[\s\S]*\(agent_tree\)/.test(t));
  const blocked = shown.filter((t) => /^CRITICAL: this read call comes from a sub-agent that is child 3 of the run that spawned it, past the limit[\s\S]*\(agent_tree\)/.test(t));
  assert.deepEqual([ran.length, warned.length, blocked.length], [1, 1, 1], shown.join('\n---\n'));
  assert.doesNotMatch(blocked[0], /not found/i, 'the blocked read never ran');

  // `loopguard scan` reads the agent's database OpenClaw wrote, as the docs say, and
  // shows the three sub-agents under the run that spawned them.
  const database = join(turn.home.state, 'agents/main/agent/openclaw-agent.sqlite');
  const scan = spawnSync(loopguardBin, ['scan', database, '--json'], { encoding: 'utf8' });
  const report = JSON.parse(scan.stdout);
  assert.equal(report.files[0].status, 'scanned', scan.stdout.slice(0, 2000));
  assert.equal(report.trees.length, 1, JSON.stringify(report.trees));
  const [tree] = report.trees;
  assert.equal(tree.children, CHILDREN, JSON.stringify(tree));
  const [root, ...children] = tree.nodes;
  assert.match(root.task, /Split the summary/);
  for (const child of children) {
    assert.equal(child.parent, root.session);
    assert.equal(child.parent_run, 'turn-1', JSON.stringify(child));
    assert.match(child.task, /SUBTASK \d/);
  }
}

describe("sub-agents spawned through a real OpenClaw Gateway", { skip, concurrency: 1 }, () => {
  test("the plugin's spawn link, with the in-process engine", () => spawnsThreeSubagents(BLOCKS));
  test("the plugin's spawn link, with a loopguard serve sidecar", async () => {
    const dir = mkdtempSync(join(tmpdir(), 'loopguard-spawn-'));
    const file = join(dir, 'loopguard.json5');
    writeFileSync(file, JSON.stringify(engineDocument(BLOCKS), null, 2));
    const sidecar = await startSidecar(file);
    try {
      await spawnsThreeSubagents({ engine: 'sidecar', sidecar: { url: sidecar.url } });
    } finally {
      await sidecar.stop();
    }
  });
});
