"""The score stage: reads the input topic, scores the case-by-case suites (in the
scoring pool's child processes, each record under `limits.scoring_deadline`),
forwards the session suite's records (alignment's) to the session stage, dead-letters
what cannot be scored, and tells the downstream stages how far each input partition has
got: it reports each finished record to the event-time component and sends the watermark
markers that component chooses, behind a micro-batch's outputs and from the timer
(`worker.windowing.event_time.InputProgress`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Coroutine, MutableMapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, NamedTuple, TypeVar

import orjson
from faust.types import TP, AppT, EventT

from worker import aggregation
from worker.gates.early import EarlyFolds, EarlyTurns, early_gates, early_share
from worker.input import records as input_records
from worker.input.result_facts import ResultView, result_facts
from worker.input.scored_records import (
    NOT_A_CASE,
    RecordTask,
    ScoredRecord,
    SessionRecord,
    session_message,
)
from worker.scoring_pool import CHUNK_RECORDS, Outcome
from worker.stream.context import (
    StreamContext,
    event_context,
    source_position,
)
from worker.stream.faust_patches.held_batches import take_held_batches
from worker.stream.faust_patches.internals import kafka_consumer, stream_offsets
from worker.stream.faust_patches.seek_guard import start_offsets
from worker.stream.inflight import InflightGuard
from worker.stream.overlap import overlap_batches
from worker.stream.publish import Contributions, Folding, OutputTooLarge
from worker.suites import registry
from worker.windowing.event_time import AssignedPartition, Marker

log = logging.getLogger("scorestream")

READY_TIMEOUT = 120.0  # seconds a start-up may take before marks are flushed anyway
MARK_TIMEOUT = 30.0  # seconds to wait for the broker to acknowledge in-flight marks

_T = TypeVar("_T")


class ScoreStage:
    """Scores input records and tells the event-time component (`context.event_time`)
    which of them it finished; sends the watermark markers that component says to."""

    def __init__(
        self,
        context: StreamContext,
        app: AppT,
        inflight: MutableMapping[str, Any] | None = None,
        ready: asyncio.Event | None = None,
        folding: Folding | None = None,
    ) -> None:
        self.context = context
        # Results are folded per pane only from each input partition's `fold_from` on:
        # its high watermark when this worker first saw it after an assignment. Nothing
        # there can have been contributed by an earlier owner (or by this worker before
        # a rebalance), so a fold never overlaps what the windows counted; the records
        # before it go case by case and the windows' per-offset dedupe sorts out replays.
        self.folding = folding
        self.fold_from: dict[int, int] = {}
        self.app = app
        self.ready = ready  # set once the worker started: the producer flushes from then
        # In-flight marks per input partition (a changelog table: it survives a crash).
        limit = context.settings.limits.poison_pill_attempts
        self.guard = InflightGuard(inflight, limit) if inflight is not None and limit else None
        self.settings = context.settings
        self.publisher = context.publisher
        # The producing side of event time: the input partitions' clocks, which markers
        # to send and when (`worker.windowing.event_time.InputProgress`).
        self.progress = context.event_time.inputs()
        self.input_partitions: int | None = None  # of the input topic, once known
        # A micro-batch's results and scoring times, for the telemetry once it is sent.
        self._observed: list[tuple[ResultView, float]] = []
        # The session suite's turns counted, and the sample judged early, per gate window
        # (`worker.gates.early`); None when no gate can be judged from a sample.
        self.early = early_folds(context.settings)

    # ---------------------------------------------------------------- records

    async def agent(self, stream: Any) -> None:  # faust.Stream
        """Micro-batches, overlapped (`overlap_batches`): the children score the batches
        after batch N (`stream.score_batches_in_hand` in all) while batch N's results
        are published and folded."""
        settings = self.settings.stream
        in_hand = settings.score_batches_in_hand
        batches = take_held_batches(
            stream, settings.score_batch_size, settings.score_batch_wait, max_held=in_hand
        )
        await overlap_batches(batches, self.begin_batch, self.finish_batch, in_hand)

    async def process_batch(self, events: list[EventT]) -> None:
        """Score a micro-batch in order (`begin_batch`, then `finish_batch`)."""
        await self.finish_batch(self.begin_batch(events))

    def begin_batch(self, events: list[EventT]) -> _Batch:
        """Mark a micro-batch in flight (durable once `_flush_marks` returns) and hand its
        records to the scoring pool; nothing is awaited, so this may run while the batch
        before is still finishing. A batch that is not full, or has a range the worker
        died in (record by record), is finished before the next one begins (`alone`)."""
        if self.folding is not None:  # from the in-flight marks as they were before the batch
            for partition in {event.message.partition for event in events}:
                self._learn_fold_from(partition)
        sources = [source_position(event) for event in events]
        self._observe_backlog(sources)
        careful, event_of = self._mark_batch(events, sources)
        batch = _Batch(events, event_of, careful, Contributions(self.folding, self.fold_from))
        # The next batch fills and begins while this one finishes (live traffic too: a
        # case does not wait for the batch before it to be published and folded).
        batch.overlaps = not careful
        for event, source in zip(events, sources, strict=True):
            key = _guard_key(source)
            if (
                key in careful
                and self.guard is not None
                and self.guard.is_suspect(key, source.offset)
            ):
                batch.suspects.append((len(batch.done), event, source))
            else:
                batch.together.append((len(batch.done), event, source))
            batch.done.append((source, None))
        # The children start on the batch while its marks travel to the broker; nothing
        # of it is published, forwarded or dead-lettered before they are acknowledged.
        batch.submitted = self._submit([(event, source) for _, event, source in batch.together])
        batch.marks_written = asyncio.ensure_future(self._flush_marks(list(event_of), event_of))
        return batch

    def _observe_backlog(self, sources: list[input_records.SourcePosition]) -> None:
        """Tell the input backlog how many records of each partition of a batch read at
        `sources` still wait past it (the consumer's high watermark as last fetched)."""
        last: dict[TP, int] = {}
        for source in sources:
            last[TP(source.topic, source.partition)] = source.offset
        consumer = self.app.consumer
        for tp, offset in last.items():
            try:
                highwater = consumer.highwater(tp)
            except Exception:  # revoked meanwhile (a rebalance): unknown
                highwater = None
            self.context.input_backlog.observe(tp.partition, highwater, offset)

    async def finish_batch(self, batch: _Batch) -> None:
        """Finish a begun micro-batch. Its results go out as they are scored (a record
        batch per partition per chunk), then its contributions to the windows, combined
        into one record per suite|segment; only then does each partition's progress
        count the batch (its markers must follow the contributions they cover), and
        progress that may close a window goes out at once, so no final waits for the
        timer (`_send_batch_progress`)."""
        self._observed.clear()
        assert batch.marks_written is not None and batch.submitted is not None
        await batch.marks_written
        done, contributions, event_of = batch.done, batch.contributions, batch.event_of
        for index, event, source in batch.suspects:
            # The worker died inside this range: one record at a time, each marked first.
            key = _guard_key(source)
            attempts = await self._guard_record(key, source.offset, event_of)
            if attempts > self.settings.limits.poison_pill_attempts:
                message = (
                    f"the worker stopped {attempts - 1} times while processing this "
                    f"record (limits.poison_pill_attempts: "
                    f"{self.settings.limits.poison_pill_attempts})"
                )
                await self._dead_letter(event, input_records.POISON_PILL, message, source)
                continue
            done[index] = (source, await self.supervised(event, source, contributions))
        event_times = await self._complete(batch.submitted, contributions)
        for (index, _, source), event_time in zip(batch.together, event_times, strict=True):
            done[index] = (source, event_time)
        if self.early is not None:  # ahead of the markers that cover them, as the rest
            for key, value in self.early.take():
                await self.publisher.early(key, value)
        await self.publisher.contribute(contributions)
        observe_all(self.context, self._observed)
        if self.guard is not None:
            for key, event in event_of.items():
                with event_context(event):
                    self.guard.end(key)
        now = self.context.clock()
        for source, event_time in done:
            self.progress.observe(
                source.partition,
                source.offset,
                None if event_time is None else event_time.timestamp(),
                now,
            )
        await self._send_batch_progress({source.partition for source, _ in done}, now)

    async def supervised(
        self,
        event: EventT,
        source: input_records.SourcePosition,
        batch: Contributions | None = None,
    ) -> datetime | None:
        """Score one record, where nothing it does stops the agent: an exception that
        got past the stage's own handling dead-letters the record (`scoring_error`)."""
        (event_time,) = await self._complete(self._submit([(event, source)]), batch)
        return event_time

    def _submit(self, records: list[tuple[EventT, input_records.SourcePosition]]) -> _Submitted:
        """Hand the records to the scoring pool, a chunk at a time (each record under
        `limits.scoring_deadline`: decoding, validation, scoring, the result); records
        without a value or over `max_record_bytes` stay here (`_complete`)."""
        prepared: list[_Pending | _Here] = []
        scoring: list[asyncio.Future[list[Outcome]]] = []
        waiting: list[_Pending] = []
        clock_offset = self.context.clock() - time.time()
        limit = self.settings.max_record_bytes
        # The records were taken together (a micro-batch, or one record): one reading of
        # the clock for all of them, not a datetime each.
        received = self.context.now()
        received_at = received.timestamp()

        def send() -> None:
            tasks = [item.task for item in waiting]
            scoring.append(asyncio.ensure_future(self.context.scoring_pool.score_records(tasks)))
            waiting.clear()

        for event, source in records:
            value = event.value
            if not isinstance(value, bytes) or len(value) > limit:  # dead-lettered here
                prepared.append(_Here(event, source, received))
                continue
            stamp = None if source.timestamp is None else source.timestamp.timestamp()
            task = (
                value,
                received_at,
                (source.topic, source.partition, source.offset, stamp),
                clock_offset,
            )
            pending = _Pending(event, source, received, task)
            prepared.append(pending)
            waiting.append(pending)
            if len(waiting) >= CHUNK_RECORDS:
                send()
        if waiting:
            send()
        return _Submitted(prepared, scoring)

    async def _complete(
        self, submitted: _Submitted, batch: Contributions | None = None
    ) -> list[datetime | None]:
        """Publish, forward or dead-letter each submitted record, in order, as its chunk
        comes back; the event time of each record that had a usable one. Pipelined: a
        chunk is scored while the previous one's results are published: with a `batch`,
        its results go out every `CHUNK_RECORDS` (not at the batch's end; the
        contributions still do)."""
        outcomes = _in_order(submitted.scoring)
        event_times: list[datetime | None] = []
        for item in submitted.prepared:
            event, source = item.event, item.source
            if isinstance(item, _Here):
                step = self._decode_here(event, source, item.received, batch=batch)
                event_times.append(await self._guarded(step, event, source))
                continue
            outcome = await anext(outcomes)
            event_times.append(
                await self._guarded(self._finish(item, outcome, batch), event, source)
            )
            if batch is not None and len(batch.results) + len(batch.forwarded) >= CHUNK_RECORDS:
                await self.publisher.send_results(batch)  # out now, not after the batch
        return event_times

    async def _guarded(
        self,
        step: Coroutine[Any, Any, _T],
        event: EventT,
        source: input_records.SourcePosition,
    ) -> _T | None:
        """Run one record's step, where nothing it does stops the agent: an exception that
        got past the stage's own handling dead-letters the record (`scoring_error`)."""
        try:
            return await step
        except Exception as exc:
            log.exception("unexpected failure on an input record")
            try:
                await self._dead_letter(event, input_records.SCORING_ERROR, repr(exc), source)
            except Exception:
                log.exception("could not dead-letter the failed record")
            return None

    def _mark_batch(
        self, events: list[EventT], sources: list[input_records.SourcePosition]
    ) -> tuple[set[str], dict[str, EventT]]:
        """Mark the batch's offset ranges in flight (made durable by `_flush_marks`); the
        partitions whose range overlaps one the worker died in, to be processed record by
        record, and an event of each partition (the marks' changelog partition).
        `sources`: where each event was read."""
        if self.guard is None:
            return set(), {}
        ranges: dict[str, tuple[int, int]] = {}
        event_of: dict[str, EventT] = {}
        for event, source in zip(events, sources, strict=True):
            key = _guard_key(source)
            offset = source.offset
            first, last = ranges.get(key, (offset, offset))
            ranges[key] = (min(first, offset), max(last, offset))
            event_of[key] = event
        careful = set()
        for key, (first, last) in ranges.items():
            with event_context(event_of[key]):  # the mark goes to this partition
                if self.guard.begin_batch(key, first, last):
                    careful.add(key)
        if careful:
            log.warning("input %s: the worker stopped inside this range; record by record", careful)
        return careful, event_of

    async def _guard_record(self, key: str, offset: int, event_of: dict[str, EventT]) -> int:
        assert self.guard is not None
        with event_context(event_of[key]):
            attempts = self.guard.begin_record(key, offset)
        await self._flush_marks([key], event_of)
        return attempts

    async def _flush_marks(self, keys: list[str], event_of: dict[str, EventT]) -> None:
        """Make the in-flight marks of `keys` durable before the work they cover starts
        (the producer only sends once the worker is ready, so that is awaited first).
        Folding relies on them (`_learn_fold_from`: nothing past a partition's `reached`
        was contributed), so marks the broker did not acknowledge are written again and
        waited for until it does; the batch waits meanwhile, as its outputs would."""
        if self.guard is None:
            return
        if self.ready is not None:
            try:
                await asyncio.wait_for(self.ready.wait(), READY_TIMEOUT)
            except TimeoutError:
                log.warning("not started in %ss: flushing the in-flight marks", READY_TIMEOUT)
        marks = self.guard.marks
        written = getattr(marks, "written", None)
        if written is None:  # a plain mapping (tests): nothing to wait for
            return
        while not await written(MARK_TIMEOUT):
            log.warning("in-flight marks not acknowledged in %ss: writing them again", MARK_TIMEOUT)
            for key in keys:
                with event_context(event_of[key]):
                    marks[key] = marks[key]

    async def _decode_here(
        self,
        event: EventT,
        source: input_records.SourcePosition,
        received: datetime,
        early: EarlyTurns | None = None,
        batch: Contributions | None = None,
    ) -> datetime | None:
        """A record the scoring pool does not take to a result: one without a value or
        over `max_record_bytes` (dead-lettered), or a session suite's turn (forwarded to
        the session stage, with `batch` when there is one, and counted for the early
        gates with what the pool judged of it: `early`); the event time when the record
        had a usable one."""
        settings = self.settings
        try:
            record = input_records.decode_record(
                event.value, settings.max_record_bytes, settings.limits
            )
            event_time = input_records.usable_event_time(
                record.event_time() or source.timestamp or received,
                received,
                settings.max_future_skew,
            )
            sessions = self.context.suites.sessions
            if sessions is None or not isinstance(record, sessions.record_model):
                # the children say a record is not a case only when it is a session record
                raise RuntimeError(f"a {record.suite} record came back from the scoring pool")
            self.context.suites.check_session(record.payload)
            await self._forward_turn(
                event.value,
                sessions.session_id(record.payload),
                source,
                received,
                event_time.timestamp(),
                batch,
            )
            if early is not None and self.early is not None:
                segments = aggregation.segments_for(
                    record.model, record.labels, self.settings.segment_by
                )
                kind = "session" if hasattr(record.payload, "turns") else "turn"
                case = (record.id, kind, record.model, record.trace_id)
                self.early.add(segments, event_time.timestamp(), early, case)
            return event_time
        except OutputTooLarge as exc:
            await self._dead_letter(event, input_records.OUTPUT_TOO_LARGE, str(exc), source)
            return None
        except input_records.Rejected as rejected:
            await self._dead_letter(event, rejected.reason, rejected.message, source)
            return None

    async def _finish(
        self, case: _Pending, outcome: Outcome, batch: Contributions | None = None
    ) -> datetime | None:
        """Publish a scored record, forward a session suite's record to the session
        stage, or dead-letter it with the reason it was not scored."""
        event, source, scored = case.event, case.source, outcome.scored
        if isinstance(scored, SessionRecord):
            return await self._forward(case, scored, batch)
        if isinstance(scored, EarlyTurns):
            return await self._decode_here(event, source, case.received, scored, batch)
        if scored == NOT_A_CASE:
            return await self._decode_here(event, source, case.received, batch=batch)
        if not isinstance(scored, ScoredRecord):
            reason = outcome.reason or input_records.SCORING_ERROR
            if reason == input_records.SCORING_ERROR:  # a scorer bug
                log.error("scoring failed: %s", outcome.message)
            await self._dead_letter(event, reason, outcome.message, source)
            return None
        result = result_facts(scored.value)  # not validated again: the child built it
        try:
            await self.publisher.result(result, batch=batch, value=scored.value)
        except OutputTooLarge as exc:
            await self._dead_letter(event, input_records.OUTPUT_TOO_LARGE, str(exc), source)
            return None
        if batch is None:
            observe(self.context, result, outcome.seconds)
        else:
            self._observed.append((result, outcome.seconds))
        return result.ts

    async def _dead_letter(
        self, event: EventT, reason: str, message: str, source: input_records.SourcePosition
    ) -> None:
        key = event.key if isinstance(event.key, bytes) else None
        await self.publisher.dead_letter(
            event.value, key, reason, message, source, self.context.now()
        )

    async def _forward(
        self, case: _Pending, read: SessionRecord, batch: Contributions | None = None
    ) -> datetime | None:
        """Hand a session suite's record, as its scoring process read it, to the session
        stage (with `batch`'s results, when there is one), and count it for the early
        gates; its event time."""
        event, source = case.event, case.source
        try:
            await self._forward_turn(
                event.value, read.session_id, source, case.received, read.event_time, batch
            )
        except OutputTooLarge as exc:
            await self._dead_letter(event, input_records.OUTPUT_TOO_LARGE, str(exc), source)
            return None
        if read.early is not None and self.early is not None:
            segments = aggregation.segments_for(read.model, read.labels, self.settings.segment_by)
            self.early.add(segments, read.event_time, read.early, read.case)
        return datetime.fromtimestamp(read.event_time, UTC)

    async def _forward_turn(
        self,
        raw: bytes,
        session_id: str,
        source: input_records.SourcePosition,
        received: datetime,
        event_time: float,
        batch: Contributions | None = None,
    ) -> None:
        """Hand a session suite's record (`raw`: its bytes, which decoded) to the session
        stage, keyed by its session (with `batch`'s results, when there is one)."""
        position = (source.topic, source.partition, source.offset)
        value = session_message(raw, position, event_time, received.timestamp())
        await self.publisher.turn(session_id, value, batch)

    # ---------------------------------------------------------------- progress

    def forget(self) -> None:
        """After a rebalance: the partitions this worker reads may have changed."""
        self.progress.forget()
        self.fold_from.clear()
        self.input_partitions = None
        self.context.input_backlog.forget()

    def _learn_fold_from(self, partition: int) -> None:
        """Set `fold_from` of an input partition: the first offset no one can have
        contributed yet. With the poison-pill guard, one past the partition's `reached`
        in-flight mark (read before this worker marks anything after an assignment;
        every batch is marked durably before its work, so nothing past it was
        contributed), or 0 when nothing was ever marked or committed: a backlog folds.
        Without the guard, or when a commit lies past the marks (written by a worker
        without the guard), the partition's high watermark as this worker's fetches
        report it (unknown yet: its results go case by case for now)."""
        if partition in self.fold_from:
            return
        tp = TP(self.settings.topics.input, partition)
        reached = committed = None
        if self.guard is not None:
            reached = self.guard.reached(f"{tp.topic}|{partition}")
            try:
                committed = stream_offsets(self.app.consumer)[0].get(tp)
            except Exception:  # no Faust consumer (tests): nothing committed here
                committed = None
            if reached is None and committed is None:
                self._fold_from(partition, 0, "nothing marked or committed")
                return
            if reached is not None and (committed is None or committed <= reached + 1):
                self._fold_from(
                    partition, reached + 1, f"in flight up to {reached}, committed {committed}"
                )
                return
        try:
            highwater = self.app.consumer.highwater(tp)
        except Exception:  # no consumer (tests) or revoked meanwhile: not folded yet
            return
        if highwater is not None:
            self._fold_from(partition, int(highwater), f"high watermark; committed {committed}")

    def _fold_from(self, partition: int, offset: int, why: str) -> None:
        """Record `fold_from` (logged: one line per input partition and assignment, what
        a handover's audit reads first)."""
        self.fold_from[partition] = offset
        log.info("input partition %s: folding from offset %s (%s)", partition, offset, why)

    async def _send_batch_progress(self, partitions: set[int], now: float) -> None:
        """Right behind a micro-batch's outputs: one marker record (to every partition of
        both internal topics) when the event-time component says the batch's progress may
        close a window (`InputProgress.batch_markers`); the rest waits for the timer
        (`send_progress`, every `tick_interval`)."""
        try:
            count = self._input_partition_count()
            assigned = {tp.partition for tp in self._assigned()}
        except Exception:  # no consumer (tests) or revoked meanwhile: the timer sends it
            log.debug("batch progress not sent", exc_info=True)
            return
        if not count:
            return
        markers = self.progress.batch_markers(partitions, assigned, count)
        if markers:
            await self._send_markers(markers, now)

    async def _send_markers(self, markers: list[Marker], now: float) -> None:
        topics = self.publisher.topics
        await self.publisher.markers(topics.turns, markers)
        await self.publisher.markers(topics.aggregate_input, markers)
        self.progress.sent(markers, now)

    def _input_partition_count(self) -> int | None:
        if self.input_partitions is None:
            topic = self.settings.topics.input
            count = self.app.consumer.topic_partitions(topic) or self._partition_count(topic)
            self.input_partitions = count or None
        return self.input_partitions

    def _assigned(self) -> list[TP]:
        """The input partitions this worker reads, in order."""
        topic = self.settings.topics.input
        return sorted(
            (tp for tp in self.app.consumer.assignment() if tp.topic == topic),
            key=lambda tp: tp.partition,
        )

    async def send_progress(self) -> None:
        """The timer's markers (`InputProgress.tick_markers`: progress that moved, idle
        partitions following the wall clock, heartbeats), as one marker record to every
        partition of both internal topics."""
        consumer = self.app.consumer
        count = self._input_partition_count()
        if not count:
            return
        now = self.context.clock()
        partitions = []
        for tp in self._assigned():
            try:
                highwater = consumer.highwater(tp)
            except Exception:  # revoked meanwhile (a rebalance): the next tick sees it
                partitions.append(
                    AssignedPartition(tp.partition, self._start_offset(tp), None, False)
                )
                continue
            if self.folding is not None and self.guard is None:
                # early: a quiet partition's live records fold (with the guard they fold
                # anyway; its table may still be recovering here, so only batches read it)
                self._learn_fold_from(tp.partition)
            partitions.append(AssignedPartition(tp.partition, self._start_offset(tp), highwater))
        markers = self.progress.tick_markers(partitions, count, now)
        await self._send_markers(markers, now)

    def _partition_count(self, topic: str) -> int | None:
        """Partitions of `topic` from the consumer's cluster metadata (Faust's own answer
        is None on a worker that joined a group whose assignment it did not compute)."""
        try:
            partitions = kafka_consumer(self.app.consumer).partitions_for_topic(topic)
        except Exception:
            log.debug("no metadata for %s yet", topic, exc_info=True)
            return None
        return len(partitions) if partitions else None

    def _start_offset(self, tp: TP) -> int | None:
        """Where this worker's reading of `tp` started after the assignment (the seek
        guard's record: the group's committed offset, or the earliest with none). Not
        the consumer's position: the fetcher moves that past records the stage holds but
        has not finished, e.g. while the scoring child starts on a loaded machine, and
        those would turn late if the partition followed the wall clock. None before the
        seek: not caught up."""
        return start_offsets(self.app.consumer).get(tp)


@dataclass
class _Batch:
    """A begun micro-batch, for `finish_batch`."""

    events: list[EventT]
    event_of: dict[str, EventT]  # an event of each input partition (guard key)
    careful: set[str]  # partitions with a range the worker died in
    contributions: Contributions
    done: list[tuple[input_records.SourcePosition, datetime | None]] = field(default_factory=list)
    together: list[tuple[int, EventT, input_records.SourcePosition]] = field(default_factory=list)
    suspects: list[tuple[int, EventT, input_records.SourcePosition]] = field(default_factory=list)
    submitted: _Submitted | None = None
    marks_written: asyncio.Future[None] | None = None
    overlaps: bool = False  # the next batch may begin while this one finishes

    @property
    def alone(self) -> bool:
        """Finished before the next batch begins (`overlap_batches`)."""
        return not self.overlaps


@dataclass(frozen=True)
class _Here:
    """A record the stage decodes itself (no value, or over `max_record_bytes`)."""

    event: EventT
    source: input_records.SourcePosition
    received: datetime


@dataclass(frozen=True)
class _Submitted:
    """Records handed to the scoring pool, in order, and the chunks being scored."""

    prepared: list[_Pending | _Here]
    scoring: list[asyncio.Future[list[Outcome]]]


class _Pending(NamedTuple):
    """A record handed to the scoring pool, waiting for its outcome (one per record: a
    named tuple is the cheapest to build)."""

    event: EventT
    source: input_records.SourcePosition
    received: datetime
    task: RecordTask


async def _in_order(scoring: list[asyncio.Future[list[Outcome]]]) -> AsyncIterator[Outcome]:
    """The outcomes of the chunks being scored, in order, as each chunk is done."""
    for future in scoring:
        for outcome in await future:
            yield outcome


def early_folds(settings: Any) -> EarlyFolds | None:
    """The score stage's early folds (`worker.gates.early`), or None when the session
    suite has no gate a sample can judge (or `early_gates.sample` is 0)."""
    spec = registry.session_suite()
    if spec is None or not early_share(settings):
        return None
    gates = early_gates(settings.gates, spec.name)
    return EarlyFolds(
        sizes=sorted({gate.window for gate in gates}),
        metrics=list(dict.fromkeys(gate.metric for gate in gates)),
        suite=spec.name,
    )


def _guard_key(source: input_records.SourcePosition) -> str:
    return f"{source.topic}|{source.partition}"


def observe(context: StreamContext, result: ResultView, scoring_seconds: float) -> None:
    """Record a published result in the telemetry (count, scores, latency)."""
    observe_all(context, [(result, scoring_seconds)])


def observe_all(context: StreamContext, scored: list[tuple[ResultView, float]]) -> None:
    """Record published results, each with its scoring time, in the telemetry at once."""
    context.telemetry.record_results(
        (result, seconds, max(0.0, (result.scored_at - result.ts).total_seconds()))
        for result, seconds in scored
    )


def decode(event: EventT) -> dict[str, Any]:
    """An internal-topic value as JSON."""
    value: dict[str, Any] = orjson.loads(event.value)
    return value
