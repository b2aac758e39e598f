#!/usr/bin/env bash
# Writes the benchmark workloads (small, medium, large: 734 MB together) into
# target/bench-data unless they are already there, and checks them against SHA256SUMS.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${LOOPGUARD_BENCH_DATA:-target/bench-data}
mkdir -p "$out"
if [ -f "$out/small.jsonl" ] && [ -f "$out/medium.jsonl" ] && [ -f "$out/large.jsonl" ]; then
  exit 0
fi
python3 bench/gen_workloads.py "$out" --check
