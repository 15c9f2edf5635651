"""The bundled example stream (`examples/demo/stream.jsonl`), made ready to replay.

`retime` moves its event times to the present by whole windows, so window boundaries stay
where the stream put them; `phases` cuts it into the windows the replay produces one after
the other. Pure: lines in, lines out.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

import orjson

from worker.demo.settings import DEMO_DIR

STREAM = DEMO_DIR / "stream.jsonl"


def event_seconds(value: Any) -> float | None:
    """Epoch seconds of an envelope `ts` (RFC 3339 string or epoch milliseconds)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value) / 1000.0
    if isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value)
        except ValueError:
            return None
        return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()
    return None


def retime(lines: list[bytes], unit: float, now: float) -> tuple[list[bytes], float]:
    """Shift every `ts` by the whole number of `unit`s that brings the last one closest to
    `now` without passing it (window boundaries stay where the stream put them).

    Returns the lines and the shift in seconds; lines that are not JSON objects or have no
    readable `ts` are kept as they are.
    """
    decoded: list[tuple[dict[str, Any] | None, float | None]] = []
    for line in lines:
        try:
            data = orjson.loads(line)
        except orjson.JSONDecodeError:
            data = None
        if not isinstance(data, dict):
            decoded.append((None, None))
            continue
        decoded.append((data, event_seconds(data.get("ts"))))
    times = [seconds for _, seconds in decoded if seconds is not None]
    if not times:
        return lines, 0.0
    shift = math.floor((now - max(times)) / unit) * unit
    out = []
    for line, (data, seconds) in zip(lines, decoded, strict=True):
        if data is None or seconds is None:
            out.append(line)
            continue
        moment = datetime.fromtimestamp(seconds + shift, UTC)
        data["ts"] = moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
        out.append(orjson.dumps(data))
    return out, shift


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
