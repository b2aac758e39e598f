// Drives a real OpenClaw (`openclaw agent --local --json`) against a scripted model, with
// this plugin loaded: no network, no real model. Each run gets its own home, state
// directory and config.
import { execFile } from 'node:child_process';
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { openclawEntry, pluginDir, scriptedModel } from './support.mjs';

/** A fresh directory for one OpenClaw installation. */
export function openclawHome() {
  const root = mkdtempSync(join(tmpdir(), 'loopguard-openclaw-'));
  const home = join(root, 'home');
  const state = join(root, 'state');
  const workspace = join(root, 'workspace');
  for (const dir of [home, state, workspace]) mkdirSync(dir, { recursive: true });
  return { root, home, state, workspace, configPath: join(state, 'openclaw.json') };
}

/** OpenClaw's config: the scripted model as a custom provider, agents `main` and `ops`, the
 * fixed detector off, and this plugin loaded from the repository. */
export function openclawConfig({ modelUrl, workspace, pluginConfig, loadPlugin = true, contextWindow = 128000 }) {
  const config = {
    models: {
      mode: 'replace',
      providers: {
        scripted: {
          baseUrl: modelUrl,
          apiKey: 'scripted',
          api: 'openai-completions',
          models: [
            {
              id: 'loop',
              name: 'Scripted loop',
              reasoning: false,
              input: ['text'],
              cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0 },
              contextWindow,
              maxTokens: Math.min(4096, contextWindow / 8),
            },
          ],
        },
      },
    },
    agents: {
      defaults: { model: { primary: 'scripted/loop' }, workspace },
      list: [{ id: 'main', default: true, workspace }, { id: 'ops', workspace }],
    },
    tools: { loopDetection: { enabled: false } },
  };
  if (loadPlugin) {
    config.plugins = {
      load: { paths: [pluginDir] },
      entries: { loopguard: { enabled: true, config: pluginConfig ?? {} } },
    };
  }
  return config;
}

/** Runs the OpenClaw CLI in `home` with `args`; resolves { code, stdout, stderr }. */
export function openclaw(home, args, { timeoutMs = 480_000 } = {}) {
  return new Promise((ok) => {
    execFile(
      process.execPath,
      [openclawEntry, ...args],
      {
        cwd: home.workspace,
        timeout: timeoutMs,
        maxBuffer: 64 << 20,
        env: {
          ...process.env,
          HOME: home.home,
          OPENCLAW_STATE_DIR: home.state,
          OPENCLAW_CONFIG_PATH: home.configPath,
          NO_COLOR: '1',
        },
      },
      (error, stdout, stderr) => ok({ code: error ? (error.code ?? 1) : 0, stdout, stderr }),
    );
  });
}

/**
 * One scripted agent run: the model asks for `steps` (then answers in text); returns the
 * run's JSON envelope, its stderr, and the tool results the model was shown.
 */
export async function scriptedRun({ steps, pluginConfig, agent = 'main', prepare, overflowAt, contextWindow }) {
  const model = await scriptedModel(steps, { overflowAt });
  try {
    const home = openclawHome();
    prepare?.(home);
    const config = openclawConfig({ modelUrl: model.url, workspace: home.workspace, pluginConfig, contextWindow });
    writeFileSync(home.configPath, JSON.stringify(config, null, 2));
    const run = await openclaw(home, ['agent', '--local', '--json', '--agent', agent, '--message', 'go']);
    let envelope = null;
    try {
      envelope = JSON.parse(run.stdout);
    } catch {
      // left null: the assertions show stdout and stderr
    }
    return { ...run, envelope, home, toolResults: model.toolResults(), requests: model.requests };
  } finally {
    await model.close();
  }
}
