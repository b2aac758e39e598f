// Shared by the plugin's tests: where the repository's builds and OpenClaw are, the
// plugin's dependency on the in-repository @loopguard/node, a scripted model server and a
// real `loopguard serve`.
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, symlinkSync } from 'node:fs';
import http from 'node:http';
import { dirname, join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

export const pluginDir = resolve(dirname(fileURLToPath(import.meta.url)), '..');
export const repoRoot = resolve(pluginDir, '../..');
const targetDir = process.env.CARGO_TARGET_DIR ?? join(repoRoot, 'target');
const profile = process.env.LOOPGUARD_PROFILE ?? 'debug';

export const loopguardBin = process.env.LOOPGUARD_BIN ?? join(targetDir, profile, 'loopguard');
export const openclawEntry =
  process.env.LOOPGUARD_OPENCLAW ?? join(targetDir, 'openclaw/node_modules/openclaw/openclaw.mjs');

if (!process.env.LOOPGUARD_NODE_ADDON) {
  const built = join(targetDir, profile, 'libloopguard_node.so');
  if (existsSync(built)) process.env.LOOPGUARD_NODE_ADDON = built;
}

// The plugin depends on @loopguard/node; in the repository that is the sibling package.
const linked = join(pluginDir, 'node_modules/@loopguard/node');
if (!existsSync(linked)) {
  mkdirSync(dirname(linked), { recursive: true });
  symlinkSync(join(repoRoot, 'packages/node'), linked, 'dir');
}

/**
 * A model that plays a fixed script over OpenAI's /v1/chat/completions, streaming or not.
 * Each request is answered by the step whose index is the number of tool results in the
 * conversation: `{tool, args}` asks for one tool call (saying `say` with it, when given),
 * `{text}` (or the end of the script) answers in text. Every request is kept, so a test can read what the model was shown.
 *
 * With `perTurn` (the text of the turns' prompt), every turn of a session starts the script
 * again.
 * With `overflowAt: k`, steps are counted by requests instead (a compaction replaces the
 * conversation, and its tool results with it), the k-th request with tools is refused
 * once as a context overflow (OpenAI's `context_length_exceeded`), and requests without
 * tools (the compaction's summary requests) are answered with a summary. With `usage`
 * (`{prompt_tokens, completion_tokens}`), every response reports those figures. With
 * `choose` (a function of a request's messages returning a script), each conversation plays
 * the script it picks: a sub-agent's conversation is told apart by its task.
 */
export async function scriptedModel(steps, { overflowAt, usage, perTurn, choose } = {}) {
  const requests = [];
  // Where the newest turn begins: after its prompt, the newest user message holding the
  // text `perTurn` (OpenClaw may add user messages of its own inside a turn).
  const text = (m) => (typeof m.content === 'string' ? m.content : (m.content ?? []).map((c) => c.text ?? '').join('\n'));
  const turnStart = (messages) =>
    perTurn ? messages.findLastIndex((m) => m.role === 'user' && text(m).includes(perTurn)) + 1 : 0;
  let served = 0;
  let overflowed = false;
  const server = http.createServer((req, res) => {
    let body = '';
    req.on('data', (chunk) => (body += chunk));
    req.on('end', () => {
      if (!req.url.endsWith('/chat/completions')) {
        res.writeHead(404, { 'content-type': 'application/json' });
        res.end('{"error":{"message":"not found"}}');
        return;
      }
      const request = JSON.parse(body);
      requests.push(request);
      // With `perTurn`, each turn of a session plays the script from its start: only the
      // tool results after the turn's prompt count.
      let n = request.messages.slice(turnStart(request.messages)).filter((m) => m.role === 'tool').length;
      let step;
      if (overflowAt !== undefined) {
        if (!request.tools?.length) {
          step = { text: 'Summary: the agent has been reading the same file.' };
        } else if (served === overflowAt && !overflowed) {
          overflowed = true;
          res.writeHead(400, { 'content-type': 'application/json' });
          res.end(JSON.stringify({ error: { message: "This model's maximum context length is 32000 tokens. However, your messages resulted in 40000 tokens.", type: 'invalid_request_error', code: 'context_length_exceeded' } }));
          return;
        } else {
          n = served++;
        }
      }
      // A script that never ends (a turn that never counts as begun) must not run forever.
      if (requests.length > 400) step ??= { text: 'the scripted model stops here' };
      step ??= (choose ? choose(request.messages) : steps)[n] ?? { text: `done after ${n} tool results` };
      const id = `chatcmpl-${requests.length}`;
      const delta = step.tool
        ? {
            role: 'assistant',
            ...(step.say ? { content: step.say } : {}),
            tool_calls: [
              { index: 0, id: `call_${n}`, type: 'function', function: { name: step.tool, arguments: JSON.stringify(step.args) } },
            ],
          }
        : { role: 'assistant', content: step.text };
      const finish = step.tool ? 'tool_calls' : 'stop';
      const chunk = (d, f) => ({ id, object: 'chat.completion.chunk', created: 0, model: request.model, choices: [{ index: 0, delta: d, finish_reason: f }] });
      // With `usage`, every response reports it (OpenAI's shape: on the last chunk).
      const used = usage ? { usage: { ...usage, total_tokens: usage.prompt_tokens + usage.completion_tokens } } : {};
      if (request.stream) {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.write(`data: ${JSON.stringify(chunk(delta, null))}\n\n`);
        res.write(`data: ${JSON.stringify({ ...chunk({}, finish), ...used })}\n\n`);
        res.end('data: [DONE]\n\n');
      } else {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ id, object: 'chat.completion', created: 0, model: request.model, choices: [{ index: 0, message: delta, finish_reason: finish }], ...used }));
      }
    });
  });
  await new Promise((ok) => server.listen(0, '127.0.0.1', ok));
  return {
    url: `http://127.0.0.1:${server.address().port}/v1`,
    requests,
    /** The tool results of the last request: what the model was shown, in order (with
     * `perTurn`, those of its turn only). */
    toolResults() {
      const messages = requests.at(-1)?.messages ?? [];
      return messages
        .slice(turnStart(messages))
        .filter((m) => m.role === 'tool')
        .map((m) => (typeof m.content === 'string' ? m.content : m.content.map((c) => c.text ?? '').join('\n')));
    },
    close: () => new Promise((ok) => server.close(ok)),
  };
}

/** A real `loopguard serve` with `config` (a file), in memory or, with `db`, on that SQLite
 * file; on a free loopback port, or on `listen` (`127.0.0.1:PORT`). */
export async function startSidecar(configFile, { db, listen = '127.0.0.1:0' } = {}) {
  const args = ['serve', ...(db ? ['--db', db] : ['--memory']), '--listen', listen];
  if (configFile) args.push('--config', configFile);
  const child = spawn(loopguardBin, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (d) => (stderr += d));
  const lines = createInterface({ input: child.stdout });
  const url = await new Promise((ok, fail) => {
    lines.on('line', (line) => {
      const m = /listening on (http:\/\/\S+)/.exec(line);
      if (m) ok(m[1]);
    });
    child.on('exit', (code) => fail(new Error(`loopguard serve exited ${code}: ${stderr}`)));
  });
  return {
    url,
    stop: () =>
      new Promise((ok) => {
        if (child.exitCode !== null) return ok();
        child.on('exit', ok);
        child.kill('SIGTERM');
      }),
  };
}
