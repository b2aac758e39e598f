# `script` (util-linux) runs a command on a pseudo-terminal: the first-run tests
# (crates/loopguard-cli/tests/first_run.rs) check what `loopguard replay -` and
# `loopguard hook` say when a person, not a pipe, is at stdin. Debian ships it in the
# essential `bsdutils` package, so this only acts on a trimmed image. Sourced by
# scripts/test: idempotent, needs root and apt-get to install.
if ! command -v script >/dev/null 2>&1; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "scripts/setup/tty.sh: installing bsdutils (for script)" >&2
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null &&
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends bsdutils >/dev/null ||
      echo "scripts/setup/tty.sh: could not install bsdutils; the terminal tests will fail" >&2
  else
    echo "scripts/setup/tty.sh: script is missing and cannot be installed here (needs root and apt-get)" >&2
  fi
fi
