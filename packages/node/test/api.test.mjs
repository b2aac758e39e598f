// The idiomatic API: config forms and their errors, the answer shapes, and bad input
// (non-JSON values, cycles, BigInt, huge and deeply nested values) answered with clear
// errors and never a crash.
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createRequire } from 'node:module';
import { test } from 'node:test';

import { ALLOW, ConfigError, Guard, countedFromAnswer, packageDir } from './support.mjs';

/** The error `fn` throws, checked to be of `type`. */
function caught(fn, type) {
  try {
    fn();
  } catch (error) {
    assert.ok(error instanceof type, `${error} is not a ${type.name}`);
    return error;
  }
  assert.fail('nothing was thrown');
}

const ON = '{ tools: { loopDetection: { enabled: true } } }';

/** Runs `n` identical calls, each with the same result; returns every verdict. */
function loop(guard, n, scope = { session: 's', run: 'r' }, tool = 'read', args = { path: '/a' }) {
  const verdicts = [];
  for (let i = 1; i <= n; i++) {
    const callId = `c${i}`;
    const v = guard.beforeCall({ ...scope, tool, args, callId });
    verdicts.push(v);
    if (v.verdict !== 'block') guard.afterCall({ ...scope, callId, tool, args, result: { text: 'same' } });
  }
  return verdicts;
}

test('config as a JSON5 string, a parsed object and a file path give the same guard', () => {
  const dir = mkdtempSync(join(tmpdir(), 'loopguard-node-'));
  const file = join(dir, 'openclaw.json5');
  writeFileSync(file, ON);
  for (const config of [ON, { tools: { loopDetection: { enabled: true } } }, file]) {
    const verdicts = loop(new Guard(config), 21);
    // Counts are of earlier identical calls: 10 of them warn the 11th, 20 block the 21st.
    assert.equal(verdicts[9].verdict, 'allow');
    assert.equal(verdicts[10].verdict, 'warn');
    assert.equal(verdicts[20].verdict, 'block');
  }
});

test('answers have every documented field', () => {
  const guard = new Guard(ON);
  const verdicts = loop(guard, 21);
  assert.deepEqual(verdicts[0], ALLOW);
  assert.ok(Object.isFrozen(verdicts[0]));
  const warn = verdicts[10];
  assert.deepEqual(Object.keys(warn).sort(), Object.keys(ALLOW).sort());
  assert.equal(warn.level, 'warning');
  assert.equal(warn.detector, 'generic_repeat');
  assert.equal(warn.count, 10);
  assert.equal(warn.notify, true);
  assert.match(warn.warningNote, /^\[loopguard\] WARNING: .*read.*10/);
  assert.equal(warn.blockedResult, null);
  const block = verdicts[20];
  assert.equal(block.level, 'critical');
  assert.equal(block.terminal, false);
  assert.equal(block.blockedResult.details.status, 'blocked');
  assert.equal(block.blockedResult.content[0].text, block.message);
  const after = guard.afterCall({ session: 's', run: 'r', callId: 'c21', result: 'x' });
  assert.deepEqual(after, { recorded: false, abort: null, endsRun: null }, 'results of blocked calls are ignored');
});

test('the global breaker is terminal and ends the run; other runs are untouched', () => {
  const guard = new Guard(ON);
  const verdicts = loop(guard, 31);
  assert.equal(verdicts[29].detector, 'generic_repeat');
  assert.equal(verdicts[30].detector, 'global_circuit_breaker');
  assert.equal(verdicts[30].count, 30);
  assert.equal(verdicts[30].terminal, true);
  const later = guard.beforeCall({ session: 's', run: 'r', tool: 'ls', args: {} });
  assert.equal(later.verdict, 'block');
  assert.equal(later.terminal, true);
  assert.equal(guard.beforeCall({ session: 's', run: 'r2', tool: 'ls', args: {} }), ALLOW);
  assert.equal(guard.endRun({ session: 's', run: 'r' }), true);
  assert.equal(guard.beforeCall({ session: 's', run: 'r', tool: 'ls', args: {} }), ALLOW);
});

