// The plugin's config (plugins.entries.loopguard.config) and the engine document it
// stands for.
//
// OpenClaw has no per-agent plugin config, so the plugin keys its own overrides by agent
// id. The engine reads an OpenClaw-style document; the plugin's blocks map onto it one to
// one, and the engine does the merging and clamping (SPEC §1) as for any document:
//
//   { loopDetection, loopguard, agents: { ops: { loopDetection, loopguard } } }
//   → { tools: { loopDetection }, loopguard, agents: { entries: { ops: { tools: { loopDetection }, loopguard } } } }

/** The engine document for a plugin config. */
export function engineDocument(config = {}) {
  const document = {};
  if (config.loopDetection !== undefined) document.tools = { loopDetection: config.loopDetection };
  if (config.loopguard !== undefined) document.loopguard = config.loopguard;
  const agents = Object.entries(config.agents ?? {});
  if (agents.length > 0) {
    document.agents = {
      entries: Object.fromEntries(
        agents.map(([id, blocks]) => {
          const agent = {};
          if (blocks?.loopDetection !== undefined) agent.tools = { loopDetection: blocks.loopDetection };
          if (blocks?.loopguard !== undefined) agent.loopguard = blocks.loopguard;
          return [id, agent];
        }),
      ),
    };
  }
  return document;
}

/** The engine settings: which engine, and the sidecar's connection. */
export function engineSettings(config = {}) {
  const sidecar = config.sidecar ?? {};
  return {
    engine: config.engine ?? 'in-process',
    url: sidecar.url,
    token: sidecar.token,
    timeoutMs: sidecar.timeoutMs ?? 2000,
    onError: sidecar.onError ?? 'allow',
  };
}
