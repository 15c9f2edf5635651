"""The source seam: what an input source other than the input topic must give the worker.

A source reads messages from a topic of its own (e.g. the Collector's span topic) and
turns each message into records for the input topic, where the score stage takes them
like any other record: event time, watermarks, sessions, results and dead letters follow
from there, so a new source changes no stage. A source is pure (no Kafka, no clock): the
generic source stage (`worker.stream.sources.SourceStage`) reads its topic, calls
`read_records` on each message, produces the records, dead-letters a message it rejects,
and counts outcomes and skipped items in the source's two metrics.

To add one: a class with the `Source` attributes and `read_records`, its settings under
`sources` (`worker.otlp.settings.SourcesSettings`), and one entry in
`worker.stream.sources.configured_sources`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class SourceRecord:
    """One record for the input topic.

    `key`: the input key (`topics.record_key`; a session suite's records: the session
    id); `value`: the envelope's JSON (`schemas.envelope`); `event_time`: epoch seconds,
    the envelope's `ts` that the score stage takes as the record's event time (None: it
    has none, and the record's receipt time is used); `origin`: where in the source it
    came from (e.g. a trace and span id), for log lines."""

    key: bytes
    value: bytes
    event_time: float | None
    origin: str


@dataclass(frozen=True)
class Skipped:
    """An item of a message that should have become a record but could not, and why."""

    reason: str
    detail: str


@dataclass
class SourceOutput:
    """What one message gave: its records, its items counted by outcome, and the items
    skipped with their reasons."""

    records: list[SourceRecord] = field(default_factory=list)
    outcomes: Counter[str] = field(default_factory=Counter)
    skipped: list[Skipped] = field(default_factory=list)


@dataclass(frozen=True)
class SourceMetrics:
    """The two counters of a source: its items by `outcome`, its skipped items by
    `reason` (every label value is created at zero when the stage starts)."""

    items: str
    items_help: str
    outcomes: tuple[str, ...]
    skipped: str
    skipped_help: str
    reasons: tuple[str, ...]


class Source(Protocol):
    """An input source: message bytes in, records for the input topic out.

    `name`: the agent's name; `item`: what one item is, for log lines ("OTLP span");
    `read_records` raises `worker.input.records.Rejected` for a message it cannot read at all
    (the message becomes a dead letter with that reason)."""

    name: str
    item: str
    metrics: SourceMetrics

    def read_records(self, raw: bytes | None) -> SourceOutput: ...


__all__ = ["Skipped", "Source", "SourceMetrics", "SourceOutput", "SourceRecord"]
