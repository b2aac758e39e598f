// OpenClaw's hooks, wired to a loopguard engine.
//
// - before_tool_call begins the call's ticket with the engine; a block returns {block,
//   blockReason} (OpenClaw hands the reason to the model as the tool result) and a
//   terminal block stops the run: every later call of it is blocked here, whatever the
//   engine is. The ticket is kept by toolCallId until the call's result.
// - The tool-result middleware appends a warning the ticket says to surface to the result
//   the model sees.
// - after_tool_call finishes the ticket with the outcome, the appended warning taken off
//   again (a result must hash the same whether or not a warning rode on it); the ticket
//   holds the call as it was judged, so nothing of the call is sent again. Results of
//   calls this plugin blocked are ignored. An abort (the loop survived a compaction) stops
//   the run like a terminal block.
// - after_compaction arms the post-compaction guard.
// - subagent_spawned links the child session to the session that asked for it and to that
//   session's current run: every event of the child names them (parentSession,
//   parentRun), so the engine's agent tree sees it; subagent_ended ends the child's run, so
//   that its tree counts it finished.
// - before_message_write hands each model response's usage and answer to the engine
//   (budgets, the detectors of messages); model_call_started tells which run they belong
//   to. A run they stop has its next tool call blocked.
//
// OpenClaw does not await after_tool_call, so each run's engine requests go through one
// queue: a result is recorded before the next call of the run is judged (this matters
// for the sidecar, whose requests are asynchronous).

const MAX_TRACKED = 10_000;

/** A Map that forgets its oldest entries past a bound (calls whose result never came). */
class BoundedMap extends Map {
  set(key, value) {
    if (!this.has(key) && this.size >= MAX_TRACKED) this.delete(this.keys().next().value);
    return super.set(key, value);
  }
}

/** The engine scope of a hook call: OpenClaw's session key, run id and agent id. */
export function scopeOf(event, ctx = {}) {
  return {
    session: ctx.sessionKey ?? ctx.sessionId ?? undefined,
    run: event?.runId ?? ctx.runId ?? undefined,
    agent: ctx.agentId ?? undefined,
  };
}

function runKey(scope) {
  return `${scope.session ?? ''}\u0000${scope.run ?? ''}`;
}

/** A finite, non-negative number, else undefined. */
function count(value) {
  return typeof value === 'number' && Number.isFinite(value) && value >= 0 ? value : undefined;
}

/**
 * What an assistant message OpenClaw writes used (`usage: {input, output, cacheRead,
 * cacheWrite, cost: {total}}`, its `model`, its `responseId`), as `recordUsage` takes it;
 * undefined when it records no token counts.
 */
export function usageOf(message) {
  const usage = message?.usage;
  if (!usage || typeof usage !== 'object') return undefined;
  const [input, output, cacheRead, cacheWrite] = [usage.input, usage.output, usage.cacheRead, usage.cacheWrite].map(count);
  if ([input, output, cacheRead, cacheWrite].every((n) => n === undefined)) return undefined;
  const out = {
    inputTokens: input ?? 0,
    outputTokens: output ?? 0,
    cacheReadTokens: cacheRead ?? 0,
    cacheWriteTokens: cacheWrite ?? 0,
  };
  const cost = count(usage.cost?.total);
  // OpenClaw prices a response by its model catalog; a zero from a catalog without prices
  // is not a price, and the engine's table gets its chance.
  if (cost !== undefined && cost > 0) out.cost = cost;
  if (typeof message.model === 'string' && message.model.trim()) out.model = message.model;
  if (typeof message.responseId === 'string' && message.responseId.trim()) out.id = message.responseId;
  return out;
}

/**
 * The answer in an assistant message (its text blocks, its thinking as reasoning, whether
 * it made tool calls), as `message` takes it; undefined when it says nothing and calls
 * nothing.
 */
export function answerOf(message) {
  const content = typeof message?.content === 'string' ? [{ type: 'text', text: message.content }] : message?.content;
  if (!Array.isArray(content)) return undefined;
  const text = [];
  const reasoning = [];
  let hasToolCalls = false;
  for (const block of content) {
    if (block?.type === 'text' && typeof block.text === 'string') text.push(block.text);
    else if (block?.type === 'thinking' && typeof block.thinking === 'string') reasoning.push(block.thinking);
    else if (block?.type === 'toolCall' || block?.type === 'tool_use') hasToolCalls = true;
  }
  if (text.length === 0 && reasoning.length === 0 && !hasToolCalls) return undefined;
  const out = { role: 'assistant', text: text.join('\n'), hasToolCalls };
  if (reasoning.length > 0) out.reasoning = reasoning.join('\n');
  if (typeof message.responseId === 'string' && message.responseId.trim()) out.id = message.responseId;
  return out;
}

/** The result without the warning note this plugin appended to it. */
export function withoutNote(result, note) {
  const content = result?.content;
  if (!note || !Array.isArray(content) || content.length === 0) return result;
  const last = content[content.length - 1];
  if (last?.type !== 'text' || last.text !== note) return result;
  return { ...result, content: content.slice(0, -1) };
}

