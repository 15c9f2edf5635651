"""The `table_start` Faust patch in a real worker on a real broker: its table manager
registers the tables without Faust's 1 s sleep, so the consumer asks to join at once,
and the worker scores as before."""

from __future__ import annotations

import asyncio

import pytest

from tests.streamkit import InProcessWorker, make_config, provision, settings_of
from worker.ops.broker import EmbeddedBroker

pytestmark = pytest.mark.integration


async def test_a_worker_registers_its_tables_without_sleeping(broker: EmbeddedBroker) -> None:
    settings = settings_of(make_config())
    await provision(settings, broker.url)
    worker = InProcessWorker(settings, broker.url)
    tables = worker.scorer.app.tables
    assert len(tables) > 0
    slept: list[float] = []
    sleep = tables.sleep

    async def recorded_sleep(seconds: float) -> None:
        slept.append(float(seconds))
        await sleep(seconds)

    tables.sleep = recorded_sleep  # type: ignore[method-assign]
    subscribed = asyncio.Event()
    subscribe = worker.scorer.app.consumer.subscribe

    async def recorded_subscribe(topics: object) -> None:
        assert tables._tables_registered.is_set()  # the conductor waited for the tables
        subscribed.set()
        await subscribe(topics)  # type: ignore[arg-type]

    worker.scorer.app.consumer.subscribe = recorded_subscribe  # type: ignore[method-assign]
    async with worker as scorer:
        assert subscribed.is_set() and scorer.ready.is_set()
        assert 1.0 not in slept  # upstream's `on_start` sleeps 1 s first
        assert set(tables._channels) == set(tables.values())
