// Drives a real OpenClaw (`openclaw agent --local --json`) against a scripted model, with
// this plugin installed the way docs/openclaw-plugin.md says: no network, no real model.
// Each run gets its own home, state directory and config.
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { createServer } from 'node:net';
import { join } from 'node:path';

import { after, before, describe, test } from 'node:test';

import { engineDocument } from '../src/config.js';
import { loopguardBin, openclawEntry, repoRoot, scriptedModel, startSidecar } from './support.mjs';

/** The marker before the block of docs/openclaw-plugin.md that this file runs. */
const MARKER = '<!-- doc-test: by packages/openclaw-plugin/test/openclaw.mjs -->';

/**
 * The install block of docs/openclaw-plugin.md, as written: `build`, the lines run in the
 * checkout (they make the plugin's tarball), and `install`, the `openclaw` commands (their
 * arguments) that install it into an OpenClaw.
 */
export function documentedInstall() {
  const text = readFileSync(join(repoRoot, 'docs/openclaw-plugin.md'), 'utf8');
  const at = text.indexOf(`${MARKER}\n\`\`\`sh\n`);
  assert.ok(at >= 0, `docs/openclaw-plugin.md has no sh block after ${MARKER}`);
  const start = at + MARKER.length + '\n```sh\n'.length;
  const lines = text
    .slice(start, text.indexOf('\n```', start))
    .split('\n')
    .map((line) => line.replace(/\s+#.*$/, '').trim())
    .filter(Boolean);
  for (const line of lines) assert.doesNotMatch(line, /['"\\$`]/, `no shell quoting in ${line}`);
  return {
    build: lines.filter((line) => !line.startsWith('openclaw ')),
    install: lines.filter((line) => line.startsWith('openclaw ')).map((line) => line.split(/\s+/).slice(1)),
  };
}

/** The environment of a user's shell: none of the tests' overrides of the native build. */
function userEnv(extra = {}) {
  const env = { ...process.env, ...extra };
  delete env.LOOPGUARD_NODE_ADDON;
  return env;
}

function run(file, args, options) {
  return new Promise((ok) => {
    execFile(file, args, { maxBuffer: 64 << 20, ...options }, (error, stdout, stderr) =>
      ok({ code: error ? (error.code ?? 1) : 0, stdout, stderr }),
    );
  });
}

let built = null;

/**
 * Runs the block's build lines in the checkout, once per process. Test files run in
 * processes of their own, so a lock directory keeps two builds from overlapping.
 */
export function buildDocumented() {
  built ??= (async () => {
    const lock = join(repoRoot, 'target/npm/.test-lock');
    mkdirSync(join(repoRoot, 'target/npm'), { recursive: true });
    for (;;) {
      try {
        mkdirSync(lock);
        break;
      } catch {
        // Left by a killed run when it is older than any build.
        if (Date.now() - statSync(lock, { throwIfNoEntry: false })?.mtimeMs > 3600_000) rmSync(lock, { recursive: true, force: true });
        await new Promise((ok) => setTimeout(ok, 1000));
      }
    }
    try {
      for (const line of documentedInstall().build) {
        const done = await run('bash', ['-c', line], { cwd: repoRoot, env: userEnv(), timeout: 3600_000 });
        assert.equal(done.code, 0, `${line} failed:\n${done.stdout}\n${done.stderr}`);
      }
    } finally {
      rmSync(lock, { recursive: true, force: true });
    }
  })();
  return built;
}

/** Installs the plugin into the OpenClaw of `home` with the block's `openclaw` commands,
 * run in the checkout, as typed. */
export async function installDocumented(home) {
  await buildDocumented();
  for (const args of documentedInstall().install) {
    const done = await openclaw(home, args, { cwd: repoRoot });
    assert.equal(done.code, 0, `openclaw ${args.join(' ')} failed:\n${done.stdout}\n${done.stderr}`);
  }
}

/** The directories of this process's OpenClaw installations, removed at its end when every
 * test passed (kept to look into otherwise). */
const made = [];
process.on('exit', (code) => {
  if (code !== 0) return;
  for (const root of made) rmSync(root, { recursive: true, force: true });
});

/** A fresh directory for one OpenClaw installation. */
export function openclawHome() {
  const root = mkdtempSync(join(tmpdir(), 'loopguard-openclaw-'));
  made.push(root);
  const home = join(root, 'home');
  const state = join(root, 'state');
  const workspace = join(root, 'workspace');
  for (const dir of [home, state, workspace]) mkdirSync(dir, { recursive: true });
  return { root, home, state, workspace, configPath: join(state, 'openclaw.json') };
}

/** OpenClaw's config: the scripted model as a custom provider, agents `main` and `ops`, and
 * the fixed detector off. The plugin's entry is what installing it writes. */
export function openclawConfig({ modelUrl, workspace, contextWindow = 128000, cost }) {
  return {
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
              cost: cost ?? { input: 0, output: 0, cacheRead: 0, cacheWrite: 0 },
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
}

/**
 * Runs the OpenClaw CLI in `home` with `args` (in its workspace, or `cwd`); resolves
 * { code, stdout, stderr }. The plugin loads its own native build, as for a user.
 */
export function openclaw(home, args, { timeoutMs = 480_000, cwd = home.workspace, env = {} } = {}) {
  return run(process.execPath, [openclawEntry, ...args], { cwd, timeout: timeoutMs, env: openclawEnv(home, env) });
}

/** The environment of an OpenClaw command in `home`. */
function openclawEnv(home, extra = {}) {
  return userEnv({
    HOME: home.home,
    OPENCLAW_STATE_DIR: home.state,
    OPENCLAW_CONFIG_PATH: home.configPath,
    NO_COLOR: '1',
    ...extra,
  });
}

let template = null;

/**
 * An OpenClaw with the plugin installed by the documented commands, made once per process
 * (an install is most of a minute of CPU). Each run gets a copy of it: its install record
 * names the template's plugin folder, which stays until the process ends.
 */
function installedTemplate() {
  template ??= (async () => {
    const home = openclawHome();
    writeFileSync(
      home.configPath,
      JSON.stringify(openclawConfig({ modelUrl: 'http://127.0.0.1:9/v1', workspace: home.workspace }), null, 2),
    );
    await installDocumented(home);
    return home;
  })();
  return template;
}

/** A new OpenClaw installation with the plugin installed: a copy of the template. */
async function installedHome() {
  const from = await installedTemplate();
  const home = openclawHome();
  for (const part of ['home', 'state', 'workspace']) {
    cpSync(join(from.root, part), join(home.root, part), { recursive: true });
  }
  return home;
}

/** An installation as the docs say, then the test's model, agents and the plugin's config
 * written over what install and enable wrote. */
async function configuredHome({ modelUrl, pluginConfig, prepare, contextWindow, cost, extra = {} }) {
  const home = await installedHome();
  prepare?.(home);
  const installed = JSON.parse(readFileSync(home.configPath, 'utf8'));
  const config = openclawConfig({ modelUrl, workspace: home.workspace, contextWindow, cost });
  installed.plugins.entries.loopguard.config = pluginConfig ?? {};
  writeFileSync(home.configPath, JSON.stringify({ ...installed, ...config, ...extra, plugins: installed.plugins }, null, 2));
  return home;
}

/** A free TCP port on loopback. */
function freePort() {
  return new Promise((ok, fail) => {
    const server = createServer();
    server.on('error', fail);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => ok(port));
    });
  });
}

/**
 * One turn of the session `sessionKey` sent through an OpenClaw Gateway, as a user's
 * `openclaw agent` without `--local` sends it: sub-agents (the `sessions_spawn` tool) are
 * runs the Gateway starts, so they need one. The Gateway runs in an installation with the
 * plugin (configured with `pluginConfig`), on a free loopback port with a token, and
 * Tool Search off so that the scripted model calls `sessions_spawn` by its name. The
 * model plays the script `choose` picks for each conversation. After the turn,
 * `settled(model)` is polled until it holds (the sub-agents run after the turn that
 * spawned them), for up to four minutes. Resolves with { code, stdout, stderr, settled,
 * gatewayLog, model, home } (the installation is removed when the test process ends).
 */
export async function gatewayTurn({ choose, pluginConfig, sessionKey, message, settled }) {
  const model = await scriptedModel([], { choose });
  let gateway;
  let gatewayLog = '';
  try {
    const port = await freePort();
    const token = `loopguard-test-${port}`;
    const home = await configuredHome({
      modelUrl: model.url,
      pluginConfig,
      extra: {
        gateway: { mode: 'local', port, bind: 'loopback', auth: { mode: 'token', token } },
        tools: { loopDetection: { enabled: false }, toolSearch: false },
      },
    });
    const env = { OPENCLAW_GATEWAY_TOKEN: token };
    gateway = spawn(process.execPath, [openclawEntry, 'gateway', 'run', '--port', String(port)], {
      cwd: home.workspace,
      detached: true,
      env: openclawEnv(home, env),
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const exited = new Promise((ok) => gateway.on('exit', ok));
    gateway.stdout.on('data', (d) => (gatewayLog += d));
    gateway.stderr.on('data', (d) => (gatewayLog += d));
    const ready = await Promise.race([
      until(() => /\[gateway\] ready/.test(gatewayLog), 240_000),
      exited.then(() => false),
    ]);
    assert.ok(ready, `the OpenClaw Gateway did not start:\n${gatewayLog.slice(-4000)}`);
    const turn = await openclaw(home, ['agent', '--json', '--agent', 'main', '--session-key', sessionKey, '--message', message], { env });
    const done = await until(() => settled(model), 240_000);
    return { ...turn, settled: done, gatewayLog, model, home };
  } finally {
    if (gateway) {
      // The Gateway and the workers it starts are one process group. It drains its work
      // for minutes on SIGTERM; what the test reads is on disk by then.
      const group = (signal) => {
        try {
          process.kill(-gateway.pid, signal);
        } catch {
          // already gone
        }
      };
      const exited = gateway.exitCode === null ? new Promise((ok) => gateway.on('exit', ok)) : null;
      group('SIGTERM');
      if (exited) await Promise.race([exited, new Promise((ok) => setTimeout(ok, 5_000))]);
      group('SIGKILL');
      gateway.stdout.destroy();
      gateway.stderr.destroy();
    }
    await model.close();
  }
}

/** Polls `check` every half second; resolves with whether it held within `ms`. */
async function until(check, ms) {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    if (check()) return true;
    await new Promise((ok) => setTimeout(ok, 500));
  }
  return check();
}

/**
 * A session of several turns in one installation, as a heartbeat or a cron job runs them:
 * each turn is one `openclaw agent` run of the session `sessionKey` with the message
 * `message`, in which the model plays `steps` from their start. `beforeTurn(i)` is awaited
 * before turn i (from 0). Resolves with one { code, stdout, stderr, toolResults, home } per
 * turn, `toolResults` being what the model was shown in that turn.
 */
export async function scriptedTurns({ turns, steps, pluginConfig, agent = 'main', sessionKey, message, prepare, beforeTurn }) {
  const model = await scriptedModel(steps, { perTurn: message });
  try {
    const home = await configuredHome({ modelUrl: model.url, pluginConfig, prepare });
    const done = [];
    for (let i = 0; i < turns; i++) {
      await beforeTurn?.(i);
      const run = await openclaw(home, ['agent', '--local', '--json', '--agent', agent, '--session-key', sessionKey, '--message', message]);
      done.push({ ...run, toolResults: model.toolResults(), home });
    }
    return done;
  } finally {
    await model.close();
  }
}

/**
 * One scripted agent run: the model asks for `steps` (then answers in text), each response
 * reporting `usage` when given, priced by OpenClaw at the model's `cost` (US dollars per
 * million tokens, as OpenClaw's model catalog has them); returns the
 * run's JSON envelope, its stderr, and the tool results the model was shown.
 */
export async function scriptedRun({ steps, pluginConfig, agent = 'main', prepare, overflowAt, contextWindow, usage, cost }) {
  const model = await scriptedModel(steps, { overflowAt, usage });
  try {
    const home = await configuredHome({ modelUrl: model.url, pluginConfig, prepare, contextWindow, cost });
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

/**
 * Runs each of `scenarios` (name → async function of a plugin config) twice: with the
 * in-process engine and the plugin config `blocks`, and with a `loopguard serve` sidecar
 * whose own config carries the same blocks as one document. `title` names the suites.
 */
export function withBothEngines(title, scenarios, blocks) {
  const skip = !(existsSync(openclawEntry) && existsSync(loopguardBin)) && 'OpenClaw or loopguard missing';
  describe(`${title} with the in-process engine`, { concurrency: 2, skip }, () => {
    for (const [name, scenario] of Object.entries(scenarios)) test(name, () => scenario(blocks));
  });
  describe(`${title} with a loopguard serve sidecar`, { concurrency: 2, skip }, () => {
    let sidecar;
    before(async () => {
      const dir = mkdtempSync(join(tmpdir(), 'loopguard-sidecar-'));
      const file = join(dir, 'loopguard.json5');
      writeFileSync(file, JSON.stringify(engineDocument(blocks), null, 2));
      sidecar = await startSidecar(file);
    });
    after(() => sidecar?.stop());
    for (const [name, scenario] of Object.entries(scenarios)) {
      test(name, () => scenario({ engine: 'sidecar', sidecar: { url: sidecar.url } }));
    }
  });
}
