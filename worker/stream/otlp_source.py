"""The OTLP source stage: reads the Collector's span topic (`sources.otlp.topic`), turns
each GenAI span into an alignment turn envelope (`worker.otlp.mapping`, pure) and
produces it to the input topic, keyed by session, where the score stage takes it like
any other record (event time, watermarks, sessions, results, dead letters).

A message that is not OTLP traces is a dead letter with its reason; spans are counted by
outcome, and GenAI spans that cannot be mapped by reason, with a rate-limited log line.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import orjson
from faust.types import EventT
from prometheus_client import Counter

from worker.input import records as input_records
from worker.otlp.mapping import OUTCOMES, UNMAPPED_REASONS, OtlpSource, SourceBatch
from worker.stream.context import StreamContext, run_to_completion, source_position
from worker.stream.publish import OutputTooLarge

log = logging.getLogger("scorestream")

LOG_EVERY = 10.0  # seconds between two log lines about one unmapped reason


class OtlpSourceStage:
    """Faust glue around an `OtlpSource`: micro-batches of span messages in, envelopes
    onto the input topic out."""

    def __init__(self, context: StreamContext, source: OtlpSource) -> None:
        self.context = context
        self.source = source
        self.publisher = context.publisher
        registry = context.telemetry.registry
        self.spans = Counter(
            "scorestream_otlp_spans_total",
            "Spans read from the OTLP source, by outcome: mapped (sent to be scored), "
            "duplicate (a span id seen before), not_genai, operation (a GenAI operation "
            "not scored), unmapped (see scorestream_otlp_unmapped_spans_total).",
            ["outcome"],
            registry=registry,
        )
        self.unmapped = Counter(
            "scorestream_otlp_unmapped_spans_total",
            "GenAI spans that could not be made an alignment turn, by reason.",
            ["reason"],
            registry=registry,
        )
        for outcome in OUTCOMES:
            self.spans.labels(outcome)
        for reason in UNMAPPED_REASONS:
            self.unmapped.labels(reason)
        self._logged_at: dict[str, float] = {}

    async def agent(self, stream: Any) -> None:  # faust.Stream: take_events
        size = self.context.settings.stream.score_batch_size
        wait = self.context.settings.stream.score_batch_wait
        async for events in stream.take_events(size, within=wait):
            await run_to_completion(self.process_batch(list(events)))

    async def process_batch(self, events: list[EventT]) -> None:
        """Map each message; send the batch's envelopes to the input topic together."""
        records: list[tuple[bytes, bytes]] = []
        topic = self.publisher.topics.input
        for event in events:
            batch = await self._read(event)
            if batch is None:
                continue
            self._count(batch)
            for envelope in batch.envelopes:
                key = envelope["payload"]["session_id"].encode("utf-8")
                value = orjson.dumps(envelope)
                try:
                    self.publisher.check_size(topic, key, value)
                except OutputTooLarge as exc:
                    await self.publisher.output_too_large(value, exc, str(exc), self.context.now())
                    continue
                records.append((key, value))
        if records:
            await self.publisher.send_records(topic, records)

    async def _read(self, event: EventT) -> SourceBatch | None:
        """The message's spans, or None after dead-lettering it."""
        reason, message = input_records.SCORING_ERROR, ""
        try:
            return self.source.read(event.value)
        except input_records.Rejected as rejected:
            reason, message = rejected.reason, rejected.message
        except Exception as exc:  # nothing a message holds stops the stage
            log.exception("unexpected failure reading an OTLP message")
            message = repr(exc)
        key = event.key if isinstance(event.key, bytes) else None
        await self.publisher.dead_letter(
            event.value, key, reason, message, source_position(event), self.context.now()
        )
        return None

    def _count(self, batch: SourceBatch) -> None:
        for outcome, count in batch.outcomes.items():
            self.spans.labels(outcome).inc(count)
        now = time.monotonic()
        for unmapped in batch.unmapped:
            self.unmapped.labels(unmapped.reason).inc()
            if now - self._logged_at.get(unmapped.reason, -LOG_EVERY) >= LOG_EVERY:
                self._logged_at[unmapped.reason] = now
                log.warning("OTLP span not scored (%s): %s", unmapped.reason, unmapped.detail)


__all__ = ["OtlpSourceStage"]
