"""Everything the worker produces, in one place: results (with their contributions to
the aggregation stage), aggregates, gate events, dead letters and watermark markers.

Order matters: a stage sends a record's outputs before the marker that covers it, and
Kafka keeps one producer's records to one partition in order, so no marker overtakes
the records it covers.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import orjson
from faust.types import TopicT

from schemas.outputs import Aggregate, CaseResult, GateEvent
from worker import aggregation
from worker.config import Settings
from worker.input import records as input_records
from worker.input.result_facts import ResultView
from worker.input.scored_records import session_bundle
from worker.ops.telemetry import Telemetry
from worker.stream.faust_patches.internals import kafka_producer
from worker.stream.faust_patches.record_batches import key_partitions, send_batches
from worker.suites.base import Scored, SuiteAggregator
from worker.windowing.event_time import Marker, markers_in, markers_value
from worker.windowing.pane_folds import PaneFold

if TYPE_CHECKING:
    from worker.otlp.sink import EvaluationSink

log = logging.getLogger("scorestream")

MARKER_KEY = b"__watermark__"


def _utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class StreamTopics:
    """The worker's topics: the public ones and two internal re-keying hops."""

    input: TopicT
    results: TopicT
    aggregates: TopicT
    gates: TopicT
    dead_letters: TopicT
    turns: TopicT  # alignment records keyed by session
    aggregate_input: TopicT  # results keyed by suite|segment, and markers


@dataclass(frozen=True)
class Folding:
    """How the score stage folds a micro-batch's results per pane (`windowing.pane_folds`)."""

    width: float  # pane width (`worker.windowing.windows.pane_width` of the window configurations)
    aggregators: Mapping[str, SuiteAggregator]
    reservoir_size: int


@dataclass
class _KeyContributions:
    segment: bytes  # the segment as JSON
    cases: list[bytes] = field(default_factory=list)  # results sent one by one
    fold: PaneFold | None = None  # results folded per pane
    parts: dict[str, None] = field(default_factory=dict)  # or the union of these keys' folds
    folded: list[bytes] = field(default_factory=list)  # the folded results, as a fallback


class Contributions:
    """A micro-batch's results (`results`, sent first, as they come) and what it
    contributes to the aggregation stage, per suite|segment key, in order (see
    `Publisher.contribute`; folded only then, after the results went out):
    results read from an input partition at or past its `fold_from` offset are folded
    per pane; the others go case by case.

    A result counts in the all-cases segment and in the segment of its labels; only the
    latter is folded case by case, the all-cases fold is the union of those folds."""

    def __init__(
        self, folding: Folding | None = None, fold_from: Mapping[int, int] | None = None
    ) -> None:
        self.folding = folding
        self.fold_from = fold_from or {}
        self.results: list[tuple[bytes, bytes]] = []  # (key, value) of each result
        # (session key, value) of each record forwarded to the session stage
        self.forwarded: list[tuple[bytes, bytes]] = []
        self._by_key: dict[str, _KeyContributions] = {}
        # Results added and not folded yet: (result, value, segments, scored)
        self._pending: list[tuple[ResultView, bytes, Sequence[Any], Scored | None]] = []

    def add(
        self,
        result: ResultView,
        value: bytes,
        segments: Sequence[tuple[str, Mapping[str, str], bytes]],
        scored: Scored | None = None,
    ) -> None:
        """Collect a result for each of its segments: (key, segment, segment as JSON),
        the all-cases segment first (`aggregation.segments_for`). Folding waits until
        the contributions are asked for (`items`), so results can be sent first. A result
        no window counts (no segments) contributes nothing."""
        if segments:
            self._pending.append((result, value, segments, scored))

    def _fold_pending(self) -> None:
        for result, value, segments, scored in self._pending:
            self._collect(result, value, segments, scored)
        self._pending.clear()

    def _collect(
        self,
        result: ResultView,
        value: bytes,
        segments: Sequence[tuple[str, Mapping[str, str], bytes]],
        scored: Scored | None,
    ) -> None:
        folding, source = self.folding, result.source
        foldable = not (
            folding is None
            or source is None
            or result.kind != "case"
            or source.offset < self.fold_from.get(source.partition, math.inf)
        )
        if foldable and scored is None:
            scored = aggregation.scored_from(result)
        labelled = segments[-1][0]  # the segment folded case by case
        for key, segment, encoded in segments:
            entry = self._by_key.get(key)
            if entry is None:
                entry = self._by_key[key] = _KeyContributions(encoded)
            if not foldable:
                entry.cases.append(value)
                continue
            entry.folded.append(value)
            if key != labelled:
                entry.parts[labelled] = None
                continue
            if entry.fold is None:
                assert folding is not None
                aggregator = folding.aggregators.get(result.suite)
                entry.fold = PaneFold(
                    result.suite, segment, folding.width, aggregator, folding.reservoir_size
                )
            entry.fold.add(result, scored)

    def items(self) -> list[tuple[str, bytes, list[bytes], PaneFold | None, list[bytes]]]:
        """Per key: (key, segment as JSON, results case by case, fold, folded results)."""
        self._fold_pending()
        out = []
        for key, entry in self._by_key.items():
            fold = entry.fold
            if entry.parts:
                parts = [self._by_key[part].fold for part in entry.parts]
                segment = orjson.loads(entry.segment)
                fold = PaneFold.union([part for part in parts if part is not None], segment)
            out.append((key, entry.segment, entry.cases, fold, entry.folded))
        return out

    def clear(self) -> None:
        self.results.clear()
        self.forwarded.clear()
        self._by_key.clear()
        self._pending.clear()

    def __len__(self) -> int:
        self._fold_pending()
        return sum(len(entry.cases) + len(entry.folded) for entry in self._by_key.values())


