"""The session stage: alignment turns keyed by session. Embeds micro-batches off the event
loop, scores turns in the scoring pool (each under `limits.scoring_deadline`: keyword
safety, traits and lexicon read the text), keeps open sessions in a changelog-backed
table, closes them on their final turn or when idle in event time, and passes the
watermark on to the aggregation.

Idle expiry is measured on this partition's watermark (the minimum progress of the input
partitions, from the markers in this stream), so a worker that was down, or has a
backlog, never expires a session whose turns are still to be read. An idle session
closes at `last turn ts + session_idle_timeout` in event time.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import MutableMapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

import orjson
from faust.types import EventT

from schemas.envelope import AlignmentRecord, AlignmentSessionPayload, AlignmentTurnPayload
from worker.input import records as input_records
from worker.input.unknown_fields import unknown_fields, with_unknown_fields
from worker.ops.telemetry import EMBEDDING_SKIPPED_OVERLOAD
from worker.scoring_pool import Outcome
from worker.scoring_suites import ALIGNMENT_TURN
from worker.stream.context import StreamContext, event_context, run_to_completion
from worker.stream.publish import OutputTooLarge, markers_of
from worker.stream.scoring import INPUT_GROUP, observe
from worker.suites.alignment.judge_client import SafetyJudge
from worker.suites.alignment.judge_verdict import with_verdict
from worker.suites.alignment.scoring import (
    SessionState,
    TurnScore,
    session_transcript,
    turn_scored,
)
from worker.suites.base import Scored
from worker.windowing.progress import ProgressTable
from worker.windowing.watermark import Marker, Watermark

log = logging.getLogger("scorestream")

PROGRESS_PREFIX = "sess"  # progress["sess|{p}"]: the partition's watermark
SESSION_GROUP = "sess"  # watermark channel group of the session stage's partitions
EMBEDDING_CHUNK = 64  # texts per executor call (bench/stream.py: 1.25x the turns/s of 16)


@dataclass(frozen=True)
class TurnContext:
    """An alignment record on the session stream, with where and when it was read."""

    record: AlignmentRecord
    source: input_records.SourcePosition
    event_time: datetime
    received: datetime


class SessionStage:
    """Scores alignment turns and sessions; `sessions` and `progress` are Faust tables
    (plain dicts in tests) written only from this stage's partitions."""

    def __init__(
        self,
        context: StreamContext,
        sessions: MutableMapping[str, Any],
        progress: MutableMapping[str, Any],
        executor: Executor,
        judge: SafetyJudge | None = None,
    ) -> None:
        self.context = context
        self.settings = context.settings
        self.publisher = context.publisher
        self.sessions = sessions
        self.progress = ProgressTable(progress, PROGRESS_PREFIX, {INPUT_GROUP: 0})
        self._forward: dict[int, Marker] = {}  # partition -> watermark to pass on
        self.executor = executor
        self.judge = judge
        self.encoder_pace = EncoderPace()

    def forget(self) -> None:
        """Drop cached watermarks after a rebalance (the table has them)."""
        self.progress.forget()

    # ---------------------------------------------------------------- batches

    async def agent(self, stream: Any) -> None:  # faust.Stream: take_events
        batch_size = self.settings.embedding_batch_size
        wait = self.settings.embedding_batch_wait
        async for events in stream.take_events(batch_size, within=wait):
            await run_to_completion(self.process_batch(list(events)))

    async def process_batch(self, events: list[EventT]) -> None:
        """Embed and apply a micro-batch in order, in chunks: while one chunk's turns are
        scored and published, the executor already encodes the next chunk. A turn more than
        `alignment.embedding.max_lag` behind is not embedded (`embedding_plan`): it is
        scored for safety alone, so safety keeps pace with any input rate. The batch is
        acknowledged only after this returns, so nothing is acked before it is applied."""
        items = []
        for event in events:
            try:
                items.append((event, orjson.loads(event.value)))
            except orjson.JSONDecodeError:  # not written by a worker: nothing to score
                log.error("skipping an undecodable session-stream record")
        chunks = _chunks_by_texts(items, EMBEDDING_CHUNK)
        loop = asyncio.get_running_loop()
        max_lag = self.settings.alignment.embedding.max_lag

        def encode(chunk: list[tuple[EventT, dict[str, Any]]]) -> _ChunkVectors:
            """Start encoding the turns of `chunk` that are within `max_lag` now."""
            now = self.context.clock()
            lags = [now - float(data["received"]) for _, data in chunk for _ in _texts_of(data)]
            plan = embedding_plan(lags, max_lag, self.encoder_pace.seconds_per_text)
            texts = [text for _, data in chunk for text in _texts_of(data)]
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

        pending = encode(chunks[0]) if chunks else None
        for position, chunk in enumerate(chunks):
            assert pending is not None
            vectors = await pending.vectors()
            pending = encode(chunks[position + 1]) if position + 1 < len(chunks) else None
            scored = await self._score_turns(chunk, vectors)
            cursor = 0
            for event, data in chunk:
                count = len(_texts_of(data))
                with event_context(event):
                    try:
                        markers = markers_of(data)
                        if markers:
                            await self.on_markers(event.message.partition, markers)
                            continue
                        span = slice(cursor, cursor + count)
                        await self._apply(event, data, vectors[span], scored[span])
                    except Exception:  # nothing one message does stops the stage
                        log.exception("session stage: unexpected failure on a message")
                    finally:
                        cursor += count
        await self.forward_progress()

    def _embed(self, texts: list[str]) -> Any:
        """Encode `texts` (in the executor) and keep the encoder's pace up to date."""
        started = time.perf_counter()
        vectors = self.context.suites.embed(texts)
        self.encoder_pace.observe(len(texts), time.perf_counter() - started)
        return vectors

    async def _score_turns(
        self, chunk: list[tuple[EventT, dict[str, Any]]], vectors: list[Any]
    ) -> list[Outcome]:
        """Score every assistant text of a chunk against its persona in the scoring pool
        (in the order of `_texts_of`, as the vectors are; a None vector: safety only)."""
        turns = [
            (str(data["record"]["payload"].get("persona_id", "")), text)
            for _, data in chunk
            for text in _texts_of(data)
        ]
        if not turns:
            return []
        return await self.context.scoring_pool.score(
            [
                (ALIGNMENT_TURN, (persona_id, text, vectors[index]), len(text))
                for index, (persona_id, text) in enumerate(turns)
            ]
        )

    # ---------------------------------------------------------------- progress

    def watermark(self, partition: int) -> Watermark:
        return self.progress.watermark(partition)

    async def on_markers(self, partition: int, markers: Sequence[Marker]) -> None:
        """Take input partitions' progress; expire idle sessions; pass the partition's
        watermark on (with the batch's other partitions', at the end of the batch)."""
        moved = False
        for marker in markers:
            moved |= self.progress.observe(partition, marker)
        self.progress.flush(partition)  # sessions are written as they change, so is progress
        current = self.progress.value(partition)
        if not moved or current is None:
            return
        await self.expire(partition, current)
        count = self.settings.stream.partitions
        self._forward[partition] = Marker(SESSION_GROUP, partition, count, current)

    async def forward_progress(self) -> None:
        """Send the watermarks the batch moved, as one marker record to every partition of
        the aggregation stage's topic, after every session result of the batch."""
        forward, self._forward = self._forward, {}
        markers = [forward[partition] for partition in sorted(forward)]
        await self.publisher.markers(self.publisher.topics.aggregate_input, markers)

    async def expire(self, partition: int, watermark: float) -> None:
        """Close the sessions of `partition` idle for the timeout in event time, and drop
        the tombstones of closed sessions once as old."""
        timeout = self.settings.alignment.session_idle_timeout
        for session_id, stored in list(self.sessions.items()):
            if stored.get("partition") != partition:
                continue
            if stored.get("closed"):
                if watermark - float(stored["at"]) >= timeout:
                    del self.sessions[session_id]  # the tombstone of a closed session
                continue
            idle_at = float(stored["ts"]) + timeout
            if idle_at > watermark:
                continue
            try:
                state = SessionState.from_json(stored["state"])
                closed_at = datetime.fromtimestamp(idle_at, UTC)
                await self.close_session(state, closed_at, stored["model"], stored["labels"])
            except Exception:  # a session that cannot be scored must not stop the stage
                log.exception("closing session %r failed", session_id[:200])
            self.sessions[session_id] = {"closed": True, "at": idle_at, "partition": partition}

    # ---------------------------------------------------------------- turns

    async def _apply(
        self, event: EventT, data: dict[str, Any], vectors: Any, scored: list[Outcome]
    ) -> None:
        record = AlignmentRecord.model_validate(data["record"], strict=False)
        topic, partition, offset = data["source"]
        context = TurnContext(
            record=record,
            source=input_records.SourcePosition(topic, partition, offset),
            event_time=datetime.fromtimestamp(float(data["event_time"]), UTC),
            received=datetime.fromtimestamp(float(data["received"]), UTC),
        )
        try:
            if isinstance(record.payload, AlignmentSessionPayload):
                await self._apply_whole_session(context, record.payload, vectors, scored)
            else:
                await self._apply_turn(context, record.payload, vectors[0], scored[0], event)
        except input_records.Rejected as rejected:
            await self._dead_letter(data, rejected.reason, rejected.message, context)
        except OutputTooLarge as exc:
            await self._dead_letter(data, input_records.OUTPUT_TOO_LARGE, str(exc), context)
        except Exception as exc:  # a scorer bug must not kill the agent or lose the record
            log.exception("alignment scoring failed")
            await self._dead_letter(data, input_records.SCORING_ERROR, repr(exc), context)

    async def _dead_letter(
        self, data: dict[str, Any], reason: str, message: str, context: TurnContext
    ) -> None:
        """Dead-letter the original input record of a forwarded alignment message."""
        await self.publisher.dead_letter(
            orjson.dumps(data["record"]),
            context.record.payload.session_id.encode("utf-8"),
            reason,
            message,
            context.source,
            self.context.now(),
        )

    async def _apply_whole_session(
        self,
        context: TurnContext,
        payload: AlignmentSessionPayload,
        vectors: Any,
        scored: list[Outcome],
    ) -> None:
        """Apply every scored turn of a session sent at once, then score the session (a
        turn that could not be scored dead-letters the whole record)."""
        suites = self.context.suites
        record = context.record
        turns = [_turn_score(outcome) for outcome in scored]
        state = suites.new_session(payload.session_id, payload.persona_id)
        unknown = unknown_fields(payload)
        for index, (turn, vector) in enumerate(zip(payload.turns, vectors, strict=True)):
            now = self.context.clock()
            state.add(index, turns[index], vector, turn.assistant, now=now, user=turn.user)
            turn_id = f"{record.id}#{index}"
            await self._emit_turn(context, turn_id, turns[index], scored[index].seconds, unknown)
        await self.close_session(state, context.event_time, record.model, record.labels)

    async def _apply_turn(
        self,
        context: TurnContext,
        payload: AlignmentTurnPayload,
        vector: Any,
        scored: Outcome,
        event: EventT,
    ) -> None:
        """Apply one scored turn to its session, and close the session when complete."""
        suites = self.context.suites
        stored = self.sessions.get(payload.session_id)
        if stored and stored.get("closed"):
            # A late repeat of a closed session's turn: its result is re-published under
            # the same key (idempotent for consumers); the session is not reopened.
            await self._emit_turn(context, context.record.id, _turn_score(scored), 0.0)
            return
        state = (
            SessionState.from_json(stored["state"])
            if stored
            else suites.new_session(payload.session_id, payload.persona_id)
        )
        if state.persona_id != payload.persona_id:
            raise input_records.Rejected(
                input_records.INVALID_RECORD,
                f"turn of persona {payload.persona_id!r} in session {payload.session_id!r} "
                f"of persona {state.persona_id!r}",
            )
        scored_turn = _turn_score(scored)
        unknown = unknown_fields(payload)
        await self._emit_turn(context, context.record.id, scored_turn, scored.seconds, unknown)
        now = self.context.clock()
        state.add(
            payload.turn_index,
            scored_turn,
            vector,
            payload.text,
            payload.final,
            now,
            user=payload.user or "",
        )
        meta = _session_meta(stored, context.record, context.event_time)
        if payload.final:
            meta["final_index"] = payload.turn_index
        partition = event.message.partition
        entry = {"state": state.to_json(), "partition": partition, **meta}
        cap = self.settings.limits.session_state_bytes
        at_cap = len(orjson.dumps(entry)) > cap
        if at_cap or _is_complete(state, meta.get("final_index")):
            closed_at = datetime.fromtimestamp(meta["ts"], UTC)
            if at_cap:
                log.warning(
                    "session %r reached limits.session_state_bytes (%d): closed with %d turns",
                    payload.session_id[:200],
                    cap,
                    len(state.turns),
                )
            self.sessions[payload.session_id] = {
                "closed": True,
                "at": meta["ts"],
                "partition": partition,
            }
            await self.close_session(state, closed_at, meta["model"], meta["labels"], at_cap=at_cap)
            return
        self.sessions[payload.session_id] = entry

    async def _emit_turn(
        self,
        context: TurnContext,
        turn_id: str,
        turn: Any,
        elapsed: float,
        unknown: list[str] | None = None,
    ) -> None:
        result = input_records.build_result(
            case_id=turn_id,
            suite="alignment",
            kind="turn",
            scored=with_unknown_fields(turn_scored(turn), unknown or []),
            event_time=context.event_time,
            model=context.record.model,
            labels=context.record.labels,
            versions=self.context.suites.versions("alignment"),
            source=context.source,
            scored_at=self.context.now(),
            received_at=context.received,
            trace_id=context.record.trace_id,
        )
        await self.publisher.result(result, aggregate=False)  # windows count sessions
        observe(self.context, result, elapsed)

    async def close_session(
        self,
        state: SessionState,
        event_time: datetime,
        model: str | None,
        labels: dict[str, str],
        at_cap: bool = False,
    ) -> None:
        """Score a finished session and publish it with `kind: "session"` (`at_cap`: it
        was closed on reaching `limits.session_state_bytes`, said in its details). A
        result too large to send is a dead letter `output_too_large`."""
        started = time.perf_counter()
        scored = await self._score_session(state)
        if at_cap:
            scored = replace(scored, details={**scored.details, "closed_by": "session_state_bytes"})
        result = input_records.build_result(
            case_id=f"session:{state.session_id}",
            suite="alignment",
            kind="session",
            scored=scored,
            event_time=event_time,
            model=model,
            labels=labels,
            versions=self.context.suites.versions("alignment"),
            source=None,
            scored_at=self.context.now(),
        )
        try:
            await self.publisher.result(result)
        except OutputTooLarge as exc:
            value = result.model_dump_json().encode("utf-8")
            await self.publisher.output_too_large(value, exc, str(exc), self.context.now())
            return
        observe(self.context, result, time.perf_counter() - started)

    async def _score_session(self, state: SessionState) -> Scored:
        """Session scores, with the judge's verdict when one is configured; an unusable
        verdict is recorded on the session (`judge: error`) and, with `judge.on_error:
        review`, makes its label at least Review (the judge counts it)."""
        suites = self.context.suites
        judge_settings = self.settings.alignment.judge
        if self.judge is None or judge_settings is None:
            return suites.score_session(state)
        verdict = await self.judge.judge(session_transcript(state))
        scored = suites.score_session(state, verdict.score)
        return with_verdict(scored, verdict, judge_settings.on_error)


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


