"""The source seam (`worker.input.sources`): the OTLP source behind it, and the one
source stage taking any source's records to the input topic without knowing the source."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import orjson

from tests.otlp_spans import SpanMaker, otlp_proto
from worker.input.records import Rejected
from worker.input.sources import Skipped, Source, SourceMetrics, SourceOutput, SourceRecord
from worker.ops.telemetry import Telemetry
from worker.otlp.mapping import OtlpSource
from worker.otlp.settings import OtlpSourceSettings
from worker.stream.sources import SourceStage

END_NS = 1_780_000_000_123_456_789


def test_the_otlp_source_gives_its_turns_as_input_records() -> None:
    rules = OtlpSourceSettings.model_validate({"persona_by_service": {"bank-bot": "support"}})
    source: Source = OtlpSource(rules, text_bytes=256 * 1024)
    bank = SpanMaker("bank-bot")
    message = otlp_proto([bank.chat("Frozen.", conversation="conv-1", end_ns=END_NS)])
    reference = OtlpSource(rules, text_bytes=256 * 1024).read(message)
    output = source.read_records(message)
    (record,) = output.records
    (envelope,) = reference.envelopes
    assert record.key == b"conv-1"
    assert orjson.loads(record.value) == envelope
    assert record.event_time == END_NS // 1_000_000 / 1000
    assert envelope["id"] in record.origin
    assert output.outcomes == reference.outcomes


class FakeSource:
    """A source of any shape: one record per message, `bad` messages rejected."""

    name = "fake"
    item = "fake item"
    metrics = SourceMetrics(
        "test_fake_items_total", "items", ("made", "dropped"), "test_fake_skipped_total", "s", ()
    )

    def read_records(self, raw: bytes | None) -> SourceOutput:
        if raw == b"bad":
            raise Rejected("invalid_record", "not a fake message")
        record = SourceRecord(b"k", raw or b"", 1.0, "fake")
        return SourceOutput([record], Counter(made=1), [Skipped("why", "detail")])


class Publisher:
    def __init__(self) -> None:
        self.topics = SimpleNamespace(input="input")
        self.sent: list[tuple[Any, list[tuple[bytes, bytes]]]] = []
        self.dead: list[tuple[bytes | None, str]] = []

    def check_size(self, topic: Any, key: bytes, value: bytes) -> None:
        return None

    async def send_records(self, topic: Any, records: list[tuple[bytes, bytes]]) -> None:
        self.sent.append((topic, records))

    async def dead_letter(self, raw: bytes | None, key: Any, reason: str, *_: Any) -> None:
        self.dead.append((raw, reason))


def test_the_source_stage_takes_any_source_to_the_input_topic() -> None:
    publisher = Publisher()
    telemetry = Telemetry()
    registry = telemetry.registry
    context = SimpleNamespace(
        publisher=publisher,
        telemetry=telemetry,
        now=lambda: datetime(2026, 1, 1, tzinfo=UTC),
    )
    stage = SourceStage(context, FakeSource())  # type: ignore[arg-type]

    def event(value: bytes) -> Any:
        message = SimpleNamespace(topic="fake", partition=0, offset=0, timestamp=None)
        return SimpleNamespace(value=value, key=None, message=message)

    asyncio.run(stage.process_batch([event(b"one"), event(b"bad"), event(b"two")]))
    assert publisher.sent == [("input", [(b"k", b"one"), (b"k", b"two")])]
    assert publisher.dead == [(b"bad", "invalid_record")]
    assert registry.get_sample_value("test_fake_items_total", {"outcome": "made"}) == 2
