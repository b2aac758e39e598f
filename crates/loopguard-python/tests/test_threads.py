"""One guard shared by 8 threads, many sessions at once: every answer equals the
sequential replay's."""

from __future__ import annotations

import json
import random
import threading
from pathlib import Path
from typing import Any, Dict, List

import loopguard
from driver import answer, replay
from streams import CONFIG, lines_of

THREADS = 8
SESSIONS = 96


def session_lines(n: int, rng: random.Random) -> List[str]:
    """A loop-heavy stream of one session (from the random-stream alphabet)."""
    from streams import ARGS, RESULTS

    plan = []
    for _ in range(rng.randrange(20, 80)):
        tool = rng.choice(sorted(ARGS))
        plan.append({
            "kind": "call" if rng.random() > 0.05 else "compaction",
            "session": f"s{n}", "run": rng.choice(["r1", "r2", None]), "agent": None, "tool": tool,
            "variant": rng.randrange(3), "outcome": rng.choice(RESULTS), "with_id": rng.random() > 0.5,
        })
    return lines_of(plan)


def test_eight_threads_answer_as_the_sequential_replay(binary: Path, tmp_path: Path) -> None:
    rng = random.Random(19)
    per_session = [session_lines(n, rng) for n in range(SESSIONS)]
    # A few results over the GIL-release threshold, so that hashing overlaps other threads.
    big = json.dumps({"content": [{"type": "text", "text": "y" * 200_000}]})
    for lines in per_session[::7]:
        lines.append(json.dumps({"type": "call", "session": json.loads(lines[0])["session"], "tool": "read", "args": {"big": 1}}))
        lines.append(lines[-1].replace('"type": "call"', '"type": "result"')[:-1] + f', "result": {big}}}')

    # The sequential truth: every session's stream, one after the other, through replay.
    flat = [line for lines in per_session for line in lines]
    events = tmp_path / "events.jsonl"
    events.write_text("\n".join(flat) + "\n")
    config = tmp_path / "config.json5"
    config.write_text(json.dumps(CONFIG))
    expected = replay(binary, events, config)
    seq_of_first = []
    seq = 1
    for lines in per_session:
        seq_of_first.append(seq)
        seq += len(lines)

    guard = loopguard.Guard(CONFIG)
    got: Dict[int, Dict[str, Any]] = {}
    barrier = threading.Barrier(THREADS)

    def work(thread: int) -> None:
        barrier.wait()
        mine = [n for n in range(SESSIONS) if n % THREADS == thread]
        # Interleave this thread's sessions event by event.
        cursors = {n: 0 for n in mine}
        while cursors:
            for n in list(cursors):
                i = cursors[n]
                seq = seq_of_first[n] + i
                got[seq] = answer(guard, seq, json.loads(per_session[n][i]))
                cursors[n] = i + 1
                if cursors[n] == len(per_session[n]):
                    del cursors[n]

    threads = [threading.Thread(target=work, args=(t,)) for t in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [got[a["seq"]] for a in expected] == expected
    assert sum(a.get("verdict") == "block" for a in expected) > 10, "the streams should loop"
