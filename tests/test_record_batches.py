"""`send_batches`: every record reaches its partition once, in order, however many
record batches that takes (a fake producer whose batches hold two records; the real
producer is exercised by every broker test, whose results go out this way)."""

from __future__ import annotations

from typing import Any

from worker.stream.faust_patches.record_batches import send_batches
from worker.stream.partitioner import partition_for_key

PARTITIONS = [0, 1, 2]


class Builder:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.records: list[tuple[bytes, bytes]] = []

    def append(self, *, timestamp: Any, key: bytes, value: bytes) -> object | None:
        if self.records and len(self.records) >= self.capacity:
            return None
        self.records.append((key, value))
        return object()


class Metadata:
    """The two lookups of aiokafka's `ClusterMetadata` a partitioner is called with."""

    def partitions_for_topic(self, topic: str) -> set[int]:
        return set(PARTITIONS)

    def available_partitions_for_topic(self, topic: str) -> set[int]:
        return set(PARTITIONS)


class Producer:
    """aiokafka's batch API, recording what is sent per partition."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.metadata_waits: list[str] = []
        self.sent: list[tuple[str, int, list[tuple[bytes, bytes]]]] = []
        # what `AIOKafkaProducer._partition` reads: its metadata and its partitioner
        self._metadata = Metadata()
        self._partitioner = partition_for_key

    async def partitions_for(self, topic: str) -> set[int]:
        self.metadata_waits.append(topic)
        return set(PARTITIONS)

    def create_batch(self) -> Builder:
        return Builder(self.capacity)

    async def send_batch(self, builder: Builder, topic: str, *, partition: int) -> None:
        self.sent.append((topic, partition, list(builder.records)))


async def test_every_record_reaches_its_partition_once_and_in_order() -> None:
    records = [(f"key-{i % 7}".encode(), f"value-{i}".encode()) for i in range(40)]
    producer = Producer(capacity=2)
    await send_batches(producer, "results", records)
    assert producer.metadata_waits == ["results"]
    assert all(len(batch) <= 2 for _, _, batch in producer.sent)
    for partition in PARTITIONS:
        expected = [
            r for r in records if partition_for_key(r[0], PARTITIONS, PARTITIONS) == partition
        ]
        got = [r for topic, p, batch in producer.sent if p == partition for r in batch]
        assert got == expected


async def test_a_record_larger_than_a_batch_goes_alone_and_nothing_is_sent_for_none() -> None:
    producer = Producer(capacity=0)  # nothing fits beside a first record
    await send_batches(producer, "results", [(b"a", b"1"), (b"a", b"2")])
    assert [batch for _, _, batch in producer.sent] == [[(b"a", b"1")], [(b"a", b"2")]]
    empty = Producer(capacity=2)
    await send_batches(empty, "results", [])
    assert empty.sent == [] and empty.metadata_waits == []
