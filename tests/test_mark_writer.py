"""The in-flight marks leave on their own producer, on a real broker: through the worker's
own `inflight` table (its Faust producer is never started here), each write reaches the
changelog topic in the order it was made, `written()` says when the broker has them all,
and after a stop nothing more is written."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from tests.streamkit import make_config, settings_of
from worker.ops.broker import EmbeddedBroker
from worker.scoring_suites import ScoringSuites
from worker.stream import ScorestreamApp
from worker.suites.alignment.embedding_model import HashingEmbedder

pytestmark = pytest.mark.integration


async def read_all(
    bootstrap: str, topic: str, partition: int, count: int, wait: float = 30.0
) -> list[Any]:
    """Up to `count` records of one partition, read for at most `wait` s: (key, decoded
    value)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, fetch_max_wait_ms=100)
    await consumer.start()
    try:
        tp = TopicPartition(topic, partition)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        records: list[Any] = []
        deadline = asyncio.get_running_loop().time() + wait
        while len(records) < count and asyncio.get_running_loop().time() < deadline:
            for messages in (await consumer.getmany(timeout_ms=200)).values():
                records += [(m.key, orjson.loads(m.value)) for m in messages]
        return records
    finally:
        await consumer.stop()


async def test_marks_reach_the_broker_in_order_on_their_own_producer(
    broker: EmbeddedBroker,
) -> None:
    settings = settings_of(make_config())
    suites = ScoringSuites.load(settings, HashingEmbedder())
    scorer = ScorestreamApp(settings, broker.url, suites=suites)
    table = scorer.inflight
    topic = table.changelog_topic.get_topic_name()
    admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, settings.stream.partitions, 1)])
    finally:
        await admin.close()
    try:
        for attempt in range(1, 201):
            mark = {"first": attempt, "last": attempt, "attempts": 1, "done": attempt % 2 == 0}
            future = table.send_changelog(1, "in|1", mark)
            assert future.message.partition == 1  # what Faust's `on_key_set` reads
        assert await table.written(30)
        records = await read_all(broker.bootstrap, topic, 1, 200)
        assert [value["first"] for _, value in records] == list(range(1, 201))
        assert {key for key, _ in records} == {b'"in|1"'}

        await scorer.mark_writer.stop()
        table.send_changelog(1, "in|1", {"first": 999, "last": 999})
        assert not await table.written(0.5)  # a stopped worker writes no more marks
        assert len(await read_all(broker.bootstrap, topic, 1, 201, wait=3)) == 200
    finally:
        await scorer.mark_writer.stop()
        scorer.close()
