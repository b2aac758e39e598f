'use strict';
// The platform name of this machine as napi-rs spells it (`linux-x64-gnu`, `darwin-arm64`,
// `win32-x64-msvc`): the suffix of the addon file `loopguard.<platform>.node` and of the
// per-platform package `@loopguard/node-<platform>`.

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

module.exports = { platformTriple };
