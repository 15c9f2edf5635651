"""The input first (`worker.stream.input_backlog`): while more input records than
`stream.input_backlog` wait for the score stage, the session stage holds its micro-batches
back (at most `stream.input_backlog_hold` each), so the turns are read, forwarded and
sampled for the provisional gate verdicts ahead of session bookkeeping. The counting and
the wait on an injected clock, then a backlog of turns on the real broker."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Any

import pytest

from tests.streamkit import (
    InProcessWorker,
    TopicReader,
    as_lines,
    make_config,
    produce,
    provision,
    retime,
    settings_of,
    tunetide_turn,
)
from worker.input.scored_records import bundled_messages, session_messages
from worker.ops.broker import EmbeddedBroker
from worker.stream.input_backlog import InputBacklog


class ManualClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_backlog_is_what_waits_past_each_partitions_last_batch() -> None:
    backlog = InputBacklog(limit=100, hold=1.0)
    backlog.observe(0, highwater=1_000, last_offset=899)  # offsets 900..999 wait
    backlog.observe(1, highwater=50, last_offset=49)  # read to the end
    assert backlog.waiting == 100 and not backlog.behind
    backlog.observe(1, highwater=60, last_offset=49)
    assert backlog.waiting == 110 and backlog.behind
    backlog.observe(0, highwater=None, last_offset=950)  # revoked meanwhile: unknown
    assert backlog.waiting == 10 and not backlog.behind
    backlog.observe(0, highwater=5_000, last_offset=999)
    assert backlog.behind
    backlog.forget()  # a rebalance: nothing known to wait
    assert backlog.waiting == 0 and not backlog.behind


async def test_a_stage_gives_way_until_the_input_is_taken() -> None:
    clock = ManualClock()
    backlog = InputBacklog(limit=10, hold=30.0, clock=clock)
    assert await backlog.give_way() == 0.0  # nothing waits: no pause at all
    backlog.observe(0, highwater=500, last_offset=99)
    waiting = asyncio.ensure_future(backlog.give_way())
    await asyncio.sleep(0.05)
    assert not waiting.done()  # held while 400 records wait
    clock.now = 2.5
    backlog.observe(0, highwater=500, last_offset=495)  # the score stage took them
    assert await asyncio.wait_for(waiting, 1.0) == 2.5
    assert backlog.held_seconds == 2.5


async def test_a_stage_holds_a_batch_back_no_longer_than_the_hold() -> None:
    backlog = InputBacklog(limit=10, hold=0.05)
    backlog.observe(0, highwater=10_000, last_offset=0)
    started = time.monotonic()
    held = await asyncio.wait_for(backlog.give_way(), 5.0)
    assert held >= 0.04 and time.monotonic() - started < 2.0
    assert backlog.behind  # still behind: the next batch is held back again


async def test_without_a_limit_no_stage_gives_way() -> None:
    backlog = InputBacklog(limit=None, hold=30.0)
    backlog.observe(0, highwater=10**9, last_offset=0)
    assert not backlog.behind
    assert await asyncio.wait_for(backlog.give_way(), 1.0) == 0.0


# ------------------------------------------------------------ on the real broker

SESSIONS = 500
TURNS = 4
SCORE_BATCH = 100


def turns() -> list[dict[str, Any]]:
    return [
        tunetide_turn(
            session,
            turn,
            f"Your mix number {session} is queued up and ready to play.",
            final=turn == TURNS - 1,
        )
        for session in range(SESSIONS)
        for turn in range(TURNS)
    ]


@pytest.mark.integration
async def test_a_backlog_of_turns_is_read_before_the_session_stage_takes_its_share(
    broker: EmbeddedBroker,
) -> None:
    """A worker starting on a backlog of turns reads (and forwards) nearly all of it
    before its session stage applies its first batch, and still gives every turn and
    session its full result."""
    config = make_config()
    config["stream"].update(
        score_batch_size=SCORE_BATCH, input_backlog=SCORE_BATCH // 2, input_backlog_hold="60s"
    )
    settings = settings_of(config)
    topics = settings.topics
    records = retime(turns(), window_s=60)
    await provision(settings, broker.url)
    await produce(broker.bootstrap, topics.input, as_lines(records))

    worker = InProcessWorker(settings, broker.url)
    scorer = worker.scorer
    begun = [0]  # input records the score stage began
    begun_when_sessions_started: list[int] = []
    begin_batch, begin_sessions = scorer.scoring.begin_batch, scorer.session_stage.begin_batch

    def counting_begin(events: list[Any]) -> Any:
        begun[0] += len(events)
        return begin_batch(events)

    def noting_begin(events: list[Any]) -> Any:
        if not begun_when_sessions_started:
            begun_when_sessions_started.append(begun[0])
        return begin_sessions(events)

    # every turn scored for safety alone (quicker), as a worker far behind would
    stage = scorer.session_stage
    stage.timing = dataclasses.replace(stage.timing, max_lag=0.0)
    scorer.scoring.begin_batch = counting_begin  # type: ignore[method-assign]
    scorer.session_stage.begin_batch = noting_begin  # type: ignore[method-assign]
    scorer.scoring_pool.start()
    turns_topic = f"{settings.app_id}-alignment-turns"
    async with worker, TopicReader(broker.bootstrap, topics.results, turns_topic) as reader:
        await reader.until(
            lambda r: len(r.values(topics.results)) >= len(records) + SESSIONS,
            timeout=120,
            what="every turn's and session's result",
        )
        held = scorer.scoring.context.input_backlog.held_seconds
    # Until the score stage's last batch, more than the limit waited: the session stage
    # held back (no longer than the hold) until then.
    assert begun_when_sessions_started[0] >= len(records) - SCORE_BATCH
    assert 0 < held < 60
    results = reader.values(topics.results)
    assert len({v["id"] for v in results if v["kind"] == "turn"}) == len(records)
    # The turns went to the session stage bundled: far fewer Kafka records than turns,
    # each turn in exactly one of them.
    forwarded = [
        message["record"]["id"]
        for _, value in reader.records[turns_topic]
        for message in session_messages(value)
        if "record" in message
    ]
    assert sorted(forwarded) == sorted(record["id"] for record in records)
    in_bundles = [bundled_messages(key) for key, _ in reader.records[turns_topic]]
    assert sum(count for count in in_bundles if count > 1) * 4 > len(records) * 3
    assert len(reader.records[turns_topic]) * 4 < len(records)
    assert len({v["id"] for v in results if v["kind"] == "session"}) == SESSIONS
