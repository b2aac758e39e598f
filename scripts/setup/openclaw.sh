# OpenClaw 2026.9.6 (npm `openclaw`, pinned) for the plugin's end-to-end tests
# (packages/openclaw-plugin/test/e2e.test.mjs drive `openclaw agent --local` against a
# scripted local model). Installed into target/openclaw; LOOPGUARD_OPENCLAW names its
# entry point. Sourced by scripts/test after node24.sh (OpenClaw needs Node >= 24.16):
# idempotent, quick when the pinned version is there. A failed install does not stop the
# other tests: the end-to-end tests then report the missing OpenClaw themselves (and fail
# on CI).
lg_openclaw_dir="$PWD/target/openclaw"
lg_openclaw_version="2026.9.6"
lg_openclaw_bin="$lg_openclaw_dir/node_modules/openclaw/openclaw.mjs"
lg_openclaw_ready() {
  [ -f "$lg_openclaw_bin" ] &&
    node -p "require('$lg_openclaw_dir/node_modules/openclaw/package.json').version" 2>/dev/null |
      grep -qx "$lg_openclaw_version"
}
if ! lg_openclaw_ready && command -v npm >/dev/null 2>&1; then
  echo "scripts/setup/openclaw.sh: installing openclaw@$lg_openclaw_version into target/openclaw" >&2
  rm -rf "$lg_openclaw_dir"
  mkdir -p "$lg_openclaw_dir"
  # --ignore-scripts: the tests need no native extras (browser drivers, pty builds) that
  # install scripts would fetch.
  npm install --prefix "$lg_openclaw_dir" --no-save --no-audit --no-fund --loglevel=error \
    --ignore-scripts "openclaw@$lg_openclaw_version" >&2 || true
fi
if lg_openclaw_ready; then
  LOOPGUARD_OPENCLAW="$lg_openclaw_bin"
  export LOOPGUARD_OPENCLAW
else
  echo "scripts/setup/openclaw.sh: could not install openclaw@$lg_openclaw_version; the OpenClaw tests will fail on CI" >&2
fi
unset lg_openclaw_dir lg_openclaw_version lg_openclaw_bin
unset -f lg_openclaw_ready
