"""Watermark progress leaves with each micro-batch (issue 25, item 3): replayed through
the three stages with an injected clock and dict tables, a window closes as soon as the
batch that carries the watermark past its end + grace is counted, without waiting for
the progress timer; the markers stay behind the records they cover, and the watermark
stays the minimum over input partitions, so a partition with a backlog turns nothing
late."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import orjson
import pytest
from faust.types import TP

from schemas.outputs import Aggregate
from tests.streamkit import EXAMPLES, envelopes, make_config, settings_of
from worker.ops.telemetry import Telemetry
from worker.scoring_pool import ScoringPool
from worker.scoring_suites import ScoringSuites
from worker.stream.context import StreamContext
from worker.stream.publish import MARKER_KEY, Publisher, StreamTopics
from worker.stream.scoring import ScoreStage
from worker.stream.sessions import SessionStage
from worker.stream.windows import WindowStage
from worker.suites.alignment.embedding_model import HashingEmbedder
from worker.windowing.event_time import INPUT_GROUP, Marker, markers_in, markers_value

T0 = 1_700_000_040.0  # a whole minute
GRACE = 1.0


@dataclass
class Topic:
    name: str

    def get_topic_name(self) -> str:
        return self.name


@dataclass
class Message:
    topic: str
    partition: int
    offset: int
    timestamp: float | None = None


@dataclass
class Event:
    value: bytes
    message: Message
    key: bytes | None = None


@dataclass
class Sent:
    topic: str
    key: bytes
    value: bytes
    partition: int | None


class RecordingPublisher(Publisher):
    """The worker's publisher with every record kept, in the order sent."""

    def __init__(self, topics: StreamTopics, settings: Any, telemetry: Telemetry) -> None:
        super().__init__(topics, settings, telemetry)
        self.log: list[Sent] = []

    async def send(
        self, topic: Any, key: str | bytes, value: bytes, partition: int | None = None
    ) -> None:
        raw = key.encode() if isinstance(key, str) else key
        self.log.append(Sent(topic.get_topic_name(), raw, value, partition))

    async def send_records(
        self,
        topic: Any,
        records: Sequence[tuple[bytes, bytes]],
        partitions: Sequence[int] | None = None,
    ) -> None:
        for index, (key, value) in enumerate(records):
            partition = None if partitions is None else partitions[index]
            self.log.append(Sent(topic.get_topic_name(), key, value, partition))

    async def key_partitions(self, topic: Any, keys: Sequence[bytes]) -> list[int]:
        return [0] * len(keys)  # the internal topics have one partition here


class Consumer:
    """The input partitions this worker reads (nothing about their ends: the timer's
    idle rule never applies here)."""

    def __init__(self, topic: str, partitions: int) -> None:
        self.topic = topic
        self.partitions = partitions

    def assignment(self) -> set[TP]:
        return {TP(self.topic, partition) for partition in range(self.partitions)}

    def topic_partitions(self, topic: str) -> int:
        return self.partitions

    def highwater(self, tp: TP) -> None:
        return None


class Pipeline:
    """Score, session and window stages wired by the records the publisher keeps."""

    def __init__(self, input_partitions: int) -> None:
        self.now = T0 + 300.0  # the wall clock; never read as event time here
        config = make_config(segment_by=[], grace=f"{GRACE:g}s")
        config["stream"] = {**config["stream"], "partitions": 1}
        settings = settings_of(config)
        names = settings.topics
        topics = StreamTopics(
            *(Topic(name) for name in (names.input, names.results, names.aggregates)),
            Topic(names.gates),
            Topic(names.dead_letters),
            Topic("turns"),
            Topic("aggregate-input"),
        )
        telemetry = Telemetry.from_settings(settings)
        self.publisher = RecordingPublisher(topics, settings, telemetry)
        suites = ScoringSuites.load(settings, HashingEmbedder())
        context = StreamContext(settings, suites, telemetry, self.publisher, lambda: self.now)
        context.scoring_pool = ScoringPool(settings, start_method="fork")
        self.context = context
        self.input = names.input
        app = SimpleNamespace(consumer=Consumer(names.input, input_partitions))
        self.score = ScoreStage(context, app)  # type: ignore[arg-type]
        self.executor = ThreadPoolExecutor(1)
        self.sessions = SessionStage(context, {}, {}, self.executor)
        self.windows = WindowStage(context, {}, {}, {})
        self.offsets = [0] * input_partitions
        self.routed = 0  # records of the log already handed on
        self.sessions_behind = False  # hold the session stage's input back
        self.held: list[Sent] = []
        self.finals: list[tuple[Aggregate, int]] = []  # and how many records were sent then
        publish_aggregate = self.publisher.aggregate

        async def aggregate(key: str, message: Aggregate) -> Any:
            if message.final:
                self.finals.append((message, len(self.publisher.log)))
            return await publish_aggregate(key, message)

        self.publisher.aggregate = aggregate  # type: ignore[method-assign]
        self.template = envelopes(EXAMPLES / "safe" / "envelopes.jsonl")[0]

    def close(self) -> None:
        self.context.scoring_pool.close()
        self.executor.shutdown()

    def case(self, partition: int, ts: float) -> Event:
        offset = self.offsets[partition]
        self.offsets[partition] += 1
        record = {**self.template, "id": f"p{partition}-{offset}", "ts": int(ts * 1000)}
        return Event(orjson.dumps(record), Message(self.input, partition, offset))

    async def batch(self, *events: Event) -> list[Sent]:
        """One score micro-batch, then the session and window stages read what it sent
        (the internal topics have one partition); what the score stage sent."""
        before = len(self.publisher.log)
        await self.score.process_batch(list(events))  # type: ignore[arg-type]
        sent = self.publisher.log[before:]
        await self.route()
        return sent

    async def route(self) -> None:
        while self.routed < len(self.publisher.log) or (self.held and not self.sessions_behind):
            sent = self.publisher.log[self.routed :]
            self.routed = len(self.publisher.log)
            turns = [item for item in sent if item.topic == "turns"]
            counted = [item for item in sent if item.topic == "aggregate-input"]
            if self.sessions_behind:  # the session stage has not read them yet
                self.held.extend(turns)
                turns = []
            elif self.held:
                turns, self.held = [*self.held, *turns], []
            if turns:
                await self.sessions.process_batch(events_of(turns))  # type: ignore[arg-type]
            if counted:
                await self.windows.process_batch(events_of(counted))  # type: ignore[arg-type]

    def final_counts(self) -> dict[datetime, int]:
        return {
            message.window.start: message.count
            for message, _ in self.finals
            if message.window.size_s == 60 and not message.segment
        }


