"""The Faust application: thin glue between Kafka and the pure scoring code.

Data flow (topic names from settings.topics; `{app}` is settings.app_id):

    llm.responses.v1 --score--> llm.eval.results.v1            (safe, extraction cases)
                     |--------> llm.responses.v1.dlq          (anything unscorable)
                     '--------> {app}-alignment-turns          (keyed by session_id)
    {app}-alignment-turns --sessions--> llm.eval.results.v1    (turns, closed sessions)
    llm.eval.results.v1 --route--> {app}-aggregate-input       (keyed by suite|segment)
    {app}-aggregate-input --aggregate--> llm.eval.aggregates.v1, llm.eval.gates.v1

Tables (`sessions`, `windows`) are updated only from the stream that is partitioned like
them, one event at a time, so their changelogs stay co-partitioned. Windows close and
idle sessions expire on "tick" records that the leader's timer sends to every partition
of the two internal topics: closing happens inside the stream, in order, with the
changelog written, instead of relying on Faust's wall-clock `on_window_close`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import tempfile
import time
import weakref
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import faust
import orjson
from faust.types import EventT, StreamT
from pydantic import JsonValue

from schemas.envelope import (
    AlignmentRecord,
    AlignmentSessionPayload,
    AlignmentTurnPayload,
    ExtractionRecord,
    SafeRecord,
    parse_event_time,
)
from schemas.outputs import Aggregate, CaseResult, RecordSource
from worker import aggregation, intake
from worker.config import Settings, WindowConfig
from worker.engines import AGGREGATORS, Engines
from worker.gates import GateEvaluator, applies_to, gate_key
from worker.suites.alignment.judge import SafetyJudge
from worker.suites.alignment.scoring import SessionState, turn_scored
from worker.suites.base import Scored
from worker.telemetry import Telemetry
from worker.windows import Watermark, WindowKey, assign_windows

log = logging.getLogger("scorestream")

RAW: dict[str, Any] = {
    "key_type": bytes,
    "key_serializer": "raw",
    "value_type": bytes,
    "value_serializer": "raw",
}
WINDOW_PREFIX = "win|"
SEEN_PREFIX = "seen|"
GATE_PREFIX = "gate|"
WATERMARK_PREFIX = "wm|"
SEEN_PURGE_EVERY = 30  # ticks
EMBEDDING_CHUNK = 16  # texts encoded per executor call inside a micro-batch


@dataclass(frozen=True)
class _TurnContext:
    """An alignment record on the session stream, with where and when it was read."""

    record: AlignmentRecord
    source: intake.SourcePosition
    event_time: datetime
    received: datetime


def faust_settings(settings: Settings, broker: str) -> dict[str, Any]:
    """Faust `App` options from our settings."""
    stream = settings.stream
    options: dict[str, Any] = {
        "broker": broker,
        "store": "memory://",
        "processing_guarantee": "at_least_once",
        "topic_partitions": stream.partitions,
        "topic_replication_factor": 1,
        "table_standby_replicas": 0,
        "broker_session_timeout": stream.session_timeout,
        "broker_rebalance_timeout": stream.rebalance_timeout,
        "broker_heartbeat_interval": stream.heartbeat_interval,
        "broker_commit_interval": stream.commit_interval,
        "consumer_auto_offset_reset": "earliest",
        "web_enabled": False,
        # Tables live in memory; keep Faust's data directory out of the working tree.
        "datadir": str(Path(tempfile.gettempdir()) / f"scorestream-{settings.app_id}-data"),
    }
    if stream.producer_max_batch_size is not None:
        options["producer_max_batch_size"] = stream.producer_max_batch_size
    return options


@contextlib.contextmanager
def event_context(event: EventT) -> Iterator[None]:
    """Make `event` Faust's current event, so table writes go to its partition.

    Inside a `take_events` micro-batch Faust's current event is the batch's last one,
    which may belong to another partition; table changelog writes must follow the event
    that caused them.
    """
    from faust.streams import _current_event

    token = _current_event.set(weakref.ref(event))
    try:
        yield
    finally:
        _current_event.reset(token)


def gate_windows(settings: Settings) -> list[WindowConfig]:
    """Configured windows plus a tumbling window for each gate's window size."""
    windows = list(settings.windows)
    tumbling = {w.size for w in windows if w.step is None or w.step == w.size}
    for gate in settings.gates:
        if gate.window not in tumbling:
            windows.append(WindowConfig(size=gate.window))
            tumbling.add(gate.window)
    return windows


