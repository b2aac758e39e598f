// The hook handlers with the event and context shapes OpenClaw 2026.9.6 passes them
// (PluginHookBeforeToolCallEvent, AgentToolResultMiddlewareEvent,
// PluginHookAfterToolCallEvent, PluginHookAfterCompactionEvent and their contexts, as
// declared in its dist/plugin-entry-*.d.ts, and as observed: after_compaction's context
// carries no run id), over both engines. e2e.test.mjs triggers a real compaction too.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { engineDocument } from '../src/config.js';
import { createEngine, SidecarEngine } from '../src/engines.js';
import { answerOf, createHooks, usageOf, withoutNote } from '../src/hooks.js';
import { startSidecar } from './support.mjs';

const CONFIG = { loopDetection: { enabled: true } };

/** One OpenClaw run as its hooks see it. */
function openclawRun(
  hooks,
  { runId = 'run-1', agentId = 'main', sessionKey = 'agent:main:main', afterParams = structuredClone } = {},
) {
  let n = 0;
  const ctx = { agentId, sessionKey, sessionId: 'session-uuid', runId };
  return {
    /** A tool call through every hook: the model-visible result, or the block reason. */
    async call(toolName, params, execute) {
      const toolCallId = `call_${n++}`;
      const decision = await hooks.beforeToolCall(
        { toolName, params, runId, toolCallId },
        { ...ctx, toolName, toolCallId },
      );
      if (decision?.block) {
        // OpenClaw reports the blocked call to after_tool_call too, as an error.
        await hooks.afterToolCall(
          { toolName, params, runId, toolCallId, error: decision.blockReason, result: { content: [{ type: 'text', text: decision.blockReason }] } },
          { agentId, runId, sessionKey },
        );
        return { blocked: decision.blockReason };
      }
      const { result, error } = execute();
      let seen = result;
      if (result) {
        const changed = hooks.toolResultMiddleware(
          { toolCallId, toolName, args: params, isError: Boolean(error), result },
          { runtime: 'openclaw', agentId, sessionId: 'session-uuid', sessionKey, runId },
        );
        seen = changed?.result ?? result;
      }
      // OpenClaw's after_tool_call event carries a structured clone of the params.
      await hooks.afterToolCall(
        { toolName, params: afterParams(params), runId, toolCallId, result: seen, error, durationMs: 3 },
        { agentId, runId, sessionKey },
      );
      return { result: seen };
    },
    /** after_compaction as OpenClaw 2026.9.6 calls it: its context has no run id. */
    compacted() {
      return hooks.afterCompaction(
        { messageCount: 3, compactedCount: 16, tokenCount: 19359, sessionFile: 'sessions/s.jsonl' },
        { agentId, sessionKey, sessionId: 'session-uuid', modelProviderId: 'scripted', modelId: 'loop' },
      );
    },
  };
}

const text = (t) => ({ content: [{ type: 'text', text: t }], details: { kind: 'text' } });
const quietLogger = { info() {}, warn() {}, error() {} };

