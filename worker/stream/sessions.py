"""The session stage: the turns of the suite that keeps sessions (`registry.session_suite()`,
alignment), keyed by session. Embeds micro-batches off the event loop, scores turns in the
scoring pool (each under `limits.scoring_deadline`), keeps open sessions in a
changelog-backed table, closes them on their final turn or when idle in event time, and
passes the watermark on to the aggregation. What a record, a turn and a session state
are is the suite's `SessionSuite` (`worker.suites.base`); this module names no suite.

When an idle session closes is the event-time component's rule
(`worker.windowing.event_time.SessionWindows`, on this partition's watermark: the minimum
progress of the input partitions, from the markers in this stream), so a worker that was
down, or has a backlog, never expires a session whose turns are still to be read.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, MutableMapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, NamedTuple

import orjson
from faust.types import EventT

from worker.input import records as input_records
from worker.input.result_facts import ResultView, result_facts
from worker.input.scored_records import (
    Framed,
    FramedAnswer,
    ResultFrame,
    bundled_messages,
    session_messages,
)
from worker.input.unknown_fields import unknown_fields, with_unknown_fields
from worker.ops.telemetry import EMBEDDING_SKIPPED_OVERLOAD
from worker.scoring_pool import Case, Outcome
from worker.stream.context import StreamContext, event_context
from worker.stream.faust_patches.held_batches import HeldBatch, take_held_batches
from worker.stream.overlap import overlap_batches
from worker.stream.publish import Contributions, OutputTooLarge, markers_of
from worker.stream.scoring import observe, observe_all
from worker.suites import registry
from worker.suites.base import SessionSuite, TurnInput
from worker.windowing.event_time import INPUT_GROUP, SESSION_GROUP, Marker, Watermark
from worker.windowing.session_deadlines import SessionDeadlines

log = logging.getLogger("scorestream")

PROGRESS_PREFIX = "sess"  # progress["sess|{p}"]: the partition's watermark
# Open sessions whose live state the stage keeps beside the table (`_state_of`).
LIVE_SESSIONS = 4096
EMBEDDING_CHUNK = 64  # texts per executor call (bench/stream.py: 1.25x the turns/s of 16)
# Micro-batches in hand: one being applied, the next being encoded and scored.
BATCHES_IN_HAND = 2


@dataclass(frozen=True)
class TurnContext:
    """A session record on the session stream, with where and when it was read."""

    record: Any  # the suite's envelope model (`SessionSuite.record_model`)
    source: input_records.SourcePosition
    event_time: datetime
    received: datetime


class SessionStage:
    """Scores the turns and sessions of the suite that keeps sessions; `sessions` and
    `progress` are Faust tables (plain dicts in tests) written only from this stage's
    partitions."""

    def __init__(
        self,
        context: StreamContext,
        sessions: MutableMapping[str, Any],
        progress: MutableMapping[str, Any],
        executor: Executor,
    ) -> None:
        spec = registry.session_suite()
        if spec is None or context.suites.sessions is None:
            raise RuntimeError("no registered suite keeps sessions")
        self.context = context
        self.settings = context.settings
        self.publisher = context.publisher
        self.suite = spec.name
        self.hooks: SessionSuite = context.suites.sessions
        self.timing = self.hooks.timing(spec.section(self.settings))
        self.sessions = sessions
        # Event time: this stage's watermarks and the session windows on them.
        self.progress = context.event_time.stage(progress, PROGRESS_PREFIX, {INPUT_GROUP: 0})
        self.session_windows = context.event_time.sessions(self.timing.idle_timeout)
        # Which sessions each partition's watermark reached: every table write is noted.
        self.deadlines = SessionDeadlines(self.session_windows)
        self._forward: dict[int, Marker] = {}  # partition -> watermark to pass on
        self.executor = executor
        self.judge = self.hooks.make_judge(context.telemetry.record_judge_error)
        self.encoder_pace = EncoderPace()
        # When this stage began its first batch since it started or was assigned its
        # partitions: a turn that waited for that is not behind because of overload.
        self.active_since: float | None = None
        # The turn results of the chunk being applied, sent at its end (None: at once).
        self._results: Contributions | None = None
        # The sessions the chunk being applied changed (open state or a closed session's
        # tombstone), written to the table once each at its end, after its results
        # (`_write_sessions`): a session's turns in one chunk cost one changelog record.
        self._changed: dict[str, tuple[dict[str, Any], EventT]] = {}
        # The chunk's turn results and their scoring times, for the telemetry at its end.
        self._observed: list[tuple[ResultView, float]] = []
        # The live state of recently written open sessions, with the entry it was dumped
        # into, oldest first (`_state_of`).
        self._live: dict[str, tuple[dict[str, Any], Any]] = {}
        # The encoding of the batch begun last (`begin_batch`): the next one waits for it.
        self._encoding: asyncio.Future[None] | None = None

    def forget(self) -> None:
        """Drop cached watermarks and deadlines after a rebalance (the tables have them)."""
        self.progress.forget()
        self.deadlines.forget()
        self._live.clear()
        self.active_since = None

    # ---------------------------------------------------------------- batches

    async def agent(self, stream: Any) -> None:  # faust.Stream
        """Micro-batches, overlapped (`overlap_batches`): the next batch is encoded and
        scored while the one before is applied, so that neither the children nor this
        stage waits for the other between batches."""
        batches = take_held_batches(
            stream,
            self.settings.embedding_batch_size,
            self.settings.embedding_batch_wait,
            max_held=BATCHES_IN_HAND,
            weight=lambda event: bundled_messages(event.key),  # a bundle, its messages
        )
        await overlap_batches(
            self._giving_way(batches), self.begin_batch, self.finish_batch, BATCHES_IN_HAND
        )

    async def _giving_way(self, batches: AsyncIterator[HeldBatch]) -> AsyncIterator[HeldBatch]:
        """Each batch once the input is not behind (`worker.stream.input_backlog`)."""
        backlog = self.context.input_backlog
        async for batch in batches:
            await backlog.give_way()
            yield batch

    async def process_batch(self, events: list[EventT]) -> None:
        """Embed, score and apply a micro-batch in order (`begin_batch`, `finish_batch`)."""
        await self.finish_batch(self.begin_batch(events))

    def begin_batch(self, events: list[EventT]) -> _SessionBatch:
        """Start embedding and scoring a micro-batch, in chunks (nothing is awaited, so
        this may run while the batch before is applied). Chunk after chunk, in a task:
        while the executor encodes a chunk, the scoring children score the chunk before
        it. A turn more than the suite's `max_lag` (`alignment.embedding.max_lag`) behind
        is not embedded (`embedding_plan`): it is scored without its vector (safety
        alone), so safety keeps pace with any input rate. A batch's encoding starts once
        the batch before it was encoded, so that the plan sees the encoder's queue."""
        items: _Chunk = []
        for event in events:
            try:
                data = orjson.loads(event.value)
            except orjson.JSONDecodeError:  # not written by a worker: nothing to score
                log.error("skipping an undecodable session-stream record")
                continue
            items.extend((event, message) for message in session_messages(data))
        chunks = _chunks_by_texts(items, EMBEDDING_CHUNK, self._texts_of)
        if self.active_since is None:
            self.active_since = self.context.clock()
        loop = asyncio.get_running_loop()
        scored: list[asyncio.Future[_ScoredVectors]] = [loop.create_future() for _ in chunks]
        self._encoding = asyncio.ensure_future(
            self._encode_and_score(chunks, scored, self._encoding, self.active_since)
        )
        return _SessionBatch(events, chunks, scored)

    async def finish_batch(self, batch: _SessionBatch) -> None:
        """Apply and publish a begun batch's chunks in order, as the children score them,
        then pass the watermarks it moved on. The batch is acknowledged only after this
        returns, so nothing is acked before it is applied."""
        for chunk, scoring in zip(batch.chunks, batch.scored, strict=True):
            vectors, scored = await scoring
            await self._apply_chunk(chunk, vectors, scored)
        await self.forward_progress()

    async def _encode_and_score(
        self,
        chunks: list[_Chunk],
        scored: list[asyncio.Future[_ScoredVectors]],
        before: asyncio.Future[None] | None,
        active_since: float,
    ) -> None:
        """Encode `chunks` one after the other (the next while the children score one)
        and hand each to the children; `scored[i]` gets chunk i's vectors and scoring, or
        the failure that stopped it (the chunks after it get that failure too)."""
        if before is not None:
            await asyncio.wait([before])
        texts_of = self._texts_of
        loop = asyncio.get_running_loop()
        max_lag = self.timing.max_lag

        def encode(chunk: _Chunk) -> _ChunkVectors:
            """Start encoding the turns of `chunk` that are within `max_lag` now, counting
            a turn's wait from when this stage became active at the earliest (the time a
            worker spends starting, or taking over partitions, is not overload)."""
            now = self.context.clock()
            lags = [
                now - max(float(data["received"]), active_since)
                for _, data in chunk
                for _ in texts_of(data)
            ]
            plan = embedding_plan(lags, max_lag, self.encoder_pace.seconds_per_text)
            texts = [text for _, data in chunk for text in texts_of(data)]
            chosen = [text for text, embed in zip(texts, plan, strict=True) if embed]
            skipped = len(texts) - len(chosen)
            if skipped:
                self.context.telemetry.record_embeddings_skipped(
                    skipped, EMBEDDING_SKIPPED_OVERLOAD
                )
            if not chosen:
                return _ChunkVectors(plan, None)
            self.context.telemetry.record_embedding_batch(len(chosen))
            future = loop.run_in_executor(self.executor, self._embed, chosen)
            return _ChunkVectors(plan, future)

        position = 0
        try:
            pending = encode(chunks[0]) if chunks else None
            for position, chunk in enumerate(chunks):
                assert pending is not None
                vectors = await pending.vectors()
                pending = encode(chunks[position + 1]) if position + 1 < len(chunks) else None
                # hand the chunk to the children before the next encoding is awaited
                scoring = asyncio.ensure_future(self._score_turns(chunk, vectors))
                scoring.add_done_callback(_passing_on(scored[position], vectors))
                await asyncio.sleep(0)
        except Exception as exc:
            for future in scored[position:]:
                if not future.done():
                    future.set_exception(exc)
        except BaseException:  # cancelled: so are the chunks still to come
            for future in scored[position:]:
                future.cancel()
            raise

    async def _apply_chunk(self, chunk: _Chunk, vectors: list[Any], scored: _ScoredChunk) -> None:
        """Apply a chunk's messages in order, once the children scored its turns; the turn
        results leave together at the end (one record batch per partition), before any
        marker the batch forwards (a replayed turn publishes its result again)."""
        contexts, outcomes = scored
        self._results = Contributions()
        try:
            await self._apply_messages(chunk, contexts, vectors, outcomes)
        finally:
            results, self._results = self._results, None
            try:
                await self.publisher.contribute(results)
            finally:
                self._write_sessions()
                observed, self._observed = self._observed, []
                observe_all(self.context, observed)

    async def _flush_chunk(self) -> None:
        """Send the chunk's results so far, then write the sessions they changed: a
        session's tombstone never reaches the table ahead of the session's result
        (should the worker stop between them, its replayed turns find the session open
        and close it again, not closed without a result)."""
        if self._results is not None:
            await self.publisher.contribute(self._results)
        self._write_sessions()

    def _write_sessions(self) -> None:
        """Write the sessions the chunk changed to the table, each once."""
        for session_id, (entry, event) in self._changed.items():
            with event_context(event):  # a table write goes to the event's partition
                self.sessions[session_id] = entry
            self.deadlines.note(session_id, entry)
        self._changed.clear()

    def _store(self, session_id: str, entry: dict[str, Any], event: EventT) -> None:
        """Keep a session's new entry until the chunk's end (`_write_sessions`), or write
        it now outside a chunk."""
        if self._results is not None:
            self._changed[session_id] = (entry, event)
        else:
            self.sessions[session_id] = entry
            self.deadlines.note(session_id, entry)

    async def _apply_messages(
        self,
        chunk: _Chunk,
        contexts: list[TurnContext | Exception | None],
        vectors: list[Any],
        scored: list[Outcome],
    ) -> None:
        texts_of = self._texts_of
        cursor = 0
        for (event, data), context in zip(chunk, contexts, strict=True):
            count = len(texts_of(data))
            with event_context(event):
                try:
                    markers = markers_of(data)
                    if markers:
                        await self.on_markers(event, markers)
                        continue
                    span = slice(cursor, cursor + count)
                    if not isinstance(context, TurnContext):
                        raise context or ValueError("a session-stream record without a record")
                    await self._apply(event, data, context, vectors[span], scored[span])
                except Exception:  # nothing one message does stops the stage
                    log.exception("session stage: unexpected failure on a message")
                finally:
                    cursor += count

    def _embed(self, texts: list[str]) -> Any:
        """Encode `texts` (in the executor) and keep the encoder's pace up to date."""
        started = time.perf_counter()
        vectors = self.context.suites.embed(texts)
        self.encoder_pace.observe(len(texts), time.perf_counter() - started)
        return vectors

    async def _score_turns(self, chunk: _Chunk, vectors: list[Any]) -> _ScoredChunk:
        """Score every text of a chunk in the scoring pool (in the order of `_texts_of`,
        as the vectors are; a None vector: the turn was not embedded), each with the
        frame of its result, which the child writes too (`Framed`); with each message's
        context (None: a marker; an exception: a record that did not validate)."""
        hooks = self.hooks
        contexts = [self._context_of(data) for _, data in chunk]
        clock_offset = self.context.clock() - time.time()
        cases: list[Case] = []
        for (_, data), context in zip(chunk, contexts, strict=True):
            texts = self._texts_of(data)
            if not texts:
                continue
            payload = data["record"]["payload"]
            frames = self._frames(context, data, len(texts), clock_offset)
            for index, text in enumerate(texts):
                item = hooks.pool_item(payload, text, vectors[len(cases)])
                if frames is not None:
                    item = Framed(item, frames[index])
                cases.append((hooks.pool_scorer, item, len(text)))
        if not cases:
            return contexts, []
        return contexts, await self.context.scoring_pool.score(cases)

    def _context_of(self, data: dict[str, Any]) -> TurnContext | Exception | None:
        """A session-stream message's record, validated, with where and when it was read
        (None: a marker; the exception when it does not validate)."""
        if "record" not in data:
            return None
        try:
            record = self.hooks.record_model.model_validate(data["record"], strict=False)
            topic, partition, offset = data["source"]
            return TurnContext(
                record=record,
                source=input_records.SourcePosition(topic, partition, offset),
                event_time=datetime.fromtimestamp(float(data["event_time"]), UTC),
                received=datetime.fromtimestamp(float(data["received"]), UTC),
            )
        except Exception as exc:
            return exc

    def _frames(
        self, context: Any, data: dict[str, Any], count: int, clock_offset: float
    ) -> list[ResultFrame] | None:
        """The frames of the results of a record's `count` turns, as `_emit_turn` writes
        them (None: the record did not validate, or is not what its texts say)."""
        if not isinstance(context, TurnContext):
            return None
        record = context.record
        try:
            whole = self.hooks.turns(record.payload)[1]
            unknown = tuple(unknown_fields(record.payload))
        except Exception:  # `_apply` reports it
            return None
        if whole:
            ids = [f"{record.id}#{index}" for index in range(count)]
        elif count == 1:
            ids = [record.id]
        else:
            return None
        source = context.source
        return [
            ResultFrame(
                case_id=case_id,
                suite=self.suite,
                kind="turn",
                event_time=float(data["event_time"]),
                model=record.model,
                labels=record.labels,
                source=(source.topic, source.partition, source.offset),
                received=float(data["received"]),
                trace_id=record.trace_id,
                unknown=unknown,
                clock_offset=clock_offset,
            )
            for case_id in ids
        ]

    def _texts_of(self, data: dict[str, Any]) -> list[str]:
        """The texts to embed for one message of the session stream (none for a marker)."""
        return self.hooks.texts(data["record"]["payload"]) if "record" in data else []

    # ---------------------------------------------------------------- progress

    def watermark(self, partition: int) -> Watermark:
        return self.progress.watermark(partition)

    async def on_markers(self, event: EventT, markers: Sequence[Marker]) -> None:
        """Take input partitions' progress (`markers`, read in `event`); expire idle
        sessions; pass the partition's watermark on (with the batch's other partitions',
        at the end of the batch)."""
        partition = event.message.partition
        await self._flush_chunk()  # the sessions before the progress that covers them
        advance = self.progress.on_markers(partition, markers)
        self.progress.flush(partition)  # at once, as the sessions it covers were
        current = advance.passed
        if current is None:
            return
        await self.expire(event, current)
        count = self.settings.stream.partitions
        self._forward[partition] = Marker(SESSION_GROUP, partition, count, current)

    async def forward_progress(self) -> None:
        """Send the watermarks the batch moved, as one marker record to every partition of
        the aggregation stage's topic, after every session result of the batch."""
        forward, self._forward = self._forward, {}
        markers = [forward[partition] for partition in sorted(forward)]
        await self.publisher.markers(self.publisher.topics.aggregate_input, markers)

    async def expire(self, event: EventT, watermark: float) -> None:
        """Close the sessions of the partition of `event` (a marker) whose session window
        `watermark` closed, and drop the tombstones of closed sessions once as old
        (`SessionWindows`)."""
        partition = event.message.partition
        rule = self.session_windows
        for session_id, stored in self.deadlines.due(partition, watermark, self.sessions):
            if stored.get("closed"):
                del self.sessions[session_id]  # the tombstone of a closed session
                continue
            idle_at = rule.closes_at(float(stored["ts"]))
            try:
                state = self._state_of(session_id, stored)
                closed_at = datetime.fromtimestamp(idle_at, UTC)
                await self.close_session(state, closed_at, stored["model"], stored["labels"])
            except Exception:  # a session that cannot be scored must not stop the stage
                log.exception("closing session %r failed", session_id[:200])
            tombstone = {"closed": True, "at": idle_at, "partition": partition}
            self._store(session_id, tombstone, event)

    # ---------------------------------------------------------------- turns

    async def _apply(
        self,
        event: EventT,
        data: dict[str, Any],
        context: TurnContext,
        vectors: Any,
        scored: list[Outcome],
    ) -> None:
        record = context.record
        try:
            turns, whole = self.hooks.turns(record.payload)
            if whole:
                await self._apply_whole_session(context, turns, vectors, scored)
            else:
                await self._apply_turn(context, turns[0], vectors[0], scored[0], event)
        except input_records.Rejected as rejected:
            await self._dead_letter(data, rejected.reason, rejected.message, context)
        except OutputTooLarge as exc:
            await self._dead_letter(data, input_records.OUTPUT_TOO_LARGE, str(exc), context)
        except Exception as exc:  # a scorer bug must not kill the agent or lose the record
            log.exception("%s scoring failed", self.suite)
            await self._dead_letter(data, input_records.SCORING_ERROR, repr(exc), context)

    async def _dead_letter(
        self, data: dict[str, Any], reason: str, message: str, context: TurnContext
    ) -> None:
        """Dead-letter the original input record of a forwarded session message."""
        await self.publisher.dead_letter(
            orjson.dumps(data["record"]),
            self.hooks.session_id(context.record.payload).encode("utf-8"),
            reason,
            message,
            context.source,
            self.context.now(),
        )

    async def _apply_whole_session(
        self,
        context: TurnContext,
        turns: list[TurnInput],
        vectors: Any,
        scored: list[Outcome],
    ) -> None:
        """Apply every scored turn of a session sent at once, then score the session (a
        turn that could not be scored dead-letters the whole record)."""
        hooks = self.hooks
        record = context.record
        payload = record.payload
        scores = [_turn_score(outcome) for outcome in scored]
        state = hooks.open(payload)
        for index, (turn, vector) in enumerate(zip(turns, vectors, strict=True)):
            hooks.add(state, turn, scores[index].turn, vector, self.context.clock())
            turn_id = f"{record.id}#{index}"
            await self._emit_turn(context, turn_id, scores[index], scored[index].seconds)
        await self.close_session(state, context.event_time, record.model, record.labels)

    async def _apply_turn(
        self,
        context: TurnContext,
        turn: TurnInput,
        vector: Any,
        scored: Outcome,
        event: EventT,
    ) -> None:
        """Apply one scored turn to its session, and close the session when complete."""
        hooks = self.hooks
        payload = context.record.payload
        session_id = hooks.session_id(payload)
        written_later = self._changed.get(session_id)
        stored = written_later[0] if written_later else self.sessions.get(session_id)
        if stored and stored.get("closed"):
            # A late repeat of a closed session's turn: its result is re-published under
            # the same key (idempotent for consumers); the session is not reopened.
            await self._emit_turn(context, context.record.id, _turn_score(scored), 0.0)
            return
        state = self._state_of(session_id, stored) if stored else hooks.open(payload)
        hooks.check_turn(state, payload)
        answer = _turn_score(scored)
        await self._emit_turn(context, context.record.id, answer, scored.seconds)
        hooks.add(state, turn, answer.turn, vector, self.context.clock())
        meta = _session_meta(stored, context.record, context.event_time)
        if turn.final:
            meta["final_index"] = turn.index
        partition = event.message.partition
        entry = {"state": hooks.dump(state), "partition": partition, **meta}
        cap = self.settings.limits.session_state_bytes
        at_cap = len(orjson.dumps(entry)) > cap
        if at_cap or hooks.is_complete(state, meta.get("final_index")):
            closed_at = datetime.fromtimestamp(meta["ts"], UTC)
            if at_cap:
                log.warning(
                    "session %r reached limits.session_state_bytes (%d): closed with %d turns",
                    session_id[:200],
                    cap,
                    hooks.turn_count(state),
                )
            tombstone = {"closed": True, "at": meta["ts"], "partition": partition}
            self._store(session_id, tombstone, event)
            await self.close_session(state, closed_at, meta["model"], meta["labels"], at_cap=at_cap)
            return
        self._store(session_id, entry, event)
        self._live[session_id] = (entry, state)
        if len(self._live) > LIVE_SESSIONS:
            del self._live[next(iter(self._live))]

    def _state_of(self, session_id: str, stored: dict[str, Any]) -> Any:
        """The state of a session whose entry is `stored`: the live state that was dumped
        into that very entry, else restored from it (a cost of the session's turns so
        far, at every turn). Taken out of the live states: a turn that fails half-way
        leaves none behind that the table does not hold."""
        live = self._live.pop(session_id, None)
        if live is not None and live[0] is stored:
            return live[1]
        return self.hooks.restore(stored["state"])

    async def _emit_turn(
        self,
        context: TurnContext,
        turn_id: str,
        answer: _Answer,
        elapsed: float,
    ) -> None:
        """Publish a turn's result: the bytes its scoring child wrote (read back only
        for the fields the loop uses, `result_facts`), or built here when it wrote none."""
        value = answer.value
        result: ResultView
        if value is not None:
            result = result_facts(value)
        else:
            result = input_records.build_result(
                case_id=turn_id,
                suite=self.suite,
                kind="turn",
                scored=with_unknown_fields(
                    self.hooks.turn_scored(answer.turn), unknown_fields(context.record.payload)
                ),
                event_time=context.event_time,
                model=context.record.model,
                labels=context.record.labels,
                versions=self.context.suites.versions(self.suite),
                source=context.source,
                scored_at=self.context.now(),
                received_at=context.received,
                trace_id=context.record.trace_id,
            )
        # windows count sessions, not turns
        await self.publisher.result(result, aggregate=False, batch=self._results, value=value)
        if self._results is not None:
            self._observed.append((result, elapsed))  # observed at the chunk's end
        else:
            observe(self.context, result, elapsed)

    async def close_session(
        self,
        state: Any,
        event_time: datetime,
        model: str | None,
        labels: dict[str, str],
        at_cap: bool = False,
    ) -> None:
        """Score a finished session and publish it with `kind: "session"` (`at_cap`: it
        was closed on reaching `limits.session_state_bytes`, said in its details). A
        result too large to send is a dead letter `output_too_large`."""
        started = time.perf_counter()
        scored = await self.hooks.score_session(state, self.judge)
        if at_cap:
            scored = replace(scored, details={**scored.details, "closed_by": "session_state_bytes"})
        # written by orjson, as a scoring child writes a turn's (no `CaseResult` built)
        value = input_records.case_result_json(
            case_id=f"session:{self.hooks.state_session_id(state)}",
            suite=self.suite,
            kind="session",
            scored=scored,
            event_time=event_time,
            model=model,
            labels=labels,
            versions=self.context.suites.versions(self.suite),
            source=None,
            scored_at=self.context.now(),
        )
        result = result_facts(value)
        try:
            # with the chunk's turn results, after them (its tombstone is written after
            # them too: `_write_sessions`)
            await self.publisher.result(result, batch=self._results, value=value)
        except OutputTooLarge as exc:
            await self.publisher.output_too_large(value, exc, str(exc), self.context.now())
            return
        observe(self.context, result, time.perf_counter() - started)


