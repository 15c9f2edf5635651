"""What the extraction batch report says: per-case outcomes, micro-averaged metrics and
the JSON report of `scorestream score`."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from worker.suites.base import Scored
from worker.suites.extraction.aggregate import (
    REPORT_METRIC_NAMES,
    ExtractionAggregator,
)
from worker.suites.extraction.settings import ExtractionSettings


@dataclass(frozen=True)
class CaseOutcome:
    """One input row: its scored result, or the error that stopped it being scored."""

    id: str
    scored: Scored | None = None
    error: str | None = None
    source: str = ""
    model: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)


def _count_values(outcomes: list[CaseOutcome], key: str) -> dict[str, int]:
    counter: Counter[str] = Counter()
    for outcome in outcomes:
        if outcome.scored is None:
            continue
        value = outcome.scored.counts.get(key)
        if isinstance(value, str):
            counter[value] += 1
        elif isinstance(value, list):
            counter.update(value)
    return dict(counter.most_common())


def detail_at(details: Mapping[str, Any], *path: str) -> Any:
    value: Any = details
    for key in path:
        value = value.get(key) if isinstance(value, Mapping) else None
    return value


@dataclass
class ExtractionResults:
    """Micro-averaged metrics over a batch, with per-case results and the JSON report
    (`worker.suites.extraction.render` draws it for a console or markdown)."""

    settings: ExtractionSettings
    outcomes: list[CaseOutcome]
    counts: dict[str, int] = field(init=False)
    metrics: dict[str, float | int] = field(init=False)

    def __post_init__(self) -> None:
        aggregator = ExtractionAggregator()
        state = aggregator.initialise()
        for outcome in self.outcomes:
            if outcome.scored is not None:
                state = aggregator.update(state, outcome.scored)
        figures = aggregator.figures(state)
        self.counts = figures["counts"]
        combined = {**figures["metrics"], **self.counts}
        self.metrics = {name: combined[name] for name in REPORT_METRIC_NAMES}

    # ------------------------------------------------------------ derived figures

    @property
    def scored(self) -> list[CaseOutcome]:
        return [outcome for outcome in self.outcomes if outcome.scored is not None]

    @property
    def failed(self) -> list[CaseOutcome]:
        return [outcome for outcome in self.outcomes if outcome.scored is None]

    def parse_methods(self) -> dict[str, int]:
        """Cases per extraction method."""
        return _count_values(self.outcomes, "parse_method")

    def repair_steps(self) -> dict[str, int]:
        """How often each repair step was tried."""
        return _count_values(self.outcomes, "repair_steps")

    def _details_at(self, *path: str) -> Iterator[Any]:
        """The detail at `path` of every scored case, in order."""
        for outcome in self.scored:
            assert outcome.scored is not None
            yield detail_at(outcome.scored.details, *path)

    def schema_violations(self) -> dict[str, int]:
        """Non-compliant cases per first-violation reason."""
        reasons = self._details_at("schema", "violation")
        return dict(Counter(reason for reason in reasons if isinstance(reason, str)).most_common())

    def hallucination_breakdown(self) -> dict[str, int]:
        """Unsupported arguments per `event_type|role`."""
        counter: Counter[str] = Counter()
        for breakdown in self._details_at("hallucination", "by_event_role"):
            if isinstance(breakdown, Mapping):
                counter.update({key: int(value) for key, value in breakdown.items()})
        return dict(counter.most_common())

    # ------------------------------------------------------------ BatchReport

    def to_json(self) -> dict[str, Any]:
        """The `score --format json` report."""
        metrics_config = self.settings.metrics
        return {
            "report_type": "extraction",
            "protocol_version": self.settings.protocol_version,
            "metrics_version": self.settings.metrics_version,
            "summary": {
                "cases": len(self.outcomes),
                "scored": len(self.scored),
                "failed": len(self.failed),
            },
            "config": {
                "relaxed": metrics_config.relaxed.model_dump(),
                "schema_mode": metrics_config.schema_.mode,
                "default_schema": self.settings.default_schema,
                "hallucination_mode": metrics_config.hallucination.match_mode,
                "cot": metrics_config.cot.model_dump(),
            },
            "metrics": dict(self.metrics),
            "counts": dict(self.counts),
            "parse_methods": self.parse_methods(),
            "repair_steps": self.repair_steps(),
            "schema_violations": self.schema_violations(),
            "hallucination_breakdown": self.hallucination_breakdown(),
            "results": [
                {
                    "id": outcome.id,
                    "model": outcome.model,
                    "labels": dict(outcome.labels),
                    "scores": dict(outcome.scored.scores),
                    "counts": dict(outcome.scored.counts),
                    "details": dict(outcome.scored.details),
                }
                for outcome in self.outcomes
                if outcome.scored is not None
            ],
            "errors": [
                {"id": outcome.id, "source": outcome.source, "error": outcome.error}
                for outcome in self.failed
            ],
        }

    def exit_code(self) -> int:
        """No per-case label: 0, or 3 when a case could not be scored."""
        return 3 if self.failed else 0

    def report_stem(self) -> str:
        return "extraction_report"
