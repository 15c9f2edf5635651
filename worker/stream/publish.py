"""Everything the worker produces, in one place: results (with their contributions to
the aggregation stage), aggregates, gate events, dead letters and watermark markers.

Order matters: a stage sends a record's outputs before the marker that covers it, and
Kafka keeps one producer's records to one partition in order, so no marker overtakes
the records it covers.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

import orjson
from faust.types import TopicT

from schemas.outputs import Aggregate, CaseResult, GateEvent
from worker import aggregation, intake
from worker.config import Settings
from worker.eventtime import Marker
from worker.telemetry import Telemetry

log = logging.getLogger("scorestream")

MARKER_KEY = b"__watermark__"


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

    async def send(
        self, topic: TopicT, key: str | bytes, value: bytes, partition: int | None = None
    ) -> None:
        raw_key = key.encode("utf-8") if isinstance(key, str) else key
        await topic.send(key=raw_key, value=value, partition=partition)

    async def result(self, result: CaseResult, aggregate: bool = True) -> None:
        """Publish a result and, when windows count it, its per-segment contributions."""
        value = result.model_dump_json().encode("utf-8")
        await self.send(self.topics.results, intake.result_key(result.suite, result.id), value)
        if not aggregate:
            return
        for segment in aggregation.segments_for(
            result.model, result.labels, self.settings.segment_by
        ):
            key = f"{result.suite}|{aggregation.segment_key(segment)}"
            contribution = b'{"segment":' + orjson.dumps(segment) + b',"result":' + value + b"}"
            await self.send(self.topics.aggregate_input, key, contribution)

    async def turn(self, session_id: str, value: bytes) -> None:
        """Forward an alignment record to the session stage, keyed by its session."""
        await self.send(self.topics.turns, session_id, value)

    async def marker(self, topic: TopicT, marker: Marker) -> None:
        """Send `marker` to every partition of an internal topic."""
        value = orjson.dumps({"wm": marker.to_json()})
        for partition in range(self.settings.stream.partitions):
            await self.send(topic, MARKER_KEY, value, partition=partition)

    async def aggregate(self, key: str, message: Aggregate) -> None:
        await self.send(self.topics.aggregates, key, message.model_dump_json().encode("utf-8"))

    async def gate_event(self, key: str, event: GateEvent) -> None:
        await self.send(self.topics.gates, key, event.model_dump_json().encode("utf-8"))

    async def dead_letter(
        self,
        raw: bytes | None,
        key: bytes | None,
        reason: str,
        message: str,
        source: intake.SourcePosition,
        now: datetime,
    ) -> None:
        """Dead-letter an input record with the reason (raw value kept, cut to a bound)."""
        letter = intake.dead_letter(
            raw, reason, message, source, self.settings.dlq_max_raw_bytes, now
        )
        value = letter.model_dump_json().encode("utf-8")
        await self.send(self.topics.dead_letters, key or b"", value)
        self.telemetry.record_dead_letter(reason)
        log.warning(
            "dead letter %s at %s:%s@%s: %s",
            reason,
            source.topic,
            source.partition,
            source.offset,
            message,
        )
