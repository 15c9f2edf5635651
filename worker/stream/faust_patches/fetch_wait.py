"""Sets how long the worker's fetches wait on the broker for data.

Faust creates its aiokafka consumer with `fetch_max_wait_ms=1500` and offers no setting
for it. Apache Kafka answers a waiting fetch as soon as data arrives, so the figure only
bounds idle round trips there. The embedded Tansu broker does not: measured on one
consumer of 8 partitions, a record produced while a fetch waited arrived 480 ms later at
1.5 s, 110 ms at 0.5 s and 10 ms at 0.1 s. Every hop between two stages (score ->
windows, score -> sessions -> windows) pays that, so on Tansu the windows counted a burst
up to 2 s after it was scored.

Patches: `_create_consumer` of Faust's consumer thread (in place, on the instance), and
aiokafka's `AIOKafkaConsumer._fetch_max_wait_ms` on each consumer it creates (read by
`start`: were it renamed, the setting would do nothing, so the start-up check looks for
it there).
Upstream: no issue found (Faust's `AIOKafkaConsumerThread._create_worker_consumer` passes
`fetch_max_wait_ms=1500` and has no setting for it).
"""

from __future__ import annotations

from typing import Any


def set_fetch_max_wait(consumer: Any, seconds: float) -> None:
    """Make the aiokafka consumer a Faust consumer creates (at start and at every restart)
    wait at most `seconds` for data in each fetch."""
    thread = consumer._thread
    create = thread._create_consumer

    def create_with_wait(*args: Any, **kwargs: Any) -> Any:
        kafka_consumer = create(*args, **kwargs)
        kafka_consumer._fetch_max_wait_ms = round(seconds * 1000)  # read when it starts
        return kafka_consumer

    thread._create_consumer = create_with_wait


__all__ = ["set_fetch_max_wait"]
