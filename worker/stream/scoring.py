"""The score stage: reads the input topic, scores SAFE and extraction cases inline,
forwards alignment records to the session stage, dead-letters what cannot be scored, and
tells the downstream stages how far each input partition has got (watermark markers).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import MutableMapping
from datetime import datetime
from typing import Any

import orjson
from faust.types import TP, AppT, EventT, StreamT

from schemas.envelope import AlignmentRecord, ExtractionRecord, SafeRecord
from schemas.outputs import CaseResult
from worker import intake
from worker.eventtime import Marker, PartitionClock
from worker.stream.context import StreamContext, source_position
from worker.stream.publish import OutputTooLarge
from worker.unknown_fields import unknown_fields, with_unknown_fields

log = logging.getLogger("scorestream")

MARK_FLUSH_TIMEOUT = 5.0  # seconds to wait for an in-flight mark to reach the broker
INPUT_GROUP = "in"  # watermark channel group of the input partitions


class ScoreStage:
    """Scores input records and keeps one `PartitionClock` per assigned input partition."""

    def __init__(
        self,
        context: StreamContext,
        app: AppT,
        inflight: MutableMapping[str, Any] | None = None,
    ) -> None:
        self.context = context
        self.app = app
        # `{topic}|{partition}` -> the input offset being processed and how many times
        # it was started (a changelog table: it survives a crash).
        self.inflight = inflight
        self.settings = context.settings
        self.publisher = context.publisher
        self.clocks: dict[int, PartitionClock] = {}
        self.sent: dict[int, tuple[float, float]] = {}  # partition -> (progress, sent at)

    # ---------------------------------------------------------------- records

    async def agent(self, stream: StreamT) -> None:
        async for event in stream.events():
            await self.supervised(event)

    async def supervised(self, event: EventT) -> None:
        """`process`, where nothing a record does stops the agent: an exception that got
        past the stage's own handling dead-letters the record (`scoring_error`)."""
        try:
            await self.process(event)
        except Exception as exc:
            log.exception("unexpected failure on an input record")
            try:
                await self._dead_letter(
                    event, intake.SCORING_ERROR, repr(exc), source_position(event)
                )
            except Exception:
                log.exception("could not dead-letter the failed record")

    async def process(self, event: EventT) -> None:
        """Score one input record; then count it in its partition's progress."""
        source = source_position(event)
        received = self.context.now()
        if await self._poison_pill(event, source):
            event_time = None
        else:
            event_time = await self._process(event, source, received)
        clock = self.clocks.get(source.partition)
        if clock is None:
            clock = self.clocks[source.partition] = PartitionClock(quiet_since=self.context.clock())
        clock.observe(
            source.offset,
            None if event_time is None else event_time.timestamp(),
            self.context.clock(),
        )

    async def _poison_pill(self, event: EventT, source: intake.SourcePosition) -> bool:
        """Remember durably that this record is in flight; True (and a `poison_pill` dead
        letter) when it was already in flight `limits.poison_pill_attempts` times without
        finishing, i.e. when it stopped the worker each time it was processed."""
        limit = self.settings.limits.poison_pill_attempts
        if self.inflight is None or limit <= 0:
            return False
        key = f"{source.topic}|{source.partition}"
        mark = self.inflight.get(key)
        marked = mark.get("offset") if isinstance(mark, dict) else None
        if isinstance(marked, int) and source.offset < marked:
            # A replay of a record that finished before the one in flight: keep the mark.
            return False
        attempts = 1
        if marked == source.offset:
            attempts = int(mark.get("attempts", 0)) + 1 if isinstance(mark, dict) else 1
        if attempts > limit:
            self.inflight[key] = {"offset": source.offset, "attempts": 0}
            message = (
                f"the worker stopped {attempts - 1} times while processing this record "
                f"(limits.poison_pill_attempts: {limit})"
            )
            await self._dead_letter(event, intake.POISON_PILL, message, source)
            return True
        self.inflight[key] = {"offset": source.offset, "attempts": attempts}
        try:  # the mark is on the broker before the work starts (bounded wait)
            await asyncio.wait_for(self.app.producer.flush(), MARK_FLUSH_TIMEOUT)
        except Exception:  # not started (tests) or slow: the mark stays best effort
            log.debug("in-flight mark not flushed", exc_info=True)
        return False

    async def _process(
        self, event: EventT, source: intake.SourcePosition, received: datetime
    ) -> datetime | None:
        """Score, forward or dead-letter; the record's event time when it had a usable one."""
        settings = self.settings
        engines = self.context.engines
        try:
            record = intake.decode_record(event.value, settings.max_record_bytes, settings.limits)
            event_time = intake.usable_event_time(
                record.event_time() or source.timestamp or received,
                received,
                settings.max_future_skew,
            )
            if isinstance(record, AlignmentRecord):
                engines.check_persona(record.payload.persona_id)
                await self._forward_turn(record, source, received, event_time)
                return event_time
            started = time.perf_counter()
            if isinstance(record, SafeRecord):
                scored = engines.score_safe(record.payload)
            elif isinstance(record, ExtractionRecord):
                scored = engines.score_extraction(record.payload)
            else:  # pragma: no cover - the discriminated union has three members
                raise intake.Rejected(intake.UNKNOWN_SUITE, f"unknown suite {record.suite!r}")
            scored = with_unknown_fields(scored, unknown_fields(record.payload))
            elapsed = time.perf_counter() - started
        except OutputTooLarge as exc:
            await self._dead_letter(event, intake.OUTPUT_TOO_LARGE, str(exc), source)
            return None
        except intake.Rejected as rejected:
            await self._dead_letter(event, rejected.reason, rejected.message, source)
            return None
        except Exception as exc:  # a scorer bug must not kill the agent or lose the record
            log.exception("scoring failed")
            await self._dead_letter(event, intake.SCORING_ERROR, repr(exc), source)
            return None
        result = intake.build_result(
            case_id=record.id,
            suite=record.suite,
            kind="case",
            scored=scored,
            event_time=event_time,
            model=record.model,
            labels=record.labels,
            versions=engines.versions(record.suite),
            source=source,
            scored_at=self.context.now(),
            received_at=received,
            trace_id=record.trace_id,
        )
        try:
            await self.publisher.result(result)
        except OutputTooLarge as exc:
            await self._dead_letter(event, intake.OUTPUT_TOO_LARGE, str(exc), source)
            return None
        observe(self.context, result, elapsed)
        return event_time

    async def _dead_letter(
        self, event: EventT, reason: str, message: str, source: intake.SourcePosition
    ) -> None:
        key = event.key if isinstance(event.key, bytes) else None
        await self.publisher.dead_letter(
            event.value, key, reason, message, source, self.context.now()
        )

    async def _forward_turn(
        self,
        record: AlignmentRecord,
        source: intake.SourcePosition,
        received: datetime,
        event_time: datetime,
    ) -> None:
        envelope = {
            "record": record.model_dump(mode="json", by_alias=True),
            "source": [source.topic, source.partition, source.offset],
            "event_time": event_time.timestamp(),
            "received": received.timestamp(),
        }
        await self.publisher.turn(record.payload.session_id, orjson.dumps(envelope))

    # ---------------------------------------------------------------- progress

    def forget(self) -> None:
        """After a rebalance: the partitions this worker reads may have changed."""
        self.clocks.clear()
        self.sent.clear()

    async def send_progress(self) -> None:
        """Send a marker for every assigned input partition whose progress moved (or was
        not sent for `marker_heartbeat`), after letting idle ones follow the wall clock."""
        consumer = self.app.consumer
        topic = self.settings.topics.input
        count = consumer.topic_partitions(topic) or self._partition_count(topic)
        if not count:
            return
        now = self.context.clock()
        assigned = sorted(
            (tp for tp in consumer.assignment() if tp.topic == topic), key=lambda tp: tp.partition
        )
        for tp in assigned:
            clock = self.clocks.get(tp.partition)
            if clock is None:
                clock = self.clocks[tp.partition] = PartitionClock(quiet_since=now)
            if not clock.observed:  # nothing read since the assignment: where it stands
                clock.next_offset = await self._position(tp)
            clock.follow_wall_clock(now, consumer.highwater(tp), self.settings.idle_timeout)
            if clock.progress is None:
                continue
            last = self.sent.get(tp.partition)
            heartbeat = self.settings.stream.marker_heartbeat
            if last is not None and last[0] == clock.progress and now - last[1] < heartbeat:
                continue
            marker = Marker(INPUT_GROUP, tp.partition, count, clock.progress)
            topics = self.publisher.topics
            await self.publisher.marker(topics.turns, marker)
            await self.publisher.marker(topics.aggregate_input, marker)
            self.sent[tp.partition] = (clock.progress, now)

    def _partition_count(self, topic: str) -> int | None:
        """Partitions of `topic` from the consumer's cluster metadata (Faust's own answer
        is None on a worker that joined a group whose assignment it did not compute)."""
        try:
            client = self.app.consumer._thread._ensure_consumer()._client  # type: ignore[attr-defined]
            partitions = client.cluster.partitions_for_topic(topic)
        except Exception:
            log.debug("no metadata for %s yet", topic, exc_info=True)
            return None
        return len(partitions) if partitions else None

    async def _position(self, tp: TP) -> int | None:
        """The next offset to read from `tp` (None when the broker did not say)."""
        try:
            return await self.app.consumer.position(tp)
        except Exception:  # not answered yet: not caught up, try on the next tick
            log.debug("no position for %s yet", tp, exc_info=True)
            return None


def observe(context: StreamContext, result: CaseResult, scoring_seconds: float) -> None:
    """Record a published result in the telemetry (count, scores, latency)."""
    e2e = max(0.0, (result.scored_at - result.ts).total_seconds())
    context.telemetry.record_result(result, scoring_seconds, e2e)


def decode(event: EventT) -> dict[str, Any]:
    """An internal-topic value as JSON."""
    value: dict[str, Any] = orjson.loads(event.value)
    return value
