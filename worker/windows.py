"""Event-time windows: assignment, the watermark, and a tracker of open and closed windows.

Pure: no Kafka, no clock. Every function that needs the time takes `now` (wall-clock epoch
seconds) as a parameter, so tests replay any history deterministically.

- A window is `[start, end)` in event time (epoch seconds). Tumbling windows advance by
  their size, hopping windows by their step (which divides the size), so an event belongs
  to `size / step` hopping windows.
- The watermark is the largest event time seen plus the wall-clock time elapsed since it
  was seen. It never moves backwards: a record whose time is above the largest seen but
  below the extrapolated watermark does not pull it back (formally, the watermark is the
  largest `ts + elapsed since seen` over all records, which is the spec's definition
  whenever the newest record is also the most advanced one).
- A window closes once `watermark >= end + grace`; a record for a closed window is late.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from schemas.outputs import WindowSpan
from worker.config import WindowConfig, format_duration


@dataclass(frozen=True)
class WindowKey:
    """One window instance: `size` and `step` in seconds (`step` None: tumbling)."""

    size: float
    step: float | None
    start: float

    @property
    def end(self) -> float:
        return self.start + self.size

    @property
    def name(self) -> str:
        """The window's configured name, as `WindowConfig.name`: '1m' or '1h/5m'."""
        if self.step is None or self.step == self.size:
            return format_duration(self.size)
        return f"{format_duration(self.size)}/{format_duration(self.step)}"

    def sort_key(self) -> tuple[float, float, float]:
        return (self.size, self.step or 0.0, self.start)

    def contains(self, event_time: float) -> bool:
        return self.start <= event_time < self.end

    def span(self) -> WindowSpan:
        """The wire form of the window (`start`, `end`, `size_s`)."""
        return WindowSpan(
            start=datetime.fromtimestamp(self.start, UTC),
            end=datetime.fromtimestamp(self.end, UTC),
            size_s=self.size,
        )

    def to_json(self) -> list[float | None]:
        return [self.size, self.step, self.start]

    @classmethod
    def from_json(cls, data: Sequence[Any]) -> WindowKey:
        size, step, start = data
        return cls(float(size), None if step is None else float(step), float(start))


def windows_for(event_time: float, window: WindowConfig) -> list[WindowKey]:
    """All windows of `window` that contain `event_time`, oldest first."""
    size = float(window.size)
    step = None if window.step is None or window.step == window.size else float(window.step)
    hop = step if step is not None else size
    index = math.floor(event_time / hop)
    # Guard against float rounding at a boundary: the newest window must start at or
    # before the event and the event must fall before its end.
    while index * hop > event_time:
        index -= 1
    while (index + 1) * hop <= event_time:
        index += 1
    per_event = round(size / hop)
    keys = [WindowKey(size, step, (index - back) * hop) for back in range(per_event - 1, -1, -1)]
    return [key for key in keys if key.contains(event_time)]


def assign_windows(event_time: float, windows: Iterable[WindowConfig]) -> list[WindowKey]:
    """The windows of every configuration that contain `event_time`."""
    return [key for window in windows for key in windows_for(event_time, window)]


@dataclass
class Watermark:
    """Event-time progress: the largest `ts` seen, advanced by wall-clock time since."""

    anchor: float | None = None  # watermark value at `anchor_at`
    anchor_at: float = 0.0  # wall-clock time the anchor was set
    max_event_time: float | None = None

    def observe(self, event_time: float, now: float) -> None:
        """Account for a record with `event_time` seen at wall-clock `now`."""
        if self.max_event_time is None or event_time > self.max_event_time:
            self.max_event_time = event_time
        current = self.value(now)
        if current is None or event_time > current:
            self.anchor = event_time
            self.anchor_at = now

    def value(self, now: float) -> float | None:
        """The watermark at wall-clock `now` (None before any record)."""
        if self.anchor is None:
            return None
        return self.anchor + max(0.0, now - self.anchor_at)

    def has_closed(self, window: WindowKey, grace: float, now: float) -> bool:
        """Whether `window` is closed at `now`: the watermark reached `end + grace`."""
        current = self.value(now)
        return current is not None and current >= window.end + grace

    def to_json(self) -> dict[str, Any]:
        return {"anchor": self.anchor, "anchor_at": self.anchor_at, "max": self.max_event_time}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Watermark:
        return cls(data["anchor"], float(data["anchor_at"]), data["max"])


