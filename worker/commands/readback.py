"""Reading a whole topic back, from its beginning to the end it had when asked: what
`scorestream results` and `scorestream gates` read their topics with."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TypeVar

from aiokafka import AIOKafkaConsumer, TopicPartition

from topics.provision import bootstrap_servers
from worker.commands.stream import client_options
from worker.config import Settings
from worker.exit_codes import UsageError
from worker.ops.connection import BrokerUnavailable, within

T = TypeVar("T")


def read_topic(
    settings: Settings, broker: str, topic: str, parse: Callable[[bytes], T | None]
) -> list[T]:
    """`parse(value)` of every record on `topic`, partition by partition in offset order
    (records it returns None for are skipped). A missing topic is a `UsageError`; a
    broker that does not answer within `stream.connect_timeout` is `BrokerUnavailable`."""
    return asyncio.run(_read_topic(settings, bootstrap_servers(broker), topic, parse))


async def _read_topic(
    settings: Settings, bootstrap: str, topic: str, parse: Callable[[bytes], T | None]
) -> list[T]:
    timeout = settings.stream.connect_timeout
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        **client_options(settings),
    )
    try:
        await within(consumer.start(), bootstrap, timeout, "connecting the consumer")
        partitions = await within(
            _partitions(consumer, topic), bootstrap, timeout, f"reading the partitions of {topic}"
        )
        if not partitions:
            raise UsageError(f"topic {topic} does not exist (scorestream topics create)")
        consumer.assign(partitions)
        begin = await within(
            consumer.beginning_offsets(partitions), bootstrap, timeout, "reading offsets"
        )
        end = await within(consumer.end_offsets(partitions), bootstrap, timeout, "reading offsets")
        for partition in partitions:
            consumer.seek(partition, begin[partition])
        return await _drain(consumer, begin, end, bootstrap, timeout, topic, parse)
    finally:
        await consumer.stop()


async def _partitions(consumer: AIOKafkaConsumer, topic: str) -> list[TopicPartition]:
    if topic not in await consumer.topics():  # also refreshes the cluster metadata
        return []
    found = consumer.partitions_for_topic(topic)
    return [TopicPartition(topic, p) for p in sorted(found or ())]


async def _drain(
    consumer: AIOKafkaConsumer,
    begin: dict[TopicPartition, int],
    end: dict[TopicPartition, int],
    bootstrap: str,
    timeout: float,
    topic: str,
    parse: Callable[[bytes], T | None],
) -> list[T]:
    """Read each partition up to the end offset seen at the start (records published
    meanwhile are not waited for). When a partition reaches the listed end, the high
    watermark its fetches reported counts once too: some brokers (the embedded Tansu)
    list a short end after a multi-record batch."""
    position = dict(begin)
    end = dict(end)
    extended: set[TopicPartition] = set()
    found: list[T] = []
    quiet_since = time.monotonic()
    while True:
        for partition in end:
            if position[partition] >= end[partition] and partition not in extended:
                extended.add(partition)
                fetched = consumer.highwater(partition)
                if fetched is not None and fetched > end[partition]:
                    end[partition] = fetched
        if all(position[p] >= end[p] for p in end):
            break
        batch = await consumer.getmany(timeout_ms=500)
        if not batch:
            if time.monotonic() - quiet_since > timeout:
                raise BrokerUnavailable(
                    f"the Kafka broker at {bootstrap} sent nothing for {timeout:g}s while "
                    f"reading {topic} (stream.connect_timeout)"
                )
            continue
        quiet_since = time.monotonic()
        for partition, messages in batch.items():
            for message in messages:
                position[partition] = message.offset + 1
                if message.value is not None:  # a fetch brings whole batches: keep them
                    parsed = parse(message.value)
                    if parsed is not None:
                        found.append(parsed)
    return found


__all__ = ["read_topic"]
