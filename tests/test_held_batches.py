"""`take_held_batches` and `overlap_batches`: the score stage begins batch N+1 while
batch N is still finishing, and a batch is acknowledged (its offsets committable) only
once it finished, in order.

The stream is the stand-in of `tests/test_prompt_batches.py` (processors run in the
stream's own drain); the stage on a real Faust stream and broker is covered by the
stream integration, backlog-fold, crash and poison-pill tests."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import pytest

from tests.test_prompt_batches import Event, Stream
from worker.stream.faust_patches.held_batches import take_held_batches
from worker.stream.overlap import overlap_batches


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


def stop(stream: Stream, task: asyncio.Future[None] | None = None) -> None:
    if task is not None:
        task.cancel()
    assert stream.drain is not None
    stream.drain.cancel()


async def test_a_held_batch_is_acknowledged_only_by_its_holder_while_the_next_fills() -> None:
    stream = Stream()
    batches = take_held_batches(stream, 2, within=5.0, max_held=2)
    for value in ("a", "b", "c", "d", "e", "f"):
        stream.queue.put_nowait(value)
    first = await anext(batches)
    first.let_next_fill()
    second = await anext(batches)  # taken while the first is held
    second.let_next_fill()
    assert [e.value for e in first.events] == ["a", "b"]
    assert [e.value for e in second.events] == ["c", "d"]
    assert stream.acked == []
    third = asyncio.ensure_future(anext(batches))
    await asyncio.sleep(0.05)
    assert not third.done()  # two held: the third waits
    assert stream.drained == ["a", "b", "c", "d", "e", "f"]  # but it has filled
    await first.acknowledge()
    assert [e.value for e in (await third).events] == ["e", "f"]
    assert stream.acked == ["a", "b"]
    await second.acknowledge()
    await second.acknowledge()  # once only
    assert stream.acked == ["a", "b", "c", "d"]
    await batches.aclose()  # the batch still held is acknowledged on the way out
    assert stream.acked == ["a", "b", "c", "d", "e", "f"]
    stop(stream)


async def test_a_weighted_event_fills_a_batch_by_its_weight() -> None:
    # a bundle of several session messages counts for each of them towards the batch size
    stream = Stream()
    weights = {"bundle-of-3": 3, "bundle-of-2": 2}
    batches = take_held_batches(
        stream, 4, within=5.0, weight=lambda event: weights.get(event.value, 1)
    )
    for value in ("bundle-of-3", "one", "bundle-of-2", "bundle-of-2", "one"):
        stream.queue.put_nowait(value)
    first = await anext(batches)
    assert [e.value for e in first.events] == ["bundle-of-3", "one"]  # 4: full
    first.let_next_fill()
    await first.acknowledge()
    second = await anext(batches)
    assert [e.value for e in second.events] == ["bundle-of-2", "bundle-of-2"]
    await second.acknowledge()
    await batches.aclose()
    stop(stream)


async def test_a_batch_that_is_not_full_comes_after_its_wait() -> None:
    stream = Stream()
    batches = take_held_batches(stream, 100, within=0.1)
    stream.queue.put_nowait("a")
    loop = asyncio.get_running_loop()
    started = loop.time()
    batch = await anext(batches)
    assert [e.value for e in batch.events] == ["a"]
    assert loop.time() - started >= 0.09
    await batches.aclose()
    stop(stream)


async def test_events_that_waited_for_the_batch_before_are_not_held_for_the_wait_again() -> None:
    # Replayed on an injected clock: "a" and "b" reach the stage at t = 0 while the held
    # batch keeps the next from filling; the batch before is finished at t = 5 (past the
    # 1 s wait), so the next batch is handed over at once, not 1 s after it was asked for.
    now = [0.0]
    stream = Stream()
    batches = take_held_batches(stream, 100, within=1.0, clock=lambda: now[0])
    stream.queue.put_nowait("x")
    first = await anext(batches)  # after its real 1 s wait: nothing advanced the clock
    for value in "ab":
        stream.queue.put_nowait(value)
    await settle()
    assert stream.drained == ["x", "a"]  # "a" waits in the processor: "x" is held
    now[0] = 5.0
    await first.acknowledge()
    loop = asyncio.get_running_loop()
    asked = loop.time()
    second = await asyncio.wait_for(anext(batches), 0.5)
    assert [e.value for e in second.events] == ["a", "b"]
    assert loop.time() - asked < 0.5
    await batches.aclose()
    stop(stream)


async def test_a_batch_whose_events_just_arrived_still_waits_for_more() -> None:
    now = [0.0]  # the clock stands still: the first event of the batch arrived just now
    stream = Stream()
    batches = take_held_batches(stream, 100, within=0.2, clock=lambda: now[0])
    stream.queue.put_nowait("a")
    await settle()
    taking = asyncio.ensure_future(anext(batches))
    await asyncio.sleep(0.05)
    stream.queue.put_nowait("b")  # joins: the batch is not due yet
    batch = await taking
    assert [e.value for e in batch.events] == ["a", "b"]
    await batches.aclose()
    stop(stream)


@dataclass
class Begun:
    events: list[Event]
    alone: bool = False


@dataclass
class Recorder:
    """A stage whose finishing takes `finish_seconds` and records what happens when."""

    stream: Stream
    finish_seconds: float = 0.05
    log: list[str] = field(default_factory=list)

    def begin(self, events: list[Event]) -> Begun:
        names = "".join(event.value for event in events)
        self.log.append(f"begin {names}")
        return Begun(events, alone=names.startswith("x"))

    async def finish(self, begun: Begun) -> None:
        names = "".join(event.value for event in begun.events)
        self.log.append(f"finishing {names} (acked {''.join(self.stream.acked)})")
        await asyncio.sleep(self.finish_seconds)
        self.log.append(f"finished {names}")


async def test_the_next_batch_begins_while_one_finishes_and_they_finish_in_order() -> None:
    stream = Stream()
    stage = Recorder(stream)
    task = asyncio.ensure_future(
        overlap_batches(take_held_batches(stream, 2, within=5.0), stage.begin, stage.finish)
    )
    for value in "abcdef":
        stream.queue.put_nowait(value)
    await asyncio.sleep(0.5)
    assert stage.log == [
        "begin ab",
        "finishing ab (acked )",
        "begin cd",  # while ab finishes
        "finished ab",
        "finishing cd (acked ab)",  # ab acknowledged once it finished, before cd goes on
        "begin ef",
        "finished cd",
        "finishing ef (acked abcd)",
        "finished ef",
    ]
    assert stream.acked == list("abcdef")
    stop(stream, task)


async def test_with_three_in_hand_two_batches_are_begun_while_one_finishes() -> None:
    """`stream.score_batches_in_hand` 3: the children get batches N+1 and N+2 while
    batch N is published; they still finish, and are acknowledged, in order."""
    stream = Stream()
    stage = Recorder(stream)
    batches = take_held_batches(stream, 2, within=5.0, max_held=3)
    task = asyncio.ensure_future(overlap_batches(batches, stage.begin, stage.finish, 3))
    for value in "abcdefgh":
        stream.queue.put_nowait(value)
    await asyncio.sleep(0.03)  # ab finishing
    assert stage.log == ["begin ab", "finishing ab (acked )", "begin cd", "begin ef"]
    await asyncio.sleep(0.5)
    finished = [entry for entry in stage.log if entry.startswith("finished")]
    assert finished == ["finished ab", "finished cd", "finished ef", "finished gh"]
    assert "finishing ef (acked abcd)" in stage.log
    assert stage.log.index("begin gh") < stage.log.index("finished cd")  # ab done: room
    assert stream.acked == list("abcdefgh")
    stop(stream, task)


async def test_live_batches_that_are_not_full_overlap_too() -> None:
    # Live traffic: batches end on their wait, not full; "cd" arrives while "ab" is
    # being finished and is begun then, not after "ab" finished. (Real time: the margins
    # are 0.1 s or more, which a busy machine's loop may take between two events; 0.02 s
    # waits split "cd" in a full run of the suite.)
    stream = Stream()
    stage = Recorder(stream, finish_seconds=1.0)
    task = asyncio.ensure_future(
        overlap_batches(take_held_batches(stream, 100, within=0.1), stage.begin, stage.finish)
    )
    for value in "ab":
        stream.queue.put_nowait(value)
    await asyncio.sleep(0.3)  # "ab" taken at 0.1 s and finishing until 1.1 s
    for value in "cd":
        stream.queue.put_nowait(value)
    await asyncio.sleep(0.4)  # "cd" taken at 0.4 s
    assert stage.log == ["begin ab", "finishing ab (acked )", "begin cd"]
    await asyncio.sleep(2.0)  # "ab" finished at 1.1 s, "cd" at 2.1 s
    assert stage.log[-1] == "finished cd"
    assert stream.acked == list("abcd")
    stop(stream, task)


async def test_a_batch_that_must_run_alone_finishes_before_the_next_begins() -> None:
    stream = Stream()
    stage = Recorder(stream)
    task = asyncio.ensure_future(
        overlap_batches(take_held_batches(stream, 2, within=5.0), stage.begin, stage.finish)
    )
    for value in ("a", "b", "x", "y", "c", "d"):
        stream.queue.put_nowait(value)
    await asyncio.sleep(0.5)
    assert stage.log.index("finished xy") < stage.log.index("begin cd")
    assert stage.log.index("begin xy") < stage.log.index("finished ab")  # it still overlaps
    stop(stream, task)


async def test_a_stopping_stage_finishes_and_acknowledges_the_batches_in_hand() -> None:
    stream = Stream()
    stage = Recorder(stream, finish_seconds=0.2)
    task = asyncio.ensure_future(
        overlap_batches(take_held_batches(stream, 2, within=5.0), stage.begin, stage.finish)
    )
    for value in "abcd":
        stream.queue.put_nowait(value)
    await asyncio.sleep(0.05)  # ab finishing, cd begun
    assert stage.log[-1] == "begin cd"
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert stage.log[-1] == "finished cd"
    assert stream.acked == list("abcd")
    stop(stream)


async def test_a_failed_batch_is_not_acknowledged_and_the_next_is_not_finished() -> None:
    stream = Stream()
    stage = Recorder(stream)

    async def finish(begun: Begun) -> None:
        if begun.events[0].value == "a":
            await asyncio.sleep(0.05)
            raise RuntimeError("a bug")
        await stage.finish(begun)

    batches = take_held_batches(stream, 2, within=5.0)
    for value in "abcd":
        stream.queue.put_nowait(value)
    with pytest.raises(RuntimeError):
        await overlap_batches(batches, stage.begin, finish)
    assert stage.log == ["begin ab", "begin cd"]
    assert stream.acked == []
    await settle()
    stop(stream)


async def test_no_next_batch_fills_until_the_held_one_lets_it_or_is_acknowledged() -> None:
    stream = Stream()
    batches = take_held_batches(stream, 2, within=0.05)
    for value in "abcd":
        stream.queue.put_nowait(value)
    first = await anext(batches)
    await asyncio.sleep(0.1)
    assert stream.drained == ["a", "b", "c"]  # "c" waits in the processor, not collected
    second = asyncio.ensure_future(anext(batches))
    await asyncio.sleep(0.1)
    assert not second.done()  # as with take_events: one batch at a time
    first.let_next_fill()
    assert [e.value for e in (await second).events] == ["c", "d"]
    assert stream.acked == []
    await batches.aclose()
    stop(stream)