test('per-agent overrides and configExplain', () => {
  const guard = new Guard(`{
    tools: { loopDetection: { enabled: true } },
    agents: { list: [{ id: "ops", tools: { loopDetection: { warningThreshold: 3, criticalThreshold: 2 } } }] },
  }`);
  const ops = loop(guard, 5, { session: 's', run: 'r', agent: 'ops' });
  assert.equal(ops[3].verdict, 'warn');
  assert.equal(ops[4].verdict, 'block', 'critical clamped to 4: the 5th call is blocked');
  const explained = guard.configExplain('ops');
  assert.equal(explained.ownBlock, true);
  assert.equal(explained.effective.criticalThreshold, 4);
  assert.equal(explained.effective.clamps[0].field, 'criticalThreshold');
  assert.equal(guard.configExplain().effective.warningThreshold, 10);
  assert.equal(guard.configExplain('nobody').ownBlock, false);
});

test('compaction arms the post-compaction guard, which aborts an identical loop', () => {
  const guard = new Guard();
  const scope = { session: 's', run: 'r' };
  assert.equal(guard.onCompaction(scope), 3);
  let abort = null;
  for (let i = 1; i <= 3 && !abort; i++) {
    guard.beforeCall({ ...scope, tool: 'exec', args: { command: 'make' }, callId: `c${i}` });
    ({ abort } = guard.afterCall({ ...scope, callId: `c${i}`, error: 'exit 2' }));
  }
  assert.equal(abort.detector, 'compaction_loop_persisted');
  assert.equal(abort.tool, 'exec');
  assert.equal(abort.count, 3);
  assert.match(abort.message, /exec.*3/);
});

test('config errors are ConfigErrors with path, line and column', () => {
  const error = caught(
    () => new Guard('{\n  tools: { loopDetection: {\n    warningTreshold: 5 } } }'),
    ConfigError,
  );
  assert.equal(error.code, 'LOOPGUARD_CONFIG');
  assert.equal(error.issues.length, 1);
  const [issue] = error.issues;
  assert.equal(issue.path, 'tools.loopDetection.warningTreshold');
  assert.equal(issue.line, 3);
  assert.equal(issue.column, 5);
  assert.match(issue.message, /did you mean `warningThreshold`/);
  assert.match(error.message, /^3:5: /);

  const dir = mkdtempSync(join(tmpdir(), 'loopguard-node-'));
  const file = join(dir, 'bad.json5');
  writeFileSync(file, '{ tools: { loopDetection: { historySize: 0 } } }');
  const fromFile = caught(() => new Guard(file), ConfigError);
  assert.equal(fromFile.origin, file);
  assert.ok(fromFile.message.startsWith(`${file}:1:`), fromFile.message);

  assert.throws(() => new Guard('{ tools: '), (e) => e instanceof ConfigError && /invalid JSON5/.test(e.message));
  assert.throws(() => new Guard(join(dir, 'missing.json5')), /cannot read the config file/);
  assert.throws(() => new Guard(42), TypeError);
  assert.throws(() => new Guard([]), TypeError);
});

test('a misspelt block name is a config warning, emitted and kept on the guard', async () => {
  const emitted = [];
  const listen = (warning) => emitted.push(warning);
  process.on('warning', listen);
  try {
    const dir = mkdtempSync(join(tmpdir(), 'loopguard-node-'));
    const file = join(dir, 'typo.json5');
    writeFileSync(file, '{ tools: {\n  loopdetection: { enabled: true } } }');
    const guard = new Guard(file);
    assert.deepEqual(guard.configWarnings, [
      {
        path: 'tools.loopdetection',
        line: 2,
        column: 3,
        message:
          'unknown key `loopdetection` in tools (did you mean `loopDetection`?): it is not read, so its settings do not apply',
      },
    ]);
    assert.ok(Object.isFrozen(guard.configWarnings) && Object.isFrozen(guard.configWarnings[0]));
    // The misspelt block does nothing: detection stays off.
    assert.equal(guard.configExplain().effective.enabled, 'unset');
    assert.deepEqual(new Guard('{ tool: { loopDetection: {} } }').configWarnings.map((w) => w.path), ['tool']);
    assert.deepEqual(new Guard(ON).configWarnings, []);
    assert.deepEqual(new Guard().configWarnings, []);
    // Warnings are emitted on the next tick.
    await new Promise((ok) => setImmediate(ok));
    const ours = emitted.filter((w) => w.name === 'LoopguardConfigWarning');
    assert.equal(ours.length, 2, ours.map(String).join('\n'));
    assert.equal(ours[0].code, 'LOOPGUARD_CONFIG_WARNING');
    assert.equal(ours[0].message, `${file}:2:3: ${guard.configWarnings[0].message}`);
    assert.match(ours[1].message, /^1:3: unknown key `tool` \(did you mean `tools`\?\)/);
  } finally {
    process.off('warning', listen);
  }
});

