"""Re-timing history to the present: the event times of a JSONL stream, shifted together.

Used by `scorestream demo` (its bundled stream, by whole windows) and by
`scorestream produce --retime` (any file, to end now). Pure: lines and a wall-clock time
in, lines out.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

import orjson

MILLISECOND = 0.001


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


def rfc3339(seconds: float) -> str:
    """Epoch seconds as an RFC 3339 UTC time with milliseconds (`...T12:00:00.000Z`)."""
    moment = datetime.fromtimestamp(seconds, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def retime(lines: list[bytes], unit: float, now: float) -> tuple[list[bytes], float]:
    """Shift every `ts` by the whole number of `unit`s that brings the last one closest to
    `now` without passing it: by whole windows, window boundaries stay where the stream put
    them; by `MILLISECOND`, the stream ends now.

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
        data["ts"] = rfc3339(seconds + shift)
        out.append(orjson.dumps(data))
    return out, shift


__all__ = ["MILLISECOND", "event_seconds", "retime", "rfc3339"]
