'use strict';
// @loopguard/node: the loopguard engine in process.
//
// `guard.begin(call)` hands out a Ticket: the engine's verdict on the call, kept with
// everything its outcome is recorded by, which `ticket.finish({ result })` gives back
// (`guard.call(call, tool)` does both around the tool). Every method turns its argument
// into one event of loopguard's replay protocol (SPEC §7) and hands it to the native
// engine, which answers it exactly as `loopguard replay` would.
// Events cross into Rust as JSON text, which the engine fingerprints in place (no value
// tree): measured faster than converting objects value by value (see bench/bench.mjs), and
// JSON.stringify fails with clear errors on cycles and BigInt. Values are taken as
// JSON.stringify sees them (toJSON applies; functions, symbols and undefined inside objects
// are left out).

const { readFileSync } = require('node:fs');
const native = require('./native.js');

/** The answer for a call that may run with nothing to say (shared, frozen). */
const ALLOW = Object.freeze({
  verdict: 'allow',
  level: null,
  detector: null,
  count: null,
  message: null,
  notify: false,
  terminal: false,
  pairedTool: null,
  blockedResult: null,
  warningNote: null,
});

/** A config document that cannot be used; `issues` lists every problem with its place. */
class ConfigError extends Error {
  constructor(message, issues, origin) {
    super(message);
    this.name = 'ConfigError';
    this.code = 'LOOPGUARD_CONFIG';
    this.origin = origin ?? null;
    this.issues = issues;
  }
}

/** The document text and its origin (a file name) for each accepted form of config. */
function configSource(config) {
  if (config === undefined || config === null) return { text: '{}', origin: undefined };
  if (typeof config === 'string') {
    // A document starts with `{` after blanks and comments; a path never does (the Python
    // binding's rule too: docs/decisions.md).
    if (/^\s*(\{|\/\/|\/\*)/.test(config)) return { text: config, origin: undefined };
    let text;
    try {
      text = readFileSync(config, 'utf8');
    } catch (error) {
      throw new Error(`cannot read the config file ${config}: ${error.message}`, { cause: error });
    }
    return { text, origin: config };
  }
  if (typeof config === 'object' && !Array.isArray(config)) {
    return { text: toJson(config, 'the config object'), origin: '(config object)' };
  }
  throw new TypeError(
    'Guard config must be a JSON5 document, a file path or a parsed config object, ' +
      `not ${describe(config)}`,
  );
}

function describe(value) {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  return typeof value === 'object' ? 'an object' : `a ${typeof value}`;
}

/** JSON.stringify with errors that say what could not be turned into JSON, and why. */
function toJson(value, what) {
  let text;
  try {
    text = JSON.stringify(value);
  } catch (error) {
    throw stringifyError(error, what);
  }
  if (text === undefined) throw new TypeError(`${what} is not a JSON value (${describe(value)})`);
  return text;
}

/** What `finish` and `afterCall` answer when there is nothing to say but whether the
 * outcome counted (shared, frozen, like ALLOW). */
const RECORDED = Object.freeze({ recorded: true, abort: null, endsRun: null });
const NOT_RECORDED = Object.freeze({ recorded: false, abort: null, endsRun: null });

// Events are written member by member rather than by JSON.stringify over an envelope
// object: the same text (same members, same order), without building the envelope.

/** Whether `s` needs no escaping in JSON (ids almost never do): no quote, backslash,
 * control character or surrogate. A loop: for strings as short as ids, cheaper than a
 * regular expression. */
function isPlain(s) {
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x20 || c === 0x22 || c === 0x5c || (c >= 0xd800 && c <= 0xdfff)) return false;
  }
  return true;
}

/** `,"name":"value"` for a string field that is given (checked by checkFields), else ''.
 * Plain strings are quoted as they are: cheaper than a call into JSON.stringify. */
function member(name, value) {
  if (value === undefined) return '';
  return isPlain(value) ? `,"${name}":"${value}"` : `,"${name}":${JSON.stringify(value)}`;
}

/** `member(name, value)`, remembering the last value: a host's session, run, agent and
 * tool mostly repeat from call to call. */
function lastMember(name) {
  let last;
  let text = '';
  return (value) => {
    if (value !== last) {
      text = member(name, value);
      last = value;
    }
    return text;
  };
}