class OutputTooLarge(Exception):
    """A record over the producer's maximum request size (`limits.max_output_bytes`)."""

    def __init__(self, topic: str, size: int, limit: int) -> None:
        super().__init__(
            f"output to {topic} of {size} bytes is over the limit of {limit} bytes "
            "(limits.max_output_bytes)"
        )
        self.topic = topic
        self.size = size


# Bytes a record needs besides its key and value (record and batch headers), so a record
# that passes the check is also accepted by the producer.
RECORD_OVERHEAD = 512
# Session messages a record of the session stream bundles at most (`_forward_bundled`), and
# the bytes a bundle adds besides its messages (its key, `{"bundle":[…]}`, the commas).
BUNDLE_MESSAGES = 32
BUNDLE_FRAME = 64 + BUNDLE_MESSAGES
# A one-result contribution besides the segment and the result: `{"segment":…,"results":[…]}`
CONTRIBUTION_OVERHEAD = len(b'{"segment":,"results":[]}')
SEGMENT_CACHE_SIZE = 4096  # distinct (suite, segment) entries kept; then it starts over
Segments = tuple[tuple[str, dict[str, str], bytes], ...]


def markers_of(data: dict[str, Any]) -> list[Marker]:
    """The markers in a decoded internal-topic value (none for a data record)."""
    return markers_in(data)


