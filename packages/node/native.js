'use strict';
// Loads the native addon: the library named by LOOPGUARD_NODE_ADDON (a development build,
// for example target/debug/libloopguard_node.so), else the file `napi build --platform`
// writes beside this one, else the per-platform package npm installed.
const { existsSync } = require('node:fs');
const { join } = require('node:path');

function platformTriple() {
  const { platform, arch } = process;
  if (platform === 'linux') {
    const report = typeof process.report?.getReport === 'function' ? process.report.getReport() : null;
    const glibc = report?.header?.glibcVersionRuntime;
    return `linux-${arch}-${glibc ? 'gnu' : 'musl'}`;
  }
  if (platform === 'win32') return `win32-${arch}-msvc`;
  return `${platform}-${arch}`;
}

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
