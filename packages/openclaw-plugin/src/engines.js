// The two engines behind the plugin, with one interface (beforeCall, afterCall,
// onCompaction, endRun; answers shaped as @loopguard/node's):
//
// - in process: @loopguard/node, the engine compiled into the gateway process;
// - sidecar: a `loopguard serve` reached over HTTP, for several gateways sharing one guard
//   (its store, SQLite or Redis, keeps the state; its own --config sets the thresholds).

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
  beforeCall(call) {
    return this.guard.beforeCall(call);
  }
  afterCall(outcome) {
    return this.guard.afterCall(outcome);
  }
  onCompaction(scope) {
    return this.guard.onCompaction(scope);
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
    return { type, session: scope.session, run: scope.run, agent: scope.agent, ...fields };
  }

  async beforeCall(call) {
    const answer = await this.#post(
      '/v1/events',
      this.#event('call', call, { call_id: call.callId, tool: call.tool, args: call.args }),
    );
    return verdictOf(answer);
  }

  async afterCall(outcome) {
    const fields = { call_id: outcome.callId, tool: outcome.tool, args: outcome.args };
    if (outcome.error !== undefined) fields.error = outcome.error;
    else if (outcome.result !== undefined) fields.result = outcome.result;
    const answer = await this.#post('/v1/events', this.#event('result', outcome, fields));
    return { recorded: answer.recorded, abort: answer.abort ?? null };
  }

  async onCompaction(scope) {
    const answer = await this.#post('/v1/events', this.#event('compaction', scope, {}));
    return answer.armed;
  }

  async endRun(scope) {
    const answer = await this.#post('/v1/runs/end', { session: scope.session, run: scope.run });
    return answer.ended;
  }
}

/** A sidecar call answer in @loopguard/node's verdict shape (the same blocked result and
 * warning note the engine's Verdict builds: docs/serve.md, "The host loop"). */
export function verdictOf(answer) {
  const verdict = answer.verdict;
  const detected = verdict === 'warn' || verdict === 'block';
  const out = {
    verdict,
    level: answer.level ?? null,
    detector: answer.detector ?? null,
    count: answer.count ?? null,
    message: answer.message ?? null,
    notify: answer.notify ?? false,
    terminal: answer.terminal ?? false,
    pairedTool: answer.paired_tool ?? null,
    blockedResult: null,
    warningNote: null,
  };
  if (detected && verdict === 'block') {
    out.blockedResult = {
      content: [{ type: 'text', text: answer.message }],
      details: { status: 'blocked', deniedReason: 'tool-loop', detector: answer.detector, count: answer.count },
    };
  }
  if (verdict === 'warn' && answer.notify) out.warningNote = `[loopguard] ${answer.message}`;
  if (answer.shadow) out.shadow = { ...answer.shadow, pairedTool: answer.shadow.paired_tool ?? null };
  return out;
}