test('the exports map: the package by its name is index.js with index.d.ts as its types, both published', () => {
  const pkg = JSON.parse(readFileSync(join(packageDir, 'package.json'), 'utf8'));
  // A package resolves its own name through its exports map, as a dependent's require does.
  const resolve = createRequire(join(packageDir, 'index.js')).resolve;
  assert.equal(resolve('@loopguard/node'), join(packageDir, 'index.js'));
  assert.equal(resolve('@loopguard/node/package.json'), join(packageDir, 'package.json'));
  assert.throws(() => resolve('@loopguard/node/native.js'), { code: 'ERR_PACKAGE_PATH_NOT_EXPORTED' });
  const root = pkg.exports['.'];
  // TypeScript takes the first condition that matches: `types` comes before `default`.
  assert.deepEqual(Object.keys(root), ['types', 'default']);
  assert.equal(root.types, `./${pkg.types}`);
  assert.equal(root.default, `./${pkg.main}`);
  for (const file of [pkg.types, pkg.main]) {
    assert.ok(existsSync(join(packageDir, file)), file);
    assert.ok(pkg.files.includes(file), `${file} is published`);
  }
});

test('bad input gets a clear error, never a crash', () => {
  const guard = new Guard(ON);
  const call = { session: 's', run: 'r', tool: 'read' };
  const cyclic = { a: 1 };
  cyclic.self = cyclic;
  assert.throws(() => guard.beforeCall({ ...call, args: cyclic }), /cannot be turned into JSON: .*circular/i);
  assert.throws(() => guard.beforeCall({ ...call, args: { n: 10n } }), /cannot be turned into JSON: .*BigInt/);
  assert.throws(() => guard.beforeCall({ ...call, args: 10n }), /args is not a JSON value/);
  assert.throws(() => guard.beforeCall({ ...call, args: () => 1 }), /args is not a JSON value/);
  assert.throws(() => guard.beforeCall({ ...call, args: Symbol('x') }), /args is not a JSON value/);
  assert.throws(() => guard.afterCall({ ...call, callId: 'c', result: 5n }), /result is not a JSON value/);
  assert.throws(() => guard.afterCall({ ...call, callId: 'c', result: { text: 'x'.repeat(100), cyclic } }), /cannot be turned into JSON: .*circular/i);
  assert.throws(() => guard.beforeCall({ ...call, tool: undefined }), /call without tool/);
  assert.throws(() => guard.beforeCall({ ...call, tool: '  ' }), /call without tool/);
  assert.throws(() => guard.beforeCall({ ...call, tool: 5 }), /tool must be a string, not a number/);
  assert.throws(() => guard.beforeCall({ ...call, run: null }), /run must be a string, not null/);
  assert.throws(() => guard.beforeCall({ ...call, parentSession: 7 }), /parentSession must be a string, not a number/);
  assert.throws(() => guard.beforeCall({ ...call, parentRun: 'r0' }), /parent_run without parent_session/);
  assert.throws(() => guard.recordUsage({ session: 's', run: 'r', parentRun: 'r0', inputTokens: 1, outputTokens: 1 }), /parent_run without parent_session/);
  assert.equal(guard.beforeCall({ ...call, parentSession: 'p', parentRun: 'r0' }).verdict, 'allow');
  assert.throws(() => guard.beforeCall(null), /expects an object/);
  assert.throws(() => guard.beforeCall('read'), /expects an object/);
  assert.throws(() => guard.afterCall({ session: 's', result: 1 }), /call_id of a pending call/);
  assert.throws(() => guard.afterCall({ session: 's', callId: 'nope', result: 1 }), /no pending call/);

  // Nesting: the engine reads JSON text of any depth without recursing (as `loopguard
  // replay` does), so 200 levels are guarded like any value; far deeper, JSON.stringify
  // itself runs out of stack, and that is an error, not a crash.
  let deep = {};
  for (let i = 0; i < 200; i++) deep = { d: deep };
  const deepLoop = loop(guard, 11, { session: 'deep', run: 'r' }, 'read', deep);
  assert.deepEqual(deepLoop.map((v) => v.verdict), [...Array(10).fill('allow'), 'warn']);
  let deeper = [];
  for (let i = 0; i < 100_000; i++) deeper = [deeper];
  assert.throws(() => guard.beforeCall({ ...call, args: deeper }), /nested too deeply|nested deeper/);

  // A 50 MB result is hashed like any other.
  const huge = 'x'.repeat(50 << 20);
  const v = guard.beforeCall({ ...call, callId: 'big', args: { p: 1 } });
  assert.equal(v.verdict, 'allow');
  assert.deepEqual(guard.afterCall({ ...call, callId: 'big', result: { content: [{ type: 'text', text: huge }] } }), {
    recorded: true,
    abort: null,
    endsRun: null,
  });
  const ticket = guard.begin({ ...call, callId: 'big2', args: { p: 2 } });
  assert.equal(ticket.finish({ result: { content: [{ type: 'text', text: huge }] } }).recorded, true);

  // Not-quite-JSON values inside objects are taken as JSON.stringify takes them.
  const a = guard.beforeCall({ ...call, session: 't', callId: 'x1', args: { p: 1, f: () => 1, u: undefined } });
  assert.equal(a.verdict, 'allow');
  assert.equal(guard.afterCall({ ...call, session: 't', callId: 'x1', result: { at: new Date(0) } }).recorded, true);

  // The guard still works after all of that.
  assert.equal(guard.beforeCall({ ...call, session: 'fresh', args: {} }).verdict, 'allow');
});

