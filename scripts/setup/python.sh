#!/usr/bin/env bash
# The Python package (crates/loopguard-python): a virtualenv under target/ with maturin, the
# test tools and the agent frameworks the adapters are tested against, all pinned in the
# package's `dev` dependency group (its pyproject.toml: the one list of them). Sourced
# by scripts/test: idempotent, quick when the pinned set is already there (a stamp file
# records it). Needs python3 >= 3.11 with venv (the frameworks need 3.11; installs Debian's
# python3-venv when it is missing and this runs as root with apt-get; never uses sudo).
# A failed install does not stop the Rust tests: scripts/test then reports the missing
# venv and fails.
lg_py_venv="$PWD/target/python-venv"
lg_py_project="$PWD/crates/loopguard-python/pyproject.toml"
# The stamp: the dependency groups as written (a changed pin installs again).
lg_py_pins=$(sed -n '/^\[dependency-groups\]/,/^\[/p' "$lg_py_project" | tr -s ' \n' ' ')
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
  if [ -x "$lg_py_venv/bin/pip" ] &&
    "$lg_py_venv/bin/pip" install -q --disable-pip-version-check 'pip>=25.1' >&2 &&
    "$lg_py_venv/bin/pip" install -q --disable-pip-version-check --group "$lg_py_project:dev" >&2; then
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
unset lg_py_venv lg_py_project lg_py_pins
unset -f lg_py_ready
