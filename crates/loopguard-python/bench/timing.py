#!/usr/bin/env python3
"""Per-call cost of the Python binding next to the Rust engine and the sidecar.

usage: python bench/timing.py [--calls 20000] [--rounds 7] [--sidecar-calls 2000] [--best-of 1]

Run from crates/loopguard-python with the package installed from a release build
(`maturin build --release` and `pip install` the wheel). Needs the workloads
(`bench/workloads.sh` at the repository root writes them into target/bench-data) and a
release build of the CLI and of the engine's `host_cycle` example:

    cargo build --release -p loopguard-cli --example host_cycle -p loopguard

Each round measures, interleaved: the Rust engine alone (`host_cycle`, the same calls),
the binding in process (through tickets, and through the protocol's `before_call` and
`after_call`), the binding through `Guard.remote` to `loopguard serve --memory`,
and the two ways of getting a value across (walking the Python objects, or `json.dumps`
then parsing the text in Rust). Every figure is the median over the rounds, per call
(`begin` + `finish`, as a host does it). With `--best-of N`, each round takes the
fastest of N passes for the engine and the in-process binding alike (each pass a fresh
guard over the same calls), which shows the cost of the code rather than the machine's
other load when it is busy. With `--cpu-time`, the engine and the in-process binding are
timed in CPU time instead (the binding's thread; the engine's process, less a run with one
pass that loads the same calls), the mean of `--best-of` passes: what a busy machine's
waiting for a core does not change.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple

import loopguard
from loopguard import _native

REPO = Path(__file__).resolve().parents[3]
DATA = Path(os.environ.get("LOOPGUARD_BENCH_DATA", REPO / "target" / "bench-data"))
RELEASE = REPO / "target" / "release"

Pair = Tuple[str, str, str, Any, Any]


def load(calls: int) -> List[Pair]:
    pairs: List[Pair] = []
    with open(DATA / "small.jsonl", encoding="utf-8") as f:
        while len(pairs) < calls:
            call, result = json.loads(f.readline()), json.loads(f.readline())
            pairs.append((call["run"], call["call_id"], call["tool"], call["args"], result["result"]))
    return pairs


def cycle(guard: Any, pairs: List[Pair], clock: Callable[[], float] = time.perf_counter, protocol: bool = False) -> float:
    """Seconds per call of the host cycle: a ticket (`begin`, then `finish` unless blocked),
    or with `protocol` (or a build without tickets) `before_call` then `after_call`."""
    start = clock()
    if protocol or not hasattr(guard, "begin"):
        for run, call_id, tool, args, result in pairs:
            verdict = guard.before_call(tool, args, session="perf", run=run, call_id=call_id)
            if not verdict.blocked:
                guard.after_call(tool, args, session="perf", run=run, call_id=call_id, result=result)
    else:
        for run, call_id, tool, args, result in pairs:
            ticket = guard.begin(tool, args, session="perf", run=run, call_id=call_id)
            if not ticket.blocked:
                ticket.finish(result=result)
    return (clock() - start) / len(pairs)


def host_cycle(calls: int, passes: int) -> str:
    return subprocess.run(
        [str(RELEASE / "examples" / "host_cycle"), str(DATA / "small.jsonl"), str(calls), "30", str(passes)],
        capture_output=True, text=True, check=True,
    ).stdout


def rust_engine(calls: int, best_of: int) -> float:
    out = host_cycle(calls, best_of)
    match = re.search(r"([\d.]+) µs per call", out)
    assert match, out
    return float(match.group(1)) / 1e6


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def rust_engine_cpu(calls: int, passes: int) -> float:
    """CPU time per call: `host_cycle` with 1 + `passes` passes less one with 1 pass (the
    same loading), over `passes` passes."""
    spent = []
    for n in (1, 1 + passes):
        before = children_cpu()
        host_cycle(calls, n)
        spent.append(children_cpu() - before)
    return (spent[1] - spent[0]) / passes / calls


def python_cpu(config: Any, pairs: List[Pair], passes: int, protocol: bool = False) -> float:
    """CPU time per call of this thread, averaged over `passes` passes."""
    return statistics.mean(cycle(loopguard.Guard(config), pairs, time.thread_time, protocol) for _ in range(passes))


def convert_objects(values: List[Any]) -> float:
    start = time.perf_counter()
    for v in values:
        _native._convert_object(v)
    return (time.perf_counter() - start) / len(values)


def convert_text(values: List[Any]) -> float:
    start = time.perf_counter()
    for v in values:
        _native._convert_text(json.dumps(v))
    return (time.perf_counter() - start) / len(values)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--sidecar-calls", type=int, default=2_000)
    ap.add_argument("--best-of", type=int, default=1, help="fastest of N passes per round (engine and binding)")
    ap.add_argument("--cpu-time", action="store_true",
                    help="engine and binding in CPU time, the mean of --best-of passes (for a busy machine)")
    a = ap.parse_args()
    pairs = load(a.calls)
    config = {"tools": {"loopDetection": {"enabled": True, "historySize": 30}}}
    values = [v for p in pairs for v in (p[3], p[4])]
    config_file = tempfile.NamedTemporaryFile("w", suffix=".json5", delete=False)
    config_file.write(json.dumps(config))
    config_file.close()
    server = subprocess.Popen(
        [str(RELEASE / "loopguard"), "serve", "--memory", "--listen", "127.0.0.1:0", "--config", config_file.name],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    assert server.stdout
    url = re.search(r"listening on (http://\S+)", server.stdout.readline())
    assert url
    samples: Dict[str, List[float]] = {k: [] for k in ("rust", "python", "protocol", "sidecar", "objects", "text")}
    try:
        for r in range(a.rounds):
            if a.cpu_time:
                samples["rust"].append(rust_engine_cpu(a.calls, a.best_of))
                samples["python"].append(python_cpu(config, pairs, a.best_of))
                samples["protocol"].append(python_cpu(config, pairs, a.best_of, protocol=True))
            else:
                samples["rust"].append(rust_engine(a.calls, a.best_of))
                samples["python"].append(min(cycle(loopguard.Guard(config), pairs) for _ in range(a.best_of)))
                samples["protocol"].append(min(cycle(loopguard.Guard(config), pairs, protocol=True) for _ in range(a.best_of)))
            remote = loopguard.Guard.remote(url.group(1))
            # A session per round: the sidecar keeps state between rounds.
            remote_pairs = [(f"{run}-{r}", cid, tool, args, res) for run, cid, tool, args, res in pairs[: a.sidecar_calls]]
            samples["sidecar"].append(cycle(remote, remote_pairs))
            samples["objects"].append(convert_objects(values))
            samples["text"].append(convert_text(values))
    finally:
        server.terminate()
        server.wait()
        os.unlink(config_file.name)
    med = {k: statistics.median(v) * 1e6 for k, v in samples.items()}
    load1 = os.getloadavg()[0]
    best = f", best of {a.best_of} passes" if a.best_of > 1 else ""
    if a.cpu_time:
        best = f", engine and binding in CPU time (mean of {a.best_of} passes)"
    print(f"small workload, {a.calls} calls ({a.sidecar_calls} through the sidecar), {a.rounds} rounds{best}, load {load1:.2f}")
    print("| path | µs per call (median) |")
    print("|---|---|")
    print(f"| Rust engine (`host_cycle`) | {med['rust']:.2f} |")
    print(f"| Python binding, in process, tickets | {med['python']:.2f} (+{med['python'] - med['rust']:.2f} over Rust) |")
    print(f"| Python binding, in process, `before_call` + `after_call` | {med['protocol']:.2f} (+{med['protocol'] - med['rust']:.2f} over Rust) |")
    print(f"| Python, `Guard.remote` to `loopguard serve --memory` | {med['sidecar']:.1f} ({med['sidecar'] / med['python']:.0f}× the in-process binding) |")
    print(f"| value across, walking the objects (per args or result) | {med['objects']:.2f} |")
    print(f"| value across, `json.dumps` + the tape in Rust | {med['text']:.2f} |")


if __name__ == "__main__":
    main()
