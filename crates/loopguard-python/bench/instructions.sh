#!/usr/bin/env bash
# Instructions per call (the host cycle on the small workload: a ticket, `begin` then
# `finish`; and the protocol's `before_call` then `after_call`) of the Rust engine
# (`host_cycle`) and of the Python binding that `python` imports, counted by valgrind's
# callgrind: unlike time, the count does not move with the machine's other load, so two
# builds can be compared on a busy machine. Each figure is the count of a run with 3 passes
# over CALLS calls less that of a run with 1 pass (the same loading), over 2 passes.
#
#   bench/instructions.sh [CALLS]        (from crates/loopguard-python; CALLS: 3000)
#
# Needs valgrind, the workloads and the release `host_cycle` as for bench/timing.py; set
# PYTHON to the interpreter (PYTHONPATH picks a build, as `timing.py` does).
set -euo pipefail
cd "$(dirname "$0")/.."
calls=${1:-3000}
python=${PYTHON:-python}
repo=$(cd ../.. && pwd)
data=${LOOPGUARD_BENCH_DATA:-$repo/target/bench-data}

count() {
  valgrind --tool=callgrind --callgrind-out-file=/dev/null "$@" 2>&1 |
    sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}
per_call() {
  local one three
  one=$(count "$@" 1)
  three=$(count "$@" 3)
  echo $(((three - one) / 2 / calls))
}
driver=$(mktemp --suffix=.py)
trap 'rm -f "$driver"' EXIT
cat >"$driver" <<'EOF'
import sys
sys.path.insert(0, "bench")
import loopguard
import timing
calls, passes, protocol = int(sys.argv[2]), int(sys.argv[3]), sys.argv[1] == "protocol"
pairs = timing.load(calls)
for _ in range(passes):
    timing.cycle(loopguard.Guard({"tools": {"loopDetection": {"enabled": True, "historySize": 30}}}), pairs, protocol=protocol)
EOF

engine=$(per_call "$repo/target/release/examples/host_cycle" "$data/small.jsonl" "$calls" 30)
tickets=$(per_call "$python" "$driver" tickets "$calls")
protocol=$(per_call "$python" "$driver" protocol "$calls")
ratio() { awk "BEGIN { printf \"%.2f\", $1 / $engine }"; }
echo "instructions per call, small workload, $calls calls:"
echo "| Rust engine (host_cycle) | $engine |"
echo "| Python binding, tickets (begin + finish) | $tickets (+$((tickets - engine)), $(ratio "$tickets")× the engine) |"
echo "| Python binding, before_call + after_call | $protocol (+$((protocol - engine)), $(ratio "$protocol")× the engine) |"
