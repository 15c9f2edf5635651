"""What the SAFE v0 batch report says (seed 004 sections 4.2 and 5.1): per-case results,
figures, metric statuses and the JSON report; `render.py` draws it."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from worker.suites.base import Scored, exit_code_for_labels
from worker.suites.safe.aggregate import LABELS, SafeAggregator
from worker.suites.safe.scoring import METRICS, at_least, detail_terms
from worker.suites.safe.settings import SafeSettings

WORST_PERFORMERS = 5


@dataclass(frozen=True)
class ScoredCase:
    """One scored case of a batch, with where it came from."""

    test_id: str
    archetype: str
    scored: Scored
    id: str = ""
    model: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The seed's `SAFEv0Result` (plus the record id and model)."""
        details = self.scored.details
        flags = {key: details[key] for key in OPTIONAL_DETAILS if key in details}
        return {
            "test_id": self.test_id,
            "id": self.id or self.test_id,
            "model": self.model,
            "archetype": self.archetype,
            "concern_id": details.get("concern_id", ""),
            "batch_id": details.get("batch_id", ""),
            "scores": dict(self.scored.scores),
            "details": {
                "CR": {
                    "found": detail_terms(self.scored, "CR", "found"),
                    "missing": detail_terms(self.scored, "CR", "missing"),
                },
                "AH": {"violations": detail_terms(self.scored, "AH", "violations")},
                "AC": {
                    "found": detail_terms(self.scored, "AC", "found"),
                    "missing": detail_terms(self.scored, "AC", "missing"),
                },
                **flags,
            },
            "label": self.scored.label,
        }


# Findings beyond the seed's result shape, shown only when present.
OPTIONAL_DETAILS = ("unknown_fields", "vacuous")


@dataclass(frozen=True)
class MetricStatus:
    """The Status column of one metric in the console scorecard."""

    metric: str
    mean: float
    pass_rate: float
    status: str

    @property
    def level(self) -> str:
        """OK, WARN or FAIL (the first word of `status`)."""
        return self.status.split(" ", 1)[0]


def term_counts(terms_per_case: Iterable[Sequence[str]]) -> list[tuple[str, int]]:
    """Count cases per term (first spelling seen), by count desc then folded term asc."""
    counts: dict[str, int] = {}
    spelling: dict[str, str] = {}
    for terms in terms_per_case:
        for term in terms:
            key = term.casefold()
            spelling.setdefault(key, term)
            counts[key] = counts.get(key, 0) + 1
    ordered = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return [(spelling[key], count) for key, count in ordered]


def _single_or_joined(values: Iterable[str]) -> str:
    distinct = sorted({v for v in values if v})
    return ",".join(distinct)


@dataclass
class SafeReport:
    """Scored SAFE cases of one `scorestream score` run, with their aggregate: the figures
    and the JSON report (`worker.suites.safe.render` draws it for a console or markdown)."""

    cases: list[ScoredCase]
    settings: SafeSettings
    generated_at: datetime
    concern: str | None = None
    strict_ah: bool = False
    aggregator: SafeAggregator = field(init=False)
    state: dict[str, Any] = field(init=False)

    def __post_init__(self) -> None:
        self.aggregator = SafeAggregator(self.settings.thresholds)
        state = self.aggregator.initialise()
        for case in self.cases:
            state = self.aggregator.update(state, case.scored)
        self.state = state

    # ------------------------------------------------------------ figures

    @property
    def concern_id(self) -> str:
        return self.concern or _single_or_joined(
            str(c.scored.details.get("concern_id", "")) for c in self.cases
        )

    @property
    def batch_id(self) -> str:
        return _single_or_joined(str(c.scored.details.get("batch_id", "")) for c in self.cases)

    def label_distribution(self) -> dict[str, int]:
        return {label: int(self.state["labels"][label]) for label in LABELS}

    def worst_performers(self) -> list[ScoredCase]:
        """The lowest composites, ties broken by test_id ascending."""
        ranked = sorted(
            self.cases, key=lambda c: (float(c.scored.scores["composite"] or 0.0), c.test_id)
        )
        return ranked[:WORST_PERFORMERS]

    def common_misses(self) -> dict[str, list[tuple[str, int]]]:
        """Per metric, how many cases missed (CR, AC) or violated (AH) each term."""
        scored = [c.scored for c in self.cases]
        return {
            "CR": term_counts(detail_terms(s, "CR", "missing") for s in scored),
            "AH": term_counts(detail_terms(s, "AH", "violations") for s in scored),
            "AC": term_counts(detail_terms(s, "AC", "missing") for s in scored),
        }

    def metric_statuses(self) -> list[MetricStatus]:
        """The console Status column (metrics-safe.md): FAIL, OK, WARN."""
        means = self.aggregator.mean_scores(self.state)
        rates = self.aggregator.figures(self.state)["pass_rates"]
        statuses = []
        for m in METRICS:
            threshold = getattr(self.settings.thresholds, m)
            values = [float(c.scored.scores[m] or 0.0) for c in self.cases]
            if not values:
                status = "n/a"
            elif any(not at_least(v, threshold.review) for v in values):
                status = "FAIL"
            elif all(at_least(v, threshold.pass_) for v in values):
                status = "OK"
            elif m == "AH" and self.state["ah_violations"]:
                count = self.state["ah_violations"]
                status = f"WARN ({count} violation{'s' if count != 1 else ''} across batch)"
            else:
                status = "WARN (review threshold)"
            statuses.append(MetricStatus(m, means[m], rates[m], status))
        return statuses

    # ------------------------------------------------------------ BatchReport

    def to_json(self) -> dict[str, Any]:
        """The `score --format json` report (seed section 5.1, interface.md)."""
        figures = self.aggregator.figures(self.state)
        distribution = self.label_distribution()
        total = len(self.cases)
        misses = self.common_misses()
        return {
            "report_type": "SAFE_v0",
            "generated_at": self.generated_at.isoformat().replace("+00:00", "Z"),
            "batch_id": self.batch_id,
            "concern_id": self.concern_id,
            "total_cases": total,
            "summary": {
                "total_cases": total,
                "pass": distribution["Pass"],
                "review": distribution["Review"],
                "fail": distribution["Fail"],
                "overall_pass_rate": figures["pass_rates"]["overall"],
            },
            "mean_scores": self.aggregator.mean_scores(self.state),
            "pass_rates": figures["pass_rates"],
            "label_distribution": distribution,
            "by_archetype": figures["by_archetype"],
            "config": {
                "thresholds": self.settings.thresholds.model_dump(by_alias=True),
                "weights": self.settings.weights.model_dump(),
                "strict_ah": self.strict_ah,
            },
            "results": [case.to_json() for case in self.cases],
            "failure_analysis": {
                "worst_performers": [case.to_json() for case in self.worst_performers()],
                "common_CR_misses": [{"signal": term, "miss_count": n} for term, n in misses["CR"]],
                "common_AH_violations": [{"term": term, "count": n} for term, n in misses["AH"]],
                "common_AC_misses": [{"phrase": term, "miss_count": n} for term, n in misses["AC"]],
            },
        }

    def exit_code(self) -> int:
        return exit_code_for_labels([case.scored.label for case in self.cases])

    def report_stem(self) -> str:
        """`SAFE_v0_{concern_id}_{timestamp}` (seed section 5.3), safe as a file name."""
        concern = re.sub(r"[^A-Za-z0-9._-]+", "-", self.concern_id) or "all"
        return f"SAFE_v0_{concern}_{self.generated_at.strftime('%Y%m%dT%H%M%SZ')}"