def embedding_plan(
    lags: Sequence[float], max_lag: float | None, seconds_per_text: float = 0.0
) -> list[bool]:
    """Which turns of a chunk to embed, given how far behind (seconds since the score stage
    received it) each is now and the encoder's recent seconds per text: in order, each
    turn that would still be within `max_lag` once it and the turns chosen before it are
    encoded; every one when `max_lag` is None.

    A stage more than `max_lag` behind thus scores turns for safety alone, at the pool's
    pace, until it is back within the bound, and then gives the encoder only what it can
    encode within it: the encoder gets all the turns it can keep up with, and the lag stays
    near `max_lag` whatever the input rate (and however slow one encode call is)."""
    if max_lag is None:
        return [True] * len(lags)
    plan = []
    chosen = 0
    for lag in lags:
        embed = lag + (chosen + 1) * seconds_per_text <= max_lag
        chosen += embed
        plan.append(embed)
    return plan


class EncoderPace:
    """The encoder's recent seconds per text (an exponentially weighted mean over encode
    calls; 0 until the first call)."""

    WEIGHT = 0.3  # of the newest call

    def __init__(self) -> None:
        self.seconds_per_text = 0.0

    def observe(self, texts: int, seconds: float) -> None:
        if texts <= 0:
            return
        pace = seconds / texts
        if self.seconds_per_text == 0.0:
            self.seconds_per_text = pace
        else:
            self.seconds_per_text += self.WEIGHT * (pace - self.seconds_per_text)


