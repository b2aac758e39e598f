#!/usr/bin/env bash
# Instruction counts (valgrind --tool=callgrind), which other load on the machine does not
# change: the engine's host cycle per call, from parsed values and from JSON text
# (crates/loopguard/examples/host_cycle.rs), and `replay`'s work per line next to a
# validation-only parse of the same lines (crates/loopguard-events/examples/replay_floor.rs),
# on each workload. Prints one line per measurement: build, harness, workload, mode,
# instructions, instructions per call or line.
#
#   bench/instructions.sh
#   LOOPGUARD_BENCH_BASELINE=DIR bench/instructions.sh
#
# With LOOPGUARD_BENCH_BASELINE, a checkout of another build is measured too (it needs the
# two harnesses: copy them into a checkout that predates them). Needs valgrind; writes the
# workloads (bench/workloads.sh) when they are missing.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "bench/instructions.sh: valgrind is missing" >&2; exit 1; }
bench/workloads.sh
data=$(cd "${LOOPGUARD_BENCH_DATA:-target/bench-data}" && pwd)
builds=(.)
if [ -n "${LOOPGUARD_BENCH_BASELINE:-}" ]; then
  builds+=("$LOOPGUARD_BENCH_BASELINE")
fi
# The instructions valgrind counted inside the functions matching $1, running the rest.
count() {
  local toggle=$1
  shift
  valgrind --tool=callgrind --toggle-collect="$toggle" --callgrind-out-file=/dev/null "$@" 2>&1 |
    awk '/ refs:/ { gsub(",", "", $4); print $4 }'
}
for build in "${builds[@]}"; do
  (cd "$build" && cargo build -q --release -p loopguard --example host_cycle -p loopguard-events --example replay_floor)
  bin="$build/target/release/examples"
  name=$(cd "$build" && pwd)
  for w in "small 20000" "medium 4000" "large 200"; do
    read -r workload calls <<<"$w"
    for mode in parsed raw; do
      n=$(LOOPGUARD_CYCLE=$mode count 'host_cycle::cycle*' "$bin/host_cycle" "$data/$workload.jsonl" "$calls" 30 1)
      echo "$name host_cycle $workload $mode $n $((n / calls))"
    done
  done
  for w in "small 40000" "medium 8000" "large 400"; do
    read -r workload lines <<<"$w"
    for mode in replay validate; do
      n=$(count 'replay_floor::run_*' "$bin/replay_floor" "$mode" "$data/$workload.jsonl" "$lines")
      echo "$name replay_floor $workload $mode $n $((n / lines))"
    done
  done
done
