"""The extraction suite as the registry sees it: its models, metrics and entry points."""

from __future__ import annotations

import gc
from collections.abc import Mapping
from typing import Any

from schemas.envelope import ExtractionPayload
from schemas.outputs import ExtractionFigures, Versions
from worker.input.rejections import UNKNOWN_SCHEMA, Rejected
from worker.suites.base import (
    CaseScorer,
    Scored,
    SuiteSpec,
    metrics,
    rate_values,
    scorer_versions,
)
from worker.suites.extraction.aggregate import (
    LOWER_IS_BETTER_RATES,
    RATE_NAMES,
    SCORE_NAMES,
    ExtractionAggregator,
)
from worker.suites.extraction.batch import make_batch_scorer
from worker.suites.extraction.schema_files import load_context
from worker.suites.extraction.scoring import score_case
from worker.suites.extraction.settings import ExtractionSettings


def recognises(row: Mapping[str, Any]) -> bool:
    """A native extraction row has `text`, `gold` and `response`."""
    return {"text", "gold", "response"} <= row.keys()


def case_scorer(section: ExtractionSettings) -> CaseScorer:
    """Loads the configured event schemas once; a case naming an unknown schema is
    rejected (`unknown_schema`).

    The cyclic garbage collector is paused while a case is scored. A case with thousands
    of arguments builds tens of thousands of short-lived rows, none in a reference cycle
    (reference counting frees them all), and the collections their allocations set off
    walk the whole heap each time: a third of the time of a maximal argument list
    (`bench/adversarial.py`). Results are the same either way.
    """
    context = load_context(section)

    def score(payload: ExtractionPayload) -> Scored:
        collecting = gc.isenabled()
        gc.disable()
        try:
            return score_case(payload, context)
        except ValueError as exc:
            raise Rejected(UNKNOWN_SCHEMA, str(exc)) from None
        finally:
            if collecting:
                gc.enable()

    return score


def versions(section: ExtractionSettings) -> Versions:
    return scorer_versions(section.metrics_version, section.protocol_version)


SPEC = SuiteSpec(
    name="extraction",
    report_type="extraction",
    payloads=(ExtractionPayload,),
    settings=ExtractionSettings,
    figures=ExtractionFigures,
    score_metrics=metrics(*SCORE_NAMES, lower_is_better=frozenset({"hallucinated"})),
    rate_metrics=metrics(*RATE_NAMES, lower_is_better=LOWER_IS_BETTER_RATES),
    headline=("strict_f1",),
    report_rows=("results", "id"),
    recognises=recognises,
    aggregator=ExtractionAggregator,
    batch_scorer=make_batch_scorer,
    versions=versions,
    figure_values=lambda figures: rate_values(figures.metrics),  # micro-averaged rates
    scorecard=(
        ("strict F1", "figure", "strict_f1"),
        ("relaxed F1", "figure", "relaxed_f1"),
        ("schema", "figure", "schema_compliance_rate"),
        ("halluc.", "figure", "hallucination_rate"),
    ),
    case_scorer=case_scorer,
)
