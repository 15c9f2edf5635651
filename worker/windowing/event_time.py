"""Event time, in one place: what time it is (from the data), and when a window closes.

Pure: no Kafka, no clock, no I/O; the wall-clock time is a parameter wherever it matters,
and what the stages know about Kafka (assignment, high water, start offsets) comes in as
plain values.

How a window comes to close, end to end:

1. **Producing side** (`InputProgress`, the score stage). Each input partition has a
   `PartitionClock`: its progress is the largest `ts` read from it, and it follows the
   wall clock only while caught up and quiet for `idle_timeout`. The stage reports every
   record it finished (`observe`) and sends the `Marker`s it is told to: right behind a
   micro-batch's outputs when the batch's progress passes some window's end + grace
   (`batch_markers`), and every `tick_interval` for the rest (`tick_markers`: idle
   partitions, progress that closes nothing, heartbeats).
2. **Consuming side** (`StageProgress`, the session and window stages). A stage
   partition's `Watermark` is the minimum progress over its upstream channels, kept in
   the stage's progress table (`ProgressTable`). `may_close` says whether a marker takes
   its channel past an end + grace (so the window stage ends its micro-batch at once),
   `on_markers` applies markers and says how the watermark moved (`Advance`).
3. **Closing.** A window `[start, end)` closes when its partition's watermark reaches
   `end + grace` (`LatenessPolicy`, `worker.windowing.lateness`); the window store
   (`worker.windowing.store`) emits its final then, once. A session is a session window
   on the same clock (`SessionWindows`): it closes `idle_timeout` of event time after
   its latest turn, once the session stage's watermark reaches that.

`check_event_time` rejects the times that would close every open window at once;
`markers_value` and `markers_in` write and read a marker record: `{"wm": marker}`, or
`{"wm": [marker, ...]}` for the progress of several channels in one record.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from worker.windowing.lateness import LatenessPolicy

EPOCH = 0.0  # 1970-01-01T00:00:00Z
INPUT_GROUP = "in"  # watermark channel group of the input partitions
SESSION_GROUP = "sess"  # watermark channel group of the session stage's partitions


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


class ProgressTable:
    """Watermarks of one stage's partitions over `table`, under keys `{prefix}|{p}`.

    A partition's `Watermark` is restored from the table on first use (with the channels
    it must hear from), moved by the markers it observes, and written back at `flush`, so
    a stage that writes its other state at the end of a micro-batch writes its progress
    with it. `forget` drops the cache (after a rebalance the table has the truth) and
    anything not flushed. The table is any mutable mapping (a Faust table, or a dict).
    """

    def __init__(
        self, table: MutableMapping[str, Any], prefix: str, channel_groups: Mapping[str, int]
    ) -> None:
        self.table = table
        self.prefix = prefix
        self.channel_groups = dict(channel_groups)  # group -> channel count (0: unknown)
        self._watermarks: dict[int, Watermark] = {}
        self._pending: dict[int, Any] = {}  # partition -> watermark to write at the flush

    def key(self, partition: int) -> str:
        return f"{self.prefix}|{partition}"

    def watermark(self, partition: int) -> Watermark:
        """The partition's watermark (restored from the table on first use)."""
        watermark = self._watermarks.get(partition)
        if watermark is None:
            watermark = Watermark.from_json(self.table.get(self.key(partition)))
            for group, count in self.channel_groups.items():
                watermark.expect(group, count)
            self._watermarks[partition] = watermark
        return watermark

    def value(self, partition: int) -> float | None:
        """The partition's watermark value (None until every channel reported)."""
        return self.watermark(partition).value()

    def observe(self, partition: int, marker: Marker) -> bool:
        """Take a marker; whether the watermark moved. A change is written at `flush`."""
        watermark = self.watermark(partition)
        before = watermark.to_json()
        moved = watermark.observe(marker)
        after = watermark.to_json()
        if after != before:
            self._pending[partition] = after
        return moved

    def pending_partitions(self) -> set[int]:
        return set(self._pending)

    def flush(self, partition: int | None = None) -> int:
        """Write the changed watermarks (of `partition`, or all); how many."""
        written = 0
        for owner, value in list(self._pending.items()):
            if partition is not None and owner != partition:
                continue
            self.table[self.key(owner)] = value
            del self._pending[owner]
            written += 1
        return written

    def forget(self) -> None:
        """Drop the cache and unwritten changes (their input was not acknowledged)."""
        self._watermarks.clear()
        self._pending.clear()


# ---------------------------------------------------------------- producing side


@dataclass(frozen=True)
class AssignedPartition:
    """An input partition this worker reads, as its consumer reports it at a tick.

    `start_offset`: where reading started after the assignment (the group's committed
    offset; None before the seek); `highwater`: the broker's end offset (None: unknown);
    `readable` False: its high water could not be read (revoked meanwhile)."""

    partition: int
    start_offset: int | None
    highwater: int | None
    readable: bool = True


