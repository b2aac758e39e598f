# Gemini CLI 0.61.0 (npm `@google/gemini-cli`, pinned) for the hook's end-to-end test
# (crates/loopguard-cli/tests/gemini_cli.rs drives `gemini` with a scripted model,
# `--fake-responses`, and the hooks `loopguard hook install gemini` writes). Installed
# into target/gemini-cli; LOOPGUARD_GEMINI_CLI names its `gemini`. Gemini CLI needs Node
# >= 20, so node24.sh is sourced first (it is idempotent; scripts/test sources it again).
# Quick when the pinned version is there. A failed install does not stop the other tests:
# the end-to-end test then reports the missing Gemini CLI itself (and fails on CI).
# shellcheck source=scripts/setup/node24.sh
. scripts/setup/node24.sh
# shellcheck source=scripts/setup/lib/npm-pinned.sh
. scripts/setup/lib/npm-pinned.sh
if lg_npm_pinned scripts/setup/gemini-cli.sh "$PWD/target/gemini-cli" @google/gemini-cli 0.61.0 &&
  [ -x "$PWD/target/gemini-cli/node_modules/.bin/gemini" ]; then
  LOOPGUARD_GEMINI_CLI="$PWD/target/gemini-cli/node_modules/.bin/gemini"
  export LOOPGUARD_GEMINI_CLI
else
  echo "scripts/setup/gemini-cli.sh: could not install @google/gemini-cli@0.61.0; the Gemini CLI test will fail on CI" >&2
fi