const sessionMember = lastMember('session');
const runMember = lastMember('run');
const agentMember = lastMember('agent');
const toolMember = lastMember('tool');

/** The ids of a scope, as members of an event. */
function idMembers(input) {
  return (
    sessionMember(input.session) +
    runMember(input.run) +
    agentMember(input.agent) +
    member('parent_session', input.parentSession) +
    member('parent_run', input.parentRun) +
    member('call_id', input.callId)
  );
}

/** `,"name":JSON` for a JSON value, or '' when JSON.stringify leaves it out (undefined). */
function jsonMember(name, value, what) {
  if (value === undefined) return '';
  let text;
  try {
    text = JSON.stringify(value);
  } catch (error) {
    throw stringifyError(error, what);
  }
  return text === undefined ? '' : `,"${name}":${text}`;
}

// An outcome's long strings cross beside its JSON text instead of inside it: escaping a
// long string in JSON.stringify and unescaping it in Rust was the largest cost of a call
// (crates/loopguard-node/src/lifted.rs has the format). The replacer below lifts them into
// `lifted` and leaves the placeholder "\u0000<index>"; every other value is returned as it
// is, so the text keeps JSON.stringify's meaning (toJSON, cycles, BigInt).
//
// A replacer call costs about as much as escaping 50 characters (measured with Node 24:
// a result of 1,000 short values took 2.6 times as long with it), so lifting gives up when
// its calls have cost more than the strings it lifted save, and the outcome is written by
// JSON.stringify alone: at most 16 calls are wasted.

/** Strings at least this long are lifted (shorter ones cost less escaped in the text). */
const LIFT_MIN = 64;
/** What a replacer call costs, in characters of escaping saved. */
const CALL_COST = 50;
/** How far lifting may run behind before it gives up, in the same unit. */
const GIVE_UP = 16 * CALL_COST;
/** The strings the current outcome's text refers to (reused: read by Rust at once). */
const lifted = [];
/** What lifting has saved so far, minus what its calls cost. */
let budget = 0;
/** Thrown by the replacer to stop lifting. */
const GAVE_UP = Symbol('lifting gave up');
const wellFormed =
  typeof String.prototype.isWellFormed === 'function'
    ? (s) => s.isWellFormed()
    : (s) => !/[\ud800-\udfff]/.test(s);

/** JSON.stringify's replacer that lifts long strings, and every string starting with
 * U+0000 (so that any such string in the text is a placeholder). */
function lift(key, value) {
  budget -= CALL_COST;
  if (typeof value === 'string' && (value.length >= LIFT_MIN || value.charCodeAt(0) === 0)) {
    // N-API would replace lone surrogates with U+FFFD: such a string stays escaped in the
    // text, and when it starts with U+0000 nothing is lifted at all.
    if (!wellFormed(value)) {
      if (value.charCodeAt(0) === 0) throw GAVE_UP;
      return value;
    }
    budget += value.length;
    lifted.push(value);
    return `\u0000${lifted.length - 1}`;
  }
  if (budget < -GIVE_UP) throw GAVE_UP;
  return value;
}

// Most outcomes are a few plain objects and arrays around one long text (an MCP or
// OpenClaw result: `{content: [{type: "text", text}], details}`). For those, a copy of the
// first levels with the long strings already lifted is written by JSON.stringify without a
// replacer, on its fast path (a third faster on the benchmark's results). The copy goes
// only through arrays and plain objects without toJSON; anything else, or a text whose
// placeholders are not exactly the lifted strings (a string starting with U+0000 further
// down), is written with the replacer instead.

/** How many levels of arrays and plain objects the copy goes down. */
const COPY_DEPTH = 3;
/** What liftedCopy returns for a value it leaves to the replacer. */
const NOT_PLAIN = Symbol('not plain');

/** `value` with its long strings lifted into `lifted`: the arrays and plain objects down
 * to `depth` levels that hold one are copied (getters then run twice, as with the
 * replacer); NOT_PLAIN when it meets a value whose JSON the copy might change. */
