# The Python package (crates/loopguard-python): a virtualenv under target/ with maturin, the
# test tools and the agent frameworks the adapters are tested against, all pinned. Sourced
# by scripts/test: idempotent, quick when the pinned set is already there (a stamp file
# records it). Needs python3 >= 3.11 with venv (the frameworks need 3.11; installs Debian's
# python3-venv when it is missing and this runs as root with apt-get; never uses sudo).
# A failed install does not stop the Rust tests: scripts/test then reports the missing
# venv and fails.
lg_py_venv="$PWD/target/python-venv"
lg_py_pins="maturin==1.16.0 pytest==9.2.0 hypothesis==6.170.15 mypy==2.4.1 langchain==1.5.0 langchain-core==1.8.1 langgraph==1.2.22 openai-agents==0.24.0 pydantic-ai-slim==2.68.0"
lg_py_ready() {
  [ -x "$lg_py_venv/bin/python" ] && [ "$(cat "$lg_py_venv/.loopguard-pins" 2>/dev/null)" = "$lg_py_pins" ]
}
if ! lg_py_ready; then
  echo "scripts/setup/python.sh: installing the Python test environment into target/python-venv" >&2
  rm -rf "$lg_py_venv"
  if ! python3 -m venv "$lg_py_venv" >/dev/null 2>&1; then
    rm -rf "$lg_py_venv"
    if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
      DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null 2>&1 || true
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        python3 python3-venv >/dev/null 2>&1 || true
      python3 -m venv "$lg_py_venv" >/dev/null 2>&1 || true
    fi
  fi
  # shellcheck disable=SC2086
  if [ -x "$lg_py_venv/bin/pip" ] &&
    "$lg_py_venv/bin/pip" install -q --disable-pip-version-check $lg_py_pins >&2; then
    printf '%s' "$lg_py_pins" >"$lg_py_venv/.loopguard-pins"
  fi
  if lg_py_ready; then
    echo "scripts/setup/python.sh: ready" >&2
  else
    echo "scripts/setup/python.sh: could not install the Python test environment; the Python suite will fail" >&2
  fi
fi
if lg_py_ready; then
  LOOPGUARD_PYTHON_VENV="$lg_py_venv"
  export LOOPGUARD_PYTHON_VENV
fi
unset lg_py_venv lg_py_pins
unset -f lg_py_ready
