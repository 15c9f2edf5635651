"""Hands each fetched record to Faust's streams without four tasks per record.

Faust's consumer delivers every record it fetched with
`wait_first(callback(message), suspend_flow.wait())`: mode's `wait_first` wraps the
callback and three events (flow suspended, consumer stopped, consumer crashed) in a task
each, waits for the first to finish and cancels the others. That costs about 30 µs a
record on these machines, more than scoring a SAFE case.

`deliver_eagerly` gives the consumer a `wait_first` with the same contract that runs the
callback in the calling task: a callback that does not block (a stream queue with room)
costs a function call; one that blocks (a full queue) waits for what it waits on or for
an interruption, whichever comes first, through one future and two callbacks. An
interruption cancels the callback, as mode's cancels its task. The three events are
watched by one task per flow epoch, made again only after an interruption.

Patches: the Faust consumer's `wait_first` (mode's, in place, on the instance); steps the
callback coroutine by hand (`send`/`throw`, asyncio's `_asyncio_future_blocking`).
Upstream: no issue found for the per-record cost. Related: faust-streaming/faust#229 (a
stall reported at this same `wait_first(callback(message), suspend_flow.wait())` call)
and robinhood/faust#563 (slow consumption).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from mode.services import WaitResults


def deliver_eagerly(consumer: Any) -> None:
    """Replace a Faust consumer's `wait_first` in place (only its two-coroutine, no-timeout
    form, the one its record delivery uses; anything else goes to the original)."""
    original: Callable[..., Awaitable[WaitResults]] = consumer.wait_first
    watch: asyncio.Future[Any] | None = None

    def interrupted() -> bool:
        return bool(consumer.suspend_flow.is_set() or consumer.should_stop)

    def interruption() -> asyncio.Future[Any]:
        """A future done once the flow is suspended or the consumer stops or crashes."""
        nonlocal watch
        if watch is None or watch.done():
            watch = asyncio.ensure_future(original(consumer.suspend_flow.wait()))
        return watch

    async def wait_first(*coros: Any, timeout: float | None = None) -> WaitResults:
        if (
            timeout is not None
            or len(coros) != 2
            or not all(asyncio.iscoroutine(coro) for coro in coros)
            or interrupted()
        ):
            return await original(*coros, timeout=timeout)
        callback, flow_wait = coros
        flow_wait.close()  # never started: the interruption future watches the flow
        finished, value = await run_until_interrupted(callback, interruption)
        if finished:
            return WaitResults([callback], [value], False)
        if consumer.should_stop:  # stopped or crashed
            return WaitResults([], [], True)
        return WaitResults([flow_wait], [True], False)  # as mode: the flow wait won

    consumer.wait_first = wait_first


async def run_until_interrupted(
    coro: Coroutine[Any, Any, Any], interruption: Callable[[], asyncio.Future[Any]]
) -> tuple[bool, Any]:
    """Run `coro` in the calling task: (True, its value) once it returns, or (False, None)
    when `interruption()` finished while it was blocked; it is then cancelled (it sees
    `CancelledError` where it waits, as in a cancelled task). Its exceptions propagate;
    cancelling the calling task cancels `coro` too."""
    error: BaseException | None = None
    cancelling = False  # we cancelled it: it was interrupted
    caller_cancelled: BaseException | None = None  # the calling task was, while it waited
    while True:
        try:
            yielded = coro.send(None) if error is None else coro.throw(error)
        except StopIteration as stop:
            if caller_cancelled is not None:
                raise caller_cancelled from None
            return True, stop.value
        except asyncio.CancelledError:
            if cancelling and caller_cancelled is None:  # it ended by our cancellation
                return False, None
            raise
        error = None
        try:
            if yielded is None:  # a bare `yield`: let the loop run once, as a task does
                await asyncio.sleep(0)
                continue
            if not asyncio.isfuture(yielded):
                error = RuntimeError(f"a coroutine yielded {yielded!r}, not a future")
                continue
            yielded._asyncio_future_blocking = False
            if cancelling or caller_cancelled is not None:  # cleaning up: on its own terms
                await _first_done(yielded)
                continue
            await _first_done(yielded, interruption())
        except BaseException as exc:  # the calling task was cancelled: cancel `coro` too
            if isinstance(yielded, asyncio.Future):
                yielded.cancel()
            caller_cancelled = error = exc
            continue
        if not yielded.done():  # interrupted first
            cancelling = True
            yielded.cancel()
            error = asyncio.CancelledError()


async def _first_done(*futures: asyncio.Future[Any]) -> None:
    """Wait until one of `futures` is done, without taking its result."""
    waiter = asyncio.get_running_loop().create_future()

    def wake(_: asyncio.Future[Any]) -> None:
        if not waiter.done():
            waiter.set_result(None)

    for future in futures:
        future.add_done_callback(wake)
    try:
        await waiter
    finally:
        for future in futures:
            future.remove_done_callback(wake)


__all__ = ["deliver_eagerly", "run_until_interrupted"]
