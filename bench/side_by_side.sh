#!/usr/bin/env bash
# loopguard's engine next to OpenClaw's own tool-loop detector on the same workloads, in one
# run: for each round and each workload, criterion's `per_call/<workload>` (the host cycle,
# JSON parsed before the clock, as OpenClaw's harness has it) and `per_call/<workload>_raw`
# (the cycle from the event's JSON text, tokenizing included: what replay, serve, the hooks
# and the MCP proxy run), then bench/openclaw_detector.mjs (OpenClaw 2026.9.6 driven as its
# wrapper drives it). Prints one line per workload: the medians over the rounds, per call,
# and the ratios; the load average before and after.
#
#   bench/side_by_side.sh [ROUNDS]     (default 3)
#   LOOPGUARD_BENCH_BASELINE=DIR bench/side_by_side.sh [ROUNDS]
#
# With LOOPGUARD_BENCH_BASELINE, a checkout of another build of loopguard (the previous
# commit, say: `git worktree add --detach DIR main`) is measured in the same rounds, right after
# this one on each workload and on the same files, and each workload gets a second line:
# its medians and this build's speed-up over it.
#
# Installs Node 24 and OpenClaw when missing (scripts/setup/node24.sh, openclaw.sh) and
# writes the workloads (bench/workloads.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
# shellcheck source=/dev/null
. scripts/setup/node24.sh
# shellcheck source=/dev/null
. scripts/setup/openclaw.sh
: "${LOOPGUARD_OPENCLAW:?OpenClaw is not installed}"
bench/workloads.sh
data=${LOOPGUARD_BENCH_DATA:-target/bench-data}
# Calls per iteration, as in crates/loopguard/benches/engine.rs.
declare -A calls=([small]=20000 [medium]=4000 [large]=200)
declare -A node_rounds=([small]=10 [medium]=10 [large]=5)
data=$(cd "$data" && pwd)
baseline=${LOOPGUARD_BENCH_BASELINE:-}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cargo bench -q -p loopguard --bench engine --no-run >/dev/null 2>&1
if [ -n "$baseline" ]; then
  (cd "$baseline" && cargo bench -q -p loopguard --bench engine --no-run >/dev/null 2>&1)
fi
# per_call/<w> and per_call/<w>_raw of the engine bench in directory $1: criterion's median
# time per iteration (ns) over the calls of one iteration, appended to $out/$2-<variant>.
engine() {
  (cd "$1" && LOOPGUARD_BENCH_DATA="$data" cargo bench -q -p loopguard --bench engine -- --noplot "^per_call/${w}(_raw)?\$" >/dev/null 2>&1)
  for v in "$w" "${w}_raw"; do
    python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["median"]["point_estimate"] / 1000 / int(sys.argv[2]))' \
      "$1/target/criterion/per_call/$v/new/estimates.json" "${calls[$w]}" >>"$out/$2-$v"
  done
}
echo "load before: $(uptime)"
for r in $(seq "$rounds"); do
  for w in small medium large; do
    engine . loopguard
    if [ -n "$baseline" ]; then
      engine "$baseline" baseline
    fi
    node bench/openclaw_detector.mjs "$data/$w.jsonl" "${calls[$w]}" "${node_rounds[$w]}" 2>/dev/null |
      python3 -c 'import json,sys; print(json.load(sys.stdin)["us_per_call_median"])' >>"$out/openclaw-$w"
  done
done
echo "load after: $(uptime)"
for w in small medium large; do
  python3 - "$w" "$out/loopguard-$w" "$out/loopguard-${w}_raw" "$out/openclaw-$w" \
    "$out/baseline-$w" "$out/baseline-${w}_raw" <<'EOF'
import os, statistics, sys
w = sys.argv[1]
values, raw, oc = [[float(x) for x in open(p)] for p in sys.argv[2:5]]
rounds = lambda xs: ", ".join(f"{x:.3f}" for x in xs)
a, r, b = statistics.median(values), statistics.median(raw), statistics.median(oc)
print(f"{w}: loopguard parsed {a:.3f} us/call ({rounds(values)}), from text {r:.3f} ({rounds(raw)}); "
      f"openclaw {b:.2f} us/call ({rounds(oc)}); {b / a:.1f}x parsed, {b / r:.1f}x from text")
if os.path.exists(sys.argv[5]):
    bv, br = [[float(x) for x in open(p)] for p in sys.argv[5:7]]
    c, d = statistics.median(bv), statistics.median(br)
    print(f"{w}: baseline parsed {c:.3f} us/call ({rounds(bv)}), from text {d:.3f} ({rounds(br)}); "
          f"openclaw {b / c:.1f}x parsed, {b / d:.1f}x from text; this build {c / a:.2f}x as fast "
          f"parsed, {d / r:.2f}x from text")
EOF
done