def events_of(sent: list[Sent]) -> list[Event]:
    return [Event(item.value, Message(item.topic, 0, index)) for index, item in enumerate(sent)]


@pytest.fixture
def pipeline() -> Any:
    built = Pipeline(input_partitions=2)
    yield built
    built.close()


def minute(start: float) -> datetime:
    return datetime.fromtimestamp(start, UTC)


async def test_a_window_closes_with_the_batch_that_passes_it_not_at_the_next_tick(
    pipeline: Pipeline,
) -> None:
    await pipeline.batch(pipeline.case(0, T0 + 1), pipeline.case(1, T0 + 2))
    await pipeline.batch(pipeline.case(0, T0 + 30), pipeline.case(1, T0 + 40))
    assert pipeline.finals == []
    # Both partitions pass end + grace in the next batch: the window closes right after
    # it, though the progress timer (`send_progress`) never ran.
    closing = T0 + 60 + GRACE + 0.5
    sent = await pipeline.batch(pipeline.case(0, closing), pipeline.case(1, closing))
    assert pipeline.final_counts() == {minute(T0): 4}
    # The batch's one marker record follows its contributions on the aggregation topic.
    counted = [item for item in sent if item.topic == "aggregate-input"]
    assert [item.key == MARKER_KEY for item in counted] == [False] * (len(counted) - 1) + [True]
    markers = markers_in(orjson.loads(counted[-1].value))
    assert [(m.group, m.index, m.count, m.value) for m in markers] == [
        (INPUT_GROUP, 0, 2, closing),
        (INPUT_GROUP, 1, 2, closing),
    ]


async def test_a_partition_behind_holds_the_window_open_and_loses_none_of_its_cases(
    pipeline: Pipeline,
) -> None:
    # Partition 0 runs far past the window; partition 1 has a backlog still in it.
    await pipeline.batch(pipeline.case(0, T0 + 5), pipeline.case(0, T0 + 200))
    await pipeline.batch(pipeline.case(1, T0 + 10))
    assert pipeline.finals == []  # the watermark is partition 1's, in the window
    await pipeline.batch(pipeline.case(1, T0 + 50), pipeline.case(1, T0 + 59))
    assert pipeline.finals == []
    await pipeline.batch(pipeline.case(1, T0 + 60 + GRACE))
    assert pipeline.final_counts() == {minute(T0): 4}  # every in-order case, none late
    assert pipeline.context.telemetry.registry.get_sample_value(
        "scorestream_late_records_total", {"suite": "safe"}
    ) in (None, 0.0)


async def test_a_safe_window_closes_without_waiting_for_the_session_stage(
    pipeline: Pipeline,
) -> None:
    """SAFE results go from the score stage straight to the windows: the session stage's
    hop (its fetch and batch wait, then another one here) is not on their final's path,
    while the input partitions still bound it (a partition behind holds it open)."""
    pipeline.sessions_behind = True
    await pipeline.batch(pipeline.case(0, T0 + 1), pipeline.case(1, T0 + 2))
    closing = T0 + 60 + GRACE + 0.5
    await pipeline.batch(pipeline.case(0, closing), pipeline.case(1, T0 + 59))
    assert pipeline.finals == []  # partition 1 is still in the window
    await pipeline.batch(pipeline.case(1, closing))
    assert pipeline.final_counts() == {minute(T0): 3}  # the session stage read nothing yet
    assert pipeline.held  # ... and has the markers still to read
    pipeline.sessions_behind = False
    await pipeline.route()
    assert pipeline.held == []
    assert pipeline.final_counts() == {minute(T0): 3}  # once