@dataclass
class _ChunkVectors:
    """A chunk's embedding plan and the encoding of its chosen texts (None: no text
    chosen)."""

    plan: list[bool]
    future: asyncio.Future[Any] | None

    async def vectors(self) -> list[Any]:
        """One vector per text of the chunk, None for a text left unembedded."""
        encoded = iter(await self.future if self.future is not None else ())
        return [next(encoded) if embed else None for embed in self.plan]


class _Answer(NamedTuple):
    """A turn's score from the pool, with its result's bytes when the child wrote them."""

    turn: Any  # what the suite's turn scorer returned
    value: bytes | None


def _turn_score(outcome: Outcome) -> _Answer:
    """A turn's score from the pool; `Rejected` with the reason when it has none (past
    `limits.scoring_deadline`, a scorer failure)."""
    scored = outcome.scored
    if scored is None:
        reason = outcome.reason or input_records.SCORING_ERROR
        raise input_records.Rejected(reason, outcome.message)
    if isinstance(scored, FramedAnswer):
        return _Answer(scored.answer, scored.value)
    return _Answer(scored, None)


_Chunk = list[tuple[EventT, dict[str, Any]]]  # consecutive messages of a micro-batch
# A chunk's scoring: each message's context (`SessionStage._context_of`), and each
# text's outcome
_ScoredChunk = tuple[list["TurnContext | Exception | None"], list[Outcome]]
_ScoredVectors = tuple[list[Any], _ScoredChunk]  # a chunk's vectors, and its scoring