class InputProgress:
    """The producing side: one `PartitionClock` per assigned input partition, and which
    markers the score stage sends behind a batch and at a tick.

    The stage calls `observe` for every record it finished, sends the markers
    `batch_markers` or `tick_markers` return, and then reports them with `sent`."""

    def __init__(
        self,
        lateness: LatenessPolicy,
        pane_width: float | None,
        idle_timeout: float,
        heartbeat: float,
        group: str = INPUT_GROUP,
    ) -> None:
        self.lateness = lateness
        self.pane_width = pane_width
        self.idle_timeout = idle_timeout
        self.heartbeat = heartbeat
        self.group = group
        self.clocks: dict[int, PartitionClock] = {}
        self._sent: dict[int, tuple[float, float]] = {}  # partition -> (progress, sent at)

    def progress(self, partition: int) -> float | None:
        """How far the partition's event time has got (None: not known yet)."""
        clock = self.clocks.get(partition)
        return None if clock is None else clock.progress

    def observe(self, partition: int, offset: int, event_time: float | None, now: float) -> None:
        """A record at `offset` was finished and its outputs sent (`event_time` None: it
        had no usable time, e.g. a dead letter)."""
        self._clock(partition, now).observe(offset, event_time, now)

    def batch_markers(
        self, partitions: Iterable[int], assigned: Collection[int], count: int
    ) -> list[Marker]:
        """The markers to send right behind a micro-batch's outputs: the progress of each
        assigned partition the batch moved, when one of them passed a window's end + grace
        since its last marker (or has none yet); else none. Other progress waits for the
        tick: a watermark is a minimum over partitions, so it can only pass an end + grace
        on a marker whose own progress passes it."""
        markers = []
        closing = False
        for partition in sorted(set(partitions) & set(assigned)):
            clock = self.clocks.get(partition)
            last = self._sent.get(partition)
            if clock is None or clock.progress is None:
                continue
            if last is not None and last[0] >= clock.progress:
                continue
            markers.append(Marker(self.group, partition, count, clock.progress))
            closing = closing or (
                last is None
                or self.lateness.closes_between(last[0], clock.progress, self.pane_width)
            )
        return markers if closing else []

    def tick_markers(
        self, partitions: Sequence[AssignedPartition], count: int, now: float
    ) -> list[Marker]:
        """The markers of a tick: every assigned partition whose progress moved, or was
        not sent for `heartbeat`, after letting idle ones follow the wall clock (a
        partition caught up and quiet for `idle_timeout`)."""
        markers = []
        for assigned in partitions:
            clock = self._clock(assigned.partition, now)
            if not clock.observed:  # nothing finished since the assignment
                clock.next_offset = assigned.start_offset
            if not assigned.readable:
                continue
            clock.follow_wall_clock(now, assigned.highwater, self.idle_timeout)
            if clock.progress is None:
                continue
            last = self._sent.get(assigned.partition)
            if last is not None and last[0] == clock.progress and now - last[1] < self.heartbeat:
                continue
            markers.append(Marker(self.group, assigned.partition, count, clock.progress))
        return markers

    def sent(self, markers: Iterable[Marker], now: float) -> None:
        """The markers went out at `now`."""
        for marker in markers:
            self._sent[marker.index] = (marker.value, now)

    def forget(self) -> None:
        """After a rebalance: the partitions this worker reads may have changed."""
        self.clocks.clear()
        self._sent.clear()

    def _clock(self, partition: int, now: float) -> PartitionClock:
        clock = self.clocks.get(partition)
        if clock is None:
            clock = self.clocks[partition] = PartitionClock(quiet_since=now)
        return clock


# ---------------------------------------------------------------- consuming side


@dataclass(frozen=True)
class Advance:
    """What markers did to a stage partition's watermark: whether it `moved`, and its
    value now (None until every upstream channel reported)."""

    moved: bool
    watermark: float | None

    @property
    def passed(self) -> float | None:
        """The new watermark when it moved to a known value (what may close something)."""
        return self.watermark if self.moved else None


