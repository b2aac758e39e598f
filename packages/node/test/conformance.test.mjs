// Every public conformance vector (spec/conformance) and every extension vector
// (spec/extensions: detectors, budgets, messages, run storms) through the binding,
// compared with what the real `loopguard replay` prints for it: once line by line through
// applyEvent (the whole answer), once through the idiomatic API (beforeCall, afterCall,
// onCompaction, message, recordUsage), field by field.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import { test } from 'node:test';

import { ConfigError, Guard, loopguardBin, repoRoot } from './support.mjs';

const vectorsDir = join(repoRoot, 'spec/conformance');
const vectors = readdirSync(vectorsDir, { withFileTypes: true })
  .filter((d) => d.isDirectory())
  .map((d) => d.name)
  .sort();
const extensionsDir = join(repoRoot, 'spec/extensions');
const extensionVectors = readdirSync(extensionsDir, { withFileTypes: true })
  .filter((d) => d.isDirectory())
  .map((d) => d.name)
  .sort();
const holding = (kind) =>
  extensionVectors.filter((name) => readFileSync(join(extensionsDir, name, 'events.jsonl'), 'utf8').includes(`"type":"${kind}"`));

/** The input lines as bytes with their line numbers (blank lines are not answered). */
function lines(bytes) {
  const out = [];
  let start = 0;
  let seq = 0;
  while (start < bytes.length) {
    let end = bytes.indexOf(0x0a, start);
    if (end === -1) end = bytes.length;
    seq += 1;
    const line = bytes.subarray(start, end);
    if (!/^\s*$/.test(line.toString('latin1'))) out.push({ seq, line });
    start = end + 1;
  }
  return out;
}