@dataclass(frozen=True)
class _SessionBatch:
    """A begun micro-batch: its events, their chunks, and each chunk's vectors and
    scoring to come."""

    events: list[EventT]
    chunks: list[_Chunk]
    scored: list[asyncio.Future[_ScoredVectors]]
    alone: bool = False  # the next batch may begin while this one is applied


def _passing_on(
    target: asyncio.Future[_ScoredVectors], vectors: list[Any]
) -> Callable[[asyncio.Future[_ScoredChunk]], None]:
    """A done-callback that passes a chunk's scoring, with its vectors, on to `target`."""

    def pass_on(scoring: asyncio.Future[_ScoredChunk]) -> None:
        if target.done():
            return
        if scoring.cancelled():
            target.cancel()
        elif (failure := scoring.exception()) is not None:
            target.set_exception(failure)
        else:
            target.set_result((vectors, scoring.result()))

    return pass_on


def _chunks_by_texts(
    items: _Chunk,
    size: int,
    texts_of: Callable[[dict[str, Any]], list[str]],
) -> list[_Chunk]:
    """Consecutive runs of messages holding about `size` texts each, order kept."""
    chunks: list[_Chunk] = []
    current: _Chunk = []
    texts = 0
    for item in items:
        current.append(item)
        texts += len(texts_of(item[1]))
        if texts >= size:
            chunks.append(current)
            current, texts = [], 0
    if current:
        chunks.append(current)
    return chunks


def _session_meta(
    stored: dict[str, Any] | None, record: Any, event_time: datetime
) -> dict[str, Any]:
    """Model, labels, the latest event time and the final index of a session's turns."""
    latest = event_time.timestamp()
    meta: dict[str, Any] = {"model": record.model, "labels": dict(record.labels)}
    if stored:
        latest = max(latest, float(stored["ts"]))
        if stored.get("final_index") is not None:
            meta["final_index"] = stored["final_index"]
    meta["ts"] = latest
    return meta
