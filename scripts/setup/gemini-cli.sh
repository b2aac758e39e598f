# Gemini CLI 0.61.0 (npm `@google/gemini-cli`, pinned) for the hook's end-to-end test
# (crates/loopguard-cli/tests/gemini_cli.rs drives `gemini` with a scripted model,
# `--fake-responses`, and the hooks `loopguard hook install gemini` writes). Installed
# into target/gemini-cli; LOOPGUARD_GEMINI_CLI names its `gemini`. Gemini CLI needs Node
# >= 20, so node24.sh is sourced first (it is idempotent; scripts/test sources it again).
# Quick when the pinned version is there. A failed install does not stop the other tests:
# the end-to-end test then reports the missing Gemini CLI itself (and fails on CI).
# shellcheck source=scripts/setup/node24.sh
. scripts/setup/node24.sh
lg_gemini_dir="$PWD/target/gemini-cli"
lg_gemini_version="0.61.0"
lg_gemini_bin="$lg_gemini_dir/node_modules/.bin/gemini"
lg_gemini_ready() {
  [ -x "$lg_gemini_bin" ] &&
    node -p "require('$lg_gemini_dir/node_modules/@google/gemini-cli/package.json').version" 2>/dev/null |
      grep -qx "$lg_gemini_version"
}
if ! lg_gemini_ready && command -v npm >/dev/null 2>&1; then
  echo "scripts/setup/gemini-cli.sh: installing @google/gemini-cli@$lg_gemini_version into target/gemini-cli" >&2
  rm -rf "$lg_gemini_dir"
  mkdir -p "$lg_gemini_dir"
  # --ignore-scripts: the test needs no native extras (pty builds) that install scripts
  # would fetch.
  npm install --prefix "$lg_gemini_dir" --no-save --no-audit --no-fund --loglevel=error \
    --ignore-scripts "@google/gemini-cli@$lg_gemini_version" >&2 || true
fi
if lg_gemini_ready; then
  LOOPGUARD_GEMINI_CLI="$lg_gemini_bin"
  export LOOPGUARD_GEMINI_CLI
else
  echo "scripts/setup/gemini-cli.sh: could not install @google/gemini-cli@$lg_gemini_version; the Gemini CLI test will fail on CI" >&2
fi
unset lg_gemini_dir lg_gemini_version lg_gemini_bin
unset -f lg_gemini_ready
