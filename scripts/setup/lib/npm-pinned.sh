# lg_npm_pinned SCRIPT DIR PACKAGE VERSION: installs the npm package PACKAGE@VERSION into
# DIR unless that version is there already; returns 0 when it is there afterwards. For the
# setup scripts of the hosts the end-to-end tests drive (OpenClaw, Gemini CLI): pinned
# versions, installed under target/, quick when present. SCRIPT names the caller in the
# lines on stderr. --ignore-scripts: the tests need no native extras (browser drivers, pty
# builds) that install scripts would fetch. Needs `node` (to read the installed version)
# and `npm`. Sourced, not run: scripts/test sources scripts/setup/*.sh, not this folder.
lg_npm_pinned() {
  lg_np_manifest="$2/node_modules/$3/package.json"
  if ! node -p "require('$lg_np_manifest').version" 2>/dev/null | grep -qx "$4" &&
    command -v npm >/dev/null 2>&1; then
    echo "$1: installing $3@$4 into ${2#"$PWD"/}" >&2
    rm -rf "$2"
    mkdir -p "$2"
    npm install --prefix "$2" --no-save --no-audit --no-fund --loglevel=error \
      --ignore-scripts "$3@$4" >&2 || true
  fi
  node -p "require('$lg_np_manifest').version" 2>/dev/null | grep -qx "$4"
  lg_np_status=$?
  unset lg_np_manifest
  return "$lg_np_status"
}
