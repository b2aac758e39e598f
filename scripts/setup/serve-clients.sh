# Python 3 and Node.js (18 or newer, for its global fetch) for the client examples that
# crates/loopguard-cli/tests/serve_ops.rs runs against a real `loopguard serve`.
# Sourced by scripts/test: idempotent, quick when both are there, installs Debian's
# packages when one is missing. Needs root, as on CI; never uses sudo.
lg_node_ok() {
  command -v node >/dev/null 2>&1 &&
    [ "$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)" -ge 18 ]
}
lg_missing=""
command -v python3 >/dev/null 2>&1 || lg_missing="$lg_missing python3"
lg_node_ok || lg_missing="$lg_missing nodejs"
if [ -n "$lg_missing" ]; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "scripts/setup/serve-clients.sh: installing$lg_missing (Debian packages)" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >/dev/null
    # shellcheck disable=SC2086
    apt-get install -y -qq --no-install-recommends $lg_missing >/dev/null
  else
    echo "scripts/setup/serve-clients.sh:$lg_missing missing and cannot be installed here (needs root and apt-get); the client example test will fail" >&2
  fi
fi
unset lg_missing
unset -f lg_node_ok