function liftedCopy(value, depth) {
  if (typeof value === 'string') {
    if (value.length < LIFT_MIN && value.charCodeAt(0) !== 0) return value;
    if (!wellFormed(value)) return NOT_PLAIN;
    lifted.push(value);
    return `\u0000${lifted.length - 1}`;
  }
  if (value === null || typeof value !== 'object' || depth === 0) return value;
  if (value.toJSON !== undefined) return NOT_PLAIN;
  if (Array.isArray(value)) {
    if (Object.getPrototypeOf(value) !== Array.prototype) return NOT_PLAIN;
    let copy;
    for (let i = 0; i < value.length; i++) {
      const item = liftedCopy(value[i], depth - 1);
      if (item === NOT_PLAIN) return NOT_PLAIN;
      if (copy === undefined) {
        if (item === value[i]) continue;
        copy = value.slice(0, i);
      }
      copy.push(item);
    }
    return copy ?? value;
  }
  const proto = Object.getPrototypeOf(value);
  if (proto !== Object.prototype && proto !== null) return NOT_PLAIN;
  const keys = Object.keys(value);
  let copy;
  for (let i = 0; i < keys.length; i++) {
    // Assigning `__proto__` would set the copy's prototype instead of a member.
    if (keys[i] === '__proto__') return NOT_PLAIN;
    const member = value[keys[i]];
    const item = liftedCopy(member, depth - 1);
    if (item === NOT_PLAIN) return NOT_PLAIN;
    if (copy === undefined) {
      if (item === member) continue;
      copy = {};
      for (let j = 0; j < i; j++) copy[keys[j]] = value[keys[j]];
    }
    copy[keys[i]] = item;
  }
  return copy ?? value;
}

/** How many strings of JSON `text` may start with U+0000: every escaped U+0000 is
 * counted (one inside a string or after an escaped backslash too, which only sends the
 * outcome the replacer's way). */
function placeholders(text) {
  let count = 0;
  for (let at = text.indexOf('\\u0000'); at !== -1; at = text.indexOf('\\u0000', at + 6)) {
    count += 1;
  }
  return count;
}

/** `jsonMember` for an outcome: its long strings lifted into `lifted`. */
function outcomeMember(name, value, what) {
  // (`lifted` is empty here: afterCall empties it after each use; setting an array's
  // length is a call into the runtime, so it is done only when needed.)
  if (value === undefined) return '';
  let text;
  try {
    const copy = liftedCopy(value, COPY_DEPTH);
    if (copy !== NOT_PLAIN) {
      text = JSON.stringify(copy);
      if (text === undefined) return '';
      if (placeholders(text) === lifted.length) return `,"${name}":${text}`;
    }
  } catch (error) {
    lifted.length = 0;
    throw stringifyError(error, what);
  }
  if (lifted.length !== 0) lifted.length = 0;
  budget = 0;
  try {
    text = JSON.stringify(value, lift);
  } catch (error) {
    lifted.length = 0;
    if (error === GAVE_UP) return jsonMember(name, value, what);
    throw stringifyError(error, what);
  }
  return text === undefined ? '' : `,"${name}":${text}`;
}

/** What JSON.stringify's failure on `what` means. */
function stringifyError(error, what) {
  if (error instanceof RangeError) {
    return new TypeError(`${what} is nested too deeply to be turned into JSON`, { cause: error });
  }
  return new TypeError(`${what} cannot be turned into JSON: ${error.message}`, { cause: error });
}

/**
 * Ids must be strings when given (null included: it is not a string), as in the protocol;
 * `args`, `result` and `error` must be JSON values. Fields are read by name (this runs on
 * every call: named reads are what V8 caches best).
 */
function checkFields(input, method) {
  if (input === null || typeof input !== 'object') {
    throw new TypeError(`${method} expects an object, not ${describe(input)}`);
  }
  checkId(input.session, 'session', method);
  checkId(input.run, 'run', method);
  checkId(input.agent, 'agent', method);
  checkId(input.parentSession, 'parentSession', method);
  checkId(input.parentRun, 'parentRun', method);
  checkId(input.callId, 'callId', method);
  checkId(input.tool, 'tool', method);
  checkId(input.batch, 'batch', method);
  checkJson(input.args, 'args', method);
  checkJson(input.result, 'result', method);
  checkJson(input.error, 'error', method);
}

function checkId(value, key, method) {
  if (value !== undefined && typeof value !== 'string') {
    throw new TypeError(`${method}: ${key} must be a string, not ${describe(value)}`);
  }
}

function checkJson(value, key, method) {
  const type = typeof value;
  if (type === 'function' || type === 'symbol' || type === 'bigint') {
    throw new TypeError(`${method}: ${key} is not a JSON value (${describe(value)})`);
  }
}