class StageProgress:
    """The consuming side: the watermarks of one stage's partitions (in its progress
    table) and which markers may close a window.

    `channel_groups` maps each upstream channel group to its channel count (0: as many
    as its markers will say)."""

    def __init__(
        self,
        table: MutableMapping[str, Any],
        prefix: str,
        channel_groups: Mapping[str, int],
        lateness: LatenessPolicy,
        pane_width: float | None,
    ) -> None:
        self.table = ProgressTable(table, prefix, channel_groups)
        self.lateness = lateness
        self.pane_width = pane_width
        # The latest marker value seen per (stage partition, group, channel) as it arrived
        # (before its batch was processed), for `may_close`.
        self._seen: dict[tuple[int, str, int], float] = {}
        self._reported: dict[int, float] = {}  # partition -> watermark `changed` returned

    def watermark(self, partition: int) -> Watermark:
        """The partition's watermark (restored from the table on first use)."""
        return self.table.watermark(partition)

    def value(self, partition: int, groups: Collection[str] | None = None) -> float | None:
        """The partition's watermark over `groups` (all: None); None until they reported."""
        return self.table.watermark(partition).value(groups)

    def may_close(self, partition: int, markers: Iterable[Marker]) -> bool:
        """Whether the markers, as they arrive (before their batch is processed), take a
        channel past a window end + grace it had not passed (or are its first)."""
        crossed = False
        for marker in markers:
            channel = (partition, marker.group, marker.index)
            before = self._seen.get(channel)
            if before is None or marker.value > before:
                self._seen[channel] = marker.value
                crossed = (
                    crossed
                    or before is None
                    or self.lateness.closes_between(before, marker.value, self.pane_width)
                )
        return crossed

    def observe(self, partition: int, marker: Marker) -> bool:
        """Take one marker; whether the watermark moved (written at `flush`)."""
        return self.table.observe(partition, marker)

    def on_markers(self, partition: int, markers: Iterable[Marker]) -> Advance:
        """Take markers; how the partition's watermark moved (written at `flush`)."""
        moved = False
        for marker in markers:
            moved |= self.table.observe(partition, marker)
        return Advance(moved, self.table.value(partition))

    def changed(self, partition: int) -> float | None:
        """The partition's watermark when it differs from the one this returned last time
        (None: unknown or unchanged)."""
        current = self.table.value(partition)
        if current is None or current == self._reported.get(partition):
            return None
        self._reported[partition] = current
        return current

    def pending_partitions(self) -> set[int]:
        return self.table.pending_partitions()

    def flush(self, partition: int | None = None) -> int:
        """Write the changed watermarks (of `partition`, or all); how many."""
        return self.table.flush(partition)

    def forget(self) -> None:
        """After a rebalance: drop cached watermarks and what markers were seen."""
        self.table.forget()
        self._seen.clear()
        self._reported.clear()


@dataclass(frozen=True)
class SessionWindows:
    """Sessions as session windows on the same clock: a session closes `idle_timeout` of
    event time after its latest turn, once the stage partition's watermark reaches that;
    a closed session's tombstone is dropped as long after it closed."""

    idle_timeout: float

    def closes_at(self, latest_turn: float) -> float:
        """The watermark at which a session whose latest turn is at `latest_turn` closes."""
        return latest_turn + self.idle_timeout

    def idle_close(self, latest_turn: float, watermark: float) -> float | None:
        """When the session closed idle (`closes_at`), if `watermark` reached it; else None."""
        closes_at = self.closes_at(latest_turn)
        return closes_at if closes_at <= watermark else None

    def tombstone_expired(self, closed_at: float, watermark: float) -> bool:
        """Whether a session closed at `closed_at` can be forgotten at `watermark`."""
        return watermark - closed_at >= self.idle_timeout


# ---------------------------------------------------------------- one per worker


class EventTime:
    """A worker's event-time component, built once around its one `LatenessPolicy`: it
    makes the producing side for the score stage and the consuming side of each stage
    (each stage instance gets its own: a stage started again starts afresh)."""

    def __init__(
        self,
        lateness: LatenessPolicy,
        pane_width: float | None,
        idle_timeout: float,
        heartbeat: float,
    ) -> None:
        self.lateness = lateness
        self.pane_width = pane_width
        self.idle_timeout = idle_timeout
        self.heartbeat = heartbeat

    def inputs(self) -> InputProgress:
        """The producing side of a score stage: its input partitions' clocks and markers."""
        return InputProgress(self.lateness, self.pane_width, self.idle_timeout, self.heartbeat)

    def stage(
        self, table: MutableMapping[str, Any], prefix: str, channel_groups: Mapping[str, int]
    ) -> StageProgress:
        """The consuming side of a stage whose progress table is `table`."""
        return StageProgress(table, prefix, channel_groups, self.lateness, self.pane_width)

    def sessions(self, idle_timeout: float) -> SessionWindows:
        """The session windows of a stage that keeps sessions idle for `idle_timeout`."""
        return SessionWindows(idle_timeout)


__all__ = [
    "INPUT_GROUP",
    "SESSION_GROUP",
    "Advance",
    "AssignedPartition",
    "EventTime",
    "InputProgress",
    "InvalidEventTime",
    "Marker",
    "PartitionClock",
    "ProgressTable",
    "SessionWindows",
    "StageProgress",
    "Watermark",
    "check_event_time",
    "markers_in",
    "markers_value",
]