async def test_only_a_marker_that_passes_a_window_end_and_grace_skips_the_batch_wait() -> None:
    """The window stage processes its batch at once on a marker that takes its channel
    past a window's end + grace (`take_batches`); other markers and data wait as before."""
    pipeline = Pipeline(input_partitions=1)
    try:

        async def marker_ends_batch(ts: float) -> bool:
            sent = await pipeline.batch(pipeline.case(0, ts))
            data = [item for item in sent if item.key != MARKER_KEY and "agg" in item.topic]
            if not any(item.key == MARKER_KEY for item in sent):  # the timer sends it
                before = len(pipeline.publisher.log)
                await pipeline.score.send_progress()
                sent = pipeline.publisher.log[before:]
            [marker] = [item for item in sent if item.key == MARKER_KEY and "agg" in item.topic]
            event = Event(marker.value, Message(marker.topic, 0, 0), marker.key)
            assert not any(
                pipeline.windows.may_close(Event(d.value, Message(d.topic, 0, 0), d.key))
                for d in data
            )
            return pipeline.windows.may_close(event)  # type: ignore[arg-type]

        assert await marker_ends_batch(T0 + 5)  # the first from its channel
        assert not await marker_ends_batch(T0 + 30)
        assert not await marker_ends_batch(T0 + 60 + GRACE - 0.1)  # not past the grace
        assert await marker_ends_batch(T0 + 60 + GRACE)  # the minute closes here
        assert not await marker_ends_batch(T0 + 90)
    finally:
        pipeline.close()


async def test_progress_that_closes_no_window_waits_for_the_timer(pipeline: Pipeline) -> None:
    """A micro-batch's progress goes right behind it only when it may close a window (it
    passes an end + grace, or is the partition's first): the rest, half of what the
    broker stores on the internal topics, goes with the next tick."""

    def markers(sent: Sequence[Sent]) -> list[tuple[int, float]]:
        return [
            (m.index, m.value)
            for item in sent
            if item.key == MARKER_KEY and item.topic == "aggregate-input"
            for m in markers_in(orjson.loads(item.value))
        ]

    first = await pipeline.batch(pipeline.case(0, T0 + 1), pipeline.case(1, T0 + 2))
    assert markers(first) == [(0, T0 + 1), (1, T0 + 2)]  # the partitions' first
    for ts in (T0 + 20, T0 + 40, T0 + 60 + GRACE - 0.5):
        assert markers(await pipeline.batch(pipeline.case(0, ts), pipeline.case(1, ts))) == []
    before = len(pipeline.publisher.log)
    await pipeline.score.send_progress()  # the tick: both partitions' progress
    ticked = T0 + 60 + GRACE - 0.5
    assert markers(pipeline.publisher.log[before:]) == [(0, ticked), (1, ticked)]
    assert pipeline.finals == []
    closing = T0 + 60 + GRACE
    # Partition 1 passes the minute's end + grace: the marker goes with the batch and
    # carries every partition the batch moved.
    sent = await pipeline.batch(pipeline.case(0, T0 + 60 + GRACE - 0.2), pipeline.case(1, closing))
    assert markers(sent) == [(0, T0 + 60 + GRACE - 0.2), (1, closing)]
    assert pipeline.finals == []  # partition 0 holds the window open
    sent = await pipeline.batch(pipeline.case(0, closing))
    assert markers(sent) == [(0, closing)]
    assert pipeline.final_counts() == {minute(T0): 6}  # the cases before T0 + 60


async def test_progress_a_batch_did_not_move_is_not_sent_again(pipeline: Pipeline) -> None:
    await pipeline.batch(pipeline.case(0, T0 + 5))
    markers_before = sum(1 for item in pipeline.publisher.log if item.key == MARKER_KEY)
    await pipeline.batch(pipeline.case(0, T0 + 3))  # older than the partition's progress
    markers_after = sum(1 for item in pipeline.publisher.log if item.key == MARKER_KEY)
    assert markers_after == markers_before


def test_a_marker_record_carries_one_or_several_channels() -> None:
    one = Marker(INPUT_GROUP, 0, 4, T0)
    several = [one, Marker(INPUT_GROUP, 3, 4, T0 + 1.5)]
    assert markers_in(orjson.loads(markers_value([one]))) == [one]
    assert orjson.loads(markers_value([one])) == {"wm": one.to_json()}  # as before
    assert markers_in(orjson.loads(markers_value(several))) == several
    assert markers_in({"segment": {}, "results": []}) == []
