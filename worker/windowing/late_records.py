"""Log lines for late records: which closed window a record arrived for, and by how much.

A record for a window that has already closed gets its result but changes no aggregate
(and is counted in `scorestream_late_records_total`). History produced into a running
worker is late that way, so each suite gets a line at most every `interval` seconds of
wall time naming the window, how far the watermark had passed it and what to do instead.
`closed_window` and `describe` are pure; `LateRecordLog` adds the rate limit.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from worker.demo.retime import rfc3339
from worker.windowing.lateness import LatenessPolicy
from worker.windowing.windows import WindowConfig, window_ends

LOG_INTERVAL = 10.0  # seconds of wall time between two lines of one suite
ADVICE = (
    "it has its result but changes no aggregate. To score history into its windows, "
    "produce it before the worker starts (with --retime to move it to now) or use a "
    "backfill app (README: Backfill)"
)


@dataclass(frozen=True)
class ClosedWindow:
    """The window a late record was for, and when and how far it had closed."""

    config: WindowConfig
    start: float
    end: float
    closed_at: float  # end + grace: when the watermark closed it
    watermark: float

    @property
    def late_by(self) -> float:
        """Seconds of event time between the window's close and the watermark."""
        return self.watermark - self.closed_at


def closed_window(
    event_time: float,
    watermark: float | None,
    configs: Iterable[WindowConfig],
    lateness: LatenessPolicy,
) -> ClosedWindow | None:
    """The oldest closed window (of the first configuration that has one) containing
    `event_time`, or None when every window containing it is still open."""
    if watermark is None:
        return None
    for config in configs:
        oldest_end, _newest_end = window_ends(event_time, config)
        if lateness.is_closed(oldest_end, watermark):
            start = oldest_end - float(config.size)
            return ClosedWindow(
                config, start, oldest_end, lateness.closes_at(oldest_end), watermark
            )
    return None


def duration(seconds: float) -> str:
    """A short human duration: `42.0s`, `3m 05s`, `2h 07m`, `413d 02h`."""
    if seconds < 60:
        return f"{seconds:.1f}s"
    whole = int(seconds)
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours:02d}h"
    if hours:
        return f"{hours}h {minutes:02d}m"
    return f"{minutes}m {secs:02d}s"


def describe(suite: str, event_time: float, window: ClosedWindow, cases: int = 1) -> str:
    """The log line for `cases` late records of `suite`, the oldest at `event_time`."""
    what = "a record" if cases == 1 else f"{cases} records"
    return (
        f"late: {what} of suite {suite} at {rfc3339(event_time)} for the "
        f"{window.config.name} window {rfc3339(window.start)} .. {rfc3339(window.end)}, "
        f"closed {duration(window.late_by)} before (the watermark is at "
        f"{rfc3339(window.watermark)}, past the window's end + grace "
        f"{rfc3339(window.closed_at)}); {ADVICE}"
    )


class LateRecordLog:
    """At most one warning per suite every `interval` seconds; the records left out in
    between are counted into the next line."""

    def __init__(
        self,
        configs: Sequence[WindowConfig],
        lateness: LatenessPolicy,
        logger: logging.Logger,
        interval: float = LOG_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.configs = list(configs)
        self.lateness = lateness
        self.logger = logger
        self.interval = interval
        self.clock = clock
        self._last: dict[str, float] = {}
        self._unlogged: dict[str, int] = {}

    def record(self, suite: str, event_time: float, watermark: float | None) -> None:
        """One late result at `event_time`."""
        self.records(suite, [(event_time, 1)], watermark)

    def records(
        self, suite: str, times: Iterable[tuple[float, int]], watermark: float | None
    ) -> None:
        """Late results as (event time, how many): a fold's panes that were late."""
        late = [
            (event_time, count, window)
            for event_time, count in times
            if (window := closed_window(event_time, watermark, self.configs, self.lateness))
        ]
        if not late:
            return
        cases = sum(count for _, count, _ in late)
        now = self.clock()
        last = self._last.get(suite)
        if last is not None and now - last < self.interval:
            self._unlogged[suite] = self._unlogged.get(suite, 0) + cases
            return
        self._last[suite] = now
        event_time, _count, window = min(late, key=lambda item: item[0])
        line = describe(suite, event_time, window, cases)
        skipped = self._unlogged.pop(suite, 0)
        if skipped:
            line += f" ({skipped} more late records of {suite} since the last line)"
        self.logger.warning(line)


__all__ = ["LOG_INTERVAL", "ClosedWindow", "LateRecordLog", "closed_window", "describe"]
