"""SAFE v0 suite: CR, AH, AC, composite and label of clinical test cases (seed 004).

Pure scoring (`score_case`), mergeable aggregation (`SafeAggregator`) and the offline
batch report (`make_batch_scorer`). No I/O, no Kafka.

Layout (as every suite): `spec.py` (what the registry knows), `settings.py` (its
configuration section), `scoring.py` (pure), `aggregate.py`, `report.py`, `render.py`
(console and Markdown), `batch.py` (`scorestream score`).
"""

from worker.suites.safe.aggregate import SafeAggregator
from worker.suites.safe.batch import SafeBatchScorer, make_batch_scorer
from worker.suites.safe.matching import (
    DEFAULT_MATCHER,
    CasefoldSubstringMatcher,
    Matcher,
    TermMatch,
    effective_terms,
    match_terms,
)
from worker.suites.safe.render import SafeBatchReport
from worker.suites.safe.report import ScoredCase
from worker.suites.safe.scoring import (
    METRICS,
    at_least,
    avoids_harm,
    composite,
    label_for,
    match_case,
    recall,
    score_case,
)

__all__ = [
    "DEFAULT_MATCHER",
    "METRICS",
    "CasefoldSubstringMatcher",
    "Matcher",
    "SafeAggregator",
    "SafeBatchReport",
    "SafeBatchScorer",
    "ScoredCase",
    "TermMatch",
    "at_least",
    "avoids_harm",
    "composite",
    "effective_terms",
    "label_for",
    "make_batch_scorer",
    "match_case",
    "match_terms",
    "recall",
    "score_case",
]
