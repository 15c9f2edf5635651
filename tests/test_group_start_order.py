"""A worker loads its models while it joins only when it is the first of its group."""

from __future__ import annotations

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from tests.streamkit import make_config, settings_of
from worker.commands.stream import first_of_its_group
from worker.ops.broker import EmbeddedBroker

pytestmark = pytest.mark.integration


async def test_only_the_first_member_of_a_group_loads_while_it_joins(
    broker: EmbeddedBroker,
) -> None:
    # a cold start (no member: nothing is being scored) loads beside the join; a worker
    # joining a running group loads first, so the partitions it takes over never wait
    # for its models
    settings = settings_of(make_config())
    assert await first_of_its_group(settings, broker.url)
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap)
    await producer.start()
    await producer.send_and_wait("group-order", b"x")
    await producer.stop()
    member = AIOKafkaConsumer(
        "group-order",
        bootstrap_servers=broker.bootstrap,
        group_id=settings.app_id,
        session_timeout_ms=6000,
        rebalance_timeout_ms=6000,
    )
    await member.start()
    try:
        await member.getmany(timeout_ms=5000)  # joined: the group has a member
        assert not await first_of_its_group(settings, broker.url)
    finally:
        await member.stop()


async def test_a_broker_that_does_not_answer_means_load_first() -> None:
    settings = settings_of(make_config(stream={"connect_timeout": "1s"}))
    assert not await first_of_its_group(settings, "kafka://127.0.0.1:9")
