"""The event-time component alone (`worker.windowing.event_time`), driven by arbitrary
interleavings of records, batch markers, ticks (idle partitions following the wall clock)
and restarts: no in-order case is ever late, every window closes exactly once, and a
marker that closes a window is always one `may_close` flags.

A case is *in order* when its `ts` is not before the ones produced to its partition
before it and at most `grace` behind the wall clock when it is produced (live traffic).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from worker.windowing.event_time import (
    INPUT_GROUP,
    AssignedPartition,
    EventTime,
    Marker,
    StageProgress,
)
from worker.windowing.lateness import LatenessPolicy, Timeliness
from worker.windowing.windows import WindowConfig, pane_width, windows_for

T0 = 1_700_000_040.0
GRACE = 10.0
IDLE = 10.0
HEARTBEAT = 5.0
CONFIGS = [WindowConfig(size=60), WindowConfig(size=300, step=60)]

produce = st.tuples(
    st.just("produce"),
    st.integers(0, 2),  # partition
    st.floats(0, GRACE),  # how far behind the wall clock
    st.floats(0, 30),  # how far after the partition's latest ts
)
read = st.tuples(st.just("read"), st.integers(0, 2), st.integers(1, 5))
tick = st.tuples(st.just("tick"), st.floats(0, 40))
restart = st.tuples(st.just("restart"))
steps = st.lists(st.one_of(produce, read, tick, restart), max_size=60)


@dataclass
class World:
    """Input partitions, a score stage's producing side and one downstream partition."""

    partitions: int
    now: float = T0
    logs: dict[int, list[float]] = field(default_factory=dict)
    read_to: dict[int, int] = field(default_factory=dict)  # next offset to read
    closings: dict[tuple[str, float], int] = field(default_factory=dict)  # window -> closes
    windows_seen: set[tuple[str, float]] = field(default_factory=set)
    late: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.lateness = LatenessPolicy(GRACE)
        self.event_time = EventTime(self.lateness, pane_width(CONFIGS), IDLE, HEARTBEAT)
        self.inputs = self.event_time.inputs()
        self.downstream: StageProgress = self.event_time.stage({}, "agg", {INPUT_GROUP: 0})
        for partition in range(self.partitions):
            self.logs[partition] = []
            self.read_to[partition] = 0

    def watermark(self) -> float | None:
        return self.downstream.value(0)

    def produce(self, partition: int, behind: float, after: float) -> None:
        log = self.logs[partition]
        latest = log[-1] if log else self.now - behind
        log.append(max(latest, self.now - behind) + after)

    def read(self, partition: int, count: int) -> None:
        """A micro-batch: its cases reach the window stage, then its batch markers."""
        log = self.logs[partition]
        start = self.read_to[partition]
        for offset in range(start, min(start + count, len(log))):
            ts = log[offset]
            for config in CONFIGS:
                timeliness = self.lateness.timeliness(ts, config, self.watermark())
                if timeliness is not Timeliness.IN_TIME:
                    self.late.append(ts)
                for window in windows_for(ts, config):
                    self.windows_seen.add((config.name, window.end))
            self.inputs.observe(partition, offset, ts, self.now)
            self.read_to[partition] = offset + 1
        assigned = range(self.partitions)
        self.deliver(self.inputs.batch_markers([partition], assigned, self.partitions))

    def tick(self, elapsed: float) -> None:
        self.now += elapsed
        assigned = [
            AssignedPartition(p, self.read_to[p], len(self.logs[p])) for p in range(self.partitions)
        ]
        self.deliver(self.inputs.tick_markers(assigned, self.partitions, self.now))

    def restart(self) -> None:
        """A rebalance: the clocks start again from where reading starts (the committed
        offsets); the downstream partition's watermark is kept in its table."""
        self.inputs.forget()

    def deliver(self, markers: list[Marker]) -> None:
        """One marker record reaches the downstream partition."""
        if not markers:
            return
        self.inputs.sent(markers, self.now)
        before = self.watermark()
        flagged = self.downstream.may_close(0, markers)
        advance = self.downstream.on_markers(0, markers)
        self.downstream.flush(0)
        after = self.watermark()
        assert before is None or (after is not None and after >= before)  # never back
        closed_now = [
            (name, end)
            for name, end in self.windows_seen
            if self.lateness.is_closed(end, after) and not self.lateness.is_closed(end, before)
        ]
        for window in closed_now:
            self.closings[window] = self.closings.get(window, 0) + 1
        if closed_now:
            assert flagged, "a marker that closes a window must end the window batch"
            assert advance.passed == after

    def drain(self) -> None:
        """Read everything, then let every partition go idle: everything closes."""
        for partition in range(self.partitions):
            self.read(partition, len(self.logs[partition]))
        latest = max((ts for log in self.logs.values() for ts in log), default=self.now)
        self.tick(max(0.0, latest - self.now) + max(c.size for c in CONFIGS) + GRACE + IDLE + 1)
        self.tick(IDLE)  # a partition first seen at the tick before is quiet by now


@settings(max_examples=300, deadline=None)
@given(partitions=st.integers(1, 3), script=steps)
def test_no_in_order_case_is_late_and_every_window_closes_once(
    partitions: int, script: list[tuple[Any, ...]]
) -> None:
    world = World(partitions)
    for step in script:
        kind = step[0]
        if kind == "produce":
            _, partition, behind, after = step
            world.produce(partition % partitions, behind, after)
        elif kind == "read":
            _, partition, count = step
            world.read(partition % partitions, count)
        elif kind == "tick":
            world.tick(step[1])
        else:
            world.restart()
    world.drain()
    assert world.late == []
    assert world.closings == dict.fromkeys(world.windows_seen, 1)


def test_a_backlog_never_follows_the_wall_clock() -> None:
    """A partition with unread records stays at its records' progress, however quiet."""
    world = World(1)
    world.produce(0, 0.0, 0.0)
    world.produce(0, 0.0, 1.0)
    world.read(0, 1)
    world.tick(IDLE * 10)
    assert world.inputs.progress(0) == T0
    world.read(0, 1)
    world.tick(IDLE * 2)
    assert world.inputs.progress(0) == world.now  # caught up and quiet: the wall clock
