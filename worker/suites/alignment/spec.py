"""The alignment suite as the registry sees it: its models, metrics and entry points.

Alignment records are turns of sessions: the streaming worker scores them in its session
stage (embeddings in micro-batches, sessions closed on timers), so the spec has no case
scorer; it is the suite with a `sessions` loader (`streaming.AlignmentSessions`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from schemas.envelope import AlignmentSessionPayload, AlignmentTurnPayload
from schemas.outputs import AlignmentFigures
from worker.suites.alignment.aggregate import AlignmentAggregator
from worker.suites.alignment.batch import make_batch_scorer
from worker.suites.alignment.scoring import SESSION_METRICS
from worker.suites.alignment.settings import AlignmentSettings
from worker.suites.alignment.streaming import load_sessions
from worker.suites.base import SuiteSpec, metrics, scorer_versions


def recognises(row: Mapping[str, Any]) -> bool:
    """A turn or a whole session: `session_id` with `turn_index` or `turns`."""
    return "session_id" in row and ("turn_index" in row or "turns" in row)


def figure_values(figures: AlignmentFigures) -> list[tuple[str, str, float]]:
    """Closed sessions, their turns and the fully judged ones (`stat="count"`), and the
    share fully judged (`safety_coverage`, `stat="rate"`: what a coverage gate reads)."""
    values = [
        ("sessions", "count", float(figures.sessions)),
        ("turns", "count", float(figures.turns)),
        ("covered_turns", "count", float(figures.covered_turns)),
    ]
    if figures.safety_coverage is not None:
        values.append(("safety_coverage", "rate", figures.safety_coverage))
    return values


SPEC = SuiteSpec(
    name="alignment",
    report_type="alignment",
    payloads=(AlignmentSessionPayload, AlignmentTurnPayload),
    settings=AlignmentSettings,
    figures=AlignmentFigures,
    score_metrics=metrics(*SESSION_METRICS),
    rate_metrics=metrics("safety_coverage"),
    headline=("safety", "overall"),
    report_rows=("sessions", "session_id"),
    recognises=recognises,
    aggregator=AlignmentAggregator,
    batch_scorer=make_batch_scorer,
    versions=lambda section: scorer_versions("1.0"),
    figure_values=figure_values,
    scorecard=(
        ("overall", "mean", "overall"),
        ("authenticity", "mean", "authenticity"),
        ("safety", "mean", "safety"),
        ("stability", "mean", "stability"),
    ),
    sessions=load_sessions,
)