/**
 * The hook handlers for one engine. `onError` says what a call gets when the engine cannot
 * answer (`allow`: fail open, or `block`).
 */
export function createHooks({ engine, logger = console, onError = 'allow' }) {
  const calls = new BoundedMap(); // run + toolCallId → { scope, blocked, ticket, args }
  const stopped = new BoundedMap(); // run → the message every later call gets
  const queues = new BoundedMap(); // run → the tail of its request chain
  const activeRun = new BoundedMap(); // session → the run of its latest tool call
  const modelRun = new BoundedMap(); // session → the run of its latest model call
  const spawnedBy = new BoundedMap(); // child session → { parentSession, parentRun }

  /** The engine scope of a hook call, with the parent of a spawned session. */
  function scopeFor(event, ctx) {
    return withParent(scopeOf(event, ctx));
  }

  /** `scope` naming the session and run that spawned its session, when one did. */
  function withParent(scope) {
    const parent = spawnedBy.get(scope.session ?? '');
    return parent ? { ...scope, ...parent } : scope;
  }

  function serialize(key, task) {
    const previous = queues.get(key) ?? Promise.resolve();
    const next = previous.then(task, task);
    queues.set(
      key,
      next.catch(() => {}),
    );
    return next;
  }

  function failure(what, error) {
    logger.error?.(`loopguard: ${what} failed: ${error.message}`);
  }

  async function beforeToolCall(event, ctx) {
    const scope = scopeFor(event, ctx);
    if (scope.run !== undefined) activeRun.set(scope.session ?? '', scope.run);
    const key = runKey(scope);
    const callKey = `${key}\u0000${event.toolCallId ?? ''}`;
    // A stopped run stays stopped even when the engine no longer knows it (a sidecar that
    // restarted in memory): the engine's own answer is used when it has one.
    let stop = stopped.get(key);
    let ticket;
    try {
      ticket = await serialize(key, () => {
        // What the run's queue did before this call (a response's usage or answer) may
        // have stopped it.
        stop ??= stopped.get(key);
        return engine.begin({ ...scope, tool: event.toolName, args: event.params, callId: event.toolCallId });
      });
    } catch (error) {
      failure(`judging ${event.toolName}`, error);
      if (stop !== undefined || onError === 'block') {
        calls.set(callKey, { scope, blocked: true });
        return { block: true, blockReason: stop ?? `loopguard could not judge this call: ${error.message}` };
      }
      // No ticket: the outcome goes as a result event with the call's arguments.
      calls.set(callKey, { scope, blocked: false, ticket: null, args: event.params });
      return undefined;
    }
    const verdict = ticket.verdict;
    if (verdict.verdict !== 'block' && stop !== undefined) {
      ticket.cancel();
      calls.set(callKey, { scope, blocked: true });
      return { block: true, blockReason: stop };
    }
    if (ticket.blocked) {
      calls.set(callKey, { scope, blocked: true });
      if (ticket.endsRun !== null && !stopped.has(key)) stopped.set(key, ticket.endsRun);
      logger.warn?.(
        `loopguard: blocked ${event.toolName} (${verdict.detector}, count ${verdict.count})` +
          `${verdict.terminal ? '; the run is stopped' : ''}`,
      );
      return { block: true, blockReason: verdict.message };
    }
    if (verdict.verdict === 'warn') {
      logger.warn?.(`loopguard: warning on ${event.toolName} (${verdict.detector}, count ${verdict.count})`);
    } else if (verdict.shadow) {
      logger.info?.(`loopguard (shadow): would ${verdict.shadow.verdict} ${event.toolName}: ${verdict.shadow.message}`);
    }
    calls.set(callKey, { scope, blocked: false, ticket, args: event.params });
    return undefined;
  }

  function toolResultMiddleware(event, ctx) {
    const scope = scopeFor(event, ctx);
    const note = calls.get(`${runKey(scope)}\u0000${event.toolCallId ?? ''}`)?.ticket?.warningNote;
    if (!note || !event.result) return undefined;
    const content = Array.isArray(event.result.content) ? event.result.content : [];
    return { result: { ...event.result, content: [...content, { type: 'text', text: note }] } };
  }

  async function afterToolCall(event, ctx) {
    const fallback = scopeFor(event, ctx);
    const callKey = `${runKey(fallback)}\u0000${event.toolCallId ?? ''}`;
    const entry = calls.get(callKey);
    calls.delete(callKey);
    if (entry?.blocked) return; // the result of a call this plugin blocked
    const scope = entry?.scope ?? fallback;
    const note = entry?.ticket?.warningNote;
    const outcome =
      event.error !== undefined && event.error !== null
        ? { error: event.error }
        : { result: withoutNote(event.result, note) ?? null };
    const key = runKey(scope);
    try {
      const recorded = await serialize(key, () => {
        if (entry?.ticket) return entry.ticket.finish(outcome);
        // A call whose ticket could not be had (or that this plugin never saw): a result
        // event with the arguments it was made with.
        const args = entry ? entry.args : event.params;
        return engine.afterCall({ ...scope, callId: event.toolCallId, tool: event.toolName, args, ...outcome });
      });
      if (recorded.endsRun) {
        stopped.set(key, recorded.endsRun);
        logger.error?.(`loopguard: ${recorded.endsRun}`);
      }
    } catch (error) {
      failure(`recording the outcome of ${event.toolName}`, error);
    }
  }

  async function afterCompaction(event, ctx) {
    const scope = scopeFor(event, ctx);
    // OpenClaw's after_compaction context has no run id: the compaction belongs to the
    // session's current run, the one its latest tool call came from.
    scope.run ??= activeRun.get(scope.session ?? '');
    try {
      const armed = await serialize(runKey(scope), () => engine.onCompaction(scope));
      if (armed > 0) logger.info?.(`loopguard: post-compaction guard armed for ${armed} attempts`);
    } catch (error) {
      failure('arming the post-compaction guard', error);
    }
  }

  // model_call_started names the run of the messages OpenClaw writes next (they carry no
  // run id), before the run's first tool call. Kept apart from the run of the latest tool
  // call, which a compaction belongs to: a compaction's own summary request is a model call
  // of a run of its own.
  function modelCallStarted(event, ctx) {
    const scope = scopeOf(event, ctx);
    scope.session ??= event?.sessionKey ?? event?.sessionId;
    if (scope.run !== undefined) modelRun.set(scope.session ?? '', scope.run);
  }

  // before_message_write sees every message OpenClaw writes to the session, each model
  // response as soon as it ends (before its tool calls run): its usage and its answer go
  // to the engine, in the run's queue, so that the response's own calls are judged after
  // them. The hook is synchronous and its answer is not awaited: the message is written
  // unchanged; a budget used up or a message detector's block stops the run, whose next
  // tool call is then blocked with the guard's message.
  function beforeMessageWrite(event, ctx) {
    const message = event?.message;
    if (message?.role !== 'assistant') return undefined;
    const session = ctx?.sessionKey ?? event.sessionKey ?? ctx?.sessionId;
    const scope = withParent({ session, run: modelRun.get(session ?? ''), agent: ctx?.agentId ?? event.agentId ?? undefined });
    const key = runKey(scope);
    const said = answerOf(message);
    const usage = usageOf(message);
    const stop = (reason) => {
      if (reason && !stopped.has(key)) {
        stopped.set(key, reason);
        logger.error?.(`loopguard: ${reason}`);
      }
    };
    // Each answer is taken in within its task, so the run is stopped before its next call
    // is judged.
    if (usage) {
      serialize(key, async () => stop((await engine.recordUsage({ ...scope, ...usage })).endsRun)).catch((error) =>
        failure('recording the usage of a response', error),
      );
    }
    if (said) {
      serialize(key, async () => {
        const verdict = await engine.message({ ...scope, ...said });
        if (verdict.verdict === 'block') stop(verdict.message);
        else if (verdict.verdict === 'warn') logger.warn?.(`loopguard: warning on the model's answer (${verdict.detector}, count ${verdict.count})`);
      }).catch((error) => failure("judging the model's answer", error));
    }
    return undefined;
  }

  // subagent_spawned: OpenClaw's sessions_spawn tool started a child session for the
  // session in its context (requesterSessionKey). The spawning tool call is the latest of
  // that session's runs, so its run is the parent run.
  function subagentSpawned(event, ctx) {
    const child = event?.childSessionKey ?? ctx?.childSessionKey;
    const parentSession = ctx?.requesterSessionKey;
    if (typeof child !== 'string' || typeof parentSession !== 'string' || child === parentSession) return;
    const link = { parentSession };
    const parentRun = activeRun.get(parentSession);
    if (parentRun !== undefined) link.parentRun = parentRun;
    spawnedBy.set(child, link);
  }

  // subagent_ended: a child session's run is over (its target session and run, with how it
  // ended). The run ends in the engine after the requests queued for it, so that its tree's
  // root counts the child finished (agentTree.maxConcurrent).
  function subagentEnded(event, ctx) {
    const session = event?.targetSessionKey ?? ctx?.childSessionKey;
    if (typeof session !== 'string' || (event?.targetKind ?? 'subagent') !== 'subagent') return undefined;
    const scope = { session, run: event?.runId ?? ctx?.runId ?? undefined };
    return serialize(runKey(scope), () => engine.endRun(scope)).then(
      () => undefined,
      (error) => failure('ending a sub-agent run', error),
    );
  }

  return {
    beforeToolCall,
    subagentSpawned,
    subagentEnded,
    afterToolCall,
    afterCompaction,
    modelCallStarted,
    beforeMessageWrite,
    toolResultMiddleware,
    stopped,
  };
}