function suite(name, engineFor) {
  describe(name, () => {
    test('warnings reach the model and are taken off again before the outcome is hashed', async () => {
      const run = openclawRun(createHooks({ engine: engineFor(), logger: quietLogger }));
      const seen = [];
      for (let i = 1; i <= 22; i++) seen.push(await run.call('read', { path: 'a' }, () => ({ result: text('same') })));
      assert.match(seen[10].result.content.at(-1).text, /^\[loopguard\] WARNING: you have called read 10 times/);
      assert.equal(seen[11].result.content.length, 1, 'warnings surface once per multiple of the threshold');
      // Were the note hashed with call 11's result, the streak would break and nothing block.
      assert.match(seen[20].blocked, /^CRITICAL: read was called 20 times/);
      assert.match(seen[21].blocked, /^CRITICAL: read was called 21 times/);
    });

    test('an outcome belongs to the call as it was judged, whatever params after_tool_call carries', async () => {
      // Another plugin's before_tool_call hook adjusted the params the tool ran with: the
      // loop the model makes is still the one the guard judged.
      const adjusted = (params) => ({ ...structuredClone(params), adjustedBy: 'another plugin' });
      const run = openclawRun(createHooks({ engine: engineFor(), logger: quietLogger }), {
        runId: 'run-judged',
        afterParams: adjusted,
      });
      const seen = [];
      for (let i = 1; i <= 21; i++) seen.push(await run.call('read', { path: 'a' }, () => ({ result: text('same') })));
      assert.match(seen[20].blocked ?? '', /^CRITICAL: read was called 20 times/);
    });

    test('after_compaction arms the post-compaction guard; a loop that survives it stops the run', async () => {
      const logs = [];
      const logger = { info: (m) => logs.push(m), warn() {}, error: (m) => logs.push(m) };
      const run = openclawRun(createHooks({ engine: engineFor(), logger }), { runId: 'run-compaction' });
      await run.call('ls', {}, () => ({ result: text('a b') })); // the session's current run
      await run.compacted();
      assert.ok(logs.includes('loopguard: post-compaction guard armed for 3 attempts'), logs.join('\n'));
      for (let i = 0; i < 3; i++) await run.call('exec', { command: 'make' }, () => ({ error: 'exit code 2' }));
      assert.ok(logs.some((m) => /compaction_loop_persisted/.test(m)), logs.join('\n'));
      const next = await run.call('read', { path: 'other' }, () => assert.fail('a stopped run ran a tool'));
      assert.match(next.blocked, /this run was stopped by compaction_loop_persisted \(exec repeated 3 times\); read was not executed/);
    });

    test('a compaction with changing results does not stop the run', async () => {
      const run = openclawRun(createHooks({ engine: engineFor(), logger: quietLogger }), { runId: 'run-progress' });
      await run.call('ls', {}, () => ({ result: text('a b') }));
      await run.compacted();
      for (let i = 0; i < 5; i++) {
        const out = await run.call('exec', { command: 'make' }, () => ({ result: text(`step ${i}`) }));
        assert.ok(out.result, `call ${i} ran`);
      }
    });

    test('a terminal block stops every later call of the run, and only of that run', async () => {
      const hooks = createHooks({ engine: engineFor(), logger: quietLogger });
      const run = openclawRun(hooks, { runId: 'run-breaker' });
      let out;
      for (let i = 1; i <= 31; i++) out = await run.call('read', { path: 'a' }, () => ({ result: text('same') }));
      assert.match(out.blocked, /global circuit breaker/);
      const later = await run.call('ls', {}, () => assert.fail('ran after the breaker'));
      assert.ok(later.blocked);
      const other = openclawRun(hooks, { runId: 'run-other' });
      assert.ok((await other.call('ls', {}, () => ({ result: text('ok') }))).result);
    });
  });
}

suite('hooks over the in-process engine', () => createEngine(CONFIG));

describe('hooks over a loopguard serve sidecar', () => {
  let sidecar;
  before(async () => {
    const { mkdtempSync, writeFileSync } = await import('node:fs');
    const { tmpdir } = await import('node:os');
    const { join } = await import('node:path');
    const file = join(mkdtempSync(join(tmpdir(), 'loopguard-sidecar-')), 'config.json5');
    writeFileSync(file, JSON.stringify(engineDocument(CONFIG)));
    sidecar = await startSidecar(file);
  });
  after(() => sidecar?.stop());
  // Each test gets its own session through a distinct run id; one sidecar serves them all.
  suite('sidecar', () => new SidecarEngine({ url: sidecar.url, timeoutMs: 5000 }));

  test('an unreachable sidecar fails open by default, or blocks when asked to', async () => {
    const dead = new SidecarEngine({ url: 'http://127.0.0.1:9', timeoutMs: 500 });
    const open = openclawRun(createHooks({ engine: dead, logger: quietLogger }));
    assert.ok((await open.call('read', {}, () => ({ result: text('x') }))).result);
    const closed = openclawRun(createHooks({ engine: dead, logger: quietLogger, onError: 'block' }));
    assert.match((await closed.call('read', {}, () => assert.fail('ran'))).blocked, /could not judge this call/);
  });
});

test('withoutNote takes off exactly the appended note', () => {
  const note = '[loopguard] WARNING: x';
  const result = { content: [{ type: 'text', text: 'a' }, { type: 'text', text: note }], details: {} };
  assert.deepEqual(withoutNote(result, note), { content: [{ type: 'text', text: 'a' }], details: {} });
  assert.equal(withoutNote(result, null), result);
  assert.equal(withoutNote({ content: [{ type: 'text', text: 'a' }] }, note).content.length, 1);
  assert.equal(withoutNote(undefined, note), undefined);
});