/**
 * Whether results `a` and `b` fingerprint alike: 21 calls of one tool with the same args,
 * their results alternating between `a` and `b`, are blocked at the 21st only if they do
 * (20 identical outcomes). Run through tickets and through afterCall (long strings lifted
 * out of the text) and through applyEvent (the whole value as JSON text, as `loopguard
 * replay` reads it): all must answer alike.
 */
function hashAlike(a, b) {
  const api = new Guard(ON);
  const tickets = new Guard(ON);
  const text = new Guard(ON);
  const verdicts = { api: [], tickets: [], text: [] };
  for (let i = 1; i <= 21; i++) {
    const result = i % 2 ? a : b;
    const call = { session: 's', run: 'r', tool: 'read', args: { p: 1 }, callId: `c${i}` };
    const v = api.beforeCall(call);
    verdicts.api.push(v.verdict);
    if (v.verdict !== 'block') api.afterCall({ ...call, result });
    const ticket = tickets.begin(call);
    verdicts.tickets.push(ticket.verdict.verdict);
    if (!ticket.blocked) ticket.finish({ result });
    const event = { session: 's', run: 'r', tool: 'read', args: { p: 1 }, call_id: `c${i}` };
    const t = text.applyEvent({ type: 'call', ...event });
    verdicts.text.push(t.verdict);
    if (t.verdict !== 'block') text.applyEvent({ type: 'result', ...event, result });
  }
  assert.deepEqual(verdicts.api, verdicts.text);
  assert.deepEqual(verdicts.tickets, verdicts.text);
  return verdicts.api.at(-1) === 'block';
}

