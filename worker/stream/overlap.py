"""Consecutive micro-batches of a stage, overlapped: batch N+1 is begun (its work handed
to the scoring children) while batch N is still being finished (published, folded).

Batches finish one after another, in the order they were taken, and each is
acknowledged (its offsets may be committed) only once it finished; a batch whose begin
says it must run alone is finished before the next one fills (as with `take_events`).
At most `in_hand` batches are in hand: one finishing and the others begun (the score
stage keeps `stream.score_batches_in_hand`). When the stage is
cancelled (the worker stops) or the stream ends, the batches in hand finish first
(`run_to_completion`).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Protocol, TypeVar

from faust.types import EventT

from worker.stream.faust_patches.held_batches import HeldBatch

log = logging.getLogger("scorestream")


class Begun(Protocol):
    """What a stage's `begin` hands back for its `finish`."""

    @property
    def alone(self) -> bool:
        """Finish this batch before the next one is begun."""
        ...


_B = TypeVar("_B", bound=Begun)


async def overlap_batches(
    batches: AsyncIterator[HeldBatch],
    begin: Callable[[list[EventT]], _B],
    finish: Callable[[_B], Awaitable[None]],
    in_hand: int = 2,
) -> None:
    """Begin each batch as soon as it is taken (`begin`: no awaiting), finish it
    (`finish`) after the batch before it finished, then acknowledge it; the next batch
    is taken while fewer than `in_hand` are unfinished. `batches` should hold back as
    many (`take_held_batches`' `max_held`)."""
    finishing: asyncio.Future[None] | None = None  # of the batch begun last
    unfinished: deque[asyncio.Future[None]] = deque()  # oldest first
    try:
        async for batch in batches:
            begun = begin(batch.events)
            finishing = asyncio.ensure_future(_in_turn(finishing, finish, begun, batch))
            if begun.alone:
                await asyncio.shield(finishing)
                continue
            batch.let_next_fill()
            unfinished.append(finishing)
            while unfinished and (unfinished[0].done() or len(unfinished) >= in_hand):
                await asyncio.shield(unfinished.popleft())
    except BaseException as stopped:  # cancelled (the worker stops), or a batch failed
        if finishing is not None:
            if not finishing.done():
                log.info("finishing the batches in hand before stopping")
                await asyncio.wait([finishing])
            failure = None if finishing.cancelled() else finishing.exception()
            if failure is not None and failure is not stopped:
                log.error("a batch in hand failed", exc_info=failure)
        raise
    if finishing is not None:  # the stream ended
        await finishing


async def _in_turn(
    previous: asyncio.Future[None] | None,
    finish: Callable[[_B], Awaitable[None]],
    begun: _B,
    batch: HeldBatch,
) -> None:
    """Finish `begun` once `previous` finished (not at all when it failed), then
    acknowledge its batch."""
    if previous is not None:
        await previous
    await finish(begun)
    await batch.acknowledge()


__all__ = ["Begun", "overlap_batches"]