function verdictObject(v) {
  if (v.shadow) {
    return {
      ...ALLOW,
      shadow: {
        verdict: v.shadow.verdict,
        level: v.shadow.level,
        detector: v.shadow.detector,
        count: v.shadow.count,
        message: v.shadow.message,
        terminal: v.shadow.terminal,
        pairedTool: v.shadow.pairedTool ?? null,
      },
    };
  }
  return {
    verdict: v.verdict,
    level: v.level,
    detector: v.detector,
    count: v.count,
    message: v.message,
    notify: v.notify,
    terminal: v.terminal,
    pairedTool: v.pairedTool ?? null,
    blockedResult: v.blockedResult ?? null,
    warningNote: v.warningNote ?? null,
  };
}

function recordedObject(r) {
  if (r === true) return RECORDED;
  if (r === false) return NOT_RECORDED;
  const abort = r.abort ?? null;
  const out = { recorded: r.recorded, abort, endsRun: abort?.message ?? null };
  if (r.shadowAbort) out.shadowAbort = r.shadowAbort;
  return out;
}

/** The keys `recordUsage` takes. */
const USAGE_KEYS = new Set([
  'session',
  'run',
  'agent',
  'parentSession',
  'parentRun',
  'id',
  'model',
  'inputTokens',
  'outputTokens',
  'cacheReadTokens',
  'cacheWriteTokens',
  'cost',
]);

/** A usage answer of the protocol (snake_case) as `recordUsage` answers it. */
function countedObject(a) {
  const out = { cost: a.cost ?? null, stop: a.stop ?? null, endsRun: a.stop?.message ?? null };
  if (a.shadow_stop) out.shadowStop = a.shadow_stop;
  return out;
}

/**
 * A `loopguard serve` answer to a usage event (the parsed object or its JSON text) as
 * `recordUsage` answers it.
 */
function countedFromAnswer(answer) {
  const a = typeof answer === 'string' ? JSON.parse(answer) : answer;
  if (a === null || typeof a !== 'object' || a.type !== 'usage' || a.counted !== true) {
    throw new Error(`not the answer to a usage event: ${JSON.stringify(a)}`);
  }
  return countedObject(a);
}

/** The error text of an exception a tool threw (its message: an Error's JSON is `{}`). */
function errorOutcome(error) {
  return error instanceof Error ? `${error.name}: ${error.message}` : error;
}

/**
 * One tool call between its verdict and its outcome (see `Guard.begin`). `settle(token,
 * outcome)` records an outcome for the ticket's `token`: for a `Guard`, the engine's own
 * ticket kept as a string of its bytes (its call's fingerprints, tool and scope), so that
 * `finish` sends the outcome alone. Other engines (the OpenClaw plugin's sidecar) make
 * tickets with a `settle` of their own.
 */
class Ticket {
  #settle;
  #token;
  #open = true;

  constructor(verdict, settle, token) {
    /** The engine's verdict on the call (`ALLOW` for an unremarkable one). */
    this.verdict = verdict;
    this.#settle = settle;
    this.#token = token;
  }

  /** Whether the call must not run: give the model `blockedResult` instead. */
  get blocked() {
    return this.verdict.verdict === 'block';
  }

  /** For a blocked call: the tool result to hand the model in place of running it. */
  get blockedResult() {
    return this.verdict.blockedResult;
  }

  /** For a warning to surface now: the note to append to the call's result. */
  get warningNote() {
    return this.verdict.warningNote;
  }

  /** When the verdict ends the run (a terminal block): the message it ends with. */
  get endsRun() {
    return this.verdict.terminal ? this.verdict.message : null;
  }