class Publisher:
    """Produces the worker's messages (`send` and, for a batch's results, `send_records`
    are the only places that touch Kafka)."""

    bundle_messages = BUNDLE_MESSAGES  # session messages a record bundles at most

    def __init__(self, topics: StreamTopics, settings: Settings, telemetry: Telemetry) -> None:
        self.topics = topics
        self.settings = settings
        self.telemetry = telemetry
        # Where results also go as gen_ai.evaluation.result log records (`evaluations`).
        self.evaluations: EvaluationSink | None = None
        self._segment_cache: dict[tuple[str, ...], Segments] = {}

    def check_size(self, topic: TopicT, key: bytes, value: bytes) -> None:
        """Raise `OutputTooLarge` when key and value do not fit one producer request."""
        limit = self.settings.limits.max_output_bytes
        size = len(key) + len(value) + RECORD_OVERHEAD
        if size > limit:
            raise OutputTooLarge(topic.get_topic_name(), size, limit)

    async def send(
        self, topic: TopicT, key: str | bytes, value: bytes, partition: int | None = None
    ) -> Awaitable[Any]:
        """Produce one record; `OutputTooLarge` (nothing sent) when it would not fit.
        Returns the record's delivery (awaiting it waits for the broker's answer)."""
        raw_key = key.encode("utf-8") if isinstance(key, str) else key
        self.check_size(topic, raw_key, value)
        # Straight to the app's producer: keys and values are bytes already, and Faust's
        # per-message futures and callbacks cost more than the send. Faust flushes this
        # producer before it commits input offsets, so at-least-once holds as before.
        producer = topic.app.producer
        return await producer.send(topic.get_topic_name(), raw_key, value, partition, None, None)

    async def send_records(
        self,
        topic: TopicT,
        records: Sequence[tuple[bytes, bytes]],
        partitions: Sequence[int] | None = None,
    ) -> None:
        """Produce records already checked with `check_size`, in order, as one record
        batch per partition (`record_batches`): each to its key's partition, or to
        `partitions[i]` when given."""
        producer = kafka_producer(topic.app.producer)
        await send_batches(producer, topic.get_topic_name(), records, partitions)

    async def key_partitions(self, topic: TopicT, keys: Sequence[bytes]) -> list[int]:
        """The partition of `topic` each key goes to (the producer's partitioner)."""
        producer = kafka_producer(topic.app.producer)
        return await key_partitions(producer, topic.get_topic_name(), keys)

    async def result(
        self,
        result: ResultView,
        aggregate: bool = True,
        batch: Contributions | None = None,
        value: bytes | None = None,
    ) -> None:
        """Publish a result and, when windows count it, its per-segment contributions:
        sent now, or collected in `batch` to go out with the batch's (`contribute`).
        `value`: the result serialized already (by a scoring child; then `result` may be
        its `ResultFacts`), else `result` is a `CaseResult`. Every record is checked
        first: `OutputTooLarge` means none of them was sent or collected."""
        if value is None:
            assert isinstance(result, CaseResult), "a result without its bytes"
            value = result.model_dump_json().encode("utf-8")
        key = input_records.result_key(result.suite, result.id).encode("utf-8")
        self.check_size(self.topics.results, key, value)
        segments = self._segments(result) if aggregate else ()
        for segment_key, _, encoded in segments:  # each as a one-result contribution
            size = len(segment_key) + len(encoded) + len(value) + CONTRIBUTION_OVERHEAD
            if size + RECORD_OVERHEAD > self.settings.limits.max_output_bytes:
                topic = self.topics.aggregate_input.get_topic_name()
                raise OutputTooLarge(topic, size, self.settings.limits.max_output_bytes)
        if self.evaluations is not None:
            whole = (
                result if isinstance(result, CaseResult) else input_records.result_from_json(value)
            )
            self.evaluations.offer(whole)
        if batch is not None:
            batch.results.append((key, value))
            batch.add(result, value, segments)
            return
        await self.send(self.topics.results, key, value)
        for segment_key, _, encoded in segments:
            await self._send_cases(segment_key, encoded, [value])

    def _segments(self, result: ResultView) -> Segments:
        """(key, segment, segment as JSON) of each segment a result counts in."""
        segment_by = self.settings.segment_by
        values = aggregation.segment_values(result.model, result.labels, segment_by)
        cache_key = (result.suite, *values)
        known = self._segment_cache.get(cache_key)
        if known is None:
            if len(self._segment_cache) >= SEGMENT_CACHE_SIZE:
                self._segment_cache.clear()
            segments = aggregation.segments_for(result.model, result.labels, segment_by)
            known = self._segment_cache[cache_key] = tuple(
                (
                    f"{result.suite}|{aggregation.segment_key(segment)}",
                    segment,
                    orjson.dumps(segment),
                )
                for segment in segments
            )
        return known

    async def send_results(self, batch: Contributions) -> None:
        """Send the results collected in `batch` so far, and the records it forwards to
        the session stage (one record batch per partition each), ahead of the batch's
        contributions: results need not wait for the folds. Their input offsets are
        committed only after the whole batch (`contribute`), and the producer is flushed
        before any commit, so at-least-once holds."""
        if batch.results:
            await self.send_records(self.topics.results, batch.results)
            batch.results.clear()
        if batch.forwarded:
            await self._forward_bundled(batch.forwarded)
            batch.forwarded.clear()

    async def _forward_bundled(self, forwarded: Sequence[tuple[bytes, bytes]]) -> None:
        """Send a micro-batch's session messages (session key, message) to the session
        stage: those of one partition (their sessions' keys') bundled, up to
        `bundle_messages` a record and within `limits.max_output_bytes`, in order; a
        message alone goes as it is, keyed by its session."""
        topic = self.topics.turns
        partitions = await self.key_partitions(topic, [key for key, _ in forwarded])
        by_partition: dict[int, list[tuple[bytes, bytes]]] = {}
        for partition, message in zip(partitions, forwarded, strict=True):
            by_partition.setdefault(partition, []).append(message)
        room = self.settings.limits.max_output_bytes - RECORD_OVERHEAD - BUNDLE_FRAME
        records: list[tuple[bytes, bytes]] = []
        targets: list[int] = []
        for partition, messages in by_partition.items():
            for run in _runs(messages, self.bundle_messages, room):
                records.append(run[0] if len(run) == 1 else session_bundle([v for _, v in run]))
                targets.append(partition)
        await self.send_records(topic, records, targets)

    async def contribute(self, batch: Contributions) -> None:
        """Send a micro-batch's results (one record batch per partition), then its
        contributions per suite|segment key: the results sent case by case (split where
        one record would exceed `limits.max_output_bytes`), then the fold, one record (or,
        should that not fit, the fold's results case by case)."""
        await self.send_results(batch)
        for key, segment, cases, fold, folded in batch.items():
            await self._send_cases(key, segment, cases)
            if fold is None:
                continue
            value = b'{"segment":' + segment + b',"fold":' + orjson.dumps(fold.to_json()) + b"}"
            try:
                await self.send(self.topics.aggregate_input, key, value)
            except OutputTooLarge:
                await self._send_cases(key, segment, folded)
        batch.clear()

    async def _send_cases(self, key: str, segment: bytes, values: list[bytes]) -> None:
        limit = self.settings.limits.max_output_bytes - RECORD_OVERHEAD
        head = b'{"segment":' + segment + b',"results":['
        chunk: list[bytes] = []
        size = len(head) + len(key) + 2
        for value in values:
            if chunk and size + len(value) + 1 > limit:
                await self.send(self.topics.aggregate_input, key, head + b",".join(chunk) + b"]}")
                chunk, size = [], len(head) + len(key) + 2
            chunk.append(value)
            size += len(value) + 1
        if chunk:
            await self.send(self.topics.aggregate_input, key, head + b",".join(chunk) + b"]}")

    async def early(self, key: str, value: bytes) -> None:
        """A micro-batch's early folds for one suite|segment (`worker.gates.early`)."""
        await self.send(self.topics.aggregate_input, key, value)

    async def turn(self, session_id: str, value: bytes, batch: Contributions | None = None) -> None:
        """Forward an alignment record to the session stage, keyed by its session: now,
        or collected in `batch` to go out with its results (`send_results`), before any
        marker that covers it. `OutputTooLarge` when it does not fit (nothing sent)."""
        key = session_id.encode("utf-8")
        if batch is None:
            await self.send(self.topics.turns, key, value)
            return
        self.check_size(self.topics.turns, key, value)
        batch.forwarded.append((key, value))

    async def markers(self, topic: TopicT, markers: Sequence[Marker]) -> None:
        """Send `markers`, as one record, to every partition of an internal topic."""
        if not markers:
            return
        value = markers_value(markers)
        for partition in range(self.settings.stream.partitions):
            await self.send(topic, MARKER_KEY, value, partition=partition)

    async def aggregate(self, key: str, message: Aggregate) -> Awaitable[Any] | None:
        """Publish an aggregate; one too large for the producer is a dead letter.
        Returns its delivery (None when it was dead-lettered)."""
        value = message.model_dump_json().encode()
        return await self._derived(self.topics.aggregates, key, value)

    async def gate_event(self, key: str, event: GateEvent) -> Awaitable[Any] | None:
        """Publish a gate event; one too large for the producer is a dead letter.
        Returns its delivery (None when it was dead-lettered)."""
        value = event.model_dump_json().encode("utf-8")
        return await self._derived(self.topics.gates, key, value)

    async def _derived(self, topic: TopicT, key: str, value: bytes) -> Awaitable[Any] | None:
        """Send an output that no single input caused; `output_too_large` dead letter
        (with the output, cut, as its raw value) when it does not fit."""
        try:
            return await self.send(topic, key, value)
        except OutputTooLarge as exc:
            await self.output_too_large(value, exc, f"{key[:200]}: {exc}", _utcnow())
            return None

    async def output_too_large(
        self, value: bytes, exc: OutputTooLarge, message: str, now: datetime
    ) -> None:
        """Dead-letter an output that did not fit one producer request: reason
        `output_too_large`, the output (cut) as the raw value, no key, and as source the
        topic it was meant for (partition and offset -1)."""
        source = input_records.SourcePosition(exc.topic, -1, -1)
        await self.dead_letter(value, None, input_records.OUTPUT_TOO_LARGE, message, source, now)

    async def dead_letter(
        self,
        raw: bytes | None,
        key: bytes | None,
        reason: str,
        message: str,
        source: input_records.SourcePosition,
        now: datetime,
    ) -> None:
        """Dead-letter an input record with the reason (raw value kept, cut to a bound)."""
        letter = input_records.dead_letter(
            raw, reason, message, source, self.settings.dlq_max_raw_bytes, now
        )
        value = letter.model_dump_json().encode("utf-8")
        raw_key = key or b""
        room = self.settings.limits.max_output_bytes - len(value) - RECORD_OVERHEAD
        if len(raw_key) > room:  # a pathological input key: keep what fits
            raw_key = raw_key[: max(0, room)]
        await self.send(self.topics.dead_letters, raw_key, value)
        self.telemetry.record_dead_letter(reason)
        log.warning(
            "dead letter %s at %s:%s@%s: %s",
            reason,
            source.topic,
            source.partition,
            source.offset,
            message,
        )


def _runs(
    messages: Sequence[tuple[bytes, bytes]], most: int, room: int
) -> list[Sequence[tuple[bytes, bytes]]]:
    """Consecutive runs of `messages` ((key, value) each) of at most `most` messages whose
    values total at most `room` bytes (a longer one alone), covering them all in order."""
    runs: list[Sequence[tuple[bytes, bytes]]] = []
    start, used = 0, 0
    for index, (_, value) in enumerate(messages):
        if index > start and (index - start >= most or used + len(value) > room):
            runs.append(messages[start:index])
            start, used = index, 0
        used += len(value)
    if start < len(messages):
        runs.append(messages[start:])
    return runs
