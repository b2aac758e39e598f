# TypeScript for the Node binding's type test: `tsc --noEmit` on packages/node/test/types.ts
# against the package's declarations (scripts/test). Installs the npm registry's
# `typescript` and `@types/node` packages, pinned, into target/typescript. Sourced by
# scripts/test: idempotent, quick when the pinned set is there (a stamp file records it).
# Needs npm (scripts/setup/node24.sh installs it when missing). A failed install does not
# stop the other tests: scripts/test then reports the missing compiler and fails.
lg_ts_dir="$PWD/target/typescript"
lg_ts_pins="typescript@5.9.3 @types/node@24.19.4"
if [ "$(cat "$lg_ts_dir/.loopguard-pins" 2>/dev/null)" != "$lg_ts_pins" ]; then
  if command -v npm >/dev/null 2>&1; then
    echo "scripts/setup/typescript.sh: installing $lg_ts_pins into target/typescript" >&2
    rm -rf "$lg_ts_dir"
    mkdir -p "$lg_ts_dir"
    # shellcheck disable=SC2086
    if npm install --prefix "$lg_ts_dir" --no-save --no-audit --no-fund --loglevel=error $lg_ts_pins >&2; then
      printf '%s' "$lg_ts_pins" >"$lg_ts_dir/.loopguard-pins"
    else
      echo "scripts/setup/typescript.sh: could not install TypeScript; the type test will fail" >&2
    fi
  else
    echo "scripts/setup/typescript.sh: npm is missing; the type test will fail" >&2
  fi
fi
if [ -x "$lg_ts_dir/node_modules/.bin/tsc" ]; then
  LOOPGUARD_TSC="$lg_ts_dir/node_modules/.bin/tsc"
  LOOPGUARD_TS_TYPES="$lg_ts_dir/node_modules/@types"
  export LOOPGUARD_TSC LOOPGUARD_TS_TYPES
fi
unset lg_ts_dir lg_ts_pins