test('engineDocument maps the plugin blocks onto an OpenClaw-style document', () => {
  assert.deepEqual(
    engineDocument({
      loopDetection: { enabled: true },
      loopguard: { mode: 'shadow' },
      agents: { ops: { loopDetection: { warningThreshold: 3 } }, bare: {} },
    }),
    {
      tools: { loopDetection: { enabled: true } },
      loopguard: { mode: 'shadow' },
      agents: { entries: { ops: { tools: { loopDetection: { warningThreshold: 3 } } }, bare: {} } },
    },
  );
  assert.deepEqual(engineDocument({}), {});
});

// An assistant message as OpenClaw 2026.9.6 writes it (before_message_write's event.message):
// content blocks, the usage its provider transport parsed and priced, the response id.
const ASSISTANT = {
  role: 'assistant',
  content: [
    { type: 'thinking', thinking: 'The file again.' },
    { type: 'text', text: 'Reading it.' },
    { type: 'toolCall', id: 'call_1', name: 'read', arguments: { path: 'notes.txt' } },
  ],
  api: 'openai-completions',
  provider: 'scripted',
  model: 'loop',
  usage: { input: 9000, output: 1000, cacheRead: 1000, cacheWrite: 0, totalTokens: 11000, cost: { input: 0.027, output: 0.015, cacheRead: 0, cacheWrite: 0, total: 0.042 } },
  stopReason: 'toolUse',
  responseId: 'chatcmpl-7',
  timestamp: 1,
};

test('a written assistant message is its usage and its answer', () => {
  assert.deepEqual(usageOf(ASSISTANT), {
    inputTokens: 9000,
    outputTokens: 1000,
    cacheReadTokens: 1000,
    cacheWriteTokens: 0,
    cost: 0.042,
    model: 'loop',
    id: 'chatcmpl-7',
  });
  assert.deepEqual(answerOf(ASSISTANT), {
    role: 'assistant',
    text: 'Reading it.',
    reasoning: 'The file again.',
    hasToolCalls: true,
    id: 'chatcmpl-7',
  });
  // A zero cost is a catalog without prices, not a price; bad figures are no figures.
  const unpriced = { ...ASSISTANT, usage: { input: 5, output: -1, cost: { total: 0 } } };
  assert.deepEqual(usageOf(unpriced), { inputTokens: 5, outputTokens: 0, cacheReadTokens: 0, cacheWriteTokens: 0, model: 'loop', id: 'chatcmpl-7' });
  assert.equal(usageOf({ role: 'assistant', content: [] }), undefined);
  assert.equal(answerOf({ role: 'assistant', content: [] }), undefined);
  assert.equal(answerOf({ role: 'assistant', content: 'plain' }).text, 'plain');
});

test('before_message_write queues the usage and the answer in the run, ahead of its calls', async () => {
  const seen = [];
  const engine = {
    recordUsage: (u) => (seen.push(['usage', u.session, u.run, u.inputTokens]), { endsRun: 'CRITICAL: budget' }),
    message: (m) => (seen.push(['message', m.session, m.run, m.text]), { verdict: 'allow' }),
    begin: (c) => (seen.push(['call', c.session, c.run, c.tool]), { verdict: { verdict: 'allow' }, blocked: false, cancel() {} }),
  };
  const hooks = createHooks({ engine, logger: { error() {}, warn() {}, info() {} } });
  const ctx = { agentId: 'main', sessionKey: 'agent:main:main' };
  hooks.modelCallStarted({ runId: 'run-9', callId: 'm1', sessionKey: 'agent:main:main', provider: 'scripted', model: 'loop' }, { ...ctx, runId: 'run-9' });
  // Only the assistant's messages count; the result is written unchanged.
  assert.equal(hooks.beforeMessageWrite({ message: { role: 'user', content: 'go' } }, ctx), undefined);
  assert.equal(hooks.beforeMessageWrite({ message: ASSISTANT }, ctx), undefined);
  const decision = await hooks.beforeToolCall({ toolName: 'read', params: {}, runId: 'run-9', toolCallId: 'call_1' }, { ...ctx, runId: 'run-9' });
  assert.deepEqual(seen, [
    ['usage', 'agent:main:main', 'run-9', 9000],
    ['message', 'agent:main:main', 'run-9', 'Reading it.'],
    ['call', 'agent:main:main', 'run-9', 'read'],
  ]);
  // The usage used a budget up: the run's call is blocked with its message.
  assert.deepEqual(decision, { block: true, blockReason: 'CRITICAL: budget' });
});

