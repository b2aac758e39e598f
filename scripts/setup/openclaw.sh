# OpenClaw 2026.9.6 (npm `openclaw`, pinned) for the plugin's end-to-end tests
# (packages/openclaw-plugin/test/e2e.test.mjs drive `openclaw agent --local` against a
# scripted local model). Installed into target/openclaw; LOOPGUARD_OPENCLAW names its
# entry point. Sourced by scripts/test after node24.sh (OpenClaw needs Node >= 24.16):
# idempotent, quick when the pinned version is there. A failed install does not stop the
# other tests: the end-to-end tests then report the missing OpenClaw themselves (and fail
# on CI).
# shellcheck source=scripts/setup/lib/npm-pinned.sh
. scripts/setup/lib/npm-pinned.sh
if lg_npm_pinned scripts/setup/openclaw.sh "$PWD/target/openclaw" openclaw 2026.9.6 &&
  [ -f "$PWD/target/openclaw/node_modules/openclaw/openclaw.mjs" ]; then
  LOOPGUARD_OPENCLAW="$PWD/target/openclaw/node_modules/openclaw/openclaw.mjs"
  export LOOPGUARD_OPENCLAW
else
  echo "scripts/setup/openclaw.sh: could not install openclaw@2026.9.6; the OpenClaw tests will fail on CI" >&2
fi
