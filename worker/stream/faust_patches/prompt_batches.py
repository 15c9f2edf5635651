"""Micro-batches of a Faust stream that end at once on an event that must not wait.

Faust's `Stream.take_events(max_, within)` hands over a batch when it holds `max_` events
or when `within` has passed, whatever the events are. The window stage batches for its
write-back (one table write per changed pane per batch), but a watermark marker that
moves a window past its end + grace should not sit out the rest of the batch wait (0.2 s
by default) before the window's final goes out. `take_batches` is the same contract with
one more way for a batch to end: an event for which `ends_batch(event)` is true hands the
batch over at once, that event included, or, when more events are already waiting in the
stream's buffer, once those are taken too (up to the batch size). A worker catching up on
a backlog spanning hours of event time meets such a marker after nearly every score
batch: cut there, the window stage wrote each pane it touched to the changelog once per
score batch (4,979 writes, 35 MB, for 20,000 SAFE cases in `bench/peer.py`'s
long-backlog scenario), and Faust's producer buffer, full of them, held back delivery to
every stage, results included. Live, the buffer is empty at a marker and it goes at once.
Events are acknowledged only after the batch's processing returned (at-least-once, as
`take_events`); while a batch is being processed, new events wait in the stream, and a
full batch holds the stream back until it is taken.

Uses Faust's `Stream` hooks that `take_events` itself uses and no public API offers:
`add_processor` and `_processors` (the buffer fills in the stream's own iteration, so
the events keep their partitions' order and current event), `_enable_passive` (the
stream is drained in the background), the channel's `queue` (what is waiting),
`enable_acks` and `ack` (manual acknowledgement), `current_event`, `wait` and
`wait_for_stopped`. Upstream: no issue found (`take_events` has no way to end a batch
early).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

from faust.types import EventT


async def take_batches(
    stream: Any, max_size: int, within: float, ends_batch: Callable[[EventT], bool]
) -> AsyncIterator[list[EventT]]:
    """Batches of at most `max_size` events of a Faust stream: handed over when full,
    when `within` seconds passed with events in hand, or right after an event for which
    `ends_batch` is true and the events already waiting behind it. Each batch is
    acknowledged once the consumer asks for the next."""
    events: list[EventT] = []
    ending = False  # the batch holds an event that ends it
    due = asyncio.Event()  # a batch is to be handed over without waiting for `within`
    room = asyncio.Event()  # the buffer is below `max_size`
    room.set()
    taking: asyncio.Future[None] | None = None  # set while a batch is being processed

    async def collect(value: Any) -> Any:
        nonlocal taking, ending
        while taking is not None:  # the batch in hand is not acknowledged yet
            await asyncio.shield(taking)
        event = stream.current_event
        if event is None:
            raise RuntimeError("a stream value without its event")
        events.append(event)
        ending = ending or ends_batch(event)
        if len(events) >= max_size or (ending and not waiting(stream)):
            due.set()
        if len(events) >= max_size:
            room.clear()
            await stream.wait(room)
        return value

    with collecting(stream, collect):
        while not stream.should_stop:
            await stream.wait_for_stopped(due, timeout=within)
            if not events:
                due.clear()
                continue
            taking = asyncio.get_running_loop().create_future()
            batch = list(events)
            try:
                yield batch
            finally:
                events.clear()
                ending = False
                due.clear()
                for event in batch:
                    await stream.ack(event)
                done, taking = taking, None
                done.set_result(None)
                room.set()


def waiting(stream: Any) -> bool:
    """Whether events are already waiting in the buffer of `stream`'s channel (the queue
    its consumer fills)."""
    queue = getattr(stream.channel, "queue", None)
    return queue is not None and not queue.empty()


@contextmanager
def collecting(stream: Any, collect: Callable[[Any], Awaitable[Any]]) -> Iterator[None]:
    """Run `collect` on every value of a Faust stream while the block runs, as
    `Stream.take_events` fills its buffer, with the stream's own acknowledgement off (the
    batcher acknowledges its events); both are undone when the block ends."""
    acks = stream.enable_acks
    stream.enable_acks = False
    stream.add_processor(collect)
    stream._enable_passive(aiter(stream.channel))
    try:
        yield
    finally:
        stream.enable_acks = acks
        stream._processors.remove(collect)


__all__ = ["collecting", "take_batches"]
