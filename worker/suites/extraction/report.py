"""The batch report of `scorestream score` for the extraction suite."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.table import Table

from worker.suites.base import Scored
from worker.suites.extraction.aggregate import (
    COT_RATE_NAMES,
    QUALITY_RATE_NAMES,
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


def _nested(details: Mapping[str, Any], *path: str) -> Any:
    value: Any = details
    for key in path:
        value = value.get(key) if isinstance(value, Mapping) else None
    return value


@dataclass
class ExtractionReport:
    """Micro-averaged metrics over a batch, with per-case results (`BatchReport`)."""

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

    def schema_violations(self) -> dict[str, int]:
        """Non-compliant cases per first-violation reason."""
        counter: Counter[str] = Counter()
        for outcome in self.scored:
            assert outcome.scored is not None
            reason = _nested(outcome.scored.details, "schema", "violation")
            if isinstance(reason, str):
                counter[reason] += 1
        return dict(counter.most_common())

    def hallucination_breakdown(self) -> dict[str, int]:
        """Unsupported arguments per `event_type|role`."""
        counter: Counter[str] = Counter()
        for outcome in self.scored:
            assert outcome.scored is not None
            breakdown = _nested(outcome.scored.details, "hallucination", "by_event_role")
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

    # ------------------------------------------------------------ console

    def render_console(self, console: Console, verbose: bool = False) -> None:
        """Main table, parse / schema / hallucination figures, then CoT diagnostics."""
        m = self.metrics
        console.rule("[bold]Event extraction")
        console.print(
            f"{len(self.outcomes)} cases, {len(self.scored)} scored, {len(self.failed)} failed"
            f"  (protocol {self.settings.protocol_version},"
            f" metrics {self.settings.metrics_version})"
        )
        main = Table(title="Micro-averaged P / R / F1")
        for column in ("mode", "precision", "recall", "F1", "tp", "pred", "gold"):
            main.add_column(column, justify="left" if column == "mode" else "right")
        for prefix, title in (("strict", "Strict"), ("relaxed", "Relaxed"), ("type", "Type")):
            main.add_row(
                title,
                f"{m[f'{prefix}_precision']:.4f}",
                f"{m[f'{prefix}_recall']:.4f}",
                f"[bold]{m[f'{prefix}_f1']:.4f}[/bold]",
                str(self.counts[f"{prefix}_tp"]),
                str(self.counts[f"{prefix}_pred_total"]),
                str(self.counts[f"{prefix}_gold_total"]),
            )
        console.print(main)

        figures = Table(title="Parse, schema and hallucination")
        figures.add_column("figure")
        figures.add_column("count", justify="right")
        figures.add_column("rate", justify="right")
        total = self.counts["total_samples"]
        for label, count, rate in (
            ("parsed without repair", "parse_raw_success", "parse_raw_success_rate"),
            ("parsed after repair", "parse_repair_success", "parse_repair_success_rate"),
            ("parse errors", "parse_errors", "parse_error_rate"),
            ("no JSON found", "parse_extraction_failures", "parse_extraction_failure_rate"),
            ("schema compliant", "schema_compliant", "schema_compliance_rate"),
            ("cases with hallucination", "hallucination_samples", "hallucination_rate"),
        ):
            figures.add_row(label, f"{self.counts[count]} / {total}", f"{m[rate]:.4f}")
        figures.add_row(
            "hallucinated arguments",
            f"{self.counts['hallucinated_entities']} / {self.counts['total_entities']}",
            f"{m['hallucination_entity_rate']:.4f}",
        )
        console.print(figures)
        details = [
            ("extraction methods", self.parse_methods()),
            ("repair steps tried", self.repair_steps()),
            ("schema violations", self.schema_violations()),
            ("hallucinated event_type|role", self.hallucination_breakdown()),
        ]
        for title, values in details:
            if values:
                text = ", ".join(f"{key} {value}" for key, value in values.items())
                console.print(f"[dim]{title}:[/dim] {text}")

        console.rule("[bold]Diagnostics (CoT, not a main claim)")
        cot = Table()
        cot.add_column("figure")
        cot.add_column("value", justify="right")
        checked = self.counts["cot_checked"]
        if not self.settings.metrics.cot.enabled:
            console.print("CoT checks are disabled (metrics.cot.enabled=false).")
        else:
            for name in ("cot_type_consistency", "cot_argument_consistency", "cot_faithfulness"):
                cot.add_row(name, f"{m[name]:.4f}")
            cot.add_row(
                "cot_coverage_rate",
                f"{m['cot_coverage_rate']:.4f}  ({checked} checked, "
                f"{self.counts['cot_skipped']} skipped, {self.counts['cot_parse_fail']}"
                " parse failures)",
            )
            console.print(cot)

        if verbose and self.scored:
            cases = Table(title="Cases")
            for column in ("id", "method", "strict F1", "relaxed F1", "type F1", "schema"):
                cases.add_column(column)
            for outcome in self.scored:
                assert outcome.scored is not None
                scores = outcome.scored.scores
                violation = _nested(outcome.scored.details, "schema", "violation")
                cases.add_row(
                    outcome.id,
                    str(outcome.scored.counts.get("parse_method", "")),
                    f"{scores['strict_f1'] or 0:.3f}",
                    f"{scores['relaxed_f1'] or 0:.3f}",
                    f"{scores['type_f1'] or 0:.3f}",
                    "ok" if violation is None else str(violation),
                )
            console.print(cases)
        for outcome in self.failed:
            console.print(f"[red]not scored[/red] {outcome.id} ({outcome.source}): {outcome.error}")

    # ------------------------------------------------------------ markdown

    def to_markdown(self) -> str:
        """The report as a Markdown document."""
        m, c = self.metrics, self.counts
        lines = [
            "# Event extraction report",
            "",
            f"{len(self.outcomes)} cases, {len(self.scored)} scored, {len(self.failed)} failed."
            f" Protocol {self.settings.protocol_version}, metrics"
            f" {self.settings.metrics_version}.",
            "",
            "## Main table (micro-averaged)",
            "",
            "| mode | precision | recall | F1 | tp | pred | gold |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for prefix, title in (("strict", "Strict"), ("relaxed", "Relaxed"), ("type", "Type")):
            lines.append(
                f"| {title} | {m[f'{prefix}_precision']:.4f} | {m[f'{prefix}_recall']:.4f}"
                f" | {m[f'{prefix}_f1']:.4f} | {c[f'{prefix}_tp']} | {c[f'{prefix}_pred_total']}"
                f" | {c[f'{prefix}_gold_total']} |"
            )
        lines += [
            "",
            "## Parse, schema and hallucination",
            "",
            "| metric | value |",
            "| --- | ---: |",
        ]
        for name in QUALITY_RATE_NAMES:
            lines.append(f"| {name} | {m[name]:.4f} |")
        for name in (
            "parse_raw_success",
            "parse_repair_success",
            "parse_errors",
            "parse_extraction_failures",
            "total_samples",
        ):
            lines.append(f"| {name} | {m[name]} |")
        for title, values in (
            ("Extraction methods", self.parse_methods()),
            ("Schema violations", self.schema_violations()),
            ("Hallucinated arguments by event_type|role", self.hallucination_breakdown()),
        ):
            if values:
                lines += ["", f"**{title}:** " + ", ".join(f"`{k}` {v}" for k, v in values.items())]
        lines += ["", "## Diagnostics: CoT (not a main claim)", ""]
        if self.settings.metrics.cot.enabled:
            lines += ["| metric | value |", "| --- | ---: |"]
            for name in COT_RATE_NAMES:
                lines.append(f"| {name} | {m[name]:.4f} |")
            for name in ("cot_checked", "cot_skipped", "cot_parse_fail"):
                lines.append(f"| {name} | {m[name]} |")
        else:
            lines.append("CoT checks are disabled.")
        if self.failed:
            lines += ["", "## Not scored", ""]
            lines += [f"- `{o.id}` ({o.source}): {o.error}" for o in self.failed]
        return "\n".join(lines) + "\n"
