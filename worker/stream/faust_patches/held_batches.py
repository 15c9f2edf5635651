"""Micro-batches of a Faust stream that stay unacknowledged until their stage says so,
so that the next batch can be taken (and started on) while one is still finishing.

Faust's `Stream.take_events` (like `prompt_batches.take_batches`) acknowledges a batch
when the consumer asks for the next one and fills no batch meanwhile: a stage cannot
start on batch N+1 before batch N is done without letting N be committed unfinished.
`take_held_batches` hands over each batch as a `HeldBatch` that is acknowledged only by
its `acknowledge()`; once its holder calls `let_next_fill()` the next batch fills while
it is held (before that, as with `take_events`, it does not), and at most `max_held` are
handed over unacknowledged (the next one waits). A batch that is not full is handed over
at the latest `within` seconds after its first event reached the stage (`take_events`
waits `within` from when it is asked for the batch, so events that filled while the
batch before was being processed waited twice), and no sooner than `settle` seconds
after it is asked for, so that what the stream has in hand by then joins it.

Faust commits an offset only when every offset before it is acknowledged, so a batch is
never committed past one that is still held, whatever order they are acknowledged in.
Batches still held when the iteration ends are acknowledged then, as `take_events`
acknowledges the batch in hand.

Uses the `Stream` hooks `take_batches` uses (`add_processor`, `_processors`,
`_enable_passive`, `enable_acks`, `ack`, `current_event`, `wait`, `wait_for_stopped`;
listed in `compatibility.py`). Upstream: no issue found (`take_events` acknowledges on
the next iteration only).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from faust.types import EventT

from worker.stream.faust_patches.prompt_batches import collecting


class HeldBatch:
    """The events of one micro-batch, acknowledged to the stream by `acknowledge()`.
    Until it is acknowledged or `let_next_fill()` is called, no next batch fills (as
    with `take_events`)."""

    def __init__(
        self, stream: Any, events: list[EventT], released: asyncio.Event, filling: asyncio.Event
    ) -> None:
        self.events = events
        self._stream = stream
        self._released = released
        self._filling = filling
        self.acknowledged = False
        self.exclusive = True  # the next batch waits to fill

    def let_next_fill(self) -> None:
        """Let the next batch fill (and be handed over) while this one is held."""
        self.exclusive = False
        self._filling.set()

    async def acknowledge(self) -> None:
        """Acknowledge the batch's events (once): their offsets may be committed."""
        if self.acknowledged:
            return
        self.acknowledged = True
        self.exclusive = False
        for event in self.events:
            await self._stream.ack(event)
        self._released.set()
        self._filling.set()


SETTLE = 0.002  # seconds: what the stream has in hand joins a batch that is due at once


async def take_held_batches(
    stream: Any,
    max_size: int,
    within: float,
    max_held: int = 2,
    clock: Callable[[], float] = time.monotonic,
    settle: float = SETTLE,
    weight: Callable[[EventT], int] | None = None,
) -> AsyncIterator[HeldBatch]:
    """Batches of at most `max_size` events of a Faust stream, handed over when full or
    `within` seconds (by `clock`) after the first of them reached the stage, each
    acknowledged by its holder; at most `max_held` unacknowledged at a time. `weight`:
    what an event counts for towards `max_size` (one each when None; a batch is full
    from the event that takes it to `max_size` on)."""
    events: list[EventT] = []
    size = 0  # the events' weight
    arrived: float | None = None  # when the first event not handed over reached the stage
    full = asyncio.Event()  # the buffer holds `max_size` events
    room = asyncio.Event()  # the buffer is below `max_size`
    room.set()
    released = asyncio.Event()  # a held batch was acknowledged
    filling = asyncio.Event()  # no held batch keeps the next from filling
    filling.set()
    held: list[HeldBatch] = []

    async def collect(value: Any) -> Any:
        nonlocal arrived, size
        if arrived is None:
            arrived = clock()
        while any(batch.exclusive for batch in held):
            filling.clear()
            await stream.wait(filling)
        event = stream.current_event
        if event is None:
            raise RuntimeError("a stream value without its event")
        events.append(event)
        size += 1 if weight is None else weight(event)
        if size >= max_size:
            full.set()
            room.clear()
            await stream.wait(room)
        return value

    with collecting(stream, collect):
        try:
            while not stream.should_stop:
                held[:] = [batch for batch in held if not batch.acknowledged]
                if len(held) >= max_held:
                    released.clear()
                    await stream.wait_for_stopped(released, timeout=within)
                    continue
                # events in hand: due `within` after the first reached the stage (they may
                # have waited for the batch before); none: at most `within` from now
                due = within if not events or arrived is None else arrived + within - clock()
                await stream.wait_for_stopped(full, timeout=max(due, settle))
                if not events:
                    continue
                batch = HeldBatch(stream, list(events), released, filling)
                events.clear()
                size = 0
                arrived = None
                full.clear()
                room.set()
                held.append(batch)
                yield batch
        finally:
            for batch in held:
                await batch.acknowledge()


__all__ = ["HeldBatch", "take_held_batches"]
