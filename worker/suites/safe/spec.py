"""The SAFE suite as the registry sees it: its models, metrics and entry points."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from schemas.envelope import SafePayload
from schemas.outputs import SafeFigures
from worker.suites.base import CaseScorer, SuiteSpec, metrics, rate_values, scorer_versions
from worker.suites.safe.aggregate import SafeAggregator
from worker.suites.safe.batch import make_batch_scorer
from worker.suites.safe.scoring import METRICS, score_case
from worker.suites.safe.settings import SafeSettings


def recognises(row: Mapping[str, Any]) -> bool:
    """A test case with `expectations`, or with `output` and `test_id` (a case without
    `output` is scored as an empty output)."""
    return "expectations" in row or ("output" in row and "test_id" in row)


def case_scorer(section: SafeSettings) -> CaseScorer:
    return lambda payload: score_case(payload, section)


SPEC = SuiteSpec(
    name="safe",
    report_type="SAFE_v0",
    payloads=(SafePayload,),
    settings=SafeSettings,
    figures=SafeFigures,
    score_metrics=metrics(*METRICS, "composite"),
    rate_metrics=metrics("pass_rate", "overall", *METRICS),
    headline=("composite",),
    report_rows=("results", "test_id"),
    recognises=recognises,
    aggregator=SafeAggregator,
    batch_scorer=make_batch_scorer,
    versions=lambda section: scorer_versions("SAFE_v0"),
    figure_values=lambda figures: rate_values(figures.pass_rates),  # per-metric pass rates
    scorecard=(
        ("composite", "mean", "composite"),
        ("CR", "mean", "CR"),
        ("AH", "mean", "AH"),
        ("AC", "mean", "AC"),
        ("pass", "rate", "pass_rate"),
    ),
    case_scorer=case_scorer,
)
