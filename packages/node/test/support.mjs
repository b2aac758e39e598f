// Shared by the tests and the benchmark: where the repository's builds are, and the
// package loaded against them.
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

export const packageDir = resolve(dirname(fileURLToPath(import.meta.url)), '..');
export const repoRoot = resolve(packageDir, '../..');

const profile = process.env.LOOPGUARD_PROFILE ?? 'debug';
const targetDir = process.env.CARGO_TARGET_DIR ?? join(repoRoot, 'target');

/** The `loopguard` CLI built by cargo (LOOPGUARD_BIN overrides). */
export const loopguardBin = process.env.LOOPGUARD_BIN ?? join(targetDir, profile, 'loopguard');

// Without a packaged build beside index.js, use the library cargo built.
if (!process.env.LOOPGUARD_NODE_ADDON) {
  const built = join(targetDir, profile, 'libloopguard_node.so');
  if (existsSync(built)) process.env.LOOPGUARD_NODE_ADDON = built;
}

const require = createRequire(import.meta.url);
export const { Guard, ConfigError, ALLOW, countedFromAnswer } = require('../index.js');
