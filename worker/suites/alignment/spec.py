"""The alignment suite as the registry sees it: its models, metrics and entry points.

Alignment records are turns of sessions: the streaming worker scores them in its session
stage (embeddings in micro-batches, sessions closed on timers), so the spec has no case
scorer; it is the suite with a `sessions` loader (`streaming.AlignmentSessions`).

Only what the registry reads is imported here: listing the suites (every command's
`--help`, a worker without alignment) does not import the scorers, the classifiers or
the judge's HTTP client. `batch` and `streaming` are imported when their entry points
are first called.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from schemas.envelope import AlignmentSessionPayload, AlignmentTurnPayload
from schemas.outputs import AlignmentFigures
from worker.suites.alignment.aggregate import AlignmentAggregator
from worker.suites.alignment.settings import AlignmentSettings
from worker.suites.base import SuiteSpec, metrics, scorer_versions

if TYPE_CHECKING:
    from worker.suites.alignment.batch import AlignmentBatchScorer
    from worker.suites.alignment.streaming import AlignmentSessions
    from worker.suites.base import BatchOptions

# The scores of a closed session, in report order.
SESSION_METRICS = (
    "authenticity",
    "style_sim",
    "traits",
    "lexicon",
    "safety",
    "stability",
    "overall",
)


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


def make_batch_scorer(settings: AlignmentSettings, options: BatchOptions) -> AlignmentBatchScorer:
    """`batch.make_batch_scorer`, imported on the first call."""
    from worker.suites.alignment.batch import make_batch_scorer as make

    return make(settings, options)


def load_sessions(
    settings: AlignmentSettings, text_budget: int, embedder: Any
) -> AlignmentSessions:
    """`streaming.load_sessions`, imported on the first call."""
    from worker.suites.alignment.streaming import load_sessions as load

    return load(settings, text_budget, embedder)


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