test('long strings of a result cross beside its text and hash as inside it', () => {
  const long = 'line "one"\n\tline two\n'.repeat(20);
  const content = (text) => ({ content: [{ type: 'text', text }], details: { ok: true } });
  assert.equal(hashAlike(content(long), content(`${long}`)), true);
  assert.equal(hashAlike(content(long), content(`${long}.`)), false);
  assert.equal(hashAlike(long, long), true, 'a long string as the whole result');
  assert.equal(hashAlike('é😀'.repeat(40), 'é😀'.repeat(40)), true);
  // Lone surrogates stay in the text (N-API would make both U+FFFD).
  assert.equal(hashAlike(`\ud800${long}`, `\udc00${long}`), false);
  // A string that looks like a placeholder is lifted too, so it is never taken for one.
  assert.equal(hashAlike(['\u00000', long], [long, long]), false);
  assert.equal(hashAlike(['\u00000', long], ['\u00000', long]), true);
  assert.equal(hashAlike(['\u0000\ud800', long], ['\u0000\udc00', long]), false);
  // toJSON and JSON.stringify's other rules apply before lifting.
  const dated = { at: new Date(0), note: long, skip: undefined, f: () => 1 };
  assert.equal(hashAlike(dated, { at: new Date(0).toISOString(), note: long }), true);
  // Many short values: lifting gives up and the text is written whole.
  const rows = (text) => ({ ...content(text), details: { rows: Array.from({ length: 100 }, (_, i) => ({ i, name: `n${i}` })) } });
  assert.equal(hashAlike(rows(long), rows(`${long}`)), true);
  assert.equal(hashAlike(rows(long), rows(`${long}.`)), false);
  // The first levels are copied with their long strings lifted; what the copy cannot
  // keep as JSON.stringify writes it goes through the replacer.
  // (a result hashes as its details and its content's text: the cases are in them)
  const deep = (tag) => ({ ...content(long), details: { a: { b: { c: tag } } } });
  // (read as a placeholder, "\u00000" would be the lifted `long`)
  assert.equal(hashAlike(deep('\u00000'), deep('\u00000')), true, 'U+0000 below the copy');
  assert.equal(hashAlike(deep('\u00000'), deep(long)), false);
  const keyed = (v) => ({ ...content(long), details: { '\u0000k': v } });
  assert.equal(hashAlike(keyed('a'), keyed('b')), false);
  const own = (x) => ({ ...content(long), details: JSON.parse(`{"__proto__": {"x": "${x}"}}`) });
  assert.equal(hashAlike(own('a'), own('a')), true, 'an own __proto__ member');
  assert.equal(hashAlike(own('a'), own('b')), false);
  assert.equal(hashAlike(own('a'), { ...content(long), details: {} }), false);
  const bare = (v) => ({ ...content(long), details: Object.assign(Object.create(null), { n: v }) });
  assert.equal(hashAlike(bare('a'), { ...content(long), details: { n: 'a' } }), true, 'no prototype');
  assert.equal(hashAlike(bare('a'), bare('b')), false);
  class Reply {
    constructor(text, n) {
      this.content = [{ type: 'text', text }];
      this.details = { n };
    }
  }
  assert.equal(hashAlike(new Reply(long, 'a'), { ...content(long), details: { n: 'a' } }), true);
  assert.equal(hashAlike(new Reply(long, 'a'), new Reply(long, 'b')), false);
  const sparse = [long, , 'x']; // eslint-disable-line no-sparse-arrays
  assert.equal(hashAlike(sparse, [long, null, 'x']), true, 'a hole is null');
  assert.equal(hashAlike(sparse, [long, 'x']), false);
  const skipped = { ...content(long), details: { n: 'a', u: undefined, f() {} } };
  assert.equal(hashAlike(skipped, { ...content(long), details: { n: 'a' } }), true);
  // Errors are lifted like results.
  const guard = new Guard(ON);
  guard.beforeCall({ session: 'e', tool: 'exec', args: { command: 'make' }, callId: 'c1' });
  assert.equal(guard.afterCall({ session: 'e', callId: 'c1', error: { message: long } }).recorded, true);
});

test('a ticket is answered as the protocol answers its call and its result', () => {
  // Two guards on the same host cycle: one through tickets (the outcome crosses alone, the
  // call's fingerprint kept in the ticket), one through the protocol (a call event, then a
  // result event with a copy of the arguments). Runs ended between a call and its outcome
  // and retried outcomes included: the answers never differ. (A blocked call runs in
  // neither: the host has no outcome for it.)
  const tickets = new Guard(ON);
  const protocol = new Guard(ON);
  const answers = (guard, useTickets) => {
    const out = [];
    for (let i = 1; i <= 60; i++) {
      const scope = { session: 's', run: 'r' };
      const args = { path: i % 7 === 0 ? '/b' : '/a', opts: { n: 1 } };
      const call = { ...scope, tool: 'read', args, callId: `c${i}` };
      const ticket = useTickets ? guard.begin(call) : null;
      const verdict = ticket ? ticket.verdict : guard.beforeCall(call);
      out.push(verdict.verdict, verdict.detector, verdict.count, verdict.warningNote);
      if (i === 5 || i === 50) out.push(guard.endRun(scope));
      if (verdict.verdict === 'block') continue;
      const outcome = { ...call, args: structuredClone(args), result: { text: 'same' } };
      out.push((ticket ? ticket.finish({ result: outcome.result }) : guard.afterCall(outcome)).recorded);
      if (i % 5 === 0) out.push(guard.afterCall(outcome).recorded); // a client retry
    }
    return out;
  };
  const got = answers(tickets, true);
  assert.deepEqual(got, answers(protocol, false));
  assert.ok(got.includes('block') && got.includes('warn'), 'the loop reaches both levels');

  // The arguments are those the call was made with: a change to the object in between
  // is not seen.
  const a = new Guard(ON);
  const b = new Guard(ON);
  for (let i = 1; i <= 12; i++) {
    const args = { path: '/a' };
    const ids = { session: 's', tool: 'read', callId: `m${i}` };
    const ticket = a.begin({ ...ids, args });
    b.beforeCall({ ...ids, args: { path: '/a' } });
    args.path = `/changed${i}`;
    ticket.finish({ result: 'r' });
    b.afterCall({ ...ids, args: { path: '/a' }, result: 'r' });
  }
  const next = { session: 's', tool: 'read', args: { path: '/a' }, callId: 'm13' };
  assert.deepEqual(a.beforeCall(next), b.beforeCall(next));

  // A blocked ticket records nothing, even when its run was ended since (the run no longer
  // knows the call; the ticket still does).
  const ended = new Guard('{ tools: { loopDetection: { enabled: true, warningThreshold: 1, criticalThreshold: 2 } } }');
  let blocked;
  for (let i = 1; i <= 3 && !blocked?.blocked; i++) {
    blocked = ended.begin({ session: 'e', run: 'r', tool: 'read', args: {}, callId: `b${i}` });
    if (!blocked.blocked) blocked.finish({ result: 'same' });
  }
  assert.equal(blocked.blocked, true);
  ended.endRun({ session: 'e', run: 'r' });
  assert.equal(blocked.finish({ result: 'same' }).recorded, false);

  // A ticket finishes once; a cancelled one records nothing and cannot be finished.
  const guard = new Guard(ON);
  const once = guard.begin({ session: 'o', tool: 't', args: {} });
  assert.deepEqual(once.finish({ result: 1 }), { recorded: true, abort: null, endsRun: null });
  assert.throws(() => once.finish({ result: 1 }), /already finished or cancelled/);
  const dropped = guard.begin({ session: 'o', tool: 't', args: {} });
  dropped.cancel();
  assert.throws(() => dropped.finish({ result: 1 }), /already finished or cancelled/);
  assert.throws(() => guard.begin({ session: 'o', tool: 't' }).finish(null), /expects an object/);
  assert.throws(() => guard.begin({ session: 'o', tool: 't' }).finish({ result: 1n }), /result is not a JSON value/);
  const native = createRequire(import.meta.url)('../native.js');
  const raw = native.newGuard(ON, undefined);
  assert.throws(() => native.finishText(raw, 'not a ticket', '{"result":1}'), /not a ticket/);
});

