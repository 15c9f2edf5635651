"""The bundled example stream (`examples/demo/stream.jsonl`), made ready to replay.

`worker.demo.retime.retime` moves its event times to the present by whole windows, so window
boundaries stay where the stream put them; `phases` cuts it into the windows the replay
produces one after the other. Pure: lines in, lines out.
"""

from __future__ import annotations

import math

import orjson

from worker.demo.retime import event_seconds, retime
from worker.demo.settings import DEMO_DIR

STREAM = DEMO_DIR / "stream.jsonl"


def phases(lines: list[bytes], unit: float) -> list[list[bytes]]:
    """Consecutive records grouped by the `unit`-sized window of their `ts` (records without
    a readable `ts` join the group of the record before them)."""
    groups: list[list[bytes]] = []
    current: float | None = None
    for line in lines:
        try:
            data = orjson.loads(line)
        except orjson.JSONDecodeError:
            data = None
        seconds = event_seconds(data.get("ts")) if isinstance(data, dict) else None
        bucket = None if seconds is None else math.floor(seconds / unit)
        if not groups or (bucket is not None and bucket != current and current is not None):
            groups.append([])
        if bucket is not None:
            current = bucket
        groups[-1].append(line)
    return groups


__all__ = ["STREAM", "event_seconds", "phases", "retime"]
