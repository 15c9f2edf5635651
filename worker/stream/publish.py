"""Everything the worker produces, in one place: results (with their contributions to
the aggregation stage), aggregates, gate events, dead letters and watermark markers.

Order matters: a stage sends a record's outputs before the marker that covers it, and
Kafka keeps one producer's records to one partition in order, so no marker overtakes
the records it covers.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime

import orjson
from faust.types import TopicT

from schemas.outputs import Aggregate, CaseResult, GateEvent
from worker import aggregation, input_records
from worker.config import Settings
from worker.eventtime import Marker
from worker.telemetry import Telemetry

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


class Contributions:
    """Results collected for the aggregation stage during a micro-batch, per
    suite|segment key, in order (see `Publisher.contribute`)."""

    def __init__(self) -> None:
        self._by_key: dict[str, tuple[bytes, list[bytes]]] = {}

    def add(self, key: str, segment: bytes, value: bytes) -> None:
        self._by_key.setdefault(key, (segment, []))[1].append(value)

    def items(self) -> list[tuple[str, tuple[bytes, list[bytes]]]]:
        return list(self._by_key.items())

    def clear(self) -> None:
        self._by_key.clear()

    def __len__(self) -> int:
        return sum(len(values) for _, values in self._by_key.values())


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


def marker_of(data: dict[str, object]) -> Marker | None:
    """The marker in a decoded internal-topic value, or None for a data record."""
    raw = data.get("wm")
    return None if raw is None else Marker.from_json(raw)


class Publisher:
    """Produces the worker's messages (`send` is the one place that touches Kafka)."""

    def __init__(self, topics: StreamTopics, settings: Settings, telemetry: Telemetry) -> None:
        self.topics = topics
        self.settings = settings
        self.telemetry = telemetry

    def check_size(self, topic: TopicT, key: bytes, value: bytes) -> None:
        """Raise `OutputTooLarge` when key and value do not fit one producer request."""
        limit = self.settings.limits.max_output_bytes
        size = len(key) + len(value) + RECORD_OVERHEAD
        if size > limit:
            raise OutputTooLarge(topic.get_topic_name(), size, limit)

    async def send(
        self, topic: TopicT, key: str | bytes, value: bytes, partition: int | None = None
    ) -> None:
        """Produce one record; `OutputTooLarge` (nothing sent) when it would not fit."""
        raw_key = key.encode("utf-8") if isinstance(key, str) else key
        self.check_size(topic, raw_key, value)
        # Straight to the app's producer: keys and values are bytes already, and Faust's
        # per-message futures and callbacks cost more than the send. Faust flushes this
        # producer before it commits input offsets, so at-least-once holds as before.
        producer = topic.app.producer
        await producer.send(topic.get_topic_name(), raw_key, value, partition, None, None)

    async def result(
        self,
        result: CaseResult,
        aggregate: bool = True,
        batch: Contributions | None = None,
    ) -> None:
        """Publish a result and, when windows count it, its per-segment contributions:
        sent now, or collected in `batch` to go out combined with `contribute`. Every
        record is checked first: `OutputTooLarge` means none of them was sent."""
        value = result.model_dump_json().encode("utf-8")
        outputs = [(self.topics.results, input_records.result_key(result.suite, result.id), value)]
        segments = []
        if aggregate:
            for segment in aggregation.segments_for(
                result.model, result.labels, self.settings.segment_by
            ):
                key = f"{result.suite}|{aggregation.segment_key(segment)}"
                encoded = orjson.dumps(segment)
                segments.append((key, encoded))
                contribution = b'{"segment":' + encoded + b',"results":[' + value + b"]}"
                outputs.append((self.topics.aggregate_input, key, contribution))
        for topic, key, data in outputs:
            self.check_size(topic, key.encode("utf-8"), data)
        if batch is None:
            for topic, key, data in outputs:
                await self.send(topic, key, data)
            return
        topic, key, data = outputs[0]
        await self.send(topic, key, data)
        for key, encoded in segments:
            batch.add(key, encoded, value)

    async def contribute(self, batch: Contributions) -> None:
        """Send a micro-batch's contributions: one record per suite|segment key (split
        where one would exceed `limits.max_output_bytes`)."""
        limit = self.settings.limits.max_output_bytes - RECORD_OVERHEAD
        for key, (segment, values) in batch.items():
            head = b'{"segment":' + segment + b',"results":['
            chunk: list[bytes] = []
            size = len(head) + len(key) + 2
            for value in values:
                if chunk and size + len(value) + 1 > limit:
                    await self.send(
                        self.topics.aggregate_input, key, head + b",".join(chunk) + b"]}"
                    )
                    chunk, size = [], len(head) + len(key) + 2
                chunk.append(value)
                size += len(value) + 1
            if chunk:
                await self.send(self.topics.aggregate_input, key, head + b",".join(chunk) + b"]}")
        batch.clear()

    async def turn(self, session_id: str, value: bytes) -> None:
        """Forward an alignment record to the session stage, keyed by its session."""
        await self.send(self.topics.turns, session_id, value)

    async def marker(self, topic: TopicT, marker: Marker) -> None:
        """Send `marker` to every partition of an internal topic."""
        value = orjson.dumps({"wm": marker.to_json()})
        for partition in range(self.settings.stream.partitions):
            await self.send(topic, MARKER_KEY, value, partition=partition)

    async def aggregate(self, key: str, message: Aggregate) -> None:
        """Publish an aggregate; one too large for the producer is a dead letter."""
        await self._derived(self.topics.aggregates, key, message.model_dump_json().encode())

    async def gate_event(self, key: str, event: GateEvent) -> None:
        """Publish a gate event; one too large for the producer is a dead letter."""
        await self._derived(self.topics.gates, key, event.model_dump_json().encode("utf-8"))

    async def _derived(self, topic: TopicT, key: str, value: bytes) -> None:
        """Send an output that no single input caused; `output_too_large` dead letter
        (with the output, cut, as its raw value) when it does not fit."""
        try:
            await self.send(topic, key, value)
        except OutputTooLarge as exc:
            await self.output_too_large(value, exc, f"{key[:200]}: {exc}", _utcnow())

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