test('guard.call runs the tool unless blocked, and records what it returned or threw', async () => {
  const guard = new Guard('{ tools: { loopDetection: { enabled: true, warningThreshold: 2, criticalThreshold: 3 } } }');
  const call = { session: 'c', run: 'r', tool: 'exec', args: { command: 'make' } };
  let runs = 0;
  const fails = () => {
    runs += 1;
    throw new Error('exit 2');
  };
  for (let i = 0; i < 3; i++) assert.throws(() => guard.call(call, fails), /exit 2/);
  const blocked = guard.call(call, fails);
  assert.equal(runs, 3, 'a blocked call does not run');
  assert.equal(blocked.ran, false);
  assert.equal(blocked.verdict.verdict, 'block');
  assert.equal(blocked.result.details.status, 'blocked');
  assert.equal(blocked.recorded, null);
  // The same loop through the protocol, the error given as text.
  const twin = new Guard('{ tools: { loopDetection: { enabled: true, warningThreshold: 2, criticalThreshold: 3 } } }');
  for (let i = 0; i < 3; i++) {
    twin.beforeCall(call);
    twin.afterCall({ ...call, error: 'Error: exit 2' });
  }
  assert.deepEqual(twin.beforeCall(call), blocked.verdict);
  const ok = await guard.call({ ...call, session: 'd' }, async () => ({ done: true }));
  assert.deepEqual([ok.ran, ok.result, ok.recorded.recorded, ok.endsRun], [true, { done: true }, true, null]);
  await assert.rejects(guard.call({ ...call, session: 'd' }, async () => Promise.reject(new Error('late'))), /late/);
  assert.throws(() => guard.call(call, 'not a function'), /tool must be a function/);
});

test('a sidecar answer reads back as the verdict the engine gives', () => {
  const { verdictFromAnswer } = createRequire(import.meta.url)('../index.js');
  const guard = new Guard(ON);
  for (let i = 1; i <= 21; i++) {
    const event = { type: 'call', session: 's', tool: 'read', args: { p: 1 }, call_id: `c${i}` };
    const answer = guard.applyEvent(event);
    const twin = new Guard(ON);
    for (let j = 1; j < i; j++) {
      twin.beforeCall({ session: 's', tool: 'read', args: { p: 1 }, callId: `c${j}` });
      twin.afterCall({ session: 's', tool: 'read', args: { p: 1 }, callId: `c${j}`, result: 'same' });
    }
    const want = twin.beforeCall({ session: 's', tool: 'read', args: { p: 1 }, callId: `c${i}` });
    assert.deepEqual(verdictFromAnswer(answer, 'read'), want, `call ${i}`);
    assert.deepEqual(verdictFromAnswer(JSON.stringify(answer), 'read'), want);
    guard.applyEvent({ ...event, type: 'result', result: 'same' });
  }
  assert.throws(() => verdictFromAnswer({ seq: 1, type: 'result', recorded: true }, 'read'), /not the answer to a call or a message/);
});

