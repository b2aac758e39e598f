// The manifest's config schema against the engine (every block has exactly the keys the
// engine reads), and against a real OpenClaw: the plugin installed and enabled as
// docs/openclaw-plugin.md says, then `openclaw config validate` accepts the documented seed
// config and refuses a typo with a clear message.
import assert from 'node:assert/strict';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { test } from 'node:test';

import { engineDocument } from '../src/config.js';
import { installDocumented, openclaw, openclawConfig, openclawHome } from './openclaw.mjs';
import { openclawEntry, pluginDir } from './support.mjs';

const require = createRequire(import.meta.url);
const { Guard, configKeys } = require('@loopguard/node');
const manifest = JSON.parse(readFileSync(join(pluginDir, 'openclaw.plugin.json'), 'utf8'));
const schema = manifest.configSchema;

/** The schema of the block at an engine path (`tools.loopDetection` is the plugin's
 * `loopDetection`; `[]` is an array's items, `*` any entry of a map such as `prices`). */
function schemaAt(root, path) {
  let node = root;
  const parts = path.replace(/^tools\./, '').split('.');
  for (const part of parts) {
    if (part === '*') {
      node = node.additionalProperties;
      assert.ok(node, `no schema for ${path}`);
      continue;
    }
    const array = part.endsWith('[]');
    node = node.properties[array ? part.slice(0, -2) : part];
    assert.ok(node, `no schema for ${path}`);
    if (array) node = node.items;
  }
  return node;
}

test('every config block of the schema has exactly the keys the engine reads', () => {
  const keys = configKeys();
  assert.ok(Object.keys(keys).length >= 10);
  for (const [path, engineKeys] of Object.entries(keys)) {
    const block = schemaAt(schema, path);
    assert.equal(block.additionalProperties, false, `${path} refuses unknown keys`);
    assert.deepEqual(Object.keys(block.properties).sort(), [...engineKeys].sort(), path);
  }
  // Per-agent overrides take the same two blocks as the global ones.
  const agent = schema.properties.agents.additionalProperties;
  assert.deepEqual(agent.properties.loopDetection, schema.properties.loopDetection);
  assert.deepEqual(agent.properties.loopguard, schema.properties.loopguard);
});

test('the schema\'s enumerations and bounds are what the engine accepts', () => {
  const ext = schema.properties.loopguard.properties;
  const accepts = (loopguard) => new Guard(engineDocument({ loopguard }));
  for (const preset of ext.preset.enum) accepts({ preset });
  assert.throws(() => accepts({ preset: 'lenient' }));
  for (const mode of ext.mode.enum) accepts({ mode });
  assert.throws(() => accepts({ mode: 'loud' }));
  for (const rule of ext.masking.properties.rules.items.enum) accepts({ masking: { rules: [rule] } });
  assert.throws(() => accepts({ masking: { rules: ['nonsense'] } }));
  for (const cls of ext.policy.properties.tools.items.properties.class.enum) {
    accepts({ policy: { tools: [{ match: 'x', class: cls }] } });
  }
  const block = schema.properties.loopDetection.properties;
  const loop = (loopDetection) => new Guard(engineDocument({ loopDetection }));
  for (const [field, spec] of Object.entries(block)) {
    if (spec.type !== 'integer') continue;
    loop({ [field]: spec.maximum });
    assert.throws(() => loop({ [field]: spec.maximum + 1 }), `${field} above ${spec.maximum}`);
    assert.throws(() => loop({ [field]: 0 }), `${field} at 0`);
  }
  const window = block.postCompactionGuard.properties.windowSize;
  loop({ postCompactionGuard: { windowSize: window.maximum } });
  assert.throws(() => loop({ postCompactionGuard: { windowSize: window.maximum + 1 } }));
});

/** The documented seed config, in the plugin's form. */
const DOCUMENTED = {
  loopDetection: {
    enabled: true,
    historySize: 30,
    warningThreshold: 10,
    criticalThreshold: 20,
    unknownToolThreshold: 10,
    globalCircuitBreakerThreshold: 30,
    detectors: { genericRepeat: true, knownPollNoProgress: true, pingPong: true },
    postCompactionGuard: { windowSize: 3 },
  },
  agents: { 'safe-runner': { loopDetection: { enabled: true, warningThreshold: 8, criticalThreshold: 16 } } },
  loopguard: { mode: 'enforce', detectors: { cycle: {} } },
};

test('the documented install, then openclaw config validate', { skip: !existsSync(openclawEntry) && 'OpenClaw missing' }, async () => {
  const home = openclawHome();
  writeFileSync(
    home.configPath,
    JSON.stringify(openclawConfig({ modelUrl: 'http://127.0.0.1:9/v1', workspace: home.workspace }), null, 2),
  );
  await installDocumented(home);

  // Keep what install and enable wrote; set the plugin's config.
  const written = JSON.parse(readFileSync(home.configPath, 'utf8'));
  written.plugins.entries.loopguard.config = DOCUMENTED;
  writeFileSync(home.configPath, JSON.stringify(written, null, 2));
  const valid = await openclaw(home, ['config', 'validate']);
  assert.equal(valid.code, 0, `${valid.stdout}\n${valid.stderr}`);

  written.plugins.entries.loopguard.config = { loopDetection: { enabled: true, warningTreshold: 5 } };
  writeFileSync(home.configPath, JSON.stringify(written, null, 2));
  const typo = await openclaw(home, ['config', 'validate']);
  assert.notEqual(typo.code, 0, 'a typo is refused');
  const said = `${typo.stdout}\n${typo.stderr}`;
  assert.match(said, /warningTreshold/, said);
  assert.match(said, /loopguard/, said);
});
