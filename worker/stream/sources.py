"""The source stage: reads a source's own topic (e.g. the Collector's span topic,
`sources.otlp.topic`), turns each message into input records with the source
(`worker.input.sources.Source`, pure) and produces them to the input topic, where the
score stage takes them like any other record (event time, watermarks, sessions,
results, dead letters). One stage class for every source: adding a source changes no
stage, only `configured_sources`.

A message the source cannot read is a dead letter with its reason; items are counted by
outcome, and skipped ones by reason, with a rate-limited log line.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from faust.types import EventT

from worker.config import Settings
from worker.input import records as input_records
from worker.input.sources import Source, SourceOutput
from worker.otlp.mapping import OtlpSource
from worker.stream.context import StreamContext, run_to_completion, source_position
from worker.stream.publish import OutputTooLarge

log = logging.getLogger("scorestream")

LOG_EVERY = 10.0  # seconds between two log lines about one skip reason


def configured_sources(
    settings: Settings, knows_persona: Callable[[str], bool]
) -> list[tuple[str, Source]]:
    """The configured sources, each with the topic it reads (`knows_persona`: whether the
    suite that keeps sessions knows a persona, for sources of session turns)."""
    sources: list[tuple[str, Source]] = []
    otlp = settings.sources.otlp
    if otlp is not None:
        sources.append((otlp.topic, OtlpSource(otlp, settings.limits.text_bytes, knows_persona)))
    return sources


class SourceStage:
    """Faust glue around a `Source`: micro-batches of its messages in, records onto the
    input topic out."""

    def __init__(self, context: StreamContext, source: Source) -> None:
        self.context = context
        self.source = source
        self.publisher = context.publisher
        counters = context.telemetry.add_source(source.metrics)
        self.items, self.skipped = counters.items, counters.skipped
        self._logged_at: dict[str, float] = {}

    async def agent(self, stream: Any) -> None:  # faust.Stream: take_events
        size = self.context.settings.stream.score_batch_size
        wait = self.context.settings.stream.score_batch_wait
        async for events in stream.take_events(size, within=wait):
            await run_to_completion(self.process_batch(list(events)))

    async def process_batch(self, events: list[EventT]) -> None:
        """Read each message; send the batch's records to the input topic together."""
        records: list[tuple[bytes, bytes]] = []
        topic = self.publisher.topics.input
        for event in events:
            output = await self._read(event)
            if output is None:
                continue
            self._count(output)
            for record in output.records:
                try:
                    self.publisher.check_size(topic, record.key, record.value)
                except OutputTooLarge as exc:
                    await self.publisher.output_too_large(
                        record.value, exc, str(exc), self.context.now()
                    )
                    continue
                records.append((record.key, record.value))
        if records:
            await self.publisher.send_records(topic, records)

    async def _read(self, event: EventT) -> SourceOutput | None:
        """The message's records, or None after dead-lettering it."""
        reason, message = input_records.SCORING_ERROR, ""
        try:
            return self.source.read_records(event.value)
        except input_records.Rejected as rejected:
            reason, message = rejected.reason, rejected.message
        except Exception as exc:  # nothing a message holds stops the stage
            log.exception("unexpected failure reading a message of source %s", self.source.name)
            message = repr(exc)
        key = event.key if isinstance(event.key, bytes) else None
        await self.publisher.dead_letter(
            event.value, key, reason, message, source_position(event), self.context.now()
        )
        return None

    def _count(self, output: SourceOutput) -> None:
        for outcome, count in output.outcomes.items():
            self.items.labels(outcome).inc(count)
        now = time.monotonic()
        for skipped in output.skipped:
            self.skipped.labels(skipped.reason).inc()
            if now - self._logged_at.get(skipped.reason, -LOG_EVERY) >= LOG_EVERY:
                self._logged_at[skipped.reason] = now
                log.warning(
                    "%s not scored (%s): %s", self.source.item, skipped.reason, skipped.detail
                )


__all__ = ["SourceStage", "configured_sources"]
