# Redis for the shared-state store of `loopguard serve --store redis://...`
# (crates/loopguard-cli/tests/redis_*.rs start their own `redis-server` processes on free
# loopback ports, and a three-node Redis Cluster joined with `redis-cli --cluster create`).
# Sourced by scripts/test (and scripts/bench-redis): idempotent, quick when the programs are
# there, installs Debian's `redis-server` and `redis-tools` packages (and `openssl`, which
# makes the certificates of the rediss:// test) when one is missing. Needs root and apt-get,
# as on CI; never uses sudo. The package's own service is not needed: the tests never use
# port 6379, and the service is stopped again if the install started it. A failed install
# does not stop the other tests: the Redis tests then report the missing program
# themselves (and fail on CI).
if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1 ||
   ! command -v openssl >/dev/null 2>&1; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "scripts/setup/redis.sh: installing redis-server and redis-tools (Debian packages)" >&2
    if DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null &&
       DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
         redis-server redis-tools openssl >/dev/null; then
      # Without systemd the package may still have started a daemon on 6379 through its
      # init script; the tests do not need it.
      if command -v service >/dev/null 2>&1; then
        service redis-server stop >/dev/null 2>&1 || true
      fi
    else
      echo "scripts/setup/redis.sh: could not install redis-server" >&2
    fi
  else
    echo "scripts/setup/redis.sh: redis-server is missing and cannot be installed here (needs root and apt-get); the Redis tests will be skipped (and fail on CI)" >&2
  fi
fi
