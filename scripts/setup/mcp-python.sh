# The official MCP Python SDK (PyPI `mcp`, pinned) for the MCP proxy tests
# (crates/loopguard-cli/tests/mcp_proxy_sdk.rs), in a virtualenv of its own under target/.
# Sourced by scripts/test: idempotent, quick when the pinned version is already there.
# Needs python3 with venv (installs Debian's python3-venv when it is missing and this runs
# as root with apt-get; never uses sudo). A failed install does not stop the other tests:
# the SDK test then reports the missing SDK itself (and fails on CI).
lg_mcp_venv="$PWD/target/mcp-venv"
lg_mcp_version="1.30.0"
lg_mcp_ready() {
  "$lg_mcp_venv/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('mcp') != '$lg_mcp_version')" >/dev/null 2>&1
}
if ! lg_mcp_ready; then
  echo "scripts/setup/mcp-python.sh: installing mcp==$lg_mcp_version into target/mcp-venv" >&2
  rm -rf "$lg_mcp_venv"
  if ! python3 -m venv "$lg_mcp_venv" >/dev/null 2>&1; then
    rm -rf "$lg_mcp_venv"
    if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
      DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null 2>&1 || true
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        python3 python3-venv >/dev/null 2>&1 || true
      python3 -m venv "$lg_mcp_venv" >/dev/null 2>&1 || true
    fi
  fi
  if [ -x "$lg_mcp_venv/bin/pip" ]; then
    "$lg_mcp_venv/bin/pip" install -q --disable-pip-version-check "mcp==$lg_mcp_version" >&2 || true
  fi
  if lg_mcp_ready; then
    echo "scripts/setup/mcp-python.sh: mcp $lg_mcp_version ready" >&2
  else
    echo "scripts/setup/mcp-python.sh: could not install mcp==$lg_mcp_version; the MCP SDK test will fail on CI" >&2
  fi
fi
if lg_mcp_ready; then
  LOOPGUARD_MCP_PYTHON="$lg_mcp_venv/bin/python"
  export LOOPGUARD_MCP_PYTHON
fi
unset lg_mcp_venv lg_mcp_version
unset -f lg_mcp_ready