/** What `loopguard replay` prints for a vector: its answers, or null for a refused config. */
function replay(dir) {
  const config = join(dir, 'config.json5');
  const args = ['replay', ...(existsSync(config) ? ['--config', config] : []), join(dir, 'events.jsonl')];
  try {
    return execFileSync(loopguardBin, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  } catch (error) {
    if (error.status === 2) return error.stdout; // error lines present
    if (error.status === 1) return null; // invalid config
    throw error;
  }
}

function guardFor(dir) {
  const config = join(dir, 'config.json5');
  return new Guard(existsSync(config) ? config : undefined);
}

test('the replay binary is built', () => {
  assert.ok(existsSync(loopguardBin), `${loopguardBin} is missing: run cargo build -p loopguard-cli`);
  assert.ok(vectors.length >= 80, `only ${vectors.length} vectors found`);
  assert.ok(holding('message').length >= 14, `only ${holding('message').length} message vectors found`);
  assert.ok(holding('usage').length >= 8, `only ${holding('usage').length} usage vectors found`);
  assert.ok(extensionVectors.filter((name) => name.startsWith('run-storm-')).length >= 3, 'run storm vectors missing');
});

const cases = [
  ...vectors.map((name) => ['conformance', join(vectorsDir, name)]),
  ...extensionVectors.map((name) => ['extensions', join(extensionsDir, name)]),
];
for (const [suite, dir] of cases) {
  test(`${suite} ${basename(dir)}`, () => {
    const printed = replay(dir);
    if (printed === null) {
      assert.ok(existsSync(join(dir, 'expected-exit')));
      assert.throws(() => guardFor(dir), ConfigError);
      return;
    }
    const expected = readFileSync(join(dir, 'expected.jsonl'), 'utf8').split('\n').filter(Boolean);
    const answers = printed.split('\n').filter(Boolean).map((l) => JSON.parse(l));
    assert.equal(answers.length, expected.length, 'replay answers every line');
    const input = lines(readFileSync(join(dir, 'events.jsonl')));
    assert.equal(input.length, answers.length);

    // 1. The protocol: every line answered exactly as replay answers it.
    const protocol = guardFor(dir);
    for (const [i, { seq, line }] of input.entries()) {
      assert.deepEqual(protocol.applyEvent(line, seq), answers[i], `line ${seq}`);
    }

    // 2. The idiomatic API on the same events.
    const guard = guardFor(dir);
    for (const [i, { seq, line }] of input.entries()) {
      checkIdiomatic(guard, line, answers[i], `line ${seq}`);
    }

    // 3. The same, as a host calls it: through tickets. A call begins a ticket, kept by
    // its call_id; a result of that call with the call's own tool and arguments finishes
    // the ticket (the outcome alone crosses); any other result is a result event.
    const host = guardFor(dir);
    const tickets = new Map();
    for (const [i, { seq, line }] of input.entries()) {
      checkIdiomatic(host, line, answers[i], `line ${seq} (tickets)`, tickets);
    }
  });
}

/** The ticket a result `event` finishes: the one its call_id's call began, when the
 * result names the same call (scope, tool and arguments); forgotten either way. */
function ticketFor(event, tickets) {
  if (typeof event.call_id !== 'string') return undefined;
  const held = tickets.get(event.call_id);
  tickets.delete(event.call_id);
  if (held === undefined) return undefined;
  const same = ['session', 'run', 'agent', 'tool'].every((k) => held.event[k] === event[k]);
  return same && JSON.stringify(held.event.args ?? {}) === JSON.stringify(event.args ?? {}) ? held.ticket : undefined;
}

function checkIdiomatic(guard, line, answer, where, tickets) {
  let event;
  try {
    event = JSON.parse(line.toString('utf8'));
  } catch {
    assert.ok('error' in answer, `${where}: replay accepted a line JSON.parse refuses`);
    return;
  }
  const kind = event?.type;
  if (!['call', 'result', 'compaction', 'message', 'usage'].includes(kind) || Array.isArray(event)) {
    // Not an event the idiomatic API can express (no type, unknown type, not an object).
    assert.ok('error' in answer, `${where}: replay accepted it`);
    return;
  }
  const parents = { parentSession: event.parent_session, parentRun: event.parent_run };
  for (const key of Object.keys(parents)) if (parents[key] === undefined) delete parents[key];
  const fields = {
    session: event.session,
    run: event.run,
    agent: event.agent,
    ...parents,
    callId: event.call_id,
    tool: event.tool,
    args: event.args,
    batch: event.batch,
  };
  if (kind === 'result') {
    if ('error' in event) fields.error = event.error;
    else if ('result' in event) fields.result = event.result;
    // The protocol's `"error": null` is an error outcome; the API's undefined is none.
    if (event.error === null) fields.error = null;
  }
  if (kind === 'message' && !('role' in event)) {
    // The protocol requires a role; the API's default is the assistant's.
    assert.ok('error' in answer, `${where}: replay accepted a message without role`);
    return;
  }
  const message = {
    session: event.session,
    run: event.run,
    agent: event.agent,
    ...parents,
    role: event.role,
    text: 'text' in event ? event.text : '',
    reasoning: event.reasoning,
    hasToolCalls: event.has_tool_calls,
    id: event.id,
    delta: event.delta,
    index: event.index,
  };
  const usage = {
    session: event.session,
    run: event.run,
    agent: event.agent,
    ...parents,
    id: event.id,
    model: event.model,
    inputTokens: event.input_tokens,
    outputTokens: event.output_tokens,
    cacheReadTokens: event.cache_read_tokens,
    cacheWriteTokens: event.cache_write_tokens,
    cost: event.cost,
  };
  for (const key of Object.keys(usage)) if (usage[key] === undefined) delete usage[key];
  // A member the protocol does not know goes through as it is: the API refuses it too.
  const known = ['type', 'session', 'run', 'agent', 'parent_session', 'parent_run', 'id', 'model', 'input_tokens', 'output_tokens', 'cache_read_tokens', 'cache_write_tokens', 'cost'];
  if (kind === 'usage') for (const key of Object.keys(event)) if (!known.includes(key)) usage[key] = event[key];
  const ticket = tickets && kind === 'result' ? ticketFor(event, tickets) : undefined;
  const act = () => {
    if (kind === 'message') return guard.message(message);
    if (kind === 'usage') return guard.recordUsage(usage);
    if (kind === 'call' && tickets) {
      const begun = guard.begin(fields);
      if (typeof event.call_id === 'string') tickets.set(event.call_id, { event, ticket: begun });
      return begun.verdict;
    }
    if (ticket !== undefined) {
      return ticket.finish('error' in fields ? { error: fields.error } : { result: fields.result });
    }
    return kind === 'call'
      ? guard.beforeCall(fields)
      : kind === 'result'
        ? guard.afterCall(fields)
        : guard.onCompaction(fields);
  };
  if ('error' in answer) {
    assert.throws(act, (e) => e instanceof Error, `${where}: replay answered ${answer.error}`);
    return;
  }
  const got = act();
  if (kind === 'call' || kind === 'message') {
    assert.equal(got.verdict, answer.verdict, where);
    if (answer.shadow) {
      assert.equal(got.shadow.verdict, answer.shadow.verdict, where);
      assert.equal(got.shadow.detector, answer.shadow.detector, where);
      assert.equal(got.shadow.count, answer.shadow.count, where);
      assert.equal(got.shadow.message, answer.shadow.message, where);
      return;
    }
    assert.equal(got.level, answer.level ?? null, where);
    assert.equal(got.detector, answer.detector ?? null, where);
    assert.equal(got.count, answer.count ?? null, where);
    assert.equal(got.message, answer.message ?? null, where);
    assert.equal(got.notify, answer.notify ?? false, where);
    assert.equal(got.terminal, answer.terminal ?? false, where);
    assert.equal(got.pairedTool, answer.paired_tool ?? null, where);
    assert.equal(got.blockedResult !== null, answer.verdict === 'block', where);
    assert.equal(got.warningNote !== null, answer.verdict === 'warn' && answer.notify, where);
  } else if (kind === 'usage') {
    assert.equal(answer.counted, true, where);
    assert.equal(got.cost, answer.cost, where);
    assert.deepEqual(got.stop, answer.stop, where);
    assert.equal(got.endsRun, answer.stop?.message ?? null, where);
    assert.deepEqual(got.shadowStop, answer.shadow_stop, where);
  } else if (kind === 'result') {
    assert.equal(got.recorded, answer.recorded, where);
    assert.deepEqual(got.abort, answer.abort, where);
  } else {
    assert.equal(got, answer.armed, where);
  }
}