  /**
   * Records what the call returned (`result`) or how it failed (`error`); neither records
   * nothing. A blocked call has no outcome (its ticket records nothing). Once per ticket
   * (an outcome refused as not JSON can be given again).
   */
  finish(outcome) {
    if (outcome === null || typeof outcome !== 'object') {
      throw new TypeError(`finish expects an object with result or error, not ${describe(outcome)}`);
    }
    checkJson(outcome.result, 'result', 'finish');
    checkJson(outcome.error, 'error', 'finish');
    if (!this.#open) throw new Error('this ticket was already finished or cancelled');
    const recorded = this.#settle(this.#token, outcome);
    this.#open = false;
    return recorded;
  }

  /** The call did not run (the host decided against it): nothing is recorded, as when a
   * ticket is dropped; written out, and `finish` refuses it afterwards. */
  cancel() {
    this.#open = false;
  }
}

/** What `Guard.call` answers: the tool's output, or the blocked result in its place. */
function called(ticket, ran, result, recorded) {
  return {
    verdict: ticket.verdict,
    ran,
    result,
    recorded,
    warningNote: ticket.warningNote,
    endsRun: ticket.endsRun ?? recorded?.endsRun ?? null,
  };
}

/** Records `outcome` for the engine's ticket `bytes` in `guard` (a native guard). */
function settleNative(guard, bytes, outcome) {
  const member =
    outcome.error !== undefined
      ? outcomeMember('error', outcome.error, 'the outcome')
      : outcomeMember('result', outcome.result, 'the outcome');
  const strings = lifted.length === 0 ? undefined : lifted.length === 1 ? lifted[0] : lifted;
  try {
    return recordedObject(native.finishText(guard, bytes, `{${member.slice(1)}}`, strings));
  } finally {
    if (lifted.length !== 0) lifted.length = 0;
  }
}

/**
 * The config warnings of a new native guard, emitted as process warnings (as the CLI
 * prints them wherever it loads a config) and kept, frozen, for `guard.configWarnings`.
 */
function configWarnings(guard, origin) {
  const found = native.configWarnings(guard, origin);
  for (const { located } of found) {
    process.emitWarning(located, { type: 'LoopguardConfigWarning', code: 'LOOPGUARD_CONFIG_WARNING' });
  }
  return Object.freeze(found.map(({ issue }) => Object.freeze(plainIssue(issue))));
}

/** A native config issue as the package's plain object. */
function plainIssue(issue) {
  return { path: issue.path, line: issue.line ?? null, column: issue.column ?? null, message: issue.message };
}

class Guard {
  #native;
  #seq = 0;
  /** `settleNative` for this guard: made once, shared by its tickets. */
  #settle;
  #configWarnings;

  /**
   * @param config a JSON5 document (a string starting with `{` or a comment), a file path, or a parsed
   *   config object; omitted: the defaults (rolling detectors off, post-compaction guard on).
   */
  constructor(config) {
    const { text, origin } = configSource(config);
    try {
      this.#native = native.newGuard(text, origin);
      const handle = this.#native;
      this.#settle = (bytes, outcome) => settleNative(handle, bytes, outcome);
      this.#configWarnings = configWarnings(handle, origin);
    } catch (error) {
      const issues = native.configIssues(text, origin);
      if (!issues) throw error;
      throw new ConfigError(
        error.message,
        issues.map(plainIssue),
        origin,
      );
    }
  }

  /**
   * What the config document holds that does nothing (a key that looks like a misspelt
   * block name), each as a `ConfigError`'s issue; also emitted as process warnings.
   */
  get configWarnings() {
    return this.#configWarnings;
  }

  /** The event text of a call. */
  #callEvent(call, method) {
    checkFields(call, method);
    return (
      '{"type":"call"' +
      idMembers(call) +
      toolMember(call.tool) +
      jsonMember('args', call.args, 'the call') +
      member('batch', call.batch) +
      '}'
    );
  }

