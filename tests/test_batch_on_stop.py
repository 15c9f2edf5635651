"""A stopping Faust worker and the micro-batch an agent has in hand, on a real broker with
the installed Faust. Faust may cancel the agent's task wherever it is (the actor's task is
a future of its service, cancelled when the service stops), and `take_events`
acknowledges the batch as it closes, so the consumer's last commit can cover records
never processed. With `run_to_completion` the batch is finished before the stop returns,
and nothing past it is committed."""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace
from typing import Any

import faust
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from tests.streamkit import as_lines, make_config, produce, settings_of
from worker.ops.broker import EmbeddedBroker
from worker.stream.app import RAW, faust_settings
from worker.stream.context import run_to_completion
from worker.stream.faust_patches.held_batches import take_held_batches
from worker.stream.overlap import overlap_batches

pytestmark = pytest.mark.integration


async def committed_offset(broker: EmbeddedBroker, group: str, tp: TopicPartition) -> int | None:
    consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=group)
    await consumer.start()
    try:
        return await consumer.committed(tp)
    finally:
        await consumer.stop()


async def test_a_stop_lets_the_batch_in_hand_finish_before_its_offsets_are_committed(
    broker: EmbeddedBroker,
) -> None:
    settings = settings_of(make_config())
    app_id = f"stop-{uuid.uuid4().hex[:8]}"
    options = {**faust_settings(settings, broker.url), "topic_partitions": 1}
    app = faust.App(app_id, **options)
    topic = app.topic(f"in-{app_id}", partitions=1, **RAW)
    started, finished = asyncio.Event(), asyncio.Event()
    in_hand: list[tuple[int, int]] = []  # each batch's offsets: first, next
    done: list[int] = []  # the next offset of each batch that finished

    async def batch(events: list[Any]) -> None:
        in_hand.append((events[0].message.offset, events[-1].message.offset + 1))
        started.set()
        await asyncio.sleep(5.0)  # e.g. waiting for the broker to take the batch's output
        done.append(events[-1].message.offset + 1)
        finished.set()

    async def agent(stream: Any) -> None:
        async for events in stream.take_events(10, within=0.2):
            await run_to_completion(batch(list(events)))

    app.agent(topic, name="batches")(agent)
    await produce(broker.bootstrap, topic.get_topic_name(), as_lines([{"n": n} for n in range(5)]))
    await app.start()
    try:
        await asyncio.wait_for(started.wait(), 60)
    finally:
        await app.stop()
    position = await committed_offset(broker, app_id, TopicPartition(topic.get_topic_name(), 0))
    assert finished.is_set(), "the stop cut the batch in hand"
    # Under load the records can come as several batches, and one more may be taken while
    # the stop waits: whatever was taken finishes, and nothing past a finished batch is
    # committed.
    assert len(done) == len(in_hand), ("a batch in hand was cut", in_hand, done)
    assert position is None or position <= max(done), (position, in_hand)


async def test_a_stop_lets_overlapped_batches_finish_before_their_offsets_are_committed(
    broker: EmbeddedBroker,
) -> None:
    """The score stage's batches (`take_held_batches`, `overlap_batches`): the next batch
    is begun while one finishes; a stop finishes both, and the commit covers only
    finished batches."""
    settings = settings_of(make_config())
    app_id = f"held-{uuid.uuid4().hex[:8]}"
    options = {**faust_settings(settings, broker.url), "topic_partitions": 1}
    app = faust.App(app_id, **options)
    topic = app.topic(f"in-{app_id}", partitions=1, **RAW)
    overlapped = asyncio.Event()
    begun: list[tuple[int, int]] = []  # each batch's offsets: first, next
    finishing: list[int] = []  # the next offset of each batch, when it started finishing
    done: list[int] = []

    def begin(events: list[Any]) -> Any:
        begun.append((events[0].message.offset, events[-1].message.offset + 1))
        if len(begun) > len(done) + 1:  # begun while the one before still finishes
            overlapped.set()
        return SimpleNamespace(events=events, alone=False)

    async def finish(batch: Any) -> None:
        finishing.append(batch.events[-1].message.offset + 1)
        await asyncio.sleep(3.0)  # e.g. waiting for the broker to take the batch's output
        done.append(batch.events[-1].message.offset + 1)

    async def agent(stream: Any) -> None:
        await overlap_batches(take_held_batches(stream, 10, 0.2), begin, finish)

    app.agent(topic, name="batches")(agent)
    records = as_lines([{"n": n} for n in range(25)])
    await produce(broker.bootstrap, topic.get_topic_name(), records)
    await app.start()
    try:
        await asyncio.wait_for(overlapped.wait(), 60)
    finally:
        await app.stop()
    position = await committed_offset(broker, app_id, TopicPartition(topic.get_topic_name(), 0))
    assert len(done) == len(begun) >= 2, ("a batch in hand was cut", begun, done)
    assert done == sorted(done) == finishing  # one after another, in order
    assert position is None or position <= max(done), (position, begun)
