"""Event-time progress per input partition, and the watermark as the minimum over them.

Pure: no Kafka, no clock; the wall-clock time is a parameter wherever it matters.

- `PartitionClock` follows one partition of the input topic where it is read: its
  progress is the largest `ts` read from it. It moves by wall-clock time only while the
  partition is caught up (everything up to the high watermark read) and quiet for
  `idle_timeout`; a partition with a backlog never advances by the wall clock.
- `Watermark` is what a downstream stage partition knows: the progress of every upstream
  channel (e.g. each input partition), carried to it by watermark markers that travel the
  same path as the records they cover. Its value is the minimum over every expected
  channel, and None while any of them has not reported yet. Progress never moves back.
- `check_event_time` rejects the times that would close every open window at once.
- `markers_value` and `markers_in` write and read a marker record: `{"wm": marker}`, or
  `{"wm": [marker, ...]}` for the progress of several channels in one record.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

EPOCH = 0.0  # 1970-01-01T00:00:00Z


class InvalidEventTime(ValueError):
    """A `ts` before 1970 or further ahead of the wall clock than `max_future_skew`."""


def check_event_time(event_time: float, now: float, max_future_skew: float) -> float:
    """`event_time` when it is usable, else `InvalidEventTime` saying why."""
    if event_time < EPOCH:
        raise InvalidEventTime(f"ts {event_time:.3f} is before 1970")
    ahead = event_time - now
    if ahead > max_future_skew:
        raise InvalidEventTime(
            f"ts is {ahead:.0f}s ahead of the wall clock (max_future_skew {max_future_skew:.0f}s)"
        )
    return event_time


@dataclass
class PartitionClock:
    """Event-time progress of one input partition, as its reader sees it.

    `next_offset` is the offset after the last record read (before any: where reading
    starts, the group's committed offset, never the fetcher's position, which runs ahead
    of what was read); `quiet_since` the wall time of the last record read, or of the
    assignment.
    """

    quiet_since: float
    next_offset: int | None = None
    progress: float | None = None
    observed: bool = False  # a record was read since the assignment

    def observe(self, offset: int, event_time: float | None, now: float) -> None:
        """A record at `offset` was read and its outputs sent (`event_time` None: it had
        no usable time, e.g. a dead letter)."""
        self.next_offset = offset + 1
        self.quiet_since = now
        self.observed = True
        if event_time is not None and (self.progress is None or event_time > self.progress):
            self.progress = event_time

    def caught_up(self, highwater: int | None) -> bool:
        """Whether everything up to `highwater` (the broker's end offset) was read."""
        return (
            highwater is not None
            and self.next_offset is not None
            and (self.next_offset >= highwater)
        )

    def follow_wall_clock(self, now: float, highwater: int | None, idle_timeout: float) -> bool:
        """Advance to `now` when caught up and quiet for `idle_timeout`; True if it moved."""
        if not self.caught_up(highwater) or now - self.quiet_since < idle_timeout:
            return False
        if self.progress is not None and self.progress >= now:
            return False
        self.progress = now
        return True


@dataclass(frozen=True)
class Marker:
    """A watermark marker: channel `index` of `group` (one of `count`) reached `value`."""

    group: str
    index: int
    count: int
    value: float

    def to_json(self) -> list[Any]:
        return [self.group, self.index, self.count, self.value]

    @classmethod
    def from_json(cls, data: Any) -> Marker:
        group, index, count, value = data
        return cls(str(group), int(index), int(count), float(value))


def markers_value(markers: Sequence[Marker]) -> bytes:
    """The value of one marker record carrying `markers` (one: the single form)."""
    if len(markers) == 1:
        return orjson.dumps({"wm": markers[0].to_json()})
    return orjson.dumps({"wm": [marker.to_json() for marker in markers]})


def markers_in(data: Mapping[str, Any]) -> list[Marker]:
    """The markers in a decoded internal-topic value (none for a data record)."""
    raw = data.get("wm")
    if raw is None:
        return []
    if raw and isinstance(raw[0], list):
        return [Marker.from_json(item) for item in raw]
    return [Marker.from_json(raw)]


@dataclass
class Watermark:
    """Progress of every upstream channel of one stage partition; the minimum closes.

    `groups` maps a channel group (e.g. "in" for the input partitions) to how many
    channels it has (0: expected, count not known yet); `progress` maps "group:index" to
    that channel's progress.
    """

    groups: dict[str, int] = field(default_factory=dict)
    progress: dict[str, float] = field(default_factory=dict)

    def expect(self, group: str, count: int = 0) -> None:
        """Wait for `count` channels of `group` (0: as many as its markers will say)."""
        self.groups[group] = max(count, self.groups.get(group, 0))

    def observe(self, marker: Marker) -> bool:
        """Take a marker into account; True when the watermark's value moved."""
        before = self.value()
        self.expect(marker.group, marker.count)
        channel = f"{marker.group}:{marker.index}"
        if marker.value > self.progress.get(channel, float("-inf")):
            self.progress[channel] = marker.value
        return self.value() != before

    def value(self, groups: Collection[str] | None = None) -> float | None:
        """The minimum progress over all expected channels (of `groups` only, when given:
        what bounds records that travel behind those groups' markers alone); None until
        all of them reported."""
        expected = {
            group: count
            for group, count in self.groups.items()
            if groups is None or group in groups
        }
        if not expected or 0 in expected.values():
            return None
        lowest: float | None = None
        for group, count in expected.items():
            for index in range(count):
                channel_progress = self.progress.get(f"{group}:{index}")
                if channel_progress is None:
                    return None
                if lowest is None or channel_progress < lowest:
                    lowest = channel_progress
        return lowest

    def has_passed(self, moment: float) -> bool:
        """Whether the watermark is at or beyond `moment`."""
        current = self.value()
        return current is not None and current >= moment

    def to_json(self) -> dict[str, Any]:
        return {"groups": dict(self.groups), "progress": dict(self.progress)}

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> Watermark:
        if not data:
            return cls()
        return cls(
            {str(k): int(v) for k, v in data["groups"].items()},
            {str(k): float(v) for k, v in data["progress"].items()},
        )


__all__ = [
    "InvalidEventTime",
    "Marker",
    "PartitionClock",
    "Watermark",
    "check_event_time",
    "markers_in",
    "markers_value",
]
