"""Messages scorestream publishes: results, aggregates, gate events and dead letters."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field, JsonValue

from schemas._base import OutputModel
from schemas.envelope import TRACE_ID_PATTERN, SuiteName

Label = Literal["Pass", "Review", "Fail"]
Grade = Literal["A", "B", "C", "D", "F"]
CountValue = int | str | list[str]
# Details are free-form JSON findings (found / missing / violated terms, parse notes ...).
DetailValue = JsonValue


class Versions(OutputModel):
    scorer: str
    metrics: str
    protocol: str | None = None


class RecordSource(OutputModel):
    """Where an input record was read from."""

    topic: str
    partition: int
    offset: int


class CaseResult(OutputModel):
    """One scored case, turn or closed session on `llm.eval.results.v1`."""

    id: str
    suite: SuiteName
    kind: Literal["case", "turn", "session"]
    ts: datetime
    model: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    scores: dict[str, float | None]
    label: Label | None = None
    grade: Grade | None = None
    details: dict[str, DetailValue] = Field(default_factory=dict)
    counts: dict[str, CountValue] = Field(default_factory=dict)
    versions: Versions
    source: RecordSource | None = None
    scored_at: datetime
    latency_ms: float | None = None
    # The input envelope's OpenTelemetry trace id, echoed (32 lowercase hex digits).
    trace_id: str | None = Field(default=None, pattern=TRACE_ID_PATTERN)


class WindowSpan(OutputModel):
    start: datetime
    end: datetime
    size_s: float


class MetricSummary(OutputModel):
    """Statistics of one metric over the cases of a window."""

    mean: float | None
    min: float | None
    max: float | None
    std: float | None
    ci_low: float | None = None
    ci_high: float | None = None


class WorstCase(OutputModel):
    """One of the worst cases of a window for a metric: enough to find its result
    (`{suite}:{id}` on the results topic) and its trace."""

    id: str
    kind: Literal["case", "turn", "session"]
    ts: datetime
    value: float
    label: Label | None = None
    model: str | None = None
    trace_id: str | None = None


class ArchetypeFigures(OutputModel):
    count: int
    mean_CR: float
    mean_AH: float
    mean_AC: float
    pass_rate: float


class SafeFigures(OutputModel):
    """SAFE v0 batch figures of a window (seed 004 section 4.2)."""

    pass_rates: dict[str, float]
    by_archetype: dict[str, ArchetypeFigures]
    # Cases with no expectations at all (they pass whatever the output): a feed that lost
    # its expectations shows up here.
    vacuous_count: int = 0


class ExtractionFigures(OutputModel):
    """Micro-averaged extraction metrics from summed counters, with the counters."""

    metrics: dict[str, float]
    counts: dict[str, int]


class AlignmentFigures(OutputModel):
    """Alignment figures of a window: closed sessions and their grades, and the share of
    their turns the safety classifier judged in full (`safety_coverage`: `covered_turns`
    of the `coverage_turns` whose coverage was recorded; null when none was)."""

    sessions: int
    turns: int
    grade_counts: dict[str, int]
    covered_turns: int = 0
    coverage_turns: int = 0
    safety_coverage: float | None = None


class Aggregate(OutputModel):
    """A windowed aggregate on `llm.eval.aggregates.v1`."""

    suite: SuiteName
    segment: dict[str, str]
    window: WindowSpan
    final: bool
    count: int
    metrics: dict[str, MetricSummary]
    label_counts: dict[str, int] = Field(default_factory=dict)
    pass_rate: float | None = None
    safe: SafeFigures | None = None
    extraction: ExtractionFigures | None = None
    alignment: AlignmentFigures | None = None
    emitted_at: datetime
    # Final aggregates: the k worst cases per drill-down metric (the suite's headline
    # metrics and the gated ones), worst first; ties broken by id.
    worst: dict[str, list[WorstCase]] | None = None


class GateEvent(OutputModel):
    """A gate changing state, on `llm.eval.gates.v1`."""

    gate: str
    state: Literal["firing", "resolved"]
    suite: SuiteName
    segment: dict[str, str]
    metric: str
    stat: str
    op: Literal["<", "<=", ">", ">="]
    threshold: float
    value: float | None
    count: int
    window: WindowSpan
    ts: datetime
    # Why the state changed when it is not the value: "no_data" (the segment has had no
    # cases for the gate's `stale_after`).
    reason: str | None = None
    # The window's worst cases for `worst_metric` (the gate's metric when it is a per-case
    # score, else the suite's headline metric), worst first.
    worst_metric: str | None = None
    worst: list[WorstCase] | None = None
    # Decided on a sample of the window's turns judged as they were read, while the
    # window's full aggregate was late (`early_gates`); its full aggregate is judged when
    # it closes. `coverage`: the share of the window's cases the decision saw (1.0: all of
    # them, the full aggregate; null: not decided on cases, e.g. `no_data`).
    provisional: bool = False
    coverage: float | None = None


class DeadLetterError(OutputModel):
    type: str
    message: str


class DeadLetterSource(OutputModel):
    topic: str
    partition: int
    offset: int
    timestamp: datetime | None = None


class DeadLetter(OutputModel):
    """An input that could not be scored, on `llm.responses.v1.dlq`."""

    error: DeadLetterError
    raw: str | None = None
    raw_b64: str | None = None
    raw_truncated: bool = False
    raw_size: int
    source: DeadLetterSource
    failed_at: datetime


__all__ = [
    "Aggregate",
    "AlignmentFigures",
    "ArchetypeFigures",
    "CaseResult",
    "CountValue",
    "DeadLetter",
    "DeadLetterError",
    "DeadLetterSource",
    "DetailValue",
    "ExtractionFigures",
    "GateEvent",
    "Grade",
    "Label",
    "MetricSummary",
    "RecordSource",
    "SafeFigures",
    "Versions",
    "WindowSpan",
    "WorstCase",
]
