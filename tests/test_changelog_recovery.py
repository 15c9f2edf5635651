"""Table recovery on the embedded broker with producer batching on: Tansu's ListOffsets
answer is short after a multi-record batch, the fetched high watermark is not, and a
restarted worker recovers every changelog record."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from faust.types import TP

from tests.streamkit import (
    EXAMPLES,
    TopicReader,
    WorkerProcess,
    as_lines,
    create_layout,
    envelopes,
    live,
    make_config,
    produce,
    provision,
    settings_of,
    write_config,
)
from worker.ops.broker import EmbeddedBroker
from worker.stream.faust_patches.changelog_ends import fetched_highwaters

pytestmark = pytest.mark.integration


async def test_a_fetch_reports_the_end_listoffsets_misses(broker: EmbeddedBroker) -> None:
    topic = "ends-demo-changelog"
    await create_layout(broker.bootstrap, {topic: 1})
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=50)
    await producer.start()
    try:
        sends = [await producer.send(topic, b"x%d" % i, partition=0) for i in range(10)]
        await asyncio.gather(*sends)  # one batch of ten records
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None)
    await consumer.start()
    try:
        listed = (await consumer.end_offsets([TopicPartition(topic, 0)]))[TopicPartition(topic, 0)]
    finally:
        await consumer.stop()
    fetched = await fetched_highwaters(broker.bootstrap, {TP(topic, 0): listed})
    assert fetched[TP(topic, 0)] == 10
    assert listed <= 10  # Tansu 0.6 says 1 (base offset of the last batch + 1)


async def test_a_fetch_reports_the_end_of_partitions_listed_past_their_records(
    broker: EmbeddedBroker,
) -> None:
    # Tansu listed a re-created, empty changelog as ending at 149: recovery must not wait
    # for records that do not exist.
    topic = "ends-past-changelog"
    await create_layout(broker.bootstrap, {topic: 2})
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap)
    await producer.start()
    try:
        for i in range(10):
            await producer.send_and_wait(topic, b"x%d" % i, partition=0)
    finally:
        await producer.stop()
    listed = {TP(topic, 0): 149, TP(topic, 1): 149}
    assert await fetched_highwaters(broker.bootstrap, listed) == {
        TP(topic, 0): 10,
        TP(topic, 1): 0,
    }


async def test_a_restarted_worker_recovers_every_window_record_with_batching(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    # Twenty segments: each micro-batch writes forty-odd window records at once, which
    # the producer puts in multi-record batches.
    config = make_config(windows=[{"size": "1h"}], segment_by=["tenant"])
    config["stream"] = {
        **config["stream"],
        "producer_max_batch_size": 1 << 20,
        "exact_changelog_ends": True,
    }
    settings = settings_of(config)
    topics = settings.topics
    base = envelopes(EXAMPLES / "safe" / "envelopes.jsonl")
    cases: list[dict[str, Any]] = [
        {**base[i % len(base)], "id": f"case-{i:04d}", "labels": {"tenant": f"t{i % 20}"}}
        for i in range(200)
    ]
    await provision(settings, broker.url)
    worker = WorkerProcess(
        write_config(tmp_path / "c.yaml", config), broker.url, tmp_path / "w.log"
    )

    def counted(reader: TopicReader) -> int:
        """Cases in the newest aggregate of every tenant's window, summed."""
        latest: dict[str, int] = {}
        for key, value in reader.keyed(topics.aggregates):
            if value["segment"]:
                latest[key] = max(latest.get(key, 0), value["count"])
        return sum(latest.values())

    async with TopicReader(broker.bootstrap, topics.aggregates) as reader:
        try:
            await produce(broker.bootstrap, topics.input, as_lines(live(cases[:150])))
            worker.start().wait_ready()
            await reader.until(lambda r: counted(r) >= 150, timeout=90, what="150 counted")
            worker.stop()  # the hour-long window is still open: its panes are table state
            worker.start()
            worker.wait_ready(occurrence=2)
            await produce(broker.bootstrap, topics.input, as_lines(live(cases[150:])))
            await reader.until(lambda r: counted(r) >= 200, timeout=90, what="200 counted")
            await reader.poll(2.0)
        finally:
            worker.stop()
    assert counted(reader) == 200