@dataclass(frozen=True)
class TrackedWindow:
    """A window of one suite and segment (`segment` is its `segment_key` text)."""

    suite: str
    segment: str
    window: WindowKey

    def sort_key(self) -> tuple[float, str, str, float, float, float]:
        """Orders by window end, then suite, segment and window."""
        return (self.window.end, self.suite, self.segment, *self.window.sort_key())

    def to_json(self) -> list[Any]:
        return [self.suite, self.segment, self.window.to_json()]

    @classmethod
    def from_json(cls, data: Sequence[Any]) -> TrackedWindow:
        suite, segment, window = data
        return cls(str(suite), str(segment), WindowKey.from_json(window))


@dataclass(frozen=True)
class Admission:
    """Where a record goes: windows still open (`open`) and closed ones (`late`)."""

    open: list[TrackedWindow]
    late: list[TrackedWindow]

    @property
    def is_late(self) -> bool:
        """Late for at least one of its windows (what `late_records_total` counts)."""
        return bool(self.late)


@dataclass
class WindowTracker:
    """Open windows per (suite, segment, window), closing each exactly once.

    `admit` sorts a record's windows into open and late ones and registers the open ones;
    `due(now)` returns the windows whose close time the watermark has reached and moves
    them to the closed set. Closed windows are remembered until they fall more than the
    largest window size plus `grace` behind the watermark; beyond that the watermark alone
    recognises their late records.
    """

    windows: list[WindowConfig]
    grace: float
    watermark: Watermark = field(default_factory=Watermark)
    open: set[TrackedWindow] = field(default_factory=set)
    closed: set[TrackedWindow] = field(default_factory=set)

    @property
    def horizon(self) -> float:
        """How far behind the watermark closed windows are still remembered."""
        largest = max((float(window.size) for window in self.windows), default=0.0)
        return largest + self.grace

    def is_closed(self, tracked: TrackedWindow, now: float) -> bool:
        """Closed now or before (a late record for it changes no aggregate)."""
        return tracked in self.closed or self.watermark.has_closed(tracked.window, self.grace, now)

    def admit(self, suite: str, segment: str, event_time: float, now: float) -> Admission:
        """Classify a record's windows for one segment, then advance the watermark.

        Call once per segment of the record (`segment` as `segment_key` text); the
        watermark only moves forward, so repeated calls with the same time are harmless.
        """
        open_windows: list[TrackedWindow] = []
        late: list[TrackedWindow] = []
        for key in assign_windows(event_time, self.windows):
            tracked = TrackedWindow(suite, segment, key)
            (late if self.is_closed(tracked, now) else open_windows).append(tracked)
        self.open.update(open_windows)
        self.watermark.observe(event_time, now)
        return Admission(open_windows, late)

    def due(self, now: float) -> list[TrackedWindow]:
        """Windows that close at `now`, each returned once, ordered by end then key."""
        closing = sorted(
            (
                tracked
                for tracked in self.open
                if self.watermark.has_closed(tracked.window, self.grace, now)
            ),
            key=TrackedWindow.sort_key,
        )
        self.open.difference_update(closing)
        self.closed.update(closing)
        self._forget_old(now)
        return closing

    def _forget_old(self, now: float) -> None:
        current = self.watermark.value(now)
        if current is None:
            return
        oldest_kept = current - self.horizon
        self.closed = {tracked for tracked in self.closed if tracked.window.end >= oldest_kept}

    def to_json(self) -> dict[str, Any]:
        """Open and closed windows and the watermark (not the window configuration)."""
        return {
            "watermark": self.watermark.to_json(),
            "open": _tracked_json(self.open),
            "closed": _tracked_json(self.closed),
        }

    @classmethod
    def from_json(
        cls, data: dict[str, Any], windows: list[WindowConfig], grace: float
    ) -> WindowTracker:
        return cls(
            windows=windows,
            grace=grace,
            watermark=Watermark.from_json(data["watermark"]),
            open={TrackedWindow.from_json(item) for item in data["open"]},
            closed={TrackedWindow.from_json(item) for item in data["closed"]},
        )


def _tracked_json(windows: Iterable[TrackedWindow]) -> list[list[Any]]:
    return [tracked.to_json() for tracked in sorted(windows, key=TrackedWindow.sort_key)]


__all__ = [
    "Admission",
    "TrackedWindow",
    "Watermark",
    "WindowKey",
    "WindowTracker",
    "assign_windows",
    "windows_for",
]
