// openclaw-plugin-loopguard: OpenClaw's documented tools.loopDetection (thresholds,
// detectors, per-agent overrides, post-compaction guard) enforced by the loopguard engine,
// in process (@loopguard/node) or through a `loopguard serve` sidecar.

import { createEngine } from './src/engines.js';
import { createHooks } from './src/hooks.js';

// OpenClaw registers a plugin more than once in one process (one registry per loading
// context, each of which may load this module afresh): the hooks of one run can come from
// different registrations. Registrations with the same config therefore share one engine
// and one set of hooks per process (kept on globalThis, which every module instance sees),
// so a run's history and its pending calls are in one place.
const engines = (globalThis[Symbol.for('openclaw-plugin-loopguard.engines')] ??= new Map());

function engineFor(config) {
  const key = JSON.stringify(config);
  let entry = engines.get(key);
  if (!entry) {
    const engine = createEngine(config);
    entry = { engine, hooks: null };
    engines.set(key, entry);
  }
  return entry;
}

export default {
  id: 'loopguard',
  name: 'loopguard',
  description:
    "Tool-loop detection with OpenClaw's documented tools.loopDetection settings, enforced by the loopguard engine.",
  register(api) {
    const config = api.pluginConfig ?? {};
    const entry = engineFor(config);
    entry.hooks ??= createHooks({
      engine: entry.engine,
      logger: api.logger ?? console,
      onError: config.sidecar?.onError ?? 'allow',
    });
    const hooks = entry.hooks;
    // The last gate: calls another plugin blocks never run, so they are not loops.
    api.on('before_tool_call', hooks.beforeToolCall, { priority: -1000 });
    api.on('after_tool_call', hooks.afterToolCall);
    api.on('after_compaction', hooks.afterCompaction);
    api.on('model_call_started', hooks.modelCallStarted);
    api.on('before_message_write', hooks.beforeMessageWrite);
    api.on('subagent_spawned', hooks.subagentSpawned);
    api.on('subagent_ended', hooks.subagentEnded);
    api.registerAgentToolResultMiddleware(hooks.toolResultMiddleware, { runtimes: ['openclaw'] });
  },
};
