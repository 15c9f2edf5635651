"""How `fetched_highwaters` finds a changelog's end from what fetches return, on a
consumer that serves a log with holes (the broker's own answers are in
`tests/test_changelog_recovery.py`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from aiokafka import TopicPartition
from faust.types import TP

from worker.stream.faust_patches.changelog_ends import fetched_highwaters

TOPIC = "app-progress-changelog"


@dataclass
class _Record:
    offset: int


@dataclass
class _Log:
    """One partition: its high watermark and the offsets a fetch returns."""

    end: int
    served: set[int]


@dataclass
class HoleyConsumer:
    """An assigned consumer over logs whose fetches may return fewer records than the
    high watermark they report: a read returns the served records from the position to
    the end and reports the end; past the end it resets to it, as `latest` does."""

    logs: dict[int, _Log]
    positions: dict[int, int] = field(default_factory=dict)
    highwaters: dict[int, int] = field(default_factory=dict)
    stopped: bool = False

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        self.stopped = True

    def assign(self, partitions: list[TopicPartition]) -> None:
        assert {p.partition for p in partitions} <= set(self.logs)

    def seek(self, partition: TopicPartition, offset: int) -> None:
        self.positions[partition.partition] = offset

    def highwater(self, partition: TopicPartition) -> int | None:
        return self.highwaters.get(partition.partition)

    async def beginning_offsets(self, partitions: list[TopicPartition]) -> dict[Any, int]:
        return {p: 0 for p in partitions}

    async def getmany(self, *partitions: TopicPartition, timeout_ms: int) -> dict[Any, Any]:
        batch = {}
        for p in partitions:
            log, position = self.logs[p.partition], self.positions[p.partition]
            self.highwaters[p.partition] = log.end
            if position > log.end:
                self.positions[p.partition] = log.end
                continue
            records = [_Record(o) for o in range(position, log.end) if o in log.served]
            if records:
                batch[p] = records
                self.positions[p.partition] = records[-1].offset + 1
        return batch


async def ends_of(consumer: HoleyConsumer, listed: dict[int, int]) -> dict[int, int]:
    ends = await fetched_highwaters(
        "unused:9092",
        {TP(TOPIC, partition): end for partition, end in listed.items()},
        consumer=consumer,
        quiet=0.05,
    )
    assert consumer.stopped or not any(listed.values())  # started and stopped if fetched
    return {tp.partition: end for tp, end in ends.items()}


async def test_a_partition_that_serves_no_record_below_its_end_recovers_as_empty() -> None:
    # What Tansu did once after an empty restart: ends of 10 listed and fetched, no record
    # served on two partitions; recovery waited for them for ever.
    consumer = HoleyConsumer(
        {
            0: _Log(10, set()),
            1: _Log(10, set(range(10))),
            2: _Log(10, set()),
            3: _Log(10, set(range(10))),
        }
    )
    assert await ends_of(consumer, {0: 10, 1: 10, 2: 10, 3: 10}) == {0: 0, 1: 10, 2: 0, 3: 10}


async def test_a_partition_with_a_hollow_tail_ends_after_its_last_served_record() -> None:
    consumer = HoleyConsumer({0: _Log(12, {0, 1, 2, 5, 6})})
    assert await ends_of(consumer, {0: 12}) == {0: 7}


async def test_ends_listed_short_or_past_are_probed_again_at_the_fetched_end() -> None:
    consumer = HoleyConsumer({0: _Log(10, set(range(10))), 1: _Log(4, set(range(4)))})
    assert await ends_of(consumer, {0: 1, 1: 149}) == {0: 10, 1: 4}


async def test_partitions_listed_empty_are_not_fetched() -> None:
    consumer = HoleyConsumer({0: _Log(10, set(range(10)))})
    assert await ends_of(consumer, {0: 0}) == {0: 0}
    assert not consumer.highwaters