  /**
   * Judges a call about to run and hands out its Ticket: do not run a blocked call (give
   * the model `ticket.blockedResult`); run any other, then `ticket.finish({ result })` or
   * `ticket.finish({ error })`, appending `ticket.warningNote` to what the model sees.
   */
  begin(call) {
    const begun = native.beginText(this.#native, this.#callEvent(call, 'begin'));
    if (typeof begun === 'string') return new Ticket(ALLOW, this.#settle, begun);
    return new Ticket(verdictObject(begun), this.#settle, begun.ticket);
  }

  /**
   * Runs a tool call under the guard: judges it, calls `tool()` unless it is blocked, and
   * records what it returned or threw (a throw is recorded as the error, then thrown
   * again). Answers `{ verdict, ran, result, recorded, warningNote, endsRun }`, where
   * `result` is the tool's output or, for a blocked call, the result to hand the model;
   * a promise of it when `tool` returns a promise.
   */
  call(call, tool) {
    if (typeof tool !== 'function') {
      throw new TypeError(`call: tool must be a function, not ${describe(tool)}`);
    }
    const ticket = this.begin(call);
    if (ticket.blocked) return called(ticket, false, ticket.blockedResult, null);
    let output;
    try {
      output = tool();
    } catch (error) {
      ticket.finish({ error: errorOutcome(error) });
      throw error;
    }
    if (output !== null && typeof output === 'object' && typeof output.then === 'function') {
      return Promise.resolve(output).then(
        (result) => called(ticket, true, result, ticket.finish({ result })),
        (error) => {
          ticket.finish({ error: errorOutcome(error) });
          throw error;
        },
      );
    }
    return called(ticket, true, output, ticket.finish({ result: output }));
  }

  /** The verdict on a call about to run (a `call` event: the engine keeps the call
   * pending, for an outcome that names it). A blocked call must not run. */
  beforeCall(call) {
    const verdict = native.callText(this.#native, this.#callEvent(call, 'beforeCall'));
    return verdict === null ? ALLOW : verdictObject(verdict);
  }

  /**
   * Records what a call returned (`result`) or how it failed (`error`): a `result` event.
   * Without `tool`, `callId` names the pending call (its tool and arguments are taken from
   * it); so does a `callId` with `tool` and no `args`. A ticket's `finish` needs neither.
   */
  afterCall(outcome) {
    checkFields(outcome, 'afterCall');
    const text =
      '{"type":"result"' +
      idMembers(outcome) +
      toolMember(outcome.tool) +
      jsonMember('args', outcome.args, 'the outcome') +
      (outcome.error !== undefined
        ? outcomeMember('error', outcome.error, 'the outcome')
        : outcomeMember('result', outcome.result, 'the outcome')) +
      '}';
    const strings = lifted.length === 0 ? undefined : lifted.length === 1 ? lifted[0] : lifted;
    try {
      return recordedObject(native.resultText(this.#native, text, strings));
    } finally {
      if (lifted.length !== 0) lifted.length = 0;
    }
  }

  /**
   * Judges a message of the run (a `message` event): the model's answer (`role`
   * `'assistant'`, the default, with its `reasoning` and `hasToolCalls`), a piece of its
   * stream (`delta: true`, numbered by `index`), the harness's feedback to an answer
   * without a tool call (`'tool_feedback'`), a prompt (`'user'`, `'system'`). Words cannot
   * be taken back: a blocked message stops the run (do not call the model again in it;
   * stop the stream being read); a warning's `warningNote` goes into the next prompt.
   */
  message(message) {
    checkFields(message, 'message');
    const { text, role = 'assistant', reasoning, hasToolCalls, id, delta, index } = message;
    if (typeof text !== 'string') {
      throw new TypeError(`message: text must be a string, not ${describe(text)}`);
    }
    checkId(role, 'role', 'message');
    checkId(id, 'id', 'message');
    if (reasoning !== undefined && typeof reasoning !== 'string') {
      throw new TypeError(`message: reasoning must be a string, not ${describe(reasoning)}`);
    }
    for (const [key, value] of [['hasToolCalls', hasToolCalls], ['delta', delta]]) {
      if (value !== undefined && typeof value !== 'boolean') {
        throw new TypeError(`message: ${key} must be a boolean, not ${describe(value)}`);
      }
    }
    if (index !== undefined && !(Number.isSafeInteger(index) && index >= 0)) {
      throw new TypeError(`message: index must be a whole number from 0, not ${String(index)}`);
    }
    const verdict = native.messageText(this.#native, messageEvent({ ...message, role }));
    return verdict === null ? ALLOW : verdictObject(verdict);
  }

  /** A compaction retry happened in this run: arms the post-compaction guard. Returns the
   * number of attempts it watches (0 when disabled). */
  onCompaction(scope = {}) {
    checkFields(scope, 'onCompaction');
    return native.compactionText(
      this.#native,
      toJson(
        {
          type: 'compaction',
          session: scope.session,
          run: scope.run,
          agent: scope.agent,
          parent_session: scope.parentSession,
          parent_run: scope.parentRun,
        },
        'the scope',
      ),
    );
  }

  /**
   * What one model response of the run used (a `usage` event): counted in the run, its
   * session, its agent and the day, priced by `cost` (US dollars) when given, else by the
   * price table. Answers `{ cost, stop, endsRun }`; when a budget is used up, the run's next
   * call is blocked. A usage sent again with the same `id` counts once. Figures that cannot
   * be right, and keys it does not know, throw and count nothing.
   */
  recordUsage(usage) {
    if (usage === null || typeof usage !== 'object') {
      throw new TypeError(`recordUsage expects an object, not ${describe(usage)}`);
    }
    for (const key of Object.keys(usage)) {
      if (!USAGE_KEYS.has(key)) {
        throw new TypeError(
          `recordUsage: unknown key ${JSON.stringify(key)} (a usage has ${[...USAGE_KEYS].join(', ')})`,
        );
      }
    }
    checkFields(usage, 'recordUsage');
    checkId(usage.id, 'id', 'recordUsage');
    checkId(usage.model, 'model', 'recordUsage');
    return countedObject(JSON.parse(native.usageText(this.#native, toJson(usageEvent(usage), 'the usage'))));
  }

  /** Forgets a run (its prompt-to-answer cycle is over). Returns whether it existed. */
  endRun(scope = {}) {
    checkFields(scope, 'endRun');
    return native.endRun(this.#native, scope.session, scope.run);
  }

  /** Forgets a session and all its runs. Returns whether it existed. */
  endSession(session) {
    if (typeof session !== 'string') {
      throw new TypeError(`endSession: session must be a string, not ${describe(session)}`);
    }
    return native.endSession(this.#native, session);
  }

  /** The settings in force for `agent` (or globally): merged, defaulted, clamped. */
  configExplain(agent) {
    if (agent !== undefined && agent !== null && typeof agent !== 'string') {
      throw new TypeError(`configExplain: agent must be a string, not ${describe(agent)}`);
    }
    return native.configExplain(this.#native, agent ?? undefined);
  }

  /**
   * One event of the replay protocol (an object, or a line of JSON text or bytes),
   * answered exactly as `loopguard replay` prints it (snake_case fields; invalid events
   * are answered with `{seq, error}`, not thrown).
   */
  applyEvent(event, seq = this.#seq + 1) {
    this.#seq = seq;
    const line =
      typeof event === 'string' || Buffer.isBuffer(event) ? event : toJson(event, 'the event');
    return JSON.parse(native.applyLine(this.#native, seq, line));
  }
}

/** Every key each config block accepts, by the block's path inside a scope
 * (`tools.loopDetection`, `loopguard.policy.tools[]`, …). */
function configKeys() {
  return native.configKeys();
}

/**
 * A `loopguard serve` answer to a call event (the parsed object or its JSON text) as the
 * verdict `beforeCall` gives: read back into the engine's own values, so its blocked result
 * and warning note are the ones the engine builds. `tool` is the call's.
 */
function verdictFromAnswer(answer, tool) {
  const text = typeof answer === 'string' ? answer : toJson(answer, 'the answer');
  const verdict = native.verdictFromAnswer(text, tool);
  return verdict === null ? ALLOW : verdictObject(verdict);
}

/** The usage event (SPEC §7, replay format) of a `recordUsage` input. */
function usageEvent(usage) {
  return {
    type: 'usage',
    session: usage.session,
    run: usage.run,
    agent: usage.agent,
    parent_session: usage.parentSession,
    parent_run: usage.parentRun,
    id: usage.id,
    model: usage.model,
    input_tokens: usage.inputTokens,
    output_tokens: usage.outputTokens,
    cache_read_tokens: usage.cacheReadTokens,
    cache_write_tokens: usage.cacheWriteTokens,
    cost: usage.cost,
  };
}

/** The message event (SPEC §7, replay format) of a `message` input, as JSON text. */
function messageEvent(message) {
  const { text, role = 'assistant', reasoning, hasToolCalls, id, delta, index } = message;
  return (
    '{"type":"message"' +
    idMembers(message) +
    member('role', role) +
    `,"text":${JSON.stringify(text)}` +
    (reasoning === undefined ? '' : `,"reasoning":${JSON.stringify(reasoning)}`) +
    (hasToolCalls === undefined ? '' : `,"has_tool_calls":${hasToolCalls}`) +
    member('id', id) +
    (delta ? ',"delta":true' : '') +
    (index === undefined ? '' : `,"index":${index}`) +
    '}'
  );
}

module.exports = {
  usageEvent,
  messageEvent,
  Guard,
  Ticket,
  ConfigError,
  ALLOW,
  configKeys,
  verdictFromAnswer,
  countedFromAnswer,
};
