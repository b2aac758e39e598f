# Headless Chromium for the `loopguard scan --html` rendering test
# (crates/loopguard-cli/tests/scan_html.rs). Sourced by scripts/test: idempotent, quick
# when Chromium is already there; installs Debian's `chromium` package (and a font, so
# screenshots show text) when it is missing. Needs root and apt-get, as on CI; never uses
# sudo. A failed install does not stop the other tests: the rendering test then reports
# the missing browser itself (and fails on CI).
if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "scripts/setup/chromium.sh: installing chromium (Debian package)" >&2
    if ! { DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null &&
           DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
             chromium fonts-dejavu-core >/dev/null; }; then
      echo "scripts/setup/chromium.sh: could not install chromium" >&2
    fi
  else
    echo "scripts/setup/chromium.sh: chromium is missing and cannot be installed here (needs root and apt-get)" >&2
  fi
fi
