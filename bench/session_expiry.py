"""What finding a partition's idle sessions costs the session stage per watermark step.

    .venv/bin/python bench/session_expiry.py [--open 1000,10000,100000] [--rounds 5]

A session stage partition holds `--open` open sessions (their latest turns spread over
the idle timeout, so some are always about to close) and takes watermark steps of a
tenth of a second; at each, the sessions the step closed are closed (their tombstones
written) and as many new sessions open, so the count stays put. Per step, min / median /
max microseconds over the rounds of:

- now: `SessionDeadlines.due` (the sessions in heaps by the watermark they wait for),
  with its `note` of every write;
- before, in the same rounds: reading every entry of the table and checking it against
  the session windows, as the stage did at every watermark step until this bench.

The table is a plain dict here (the worker's Faust table reads slower), and the stage's
own work on a closed session (its scoring) is left out: both sides do it alike.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from worker.windowing.event_time import SessionWindows
from worker.windowing.session_deadlines import SessionDeadlines

IDLE = 600.0  # seconds of event time: sessions a chat user leaves open for minutes
STEP = 0.1
STEPS = 300
PARTITION = 0


def reading_everything(
    table: dict[str, dict[str, Any]], rule: SessionWindows, watermark: float
) -> list[str]:
    """The sessions due at `watermark`, found as the stage did before `SessionDeadlines`."""
    due = []
    for session_id, stored in list(table.items()):
        if stored.get("partition") != PARTITION:
            continue
        if stored.get("closed"):
            if rule.tombstone_expired(float(stored["at"]), watermark):
                due.append(session_id)
        elif rule.idle_close(float(stored["ts"]), watermark) is not None:
            due.append(session_id)
    return due


def one_round(open_sessions: int, indexed: bool) -> float:
    """Microseconds per watermark step, finding and closing the due sessions."""
    rule = SessionWindows(IDLE)
    deadlines = SessionDeadlines(rule)
    table: dict[str, dict[str, Any]] = {}
    spacing = IDLE / open_sessions
    for index in range(open_sessions):
        table[f"s{index}"] = {"partition": PARTITION, "ts": index * spacing, "state": index}
    next_id = open_sessions
    watermark = IDLE
    if indexed:
        deadlines.due(PARTITION, watermark, table)  # built once, as after an assignment
    gc.collect()
    started = time.perf_counter()
    for _ in range(STEPS):
        watermark += STEP
        if indexed:
            due = [session_id for session_id, _ in deadlines.due(PARTITION, watermark, table)]
        else:
            due = reading_everything(table, rule, watermark)
        for session_id in due:
            stored = table[session_id]
            if stored.get("closed"):
                del table[session_id]
                continue
            tombstone = {"closed": True, "at": rule.closes_at(stored["ts"]), "partition": 0}
            table[session_id] = tombstone
            opened = {"partition": PARTITION, "ts": watermark, "state": next_id}
            table[f"s{next_id}"] = opened
            if indexed:
                deadlines.note(session_id, tombstone)
                deadlines.note(f"s{next_id}", opened)
            next_id += 1
    return (time.perf_counter() - started) / STEPS * 1e6


def spread(values: list[float]) -> str:
    return " / ".join(f"{v:,.1f}" for v in (min(values), statistics.median(values), max(values)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--open", default="1000,10000,100000", help="open sessions, listed")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print(f"us per watermark step ({STEP} s), idle timeout {IDLE:.0f} s; min / median / max")
    print(f"{'open':>8}  {'before (read all)':>28}  {'now (deadlines)':>24}  ratio now/before")
    for count in (int(part) for part in args.open.split(",")):
        before: list[float] = []
        now: list[float] = []
        for _ in range(args.rounds):  # alternated, so both see the same machine
            before.append(one_round(count, indexed=False))
            now.append(one_round(count, indexed=True))
        ratios = [n / b for n, b in zip(now, before, strict=True)]
        print(
            f"{count:>8,}  {spread(before):>28}  {spread(now):>24}  "
            f"{min(ratios):.4f} / {statistics.median(ratios):.4f} / {max(ratios):.4f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