test('subagent_spawned links the child session to the session and run that spawned it', async () => {
  const seen = [];
  const record = (kind) => (x) => (seen.push([kind, x.session, x.run, x.parentSession, x.parentRun]), x);
  const engine = {
    recordUsage: (u) => (record('usage')(u), { endsRun: null }),
    message: (m) => (record('message')(m), { verdict: 'allow' }),
    begin: (c) => (record('call')(c), { verdict: { verdict: 'allow' }, blocked: false, cancel() {} }),
  };
  const hooks = createHooks({ engine, logger: quietLogger });
  const parentCtx = { agentId: 'main', sessionKey: 'agent:main:main', runId: 'run-1' };
  // The parent's sessions_spawn call is the latest of its run.
  await hooks.beforeToolCall({ toolName: 'sessions_spawn', params: { task: 'x' }, runId: 'run-1', toolCallId: 'c0' }, parentCtx);
  const child = 'agent:main:subagent:7f3a';
  // As OpenClaw 2026.9.6's sessions_spawn tool calls the hook.
  hooks.subagentSpawned(
    { runId: 'child-run', childSessionKey: child, agentId: 'main', mode: 'run', threadRequested: false },
    { runId: 'child-run', childSessionKey: child, requesterSessionKey: 'agent:main:main' },
  );
  const childCtx = { agentId: 'main', sessionKey: child, runId: 'child-run' };
  hooks.modelCallStarted({ runId: 'child-run', sessionKey: child }, childCtx);
  hooks.beforeMessageWrite({ message: ASSISTANT }, { agentId: 'main', sessionKey: child });
  await hooks.beforeToolCall({ toolName: 'read', params: {}, runId: 'child-run', toolCallId: 'c1' }, childCtx);
  // A session nobody spawned names no parent; a hook without a requester links nothing.
  hooks.subagentSpawned({ childSessionKey: 'orphan' }, {});
  await hooks.beforeToolCall({ toolName: 'read', params: {}, runId: 'r', toolCallId: 'c2' }, { sessionKey: 'orphan', runId: 'r' });
  assert.deepEqual(seen, [
    ['call', 'agent:main:main', 'run-1', undefined, undefined],
    ['usage', child, 'child-run', 'agent:main:main', 'run-1'],
    ['message', child, 'child-run', 'agent:main:main', 'run-1'],
    ['call', child, 'child-run', 'agent:main:main', 'run-1'],
    ['call', 'orphan', 'r', undefined, undefined],
  ]);
});

test('subagent_ended ends the child run, so that the tree counts it finished', async () => {
  const engine = createEngine({ ...CONFIG, loopguard: { detectors: { agentTree: { maxConcurrent: 1 } } } });
  const hooks = createHooks({ engine, logger: quietLogger });
  const parent = 'agent:main:main';
  await hooks.beforeToolCall(
    { toolName: 'sessions_spawn', params: { task: 'x' }, runId: 'run-1', toolCallId: 'c0' },
    { agentId: 'main', sessionKey: parent, runId: 'run-1' },
  );
  // As OpenClaw 2026.9.6's sessions_spawn tool and its sub-agent registry call the hooks.
  const spawn = (child) =>
    hooks.subagentSpawned(
      { runId: `${child}-run`, childSessionKey: child, agentId: 'main', mode: 'run', threadRequested: false },
      { runId: `${child}-run`, childSessionKey: child, requesterSessionKey: parent },
    );
  const firstCall = async (child) => {
    spawn(child);
    const ctx = { agentId: 'main', sessionKey: child, runId: `${child}-run` };
    return hooks.beforeToolCall({ toolName: 'read', params: { path: child }, runId: ctx.runId, toolCallId: `${child}-c1` }, ctx);
  };
  assert.equal((await firstCall('agent:main:subagent:a'))?.block, undefined, 'one child running: at the limit');
  const second = await firstCall('agent:main:subagent:b');
  assert.equal(second?.block, true, 'two running, past maxConcurrent');
  assert.match(second.blockReason, /agent_tree/);
  await hooks.subagentEnded(
    { targetSessionKey: 'agent:main:subagent:a', targetKind: 'subagent', reason: 'completed', runId: 'agent:main:subagent:a-run', outcome: 'ok' },
    { runId: 'agent:main:subagent:a-run', childSessionKey: 'agent:main:subagent:a', requesterSessionKey: parent },
  );
  assert.equal((await firstCall('agent:main:subagent:c'))?.block, undefined, 'the first child ended: room for another');
});
