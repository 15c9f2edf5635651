"""Event-time windows: their configuration (`WindowConfig`, the `windows` setting) and
which windows of each configuration an event time falls into.

Pure. A window is `[start, end)` in event time (epoch seconds). Tumbling windows advance
by their size, hopping windows by their step (which divides the size), so an event belongs
to `size / step` hopping windows. When a window closes: `worker.windowing.event_time`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import model_validator

from schemas.outputs import WindowSpan
from worker.settings_base import Duration, Section, format_duration


class WindowConfig(Section):
    """A tumbling (`step` unset) or hopping window over event time."""

    size: Duration
    step: Duration | None = None

    @model_validator(mode="after")
    def _step_divides(self) -> WindowConfig:
        if self.step is not None and (self.step > self.size or self.size % self.step):
            raise ValueError("step must be at most size and divide it")
        return self

    @property
    def name(self) -> str:
        """Label used in topic keys and Prometheus: '1m' or '1h/5m'."""
        return window_name(self.size, self.step)


def window_name(size: float, step: float | None) -> str:
    """The name of a window configuration in topic keys, Prometheus labels and reports:
    '1m' for a tumbling window (`step` None or `size`), '1h/5m' for a hopping one."""
    if step is None or step == size:
        return format_duration(size)
    return f"{format_duration(size)}/{format_duration(step)}"


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
        return window_name(self.size, self.step)

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


def _layout(event_time: float, window: WindowConfig) -> tuple[float, float | None, float, int]:
    """(size, step or None, hop, index of the newest window containing `event_time`)."""
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
    return size, step, hop, index


def windows_for(event_time: float, window: WindowConfig) -> list[WindowKey]:
    """All windows of `window` that contain `event_time`, oldest first."""
    size, step, hop, index = _layout(event_time, window)
    per_event = round(size / hop)
    keys = [WindowKey(size, step, (index - back) * hop) for back in range(per_event - 1, -1, -1)]
    return [key for key in keys if key.contains(event_time)]


def window_ends(event_time: float, window: WindowConfig) -> tuple[float, float]:
    """The ends of the oldest and the newest window of `window` containing `event_time`
    (the same windows as `windows_for`, without building them: a hot path)."""
    size, _step, hop, index = _layout(event_time, window)
    newest = index * hop + size
    for back in range(round(size / hop) - 1, 0, -1):
        start = (index - back) * hop
        if start <= event_time < start + size:
            return start + size, newest
    return newest, newest


def with_gate_windows(
    configured: Iterable[WindowConfig], gate_sizes: Iterable[float]
) -> list[WindowConfig]:
    """The `configured` windows plus a tumbling window of each gate's window size."""
    windows = list(configured)
    tumbling = {w.size for w in windows if w.step is None or w.step == w.size}
    for size in gate_sizes:
        if size not in tumbling:
            windows.append(WindowConfig(size=size))
            tumbling.add(size)
    return windows


def pane_width(windows: Iterable[WindowConfig]) -> float | None:
    """The widest pane that divides every size and step of `windows` (a whole number of
    milliseconds), so each pane lies inside one pane of every configuration and all its
    event times share their windows; None when no such width exists."""
    millis = []
    for window in windows:
        for length in (window.size, window.step or window.size):
            whole = round(float(length) * 1000)
            if whole <= 0 or not math.isclose(whole, float(length) * 1000, abs_tol=1e-6):
                return None
            millis.append(whole)
    if not millis:
        return None
    return math.gcd(*millis) / 1000


def pane_start_of(event_time: float, width: float) -> float:
    """Start of the pane of `width` seconds that holds `event_time`."""
    start = math.floor(event_time / width) * width
    while start > event_time:  # float rounding at a boundary
        start -= width
    while start + width <= event_time:
        start += width
    return start


def assign_windows(event_time: float, windows: Iterable[WindowConfig]) -> list[WindowKey]:
    """The windows of every configuration that contain `event_time`."""
    return [key for window in windows for key in windows_for(event_time, window)]


__all__ = [
    "WindowConfig",
    "WindowKey",
    "assign_windows",
    "pane_start_of",
    "pane_width",
    "window_ends",
    "window_name",
    "windows_for",
    "with_gate_windows",
]