test('messages: a chanting stream and a format-error loop are stopped, bad fields refused', () => {
  const { verdictFromAnswer } = createRequire(import.meta.url)('../index.js');
  const config = "{ loopguard: { preset: 'recommended' } }";
  const guard = new Guard(config);
  const twin = new Guard(config);
  const pieces = [];
  for (let i = 0; i < 24 && !pieces.some((v) => v.verdict === 'block'); i++) {
    const text = i % 2 === 0 ? 'I will run the tests again ' : 'to make sure that they pass.\n';
    const piece = { session: 's', run: 'stream', text, delta: true, index: i, id: 'm1' };
    pieces.push(guard.message(piece));
    // A sidecar answers the same event; its answer reads back as the same verdict.
    const answer = twin.applyEvent({ type: 'message', session: 's', run: 'stream', role: 'assistant', text, delta: true, index: i, id: 'm1' });
    assert.deepEqual(verdictFromAnswer(answer, 'assistant'), pieces.at(-1));
  }
  const blocked = pieces.at(-1);
  assert.equal(blocked.detector, 'content_chanting');
  assert.equal(blocked.terminal, true);
  assert.equal(pieces.length, 20, 'the 10th complete line blocks');
  assert.equal(guard.beforeCall({ session: 's', run: 'stream', tool: 'bash' }).verdict, 'block');

  const turns = [];
  for (let i = 0; i < 9; i++) {
    guard.message({ session: 's', run: 'format', text: `Done, attempt ${i}.`, hasToolCalls: false });
    turns.push(guard.message({ session: 's', run: 'format', role: 'tool_feedback', text: 'No tool calls found.' }));
  }
  assert.deepEqual(
    turns.map((v) => v.verdict),
    ['allow', 'allow', 'warn', 'warn', 'warn', 'warn', 'warn', 'block', 'block'],
  );
  assert.equal(turns[2].warningNote.includes('No tool calls found.'), true);

  caught(() => guard.message({ session: 's' }), TypeError);
  caught(() => guard.message({ session: 's', text: 'x', hasToolCalls: 'no' }), TypeError);
  caught(() => guard.message({ session: 's', text: 'x', delta: true, index: -1 }), TypeError);
  caught(() => guard.message({ session: 's', text: 'x', index: 1.5 }), TypeError);
  assert.match(caught(() => guard.message({ session: 's', text: 'x', role: 'robot' }), Error).message, /role/);
  assert.match(caught(() => guard.message({ session: 's', text: 'x', role: 'user', delta: true }), Error).message, /delta/);
});

test('ids that need escaping in JSON keep their scopes apart', () => {
  // Quoted as they are when plain, escaped by JSON.stringify otherwise: either way the
  // engine reads the id given (the protocol answers the same events alike).
  const ids = ['plain', 'a"b', 'a\\"b', 'a\\b', 'line\nbreak', '\u0000', 'é😀', ''];
  const api = new Guard(ON);
  const text = new Guard(ON);
  for (let round = 1; round <= 12; round++) {
    for (const [i, id] of ids.entries()) {
      const call = { session: id, run: id, agent: id, tool: 't', args: {}, callId: `${id}#${round}${i}` };
      const got = api.beforeCall(call);
      const want = text.applyEvent({ type: 'call', session: id, run: id, agent: id, tool: 't', args: {}, call_id: call.callId });
      assert.equal(got.verdict, want.verdict, `${JSON.stringify(id)} round ${round}`);
      assert.equal(got.count, want.count ?? null);
      api.afterCall({ ...call, result: 'same' });
      text.applyEvent({ type: 'result', session: id, run: id, agent: id, tool: 't', args: {}, call_id: call.callId, result: 'same' });
    }
  }
  // Every id its own scope: twelve identical calls in each, not in all together.
  for (const id of ['a"b', 'a\\"b', '\u0000', '']) {
    assert.equal(api.beforeCall({ session: id, run: id, agent: id, tool: 't', args: {} }).count, 12);
  }
  // A lone surrogate is not Unicode text: refused, as the protocol refuses it.
  assert.throws(() => api.beforeCall({ session: '\ud800', tool: 't' }), /lone surrogate/);
  assert.match(text.applyEvent({ type: 'call', session: '\ud800', tool: 't' }).error, /lone surrogate/);
});

