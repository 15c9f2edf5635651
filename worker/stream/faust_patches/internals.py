"""Faust's private state that the worker reads (nothing here replaces anything).

Each reader names what it reads, why no public API does, and the upstream issue; the
start-up check (`compatibility`) makes sure every one is still there.
"""

from __future__ import annotations

import weakref
from collections.abc import MutableMapping
from contextvars import ContextVar
from functools import cache
from typing import Any

from faust.types import TP, EventT


class current_event:
    """Make `event` Faust's current event while the block runs.

    Reads `faust.streams._current_event`, the context variable from which a table picks
    the partition of its changelog write; Faust sets it only to the last event a stream
    yielded. Upstream: faust-streaming/faust#497 (a table written inside `Stream.take()`
    has no current event); no public setter. A class, not a generator: it is entered once
    per record of every stage (a quarter of the cost)."""

    __slots__ = ("_event", "_token")

    def __init__(self, event: EventT) -> None:
        self._event = event

    def __enter__(self) -> None:
        self._token = _faust_current_event().set(weakref.ref(self._event))

    def __exit__(self, *exc_info: object) -> None:
        _faust_current_event().reset(self._token)


@cache
def _faust_current_event() -> ContextVar[Any]:
    from faust.streams import _current_event

    return _current_event


def kafka_consumer(consumer: Any) -> Any:
    """The started `AIOKafkaConsumer` under a Faust consumer (`ConsumerNotStarted` before).

    Reads `consumer._thread._ensure_consumer()`: Faust's own `topic_partitions` answers
    from the group assignment's metadata snapshot, None on a worker that did not compute
    the assignment. Upstream: no issue found."""
    return consumer._thread._ensure_consumer()


def kafka_producer(producer: Any) -> Any:
    """The started `AIOKafkaProducer` under a Faust producer (`NotReady` before).

    Reads `producer._ensure_producer()`, for aiokafka's batch API, which Faust does not
    wrap. Upstream: no issue found."""
    return producer._ensure_producer()


def stream_offsets(
    consumer: Any,
) -> tuple[MutableMapping[TP, int | None], MutableMapping[TP, int | None]]:
    """(committed, read) offsets per partition of a Faust consumer: the next offset after
    the processed records, and the last offset handed to a stream.

    Reads `consumer._committed_offset` and `consumer._read_offset`: Faust exposes neither.
    Upstream: no issue found."""
    return consumer._committed_offset, consumer._read_offset


__all__ = ["current_event", "kafka_consumer", "kafka_producer", "stream_offsets"]
