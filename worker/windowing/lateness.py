"""When a window closes, and whether an event time is still in time: the one lateness
policy of the window stage. Pure.

A window `[start, end)` closes when the watermark reaches `end + grace`. An event time
falls into every window of a configuration that contains it (one when tumbling, `size /
step` when hopping); it is *in time* while none of them has closed, *partly late* once the
oldest has (it still counts in the newer ones) and *late* once the newest has.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

from worker.windowing.windows import WindowConfig, window_ends


class Timeliness(enum.Enum):
    IN_TIME = "in_time"
    PARTLY_LATE = "partly_late"  # some of its windows have closed, not all
    LATE = "late"  # every window that would hold it has closed


@dataclass(frozen=True)
class LatenessPolicy:
    """Windows close `grace` seconds of event time after their end."""

    grace: float

    def closes_at(self, window_end: float) -> float:
        """The watermark at which a window ending at `window_end` closes."""
        return window_end + self.grace

    def is_closed(self, window_end: float, watermark: float | None) -> bool:
        """Whether the window ending at `window_end` has closed at `watermark`."""
        return watermark is not None and watermark >= window_end + self.grace

    def timeliness(
        self, event_time: float, config: WindowConfig, watermark: float | None
    ) -> Timeliness:
        """Whether an event at `event_time` can still count in `config`'s windows."""
        oldest_end, newest_end = window_ends(event_time, config)
        if not self.is_closed(oldest_end, watermark):
            return Timeliness.IN_TIME
        if not self.is_closed(newest_end, watermark):
            return Timeliness.PARTLY_LATE
        return Timeliness.LATE

    def closes_between(self, before: float, after: float, width: float | None) -> bool:
        """Whether event-time progress from `before` to `after` passes some window's end
        + grace, every window ending on a multiple of the pane `width` (None: unknown, so
        any progress may)."""
        if width is None:
            return True
        return self.closed_through(after, width) > self.closed_through(before, width)

    def closed_through(self, watermark: float, step: float) -> float:
        """The latest pane boundary (a multiple of `step`) such that every window ending
        at or before it has closed at `watermark`."""
        return math.floor((watermark - self.grace) / step) * step
