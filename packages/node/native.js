'use strict';
// Loads the native addon, the first found of:
// 1. the library LOOPGUARD_NODE_ADDON names (a development build, for example
//    target/debug/libloopguard_node.so);
// 2. `loopguard.<platform>.node` beside this file (what `npm run build` writes, and what
//    the tarballs of scripts/npm-pack carry);
// 3. the per-platform package `@loopguard/node-<platform>` npm installed.
const { existsSync } = require('node:fs');
const { join } = require('node:path');
const { platformTriple } = require('./platform.js');

function load() {
  const explicit = process.env.LOOPGUARD_NODE_ADDON;
  if (explicit) {
    const module = { exports: {} };
    process.dlopen(module, explicit);
    return module.exports;
  }
  const triple = platformTriple();
  const local = join(__dirname, `loopguard.${triple}.node`);
  if (existsSync(local)) return require(local);
  try {
    return require(`@loopguard/node-${triple}`);
  } catch (error) {
    throw new Error(
      `@loopguard/node has no native build for ${triple}: install the package ` +
        `@loopguard/node-${triple}, or build one with \`npm run build\` in the package ` +
        `(needs Rust), or set LOOPGUARD_NODE_ADDON to a built library`,
      { cause: error },
    );
  }
}

module.exports = load();
