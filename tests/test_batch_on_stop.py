"""What a stopping Faust worker does to the micro-batch an agent has in hand, on a real
broker with the installed Faust: it cancels the agent's task wherever it is and then
commits the batch's offsets anyway (`take_events` acknowledges them as it closes; if a
Faust upgrade stops doing that, the `plain` case fails and the guard can go).
`run_to_completion` lets the batch finish first, so what is committed was processed (a
SIGTERM handover lost a window's final without it)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import faust
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from tests.streamkit import as_lines, make_config, produce, settings_of
from worker.broker import EmbeddedBroker
from worker.stream.app import RAW, faust_settings
from worker.stream.context import run_to_completion

pytestmark = pytest.mark.integration


async def committed_offset(broker: EmbeddedBroker, group: str, tp: TopicPartition) -> int | None:
    consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=group)
    await consumer.start()
    try:
        return await consumer.committed(tp)
    finally:
        await consumer.stop()


@pytest.mark.parametrize("guarded", [False, True], ids=["plain", "run_to_completion"])
async def test_a_stop_commits_the_batch_in_hand_so_it_must_be_finished(
    broker: EmbeddedBroker, guarded: bool
) -> None:
    settings = settings_of(make_config())
    app_id = f"stop-{uuid.uuid4().hex[:8]}"
    options = {**faust_settings(settings, broker.url), "topic_partitions": 1}
    app = faust.App(app_id, **options)
    topic = app.topic(f"in-{app_id}", partitions=1, **RAW)
    started, finished = asyncio.Event(), asyncio.Event()
    in_hand: list[tuple[int, int]] = []  # the first batch's offsets: first, next

    async def batch(events: list[Any]) -> None:
        in_hand.append((events[0].message.offset, events[-1].message.offset + 1))
        started.set()
        await asyncio.sleep(5.0)  # e.g. waiting for the broker to take the batch's output
        finished.set()

    async def agent(stream: Any) -> None:
        async for events in stream.take_events(10, within=0.2):
            if guarded:
                await run_to_completion(batch(list(events)))
            else:
                await batch(list(events))

    app.agent(topic, name="batches")(agent)
    await produce(broker.bootstrap, topic.get_topic_name(), as_lines([{"n": n} for n in range(5)]))
    await app.start()
    try:
        await asyncio.wait_for(started.wait(), 60)
    finally:
        await app.stop()
    position = await committed_offset(broker, app_id, TopicPartition(topic.get_topic_name(), 0))
    first, after = in_hand[0]
    # Some or all of the batch in hand is committed, whether or not it was processed.
    assert position is not None and first < position <= after, (position, in_hand)
    assert finished.is_set() is guarded