class ScorestreamApp:
    """Builds the Faust app, its topics, tables, agents and timer from settings."""

    def __init__(
        self,
        settings: Settings,
        broker: str,
        engines: Engines | None = None,
        telemetry: Telemetry | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.engines = engines or Engines.load(settings)
        self.telemetry = telemetry or Telemetry.from_settings(settings)
        self.clock = clock
        self.windows = gate_windows(settings)
        judge = settings.alignment.judge
        self.judge = SafetyJudge(judge) if judge is not None else None
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="embed")
        self.dirty: set[str] = set()
        self.watermarks: dict[int, Watermark] = {}
        self.ticks: dict[int, int] = {}
        self.ready = asyncio.Event()

        app_id = settings.app_id
        partitions = settings.stream.partitions
        self.app = faust.App(app_id, **faust_settings(settings, broker))
        names = settings.topics
        self.input_topic = self.app.topic(names.input, **RAW)
        self.results_topic = self.app.topic(names.results, **RAW)
        self.aggregates_topic = self.app.topic(names.aggregates, **RAW)
        self.gates_topic = self.app.topic(names.gates, **RAW)
        self.dlq_topic = self.app.topic(names.dead_letters, **RAW)
        self.turns_topic = self.app.topic(
            f"{app_id}-alignment-turns", partitions=partitions, internal=True, **RAW
        )
        self.aggregate_input = self.app.topic(
            f"{app_id}-aggregate-input", partitions=partitions, internal=True, **RAW
        )
        self.sessions = self.app.Table("sessions", partitions=partitions, key_type=str)
        self.state = self.app.Table("windows", partitions=partitions, key_type=str)
        # Case ids already counted per segment (dedupe of replays), in a table of its own
        # so that ticks scan only the window state.
        self.seen = self.app.Table("seen", partitions=partitions, key_type=str)
        self.app.agent(self.input_topic, name="score")(self._score_agent)
        self.app.agent(self.turns_topic, name="sessions")(self._session_agent)
        self.app.agent(self.results_topic, name="route")(self._route_agent)
        self.app.agent(self.aggregate_input, name="aggregate")(self._aggregate_agent)
        self.app.timer(settings.stream.tick_interval, on_leader=True)(self._tick)
        self.app.on_startup_finished = self._on_ready
        self.app.on_partitions_revoked.connect(self._forget_partition_caches)

    async def _on_ready(self) -> None:
        self.ready.set()
        log.info("scorestream worker ready")

    def _forget_partition_caches(
        self, sender: Any, /, *args: Any, signal: Any, **kwargs: Any
    ) -> None:
        """After a rebalance, read watermarks back from the table: another worker may
        have advanced a partition this one gets back."""
        self.watermarks.clear()
        self.dirty.clear()

    def worker(self, loglevel: str = "info") -> faust.Worker:
        """A Faust `Worker` running this app (it replaces the app's start-up hook with its
        own, so ours is chained after it)."""
        scorer = self

        class _Worker(faust.Worker):
            async def on_startup_finished(self) -> None:
                await super().on_startup_finished()
                await scorer._on_ready()

        return _Worker(self.app, loglevel=loglevel)

    def now(self) -> datetime:
        return datetime.fromtimestamp(self.clock(), UTC)

    # ---------------------------------------------------------------- sending

    async def _send(self, topic: faust.types.TopicT, key: str, value: bytes) -> None:
        await topic.send(key=key.encode("utf-8"), value=value)

    async def _publish_result(self, result: CaseResult) -> None:
        key = intake.result_key(result.suite, result.id)
        await self._send(self.results_topic, key, result.model_dump_json().encode("utf-8"))

    async def _dead_letter(
        self, event: EventT, reason: str, message: str, source: intake.SourcePosition
    ) -> None:
        letter = intake.dead_letter(
            event.value, reason, message, source, self.settings.dlq_max_raw_bytes, self.now()
        )
        key = event.key if isinstance(event.key, bytes) else b""
        await self.dlq_topic.send(key=key, value=letter.model_dump_json().encode("utf-8"))
        self.telemetry.record_dead_letter(reason)
        log.warning("dead letter %s at %s:%s@%s: %s", reason, *_where(source), message)

    # ---------------------------------------------------------------- scoring

    async def _score_agent(self, stream: StreamT) -> None:
        async for event in stream.events():
            await self._score_event(event)

    async def _score_event(self, event: EventT) -> None:
        source = _position(event)
        received = self.now()
        try:
            record = intake.decode_record(event.value, self.settings.max_record_bytes)
            if isinstance(record, AlignmentRecord):
                self.engines.check_persona(record.payload.persona_id)
                await self._forward_turn(record, source, received)
                return
            started = time.perf_counter()
            if isinstance(record, SafeRecord):
                scored = self.engines.score_safe(record.payload)
            elif isinstance(record, ExtractionRecord):
                scored = self.engines.score_extraction(record.payload)
            else:  # pragma: no cover - the discriminated union has three members
                raise intake.Rejected(intake.UNKNOWN_SUITE, f"unknown suite {record.suite!r}")
            elapsed = time.perf_counter() - started
        except intake.Rejected as rejected:
            await self._dead_letter(event, rejected.reason, rejected.message, source)
            return
        except Exception as exc:  # a scorer bug must not kill the agent or lose the record
            log.exception("scoring failed")
            await self._dead_letter(event, intake.SCORING_ERROR, repr(exc), source)
            return
        event_time = record.event_time() or source.timestamp or received
        result = intake.build_result(
            case_id=record.id,
            suite=record.suite,
            kind="case",
            scored=scored,
            event_time=event_time,
            model=record.model,
            labels=record.labels,
            versions=self.engines.versions(record.suite),
            source=source,
            scored_at=self.now(),
            received_at=received,
        )
        await self._publish_result(result)
        self._observe(result, elapsed, event_time)

    def _observe(self, result: CaseResult, scoring_seconds: float, event_time: datetime) -> None:
        e2e = max(0.0, (result.scored_at - event_time).total_seconds())
        self.telemetry.record_result(result, scoring_seconds, e2e)

    async def _forward_turn(
        self, record: AlignmentRecord, source: intake.SourcePosition, received: datetime
    ) -> None:
        """Route an alignment record to the session stream, keyed by its session."""
        event_time = record.event_time() or source.timestamp or received
        envelope = {
            "record": record.model_dump(mode="json", by_alias=True),
            "source": [source.topic, source.partition, source.offset],
            "event_time": event_time.timestamp(),
            "received": received.timestamp(),
        }
        await self._send(self.turns_topic, record.payload.session_id, orjson.dumps(envelope))

    # ---------------------------------------------------------------- sessions

    async def _session_agent(self, stream: Any) -> None:  # faust.Stream: take_events
        batch_size = self.settings.embedding_batch_size
        wait = self.settings.embedding_batch_wait
        async for events in stream.take_events(batch_size, within=wait):
            await self._session_batch(list(events))

    async def _session_batch(self, events: list[EventT]) -> None:
        """Embed and apply a micro-batch in order, in chunks: while one chunk's turns are
        scored and published, the executor already encodes the next chunk. The batch is
        acknowledged only after this returns, so nothing is acked before it is applied."""
        items = [(event, orjson.loads(event.value)) for event in events]
        chunks = _chunks_by_texts(items, EMBEDDING_CHUNK)
        loop = asyncio.get_running_loop()

        def encode(chunk: list[tuple[EventT, dict[str, Any]]]) -> asyncio.Future[Any] | None:
            texts = [text for _, data in chunk for text in _texts_of(data)]
            if not texts:
                return None
            self.telemetry.record_embedding_batch(len(texts))
            return loop.run_in_executor(self.executor, self.engines.embed, texts)

        pending = encode(chunks[0]) if chunks else None
        for position, chunk in enumerate(chunks):
            vectors = await pending if pending is not None else None
            pending = encode(chunks[position + 1]) if position + 1 < len(chunks) else None
            cursor = 0
            for event, data in chunk:
                with event_context(event):
                    if "tick" in data:
                        await self._expire_sessions(event.message.partition, float(data["tick"]))
                        continue
                    count = len(_texts_of(data))
                    assert vectors is not None  # the chunk had texts, so it was encoded
                    await self._apply_alignment(event, data, vectors[cursor : cursor + count])
                    cursor += count

    async def _apply_alignment(self, event: EventT, data: dict[str, Any], vectors: Any) -> None:
        record = AlignmentRecord.model_validate(data["record"], strict=False)
        topic, partition, offset = data["source"]
        context = _TurnContext(
            record=record,
            source=intake.SourcePosition(topic, partition, offset),
            event_time=datetime.fromtimestamp(float(data["event_time"]), UTC),
            received=datetime.fromtimestamp(float(data["received"]), UTC),
        )
        try:
            if isinstance(record.payload, AlignmentSessionPayload):
                await self._apply_whole_session(context, record.payload, vectors)
            else:
                await self._apply_turn(context, record.payload, vectors[0], event)
        except intake.Rejected as rejected:
            await self._dead_letter_record(event, data, rejected.reason, rejected.message, context)
        except Exception as exc:  # a scorer bug must not kill the agent or lose the record
            log.exception("alignment scoring failed")
            await self._dead_letter_record(event, data, intake.SCORING_ERROR, repr(exc), context)

    async def _dead_letter_record(
        self, event: EventT, data: dict[str, Any], reason: str, message: str, context: _TurnContext
    ) -> None:
        """Dead-letter the original input record of a forwarded alignment message."""
        letter = intake.dead_letter(
            orjson.dumps(data["record"]),
            reason,
            message,
            context.source,
            self.settings.dlq_max_raw_bytes,
            self.now(),
        )
        key = context.record.payload.session_id.encode("utf-8")
        await self.dlq_topic.send(key=key, value=letter.model_dump_json().encode("utf-8"))
        self.telemetry.record_dead_letter(reason)
        log.warning("dead letter %s at %s:%s@%s: %s", reason, *_where(context.source), message)

    async def _apply_whole_session(
        self, context: _TurnContext, payload: AlignmentSessionPayload, vectors: Any
    ) -> None:
        """Score every turn of a session sent at once, then the session."""
        record = context.record
        state = self.engines.new_session(payload.session_id, payload.persona_id)
        for index, (turn, vector) in enumerate(zip(payload.turns, vectors, strict=True)):
            started = time.perf_counter()
            scored_turn = self.engines.score_turn((payload.persona_id, turn.assistant), vector)
            state.add(index, scored_turn, vector, turn.assistant, now=self.clock())
            elapsed = time.perf_counter() - started
            await self._emit_turn(context, f"{record.id}#{index}", scored_turn, elapsed)
        await self._close_session(state, context.event_time, record.model, record.labels)

    async def _apply_turn(
        self, context: _TurnContext, payload: AlignmentTurnPayload, vector: Any, event: EventT
    ) -> None:
        """Score one turn, add it to its session, and close the session on `final`."""
        stored = self.sessions.get(payload.session_id)
        if stored and stored.get("closed"):
            # A late repeat of a closed session's turn: its result is re-published under
            # the same key (idempotent for consumers); the session is not reopened.
            scored_turn = self.engines.score_turn(payload, vector)
            await self._emit_turn(context, context.record.id, scored_turn, 0.0)
            return
        state = (
            SessionState.from_json(stored["state"])
            if stored
            else self.engines.new_session(payload.session_id, payload.persona_id)
        )
        if state.persona_id != payload.persona_id:
            raise intake.Rejected(
                intake.INVALID_RECORD,
                f"turn of persona {payload.persona_id!r} in session {payload.session_id!r} "
                f"of persona {state.persona_id!r}",
            )
        started = time.perf_counter()
        scored_turn = self.engines.score_turn(payload, vector)
        elapsed = time.perf_counter() - started
        await self._emit_turn(context, context.record.id, scored_turn, elapsed)
        now = self.clock()
        state.add(payload.turn_index, scored_turn, vector, payload.text, payload.final, now)
        meta = _session_meta(stored, context.record, context.event_time)
        if payload.final:
            meta["final_index"] = payload.turn_index
        partition = event.message.partition
        if _is_complete(state, meta.get("final_index")):
            closed_at = datetime.fromtimestamp(meta["ts"], UTC)
            await self._close_session(state, closed_at, meta["model"], meta["labels"])
            self.sessions[payload.session_id] = {"closed": True, "at": now, "partition": partition}
            return
        self.sessions[payload.session_id] = {
            "state": state.to_json(),
            "partition": partition,
            **meta,
        }

    async def _emit_turn(
        self, context: _TurnContext, turn_id: str, turn: Any, elapsed: float
    ) -> None:
        result = intake.build_result(
            case_id=turn_id,
            suite="alignment",
            kind="turn",
            scored=turn_scored(turn),
            event_time=context.event_time,
            model=context.record.model,
            labels=context.record.labels,
            versions=self.engines.versions("alignment"),
            source=context.source,
            scored_at=self.now(),
            received_at=context.received,
        )
        await self._publish_result(result)
        self._observe(result, elapsed, context.event_time)

    async def _close_session(
        self,
        state: SessionState,
        event_time: datetime,
        model: str | None,
        labels: dict[str, str],
    ) -> None:
        """Score a finished session and publish it with `kind: "session"`."""
        started = time.perf_counter()
        scored = await self._score_session(state)
        result = intake.build_result(
            case_id=f"session:{state.session_id}",
            suite="alignment",
            kind="session",
            scored=scored,
            event_time=event_time,
            model=model,
            labels=labels,
            versions=self.engines.versions("alignment"),
            source=None,
            scored_at=self.now(),
        )
        await self._publish_result(result)
        self._observe(result, time.perf_counter() - started, event_time)

    async def _score_session(self, state: SessionState) -> Scored:
        """Session scores, with the judge's verdict when one is configured; a failed
        verdict leaves the keyword safety standing and is recorded in the details."""
        if self.judge is None:
            return self.engines.score_session(state)
        verdict = await self.judge.judge(state.transcript())
        scored = self.engines.score_session(state, verdict.score)
        judged: dict[str, JsonValue] = {
            "score": verdict.score,
            "reason": verdict.reason,
            "error": verdict.error,
            "judge_errors": self.judge.stats.judge_errors,
        }
        return replace(scored, details={**scored.details, "judge": judged})

    async def _expire_sessions(self, partition: int, now: float) -> None:
        """Close the sessions of `partition` idle for longer than the timeout."""
        timeout = self.settings.alignment.session_idle_timeout
        for session_id, stored in list(self.sessions.items()):
            if stored.get("partition") != partition:
                continue
            if stored.get("closed"):
                if now - float(stored["at"]) >= timeout:
                    del self.sessions[session_id]  # the tombstone of a closed session
                continue
            state = SessionState.from_json(stored["state"])
            if state.updated_at is not None and now - state.updated_at < timeout:
                continue
            event_time = datetime.fromtimestamp(float(stored["ts"]), UTC)
            await self._close_session(state, event_time, stored["model"], stored["labels"])
            del self.sessions[session_id]

    # ---------------------------------------------------------------- aggregation

    async def _route_agent(self, stream: StreamT) -> None:
        """Re-key results by (suite, segment) so that window state is co-partitioned."""
        segment_by = self.settings.segment_by
        async for event in stream.events():
            # Results are this worker's own validated output: read only what routing needs.
            try:
                result = orjson.loads(event.value)
                suite, kind = result["suite"], result["kind"]
                model, labels = result.get("model"), result.get("labels") or {}
            except (orjson.JSONDecodeError, KeyError, TypeError):
                log.warning("ignoring a malformed result at offset %s", event.message.offset)
                continue
            if kind == "turn":
                continue  # alignment windows aggregate closed sessions
            for segment in aggregation.segments_for(model, labels, segment_by):
                key = f"{suite}|{aggregation.segment_key(segment)}"
                value = b'{"segment":' + orjson.dumps(segment) + b',"result":' + event.value + b"}"
                await self._send(self.aggregate_input, key, value)

    async def _aggregate_agent(self, stream: StreamT) -> None:
        async for event in stream.events():
            data = orjson.loads(event.value)
            partition = event.message.partition
            if "tick" in data:
                await self._on_aggregate_tick(partition, float(data["tick"]))
                continue
            self._aggregate(_positioned_result(data["result"], event), data["segment"], event)

    def _watermark(self, partition: int) -> Watermark:
        """The partition's watermark: kept in memory, restored from the table after a
        restart or rebalance, and written back on ticks (not once per record)."""
        watermark = self.watermarks.get(partition)
        if watermark is None:
            stored = self.state.get(f"{WATERMARK_PREFIX}{partition}")
            watermark = Watermark.from_json(stored) if stored else Watermark()
            self.watermarks[partition] = watermark
        return watermark

    def _aggregate(self, result: CaseResult, segment: dict[str, str], event: EventT) -> None:
        partition = event.message.partition
        now = self.clock()
        event_time = result.ts.timestamp()
        segkey = aggregation.segment_key(segment)
        seen_key = f"{SEEN_PREFIX}{result.suite}|{segkey}|{result.kind}:{result.id}"
        seen = self.seen.get(seen_key)
        if seen is not None and seen[0] == event_time:
            return  # the same case, replayed: counted once
        watermark = self._watermark(partition)
        windows = assign_windows(event_time, self.windows)
        open_windows = [w for w in windows if not watermark.has_closed(w, self.settings.grace, now)]
        if len(open_windows) < len(windows):
            self.telemetry.record_late(result.suite)
        watermark.observe(event_time, now)
        self.seen[seen_key] = [event_time, partition]
        aggregator = AGGREGATORS[result.suite]
        for window in open_windows:
            key = WINDOW_PREFIX + aggregation.aggregate_key(result.suite, segment, window)
            stored = self.state.get(key)
            state = (
                stored["state"]
                if stored
                else aggregation.initialise(
                    result.suite, segment, window, self.settings.reservoir_size
                )
            )
            state, applied = aggregation.update(state, result, aggregator)
            if applied:
                self.state[key] = {"state": state, "partition": partition}
                self.dirty.add(key)

    async def _on_aggregate_tick(self, partition: int, now: float) -> None:
        watermark = self._watermark(partition)
        key = f"{WATERMARK_PREFIX}{partition}"
        if watermark.anchor is not None and self.state.get(key) != watermark.to_json():
            self.state[key] = watermark.to_json()
        grace = self.settings.grace
        self.ticks[partition] = self.ticks.get(partition, 0) + 1
        if self.ticks[partition] % SEEN_PURGE_EVERY == 0:
            self._purge_seen(partition, watermark, now)
        for key, stored in list(self.state.items()):
            if not key.startswith(WINDOW_PREFIX) or stored.get("partition") != partition:
                continue
            state = stored["state"]
            window = WindowKey.from_json(state["window"])
            if watermark.has_closed(window, grace, now):
                await self._emit_aggregate(key, state, final=True)
                del self.state[key]
                self.dirty.discard(key)
            elif key in self.dirty:
                await self._emit_aggregate(key, state, final=False)
                self.dirty.discard(key)

    def _purge_seen(self, partition: int, watermark: Watermark, now: float) -> None:
        """Forget the case ids of `partition` far behind the watermark: a replay after a
        crash comes within minutes, and windows that old are closed anyway."""
        current = watermark.value(now)
        if current is None:
            return
        horizon = max(w.size for w in self.windows) + self.settings.grace
        oldest_kept = current - horizon - self.settings.stream.dedupe_horizon
        for key, (event_time, owner) in list(self.seen.items()):
            if owner == partition and event_time < oldest_kept:
                del self.seen[key]

    async def _emit_aggregate(self, key: str, state: dict[str, Any], final: bool) -> None:
        aggregator = AGGREGATORS[state["suite"]]
        message = aggregation.to_message(
            state, final, self.now(), aggregator, confidence_intervals=final
        )
        await self._send(
            self.aggregates_topic,
            key[len(WINDOW_PREFIX) :],
            message.model_dump_json().encode("utf-8"),
        )
        window = WindowKey.from_json(state["window"])
        self.telemetry.record_aggregate(message, window.name)
        await self._evaluate_gates(message, window)

    async def _evaluate_gates(self, message: Aggregate, window: WindowKey) -> None:
        if window.step is not None and window.step != window.size:
            return  # gates watch tumbling windows only
        for gate in self.settings.gates:
            if not applies_to(gate, message):
                continue
            key = GATE_PREFIX + gate_key(gate.name, message.segment)
            stored = self.state.get(key)
            evaluator = GateEvaluator(
                [gate], {gate_key(gate.name, message.segment): stored} if stored else None
            )
            for gate_event in evaluator.evaluate(message, self.now()):
                await self._send(
                    self.gates_topic,
                    gate_key(gate.name, message.segment),
                    gate_event.model_dump_json().encode("utf-8"),
                )
                self.telemetry.record_gate(gate_event)
                log.info("gate %s %s for %s", gate.name, gate_event.state, message.segment)
            state = evaluator.to_json().get(gate_key(gate.name, message.segment))
            if state is not None and state != stored:
                self.state[key] = state

    # ---------------------------------------------------------------- ticks

    async def _tick(self) -> None:
        """Send a tick to every partition of the internal topics (leader only)."""
        value = orjson.dumps({"tick": self.clock()})
        for topic in (self.aggregate_input, self.turns_topic):
            for partition in range(self.settings.stream.partitions):
                await topic.send(key=b"tick", value=value, partition=partition)


def _position(event: EventT) -> intake.SourcePosition:
    message = event.message
    timestamp = datetime.fromtimestamp(message.timestamp, UTC) if message.timestamp else None
    return intake.SourcePosition(message.topic, message.partition, message.offset, timestamp)


def _positioned_result(data: dict[str, Any], event: EventT) -> CaseResult:
    """A result read back for aggregation, without re-validating this worker's own output.

    Its `source` becomes its position on the aggregate-input topic: the window state's
    high-water mark then skips a replay of that topic after a crash.
    """
    message = event.message
    source = RecordSource.model_construct(
        topic=message.topic, partition=message.partition, offset=message.offset
    )
    return CaseResult.model_construct(
        **{**data, "ts": parse_event_time(data["ts"]), "source": source}
    )


def _where(source: intake.SourcePosition) -> tuple[str, int, int]:
    return source.topic, source.partition, source.offset


def _texts_of(data: dict[str, Any]) -> list[str]:
    """The texts to embed for one message of the session stream (none for a tick)."""
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


__all__ = ["ScorestreamApp", "event_context", "faust_settings", "gate_windows"]
