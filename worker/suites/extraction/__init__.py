"""The `extraction` suite: event extraction v2.0 metrics (seed 002), pure functions.

Streaming use: build `ctx = load_context(settings.extraction)` once at start, then
`score_case(payload, ctx) -> Scored` per case and fold with `ExtractionAggregator`.
Offline use: `make_batch_scorer(settings.extraction, options)`.

Layout (as every suite): `spec.py` (what the registry knows), `settings.py` (its
configuration section), `scoring.py` (pure), `aggregate.py`, `report.py`, `render.py`
(console and Markdown), `batch.py` (`scorestream score`); the schema files
are read by `schema_files.py`.
"""

from worker.suites.extraction.aggregate import (
    COUNTER_NAMES,
    RATE_NAMES,
    REPORT_METRIC_NAMES,
    ExtractionAggregator,
)
from worker.suites.extraction.batch import ExtractionBatchScorer, make_batch_scorer
from worker.suites.extraction.render import ExtractionReport
from worker.suites.extraction.schema_files import load_context
from worker.suites.extraction.scoring import ExtractionContext, score_case

__all__ = [
    "COUNTER_NAMES",
    "RATE_NAMES",
    "REPORT_METRIC_NAMES",
    "ExtractionAggregator",
    "ExtractionBatchScorer",
    "ExtractionContext",
    "ExtractionReport",
    "load_context",
    "make_batch_scorer",
    "score_case",
]
