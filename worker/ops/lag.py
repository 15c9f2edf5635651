"""How far behind the worker is, sampled on a timer of its Faust app into `Telemetry`:
consumer lag per partition of every topic it reads (the input and both internal hops),
event-time lag per stage (wall clock minus the stage's watermark), and the broker
connection state."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from worker.config import Settings
from worker.ops.telemetry import Telemetry
from worker.stream.faust_patches.internals import stream_offsets

log = logging.getLogger("scorestream.lag")

DEFAULT_INTERVAL = 5.0
STAGES = ("score", "sessions", "windows")


def partition_lags(
    end_offsets: Mapping[int, int], next_offsets: Mapping[int, int | None]
) -> dict[int, int]:
    """Records left to read per partition: end offset (the offset the next record written
    will get) minus the next offset to read (0 when unknown); never negative."""
    return {
        partition: max(end - (next_offsets.get(partition) or 0), 0)
        for partition, end in end_offsets.items()
    }


def event_time_lag(now: float, watermarks: Iterable[float | None]) -> float | None:
    """Seconds from the oldest known watermark to `now` (never negative); None when no
    watermark is known (no partition owned, or none has heard from all its upstreams)."""
    known = [mark for mark in watermarks if mark is not None]
    if not known:
        return None
    return max(now - min(known), 0.0)


async def sample_lags(consumer: Any, topic: str) -> dict[int, int]:
    """Lag of each partition of `topic` assigned to a Faust consumer (asks the broker for
    the end offsets): records not processed yet, as Kafka's consumer-group lag counts
    them, from the offset committed after processing. Records fetched into the agent's
    buffer but not processed still count (a backlog behind a slow stage sits there).
    Before the first commit: from the last offset handed to the stream, else from the
    earliest offset (where a new group starts reading)."""
    assigned = [tp for tp in consumer.assignment() if tp.topic == topic]
    if not assigned:
        return {}
    ends = await consumer.highwaters(*assigned)
    committed, read = stream_offsets(consumer)
    next_offsets: dict[int, int | None] = {}
    unread = []
    for tp in assigned:
        done, last = committed.get(tp), read.get(tp)
        if done is not None:
            next_offsets[tp.partition] = done
        elif last is not None:
            next_offsets[tp.partition] = last + 1
        else:
            unread.append(tp)
    if unread:  # never committed nor read: reading starts at the earliest offset
        for tp, offset in (await consumer.earliest_offsets(*unread)).items():
            next_offsets[tp.partition] = offset
    known = {tp.partition: end for tp, end in ends.items() if tp.partition in next_offsets}
    return partition_lags(known, next_offsets)


def install_lag_monitor(
    app: Any,
    telemetry: Telemetry,
    topics: str | Sequence[str],
    settings: Settings,
    interval: float | None = None,
    watermarks: Callable[[], Mapping[str, Iterable[float | None]]] | None = None,
    clock: Callable[[], float] = time.time,
) -> None:
    """Every `interval` seconds (from the first tick on) set `scorestream_consumer_lag` for
    each of `topics` and `scorestream_broker_connected` (0 when the broker did not answer
    within `stream.connect_timeout`); every `stream.tick_interval`, from `watermarks()`
    (stage -> the watermarks of its owned partitions),
    `scorestream_event_time_lag_seconds`. Call before the app starts."""
    timeout = settings.stream.connect_timeout
    names = [topics] if isinstance(topics, str) else list(topics)

    async def sample_event_time() -> None:
        assert watermarks is not None
        now = clock()
        marks = watermarks()
        telemetry.set_event_time_lag(
            {stage: event_time_lag(now, marks.get(stage, ())) for stage in STAGES}
        )

    async def sample() -> None:
        failure: Exception | None = None
        answered = False
        for name in names:  # one topic failing does not hide the others
            try:
                lags = await asyncio.wait_for(sample_lags(app.consumer, name), timeout)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # any failure to talk to the broker
                failure = exc
                continue
            answered = True
            telemetry.set_consumer_lag(name, lags)
        if answered or failure is None:
            telemetry.set_broker_connected(True)
            return
        if telemetry.readiness()["broker"] != "disconnected":
            log.warning("broker unreachable: %s", str(failure) or type(failure).__name__)
        telemetry.set_broker_connected(False)

    every = interval or DEFAULT_INTERVAL
    last_sampled: list[float] = []  # monotonic time of the last consumer-lag sample

    async def tick() -> None:
        # Event time needs no broker round trip: as often as markers go out. Consumer
        # lag every `interval`, from the first tick on (a short run is sampled too).
        if watermarks is not None:
            await sample_event_time()
        moment = time.monotonic()
        if not last_sampled or moment - last_sampled[-1] >= every:
            last_sampled[:] = [moment]
            await sample()

    app.timer(min(settings.stream.tick_interval, every))(tick)


def stage_watermarks(scorer: Any) -> dict[str, list[float | None]]:
    """The watermark of every stage partition a `ScorestreamApp` owns, by stage: `score`
    the event-time progress of its input partitions, `sessions` and `windows` the
    watermarks of its partitions of the two internal topics."""
    assigned = scorer.app.consumer.assignment()
    topics = scorer.topics

    def owned(topic: Any) -> list[int]:
        name = topic.get_topic_name()
        return sorted(tp.partition for tp in assigned if tp.topic == name)

    inputs = scorer.scoring.progress
    return {
        "score": [inputs.progress(partition) for partition in owned(topics.input)],
        "sessions": [
            scorer.session_stage.watermark(partition).value() for partition in owned(topics.turns)
        ],
        "windows": [
            scorer.window_stage.store.watermark(partition).value()
            for partition in owned(topics.aggregate_input)
        ],
    }


def watch_worker(scorer: Any, settings: Settings) -> None:
    """Wire a `ScorestreamApp`'s health into its telemetry before it starts: `/readyz` is
    ready once the app started (partitions assigned, tables recovered) while it is not
    rebalancing or recovering, and the lag monitor keeps the broker state and the
    consumer and event-time lag gauges."""
    app = scorer.app
    scorer.telemetry.set_readiness(
        lambda: (
            scorer.ready.is_set()
            and not getattr(app, "rebalancing", False)
            and not getattr(app, "in_recovery", False)
        )
    )
    topics = [
        topic.get_topic_name()
        for topic in (scorer.topics.input, scorer.topics.turns, scorer.topics.aggregate_input)
    ]

    def watermarks() -> dict[str, list[float | None]]:
        if not scorer.ready.is_set():
            return {}
        return stage_watermarks(scorer)

    install_lag_monitor(app, scorer.telemetry, topics, settings, watermarks=watermarks)


__all__ = [
    "STAGES",
    "event_time_lag",
    "install_lag_monitor",
    "partition_lags",
    "sample_lags",
    "stage_watermarks",
    "watch_worker",
]