def _turn_score(outcome: Outcome) -> TurnScore:
    """A turn's score from the pool; `Rejected` with the reason when it has none (past
    `limits.scoring_deadline`, a scorer failure)."""
    if outcome.scored is None:
        reason = outcome.reason or input_records.SCORING_ERROR
        raise input_records.Rejected(reason, outcome.message)
    assert isinstance(outcome.scored, TurnScore)
    return outcome.scored


def _texts_of(data: dict[str, Any]) -> list[str]:
    """The texts to embed for one message of the session stream (none for a marker)."""
    return _assistant_texts(data["record"]["payload"]) if "record" in data else []


def _chunks_by_texts(
    items: list[tuple[EventT, dict[str, Any]]], size: int
) -> list[list[tuple[EventT, dict[str, Any]]]]:
    """Consecutive runs of messages holding about `size` texts each, order kept."""
    chunks: list[list[tuple[EventT, dict[str, Any]]]] = []
    current: list[tuple[EventT, dict[str, Any]]] = []
    texts = 0
    for item in items:
        current.append(item)
        texts += len(_texts_of(item[1]))
        if texts >= size:
            chunks.append(current)
            current, texts = [], 0
    if current:
        chunks.append(current)
    return chunks


def _assistant_texts(payload: dict[str, Any]) -> list[str]:
    """The assistant texts of an alignment payload, in order (one for a turn)."""
    if "turns" in payload:
        return [turn["assistant"] for turn in payload["turns"]]
    return [payload["text"]]


def _session_meta(
    stored: dict[str, Any] | None, record: AlignmentRecord, event_time: datetime
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


def _is_complete(state: SessionState, final_index: int | None) -> bool:
    """Whether every turn up to the final one has arrived (or the bound is reached)."""
    if final_index is None:
        return False
    expected = min(final_index + 1, state.max_turns)
    return sum(1 for index in state.turns if index <= final_index) >= expected