test('a native call made from inside another one on the same guard is an error', () => {
  const native = createRequire(import.meta.url)('../native.js');
  const guard = native.newGuard(ON, undefined);
  native.callText(guard, '{"type":"call","session":"s","call_id":"c1","tool":"read"}');
  const lifted = [];
  Object.defineProperty(lifted, 0, { enumerable: true, get: () => (native.endRun(guard, 's', undefined), 'x') });
  const event = '{"type":"result","session":"s","call_id":"c1","result":"\\u00000"}';
  assert.throws(() => native.resultText(guard, event, lifted), /called again from inside one of its calls/);
  assert.equal(native.resultText(guard, event, ['x'.repeat(100)]), true);
});

test('applyEvent answers protocol lines, bad ones included, with replay\'s fields', () => {
  const guard = new Guard(ON);
  assert.deepEqual(guard.applyEvent('{"type":"call","tool":"read","call_id":"c1"}'), {
    seq: 1,
    type: 'call',
    session: 'default',
    run: null,
    verdict: 'allow',
  });
  assert.deepEqual(guard.applyEvent('not json'), { seq: 2, error: 'invalid JSON: expected ident at column 2' });
  assert.match(guard.applyEvent(Buffer.from([0x7b, 0xff, 0x7d])).error, /UTF-8/);
  assert.equal(guard.applyEvent({ type: 'compaction' }, 10).armed, 3);
});

test('recordUsage counts a response once, prices it, and a used-up budget stops the run', () => {
  const guard = new Guard(
    '{ tools: { loopDetection: { enabled: true } }, loopguard: { budgets: { run: { cost: 0.01 } } } }',
  );
  const scope = { session: 's', run: 'r' };
  const usage = { ...scope, id: 'resp-1', model: 'gpt-4o', inputTokens: 1000, outputTokens: 100 };
  const first = guard.recordUsage(usage);
  assert.deepEqual(first, { cost: 0.0035, stop: null, endsRun: null });
  assert.deepEqual(guard.recordUsage(usage), first, 'a retry is answered the same');
  // A retry with other figures under the same id is refused, and counts nothing.
  const conflict = caught(() => guard.recordUsage({ ...usage, outputTokens: 101 }), Error);
  assert.match(conflict.message, /already counted with other figures/);
  for (const [bad, says] of [
    [{ ...scope, inputTokens: -1, outputTokens: 0 }, /input_tokens must be a whole number/],
    [{ ...scope, inputTokens: 1.5, outputTokens: 0 }, /input_tokens must be a whole number/],
    [{ ...scope, inputTokens: 1, outputTokens: 0, cost: Number.NaN }, /cost must be/],
    [{ ...scope, inputTokens: 1, outputTokens: 0, cost: -1 }, /cost must be/],
    [{ ...scope, inputTokens: 1e12, outputTokens: 0 }, /from 0 to 100000000/],
    [{ ...scope, outputTokens: 0 }, /without input_tokens/],
  ]) {
    assert.match(caught(() => guard.recordUsage(bad), Error).message, says);
  }
  assert.match(
    caught(() => guard.recordUsage({ ...scope, promptTokens: 3 }), TypeError).message,
    /unknown key "promptTokens"/,
  );
  assert.match(caught(() => guard.recordUsage({ ...scope, model: 4 }), TypeError).message, /model/);
  assert.equal(guard.beforeCall({ ...scope, tool: 'read', args: { n: 1 } }).verdict, 'allow');
  const over = guard.recordUsage({ ...scope, id: 'resp-2', cost: 0.02, inputTokens: 1, outputTokens: 1 });
  assert.equal(over.cost, 0.02);
  assert.equal(over.stop.detector, 'run_budget');
  assert.equal(over.stop.measure, 'cost');
  assert.equal(over.stop.limit, 0.01);
  assert.equal(over.endsRun, over.stop.message);
  const blocked = guard.beforeCall({ ...scope, tool: 'read', args: { n: 2 } });
  assert.equal(blocked.verdict, 'block');
  assert.equal(blocked.detector, 'run_budget');
  assert.equal(blocked.terminal, true);
  // The sidecar's answer reads back the same way.
  const answer = guard.applyEvent({ type: 'usage', ...scope, id: 'resp-2', cost: 0.02, input_tokens: 1, output_tokens: 1 });
  assert.deepEqual(countedFromAnswer(answer), over);
});
