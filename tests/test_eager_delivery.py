"""`deliver_eagerly`: the consumer's record delivery keeps mode's `wait_first` contract
(deliver, or give up when the flow is suspended or the consumer stops; errors and
cancellation pass through) without a task per record. Each contract test runs against
mode's own `wait_first` too, so the two are shown to agree."""

from __future__ import annotations

import asyncio
import gc
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
from mode import Service

from worker.stream.faust_patches.eager_delivery import deliver_eagerly


class FakeConsumer(Service):
    """The parts of a Faust consumer that record delivery uses: a mode service with a
    `suspend_flow` event."""

    def __init__(self) -> None:
        super().__init__()
        self.suspend_flow = asyncio.Event()


@pytest.fixture(params=["eager", "mode"])
def consumer(request: pytest.FixtureRequest) -> Iterator[FakeConsumer]:
    consumer = FakeConsumer()
    if request.param == "eager":
        deliver_eagerly(consumer)
    yield consumer


class Delivery:
    """A callback like Faust's `on_message`: puts the record in a stream queue, waiting
    while it is full; remembers how it ended."""

    def __init__(self, queue: asyncio.Queue[Any]) -> None:
        self.queue = queue
        self.outcome: str | None = None

    async def __call__(self, record: Any) -> str:
        try:
            await self.queue.put(record)
        except asyncio.CancelledError:
            self.outcome = "cancelled"
            raise
        self.outcome = "delivered"
        return f"put {record}"


def deliver(consumer: FakeConsumer, callback: Any, record: Any) -> Any:
    return consumer.wait_first(callback(record), consumer.suspend_flow.wait())


async def blocked(consumer: FakeConsumer, callback: Delivery, record: Any) -> asyncio.Task[Any]:
    """A delivery waiting for room in a full queue."""
    task = asyncio.ensure_future(deliver(consumer, callback, record))
    for _ in range(5):
        await asyncio.sleep(0)
    assert not task.done() and callback.outcome is None
    return task


async def test_records_with_room_are_delivered_in_order(consumer: FakeConsumer) -> None:
    queue: asyncio.Queue[int] = asyncio.Queue()
    for record in range(50):
        outcome = await deliver(consumer, Delivery(queue), record)
        assert outcome.done and outcome.results == [f"put {record}"] and not outcome.stopped
    assert [queue.get_nowait() for _ in range(50)] == list(range(50))


async def test_a_record_waits_for_room_and_then_is_delivered(consumer: FakeConsumer) -> None:
    queue: asyncio.Queue[str] = asyncio.Queue(maxsize=1)
    queue.put_nowait("first")
    callback = Delivery(queue)
    task = await blocked(consumer, callback, "second")
    assert queue.get_nowait() == "first"
    outcome = await asyncio.wait_for(task, 5)
    assert outcome.results == ["put second"] and callback.outcome == "delivered"
    assert queue.get_nowait() == "second"


@pytest.mark.parametrize("interrupt", ["suspend the flow", "stop the consumer"])
async def test_an_interruption_cancels_a_waiting_record(
    consumer: FakeConsumer, interrupt: str
) -> None:
    queue: asyncio.Queue[str] = asyncio.Queue(maxsize=1)
    queue.put_nowait("first")
    callback = Delivery(queue)
    task = await blocked(consumer, callback, "second")
    if interrupt == "suspend the flow":
        consumer.suspend_flow.set()
    else:
        consumer._stopped.set()
    outcome = await asyncio.wait_for(task, 5)
    if interrupt == "suspend the flow":  # the flow's wait won
        assert outcome.results == [True] and not outcome.stopped
    else:
        assert outcome.stopped and outcome.done == []
    assert callback.outcome == "cancelled"
    assert queue.get_nowait() == "first" and queue.empty()


async def test_delivery_resumes_after_the_flow_is_resumed(consumer: FakeConsumer) -> None:
    queue: asyncio.Queue[str] = asyncio.Queue(maxsize=1)
    queue.put_nowait("first")
    task = await blocked(consumer, Delivery(queue), "lost to the rebalance")
    consumer.suspend_flow.set()
    await asyncio.wait_for(task, 5)
    consumer.suspend_flow.clear()
    callback = Delivery(queue)
    task = await blocked(consumer, callback, "after")
    queue.get_nowait()
    assert (await asyncio.wait_for(task, 5)).results == ["put after"]
    assert queue.get_nowait() == "after"


async def test_errors_of_the_callback_propagate(consumer: FakeConsumer) -> None:
    async def at_once(record: Any) -> None:
        raise ValueError(f"bad {record}")

    async def after_waiting(record: Any) -> None:
        await asyncio.sleep(0.01)
        raise KeyError(record)

    with pytest.raises(ValueError, match="bad 1"):
        await deliver(consumer, at_once, 1)
    with pytest.raises(KeyError):
        await deliver(consumer, after_waiting, 2)


async def test_cancelling_the_caller_cancels_the_waiting_record(consumer: FakeConsumer) -> None:
    queue: asyncio.Queue[str] = asyncio.Queue(maxsize=1)
    queue.put_nowait("first")
    callback = Delivery(queue)
    task = await blocked(consumer, callback, "second")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert callback.outcome == "cancelled"
    assert queue.get_nowait() == "first" and queue.empty()


async def test_a_record_with_room_costs_no_task_and_leaves_no_coroutine_behind() -> None:
    consumer = FakeConsumer()
    deliver_eagerly(consumer)
    loop = asyncio.get_running_loop()
    created: list[Any] = []

    def counting_factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> Any:
        created.append(coro)
        return asyncio.Task(coro, loop=loop, **kwargs)

    queue: asyncio.Queue[int] = asyncio.Queue()
    loop.set_task_factory(counting_factory)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # "coroutine ... was never awaited" fails
            for record in range(100):
                await deliver(consumer, Delivery(queue), record)
            gc.collect()
    finally:
        loop.set_task_factory(None)
    assert created == []
    assert queue.qsize() == 100


async def test_a_cancelled_caller_stays_cancelled_when_the_callback_swallows_it(
    consumer: FakeConsumer,
) -> None:
    started = asyncio.Event()

    async def stubborn(record: Any) -> str:
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            return "swallowed"
        return "slept"

    task = asyncio.ensure_future(consumer.wait_first(stubborn(1), consumer.suspend_flow.wait()))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 5)
