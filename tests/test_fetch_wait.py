"""`stream.fetch_max_wait` reaches the aiokafka consumer Faust creates, at every start."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from aiokafka import AIOKafkaConsumer

from worker.stream.faust_patches.fetch_wait import set_fetch_max_wait


class FakeThread:
    """Faust's consumer thread as far as the setting goes: it builds a fresh aiokafka
    consumer, with Faust's hard-coded 1.5 s wait, each time it starts."""

    def __init__(self) -> None:
        self.built: list[AIOKafkaConsumer] = []

    def _create_consumer(self, loop: Any) -> AIOKafkaConsumer:
        consumer = AIOKafkaConsumer(bootstrap_servers="127.0.0.1:9", fetch_max_wait_ms=1500)
        self.built.append(consumer)
        return consumer


async def test_every_consumer_the_thread_builds_waits_the_configured_time() -> None:
    thread = FakeThread()
    faust_consumer = SimpleNamespace(_thread=thread)
    set_fetch_max_wait(faust_consumer, 0.1)
    first = thread._create_consumer(loop=None)
    again = thread._create_consumer(loop=None)  # a restarted consumer thread
    assert [c._fetch_max_wait_ms for c in (first, again)] == [100, 100]
    assert thread.built == [first, again]
