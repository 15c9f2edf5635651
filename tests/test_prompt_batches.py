"""`take_batches`: a marker that closes a window ends the window stage's micro-batch at
once instead of waiting out `aggregate_batch_wait`, with the events already waiting behind
it (a backlog is not cut into a batch per marker); otherwise batches behave as Faust's
`take_events` (full or timed out, acknowledged only after they were processed).

The stream is a stand-in with the hooks `take_events` uses (processors run in the
stream's own drain, one event at a time); the worker's use of it on a real Faust stream
and broker is covered by the stream integration and window handover tests."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import faust

from worker.stream.faust_patches.prompt_batches import take_batches, waiting


@dataclass
class Event:
    value: str


@dataclass
class Channel:
    """A Faust channel as the batcher sees it: its buffer, iterated by the drain."""

    queue: asyncio.Queue[str]

    def __aiter__(self) -> AsyncIterator[str]:
        return self._values()

    async def _values(self) -> AsyncIterator[str]:
        while True:
            yield await self.queue.get()


@dataclass
class Stream:
    """Feeds queued values through its processors, as a Faust stream's passive drain."""

    queue: asyncio.Queue[str] = field(default_factory=asyncio.Queue)
    _processors: list[Any] = field(default_factory=list)
    current_event: Event | None = None
    enable_acks: bool = True
    should_stop: bool = False
    acked: list[str] = field(default_factory=list)
    drained: list[str] = field(default_factory=list)  # handed to the processors
    drain: asyncio.Task[None] | None = None

    @property
    def channel(self) -> Channel:
        return Channel(self.queue)

    def add_processor(self, processor: Any) -> None:
        self._processors.append(processor)

    def _enable_passive(self, channel: AsyncIterator[str]) -> None:
        async def run() -> None:
            async for value in channel:
                await asyncio.sleep(0)  # a Faust stream may yield between events
                self.current_event = Event(value)
                self.drained.append(value)
                for processor in list(self._processors):
                    await processor(value)

        self.drain = asyncio.ensure_future(run())

    async def ack(self, event: Event) -> None:
        self.acked.append(event.value)

    async def wait(self, event: asyncio.Event) -> None:
        await event.wait()

    async def wait_for_stopped(self, event: asyncio.Event, timeout: float) -> bool:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), timeout)
        return self.should_stop


def ends(event: Event) -> bool:
    return event.value.startswith("marker")


async def collect(
    stream: Stream, batches: list[tuple[list[str], float, list[str]]], size: int, within: float
) -> None:
    """Record each batch, when it came and what was acknowledged before it."""
    started = time.monotonic()
    async for batch in take_batches(stream, size, within, ends):  # type: ignore[arg-type]
        batches.append(([e.value for e in batch], time.monotonic() - started, list(stream.acked)))
        await asyncio.sleep(0.05)  # processing: nothing is acknowledged meanwhile
        assert stream.acked == batches[-1][2]


async def test_a_marker_that_may_close_a_window_ends_the_batch_at_once() -> None:
    stream = Stream()
    batches: list[tuple[list[str], float, list[str]]] = []
    task = asyncio.ensure_future(collect(stream, batches, size=100, within=5.0))
    await asyncio.sleep(0)
    for value in ("fold-1", "fold-2", "marker-1"):
        stream.queue.put_nowait(value)
    await asyncio.sleep(0.02)
    for value in ("fold-3", "fold-4"):  # while the first batch is processed
        stream.queue.put_nowait(value)
    await asyncio.sleep(0.3)
    assert batches[0][0] == ["fold-1", "fold-2", "marker-1"]
    assert batches[0][1] < 1.0  # not after `within` (5 s)
    assert len(batches) == 1  # the data after it waits for a marker or `within`
    assert stream.acked == ["fold-1", "fold-2", "marker-1"]  # once it was processed
    stream.queue.put_nowait("marker-2")
    await asyncio.sleep(0.3)
    assert [batch for batch, _, _ in batches] == [
        ["fold-1", "fold-2", "marker-1"],
        ["fold-3", "fold-4", "marker-2"],
    ]
    task.cancel()
    assert stream.drain is not None
    stream.drain.cancel()


async def test_without_a_marker_a_batch_ends_when_full_or_after_its_wait() -> None:
    stream = Stream()
    batches: list[tuple[list[str], float, list[str]]] = []
    task = asyncio.ensure_future(collect(stream, batches, size=3, within=0.3))
    await asyncio.sleep(0)
    for index in range(7):
        stream.queue.put_nowait(f"fold-{index}")
    await asyncio.sleep(0.2)
    # Full batches go at once; a full buffer holds the stream back until it is taken.
    assert [batch for batch, _, _ in batches] == [
        ["fold-0", "fold-1", "fold-2"],
        ["fold-3", "fold-4", "fold-5"],
    ]
    assert stream.drained == [f"fold-{index}" for index in range(7)]
    await asyncio.sleep(0.6)
    assert [batch for batch, _, _ in batches] == [
        ["fold-0", "fold-1", "fold-2"],
        ["fold-3", "fold-4", "fold-5"],
        ["fold-6"],  # not full: after the wait
    ]
    assert batches[2][1] >= 0.3
    assert stream.acked == [f"fold-{index}" for index in range(7)]
    task.cancel()
    assert stream.drain is not None
    stream.drain.cancel()


async def test_a_marker_takes_the_events_already_waiting_behind_it_up_to_the_size() -> None:
    """A worker catching up meets a closing marker after nearly every score batch: what
    already waits in the buffer joins its batch (one table write per pane, not one per
    marker), up to the batch size, and the batch still goes without waiting `within`."""
    stream = Stream()
    batches: list[tuple[list[str], float, list[str]]] = []
    backlog = [f"{kind}-{index}" for index in range(4) for kind in ("fold", "marker")]
    for value in backlog:
        stream.queue.put_nowait(value)
    task = asyncio.ensure_future(collect(stream, batches, size=6, within=5.0))
    await asyncio.sleep(0.02)
    assert [batch for batch, _, _ in batches] == [backlog[:6]]  # full: the size bounds it
    await asyncio.sleep(0.1)
    assert [batch for batch, _, _ in batches] == [backlog[:6], backlog[6:]]
    assert all(at < 1.0 for _, at, _ in batches)  # not after `within` (5 s)
    stream.queue.put_nowait("fold-9")  # live: nothing waits behind a marker
    await asyncio.sleep(0.01)
    stream.queue.put_nowait("marker-9")
    await asyncio.sleep(0.02)
    stream.queue.put_nowait("fold-10")  # arrives while that batch is processed
    await asyncio.sleep(0.3)
    assert [batch for batch, _, _ in batches][2:] == [["fold-9", "marker-9"]]
    assert stream.acked == [*backlog, "fold-9", "marker-9"]
    task.cancel()
    assert stream.drain is not None
    stream.drain.cancel()


async def test_waiting_reads_the_buffer_a_real_faust_stream_drains() -> None:
    """On Faust's own objects: a stream over a topic reads the queue of the channel the
    conductor delivers to, and `waiting` sees what is in it (no broker is contacted)."""
    app = faust.App("prompt-batches-test", broker="kafka://127.0.0.1:9", web_enabled=False)
    stream = app.stream(app.topic("prompt-batches-in"))
    assert stream.channel in app.topics  # the clone the conductor fills
    assert not waiting(stream)
    stream.channel.queue.put_nowait("delivered")
    assert waiting(stream)
    stream.channel.queue.get_nowait()
    assert not waiting(stream)
