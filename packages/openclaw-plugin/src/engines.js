// The two engines behind the plugin, with one interface (begin, which hands out a ticket
// with the verdict and `finish(outcome)`; afterCall, a result event for a call whose
// ticket could not be had; onCompaction; recordUsage and message, what a model response
// used and said; endRun; answers shaped as @loopguard/node's):
//
// - in process: @loopguard/node, the engine compiled into the gateway process;
// - sidecar: a `loopguard serve` reached over HTTP, for several gateways sharing one guard
//   (its store, SQLite or Redis, keeps the state; its own --config sets the thresholds).
//   A call is a call event, its ticket's outcome a result event; the sidecar's answer is
//   read back by @loopguard/node into the engine's own verdict (its blocked result and
//   warning note are the engine's).

import { createRequire } from 'node:module';

import { engineDocument, engineSettings } from './config.js';

const require = createRequire(import.meta.url);

/** The engine a plugin config asks for. */
export function createEngine(config) {
  const settings = engineSettings(config);
  if (settings.engine === 'sidecar') {
    if (!settings.url) throw new Error('loopguard: engine "sidecar" needs sidecar.url');
    return new SidecarEngine(settings);
  }
  const { Guard } = require('@loopguard/node');
  return new InProcessEngine(new Guard(engineDocument(config)));
}

/** @loopguard/node in this process: answers synchronously. */
export class InProcessEngine {
  constructor(guard) {
    this.guard = guard;
    this.kind = 'in-process';
  }
  begin(call) {
    return this.guard.begin(call);
  }
  afterCall(outcome) {
    return this.guard.afterCall(outcome);
  }
  onCompaction(scope) {
    return this.guard.onCompaction(scope);
  }
  recordUsage(usage) {
    return this.guard.recordUsage(usage);
  }
  message(message) {
    return this.guard.message(message);
  }
  endRun(scope) {
    return this.guard.endRun(scope);
  }
}

/** A sidecar's answer could not be had (network, status, timeout). */
export class SidecarError extends Error {}

/** `loopguard serve` over HTTP (docs/serve.md): each method is one POST /v1/events. */
export class SidecarEngine {
  constructor({ url, token, timeoutMs }) {
    this.url = url.replace(/\/+$/, '');
    this.timeoutMs = timeoutMs;
    this.headers = { 'content-type': 'application/json' };
    if (token) this.headers.authorization = `Bearer ${token}`;
    this.kind = 'sidecar';
  }

  async #post(path, body) {
    let response;
    try {
      response = await fetch(this.url + path, {
        method: 'POST',
        headers: this.headers,
        body: JSON.stringify(body),
        signal: AbortSignal.timeout(this.timeoutMs),
      });
    } catch (error) {
      throw new SidecarError(`loopguard sidecar at ${this.url} did not answer: ${error.message}`, {
        cause: error,
      });
    }
    const answer = await response.json().catch(() => ({}));
    if (!response.ok) {
      throw new SidecarError(
        `loopguard sidecar answered HTTP ${response.status}: ${answer.error ?? response.statusText}`,
      );
    }
    return answer;
  }

  #event(type, scope, fields) {
    return {
      type,
      session: scope.session,
      run: scope.run,
      agent: scope.agent,
      parent_session: scope.parentSession,
      parent_run: scope.parentRun,
      ...fields,
    };
  }

  async begin(call) {
    const answer = await this.#post(
      '/v1/events',
      this.#event('call', call, { call_id: call.callId, tool: call.tool, args: call.args }),
    );
    const { Ticket, verdictFromAnswer } = require('@loopguard/node');
    return new Ticket(verdictFromAnswer(answer, call.tool), this.#settle, call);
  }

  /** A ticket's outcome: the result event of its call (the sidecar fingerprints the
   * arguments it is sent again). */
  #settle = (call, outcome) => this.afterCall({ ...call, ...outcome });

  async afterCall(outcome) {
    const fields = { call_id: outcome.callId, tool: outcome.tool, args: outcome.args };
    if (outcome.error !== undefined) fields.error = outcome.error;
    else if (outcome.result !== undefined) fields.result = outcome.result;
    const answer = await this.#post('/v1/events', this.#event('result', outcome, fields));
    const abort = answer.abort ?? null;
    return { recorded: answer.recorded, abort, endsRun: abort?.message ?? null };
  }

  async onCompaction(scope) {
    const answer = await this.#post('/v1/events', this.#event('compaction', scope, {}));
    return answer.armed;
  }

  /** A usage event; its answer read back as `recordUsage` gives it. */
  async recordUsage(usage) {
    const { countedFromAnswer, usageEvent } = require('@loopguard/node');
    return countedFromAnswer(await this.#post('/v1/events', usageEvent(usage)));
  }

  /** A message event; its answer read back as the verdict `message` gives. */
  async message(message) {
    const { messageEvent, verdictFromAnswer } = require('@loopguard/node');
    const answer = await this.#post('/v1/events', JSON.parse(messageEvent(message)));
    return verdictFromAnswer(answer, message.role ?? 'assistant');
  }

  async endRun(scope) {
    const answer = await this.#post('/v1/runs/end', { session: scope.session, run: scope.run });
    return answer.ended;
  }
}
