"""The seek guard: nothing Faust fetches during its post-rebalance seek reaches a stream
queue, and stream partitions with no committed offset are read again from the start."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from aiokafka import TopicPartition
from aiokafka.errors import IllegalStateError

from worker.stream.faust_patches.seek_guard import guard_seek, start_offsets


class FakeConsumer:
    """What the guard touches of a Faust consumer, recording the order of calls."""

    def __init__(self, committed: dict[TopicPartition, int | None], reset: str) -> None:
        self.calls: list[Any] = []
        self.committed = committed
        self.app = SimpleNamespace(conf=SimpleNamespace(consumer_auto_offset_reset=reset))
        self.assigned: set[TopicPartition] = set(committed)
        self.seek_error: Exception | None = None

    def assignment(self) -> set[TopicPartition]:
        return self.assigned

    def stop_flow(self) -> None:
        self.calls.append("stop_flow")

    async def seek_to_committed(self) -> dict[TopicPartition, int | None]:
        self.calls.append("seek_to_committed")
        return self.committed

    async def earliest_offsets(self, *partitions: TopicPartition) -> dict[TopicPartition, int]:
        return {tp: 5 * tp.partition for tp in partitions}  # retention deleted some

    async def seek_wait(self, positions: dict[TopicPartition, int]) -> None:
        self.calls.append(("seek", positions))
        if self.seek_error is not None:
            raise self.seek_error


INPUT = [TopicPartition("in", p) for p in range(3)]
CHANGELOG = TopicPartition("app-windows-changelog", 0)


async def test_the_flow_stops_before_the_seek_and_uncommitted_inputs_start_over() -> None:
    committed = {INPUT[0]: 12, INPUT[1]: None, INPUT[2]: 0, CHANGELOG: None}
    consumer = FakeConsumer(committed, reset="earliest")
    guard_seek(consumer, {"in"})
    assert await consumer.seek_to_committed() == committed
    assert consumer.calls == [
        "stop_flow",
        "seek_to_committed",
        ("seek", {INPUT[1]: 5, INPUT[2]: 10}),  # to their earliest offsets; never the changelog
    ]
    # Where the stream partitions' reading starts, for the score stage's progress.
    assert start_offsets(consumer) == {INPUT[0]: 12, INPUT[1]: 5, INPUT[2]: 10}


async def test_with_latest_reset_uncommitted_partitions_stay_where_they_are() -> None:
    consumer = FakeConsumer({INPUT[0]: None}, reset="latest")
    assert start_offsets(consumer) == {}  # before the first seek
    guard_seek(consumer, {"in"})
    await consumer.seek_to_committed()
    assert consumer.calls == ["stop_flow", "seek_to_committed"]
    assert start_offsets(consumer) == {}  # not known: reading starts at the end


async def test_a_partition_taken_away_during_the_seek_is_not_rewound() -> None:
    """A member joining mid-seek: aiokafka raises IllegalStateError for a partition that
    is no longer assigned; the guard seeks only the ones it still has."""
    committed = {INPUT[0]: None, INPUT[1]: None}
    consumer = FakeConsumer(committed, reset="earliest")
    consumer.assigned = {INPUT[1]}
    guard_seek(consumer, {"in"})
    assert await consumer.seek_to_committed() == committed
    assert consumer.calls[-1] == ("seek", {INPUT[1]: 5})


async def test_an_assignment_lost_in_the_seek_itself_is_logged_not_raised() -> None:
    consumer = FakeConsumer({INPUT[0]: None}, reset="earliest")
    consumer.seek_error = IllegalStateError("No current assignment for partition in-0")
    guard_seek(consumer, {"in"})
    assert await consumer.seek_to_committed() == {INPUT[0]: None}
