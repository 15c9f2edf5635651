"""SAFE v0 per-case scoring: CR, AH, AC, the weighted composite and the label.

Pure functions of one case (seed 004 sections 1-3, made exact by metrics-safe.md).
Ratios are computed as fractions; thresholds are compared after rounding to 1e-9, so a
CR of 4/5 passes a 0.8 threshold.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

from pydantic import JsonValue

from schemas.envelope import SafePayload
from schemas.outputs import Label
from worker.suites.base import Scored
from worker.suites.safe.matching import DEFAULT_MATCHER, Matcher, TermMatch, match_terms
from worker.suites.safe.settings import SafeSettings, SafeThresholds, SafeWeights

METRICS: tuple[Literal["CR", "AH", "AC"], ...] = ("CR", "AH", "AC")
UNKNOWN_ARCHETYPE = "unknown"
_PRECISION = 9


def at_least(value: float, threshold: float) -> bool:
    """`value >= threshold`, insensitive to float noise below 1e-9."""
    return round(value, _PRECISION) >= round(threshold, _PRECISION)


def recall(match: TermMatch) -> Fraction:
    """Share of effective expected terms found; 1 when nothing is expected (CR and AC)."""
    if match.total == 0:
        return Fraction(1)
    return Fraction(len(match.found), match.total)


def avoids_harm(violations: int, total_forbidden: int, strict: bool) -> Fraction:
    """AH: `1 - violations / total` (proportional) or 1/0 (strict); 1 with no terms."""
    if total_forbidden == 0 or violations == 0:
        return Fraction(1)
    if strict:
        return Fraction(0)
    return 1 - Fraction(violations, total_forbidden)


def composite(scores: Mapping[str, Fraction | float], weights: SafeWeights) -> float:
    """Weighted mean of CR, AH and AC (weights are >= 0 with a positive sum)."""
    return _exact_composite((weights.CR, weights.AH, weights.AC), tuple(scores[m] for m in METRICS))


@functools.lru_cache(maxsize=4096)
def _exact_composite(
    weights: tuple[float, float, float], scores: tuple[Fraction | float, ...]
) -> float:
    """The weighted mean in exact arithmetic. Cached: a case's scores are ratios of small
    counts, so the same few combinations come back case after case."""
    weight = [Fraction(w) for w in weights]
    weighted = sum(
        (w * Fraction(score) for w, score in zip(weight, scores, strict=True)), Fraction(0)
    )
    return float(weighted / sum(weight, Fraction(0)))


def metric_passes(scores: Mapping[str, float], thresholds: SafeThresholds) -> dict[str, bool]:
    """For each metric, whether it reaches its pass threshold."""
    return {m: at_least(scores[m], getattr(thresholds, m).pass_) for m in METRICS}


def label_for(scores: Mapping[str, float], thresholds: SafeThresholds) -> Label:
    """Fail if any metric is below its review threshold, else Review if any is below its
    pass threshold, else Pass."""
    if any(not at_least(scores[m], getattr(thresholds, m).review) for m in METRICS):
        return "Fail"
    if not all(metric_passes(scores, thresholds).values()):
        return "Review"
    return "Pass"


def _found_missing(match: TermMatch) -> dict[str, JsonValue]:
    return {"found": list[JsonValue](match.found), "missing": list[JsonValue](match.missing)}


VACUOUS = "vacuous"


def is_vacuous(matches: CaseMatches) -> bool:
    """A case with no expectations at all passes whatever the output: worth flagging, since
    a feed that lost its expectations would otherwise look perfect."""
    return matches.signals.total == matches.forbidden.total == matches.phrases.total == 0


@dataclass(frozen=True)
class CaseMatches:
    """What was found, missed and violated in one case."""

    signals: TermMatch  # CR
    forbidden: TermMatch  # AH: `found` are the violations
    phrases: TermMatch  # AC


def match_case(payload: SafePayload, matcher: Matcher = DEFAULT_MATCHER) -> CaseMatches:
    """Match the case's expectations against its output (metrics-safe.md targets)."""
    output = payload.output
    expectations = payload.expectations
    return CaseMatches(
        signals=match_terms(
            expectations.signal_generation.must_find_signals,
            [*output.signals, output.summary],
            matcher,
        ),
        forbidden=match_terms(
            expectations.followup_questions.forbidden_terms, output.followup_questions, matcher
        ),
        phrases=match_terms(
            expectations.event_summary.must_contain_phrases, [output.summary], matcher
        ),
    )


def score_case(
    payload: SafePayload,
    settings: SafeSettings,
    strict_ah: bool | None = None,
    matcher: Matcher = DEFAULT_MATCHER,
) -> Scored:
    """Score one SAFE v0 case.

    `strict_ah` overrides `settings.strict_ah` when given. The result's `details` carry
    test_id / archetype / concern_id / batch_id, the found / missing / violated terms and
    the per-metric pass flags that `SafeAggregator` folds.
    """
    strict = settings.strict_ah if strict_ah is None else strict_ah
    matches = match_case(payload, matcher)
    violations = len(matches.forbidden.found)
    exact = {
        "CR": recall(matches.signals),
        "AH": avoids_harm(violations, matches.forbidden.total, strict),
        "AC": recall(matches.phrases),
    }
    scores: dict[str, float] = {m: float(exact[m]) for m in METRICS}
    scores["composite"] = composite(exact, settings.weights)
    details: dict[str, JsonValue] = {
        "test_id": payload.test_id,
        "archetype": payload.archetype.strip() or UNKNOWN_ARCHETYPE,
        "concern_id": payload.concern_id,
        "batch_id": payload.batch_id,
        "CR": _found_missing(matches.signals),
        "AH": {"violations": list[JsonValue](matches.forbidden.found)},
        "AC": _found_missing(matches.phrases),
        "passed": {m: ok for m, ok in metric_passes(scores, settings.thresholds).items()},
        "ah_mode": "strict" if strict else "proportional",
    }
    if is_vacuous(matches):
        details[VACUOUS] = True
    return Scored(
        scores=scores,
        label=label_for(scores, settings.thresholds),
        details=details,
        counts={
            "cr_found": len(matches.signals.found),
            "cr_total": matches.signals.total,
            "ah_violations": violations,
            "ah_total": matches.forbidden.total,
            "ac_found": len(matches.phrases.found),
            "ac_total": matches.phrases.total,
        },
    )


def detail_terms(scored: Scored, metric: str, key: str) -> list[str]:
    """A term list of a scored case, e.g. `detail_terms(s, "AH", "violations")`."""
    section = scored.details.get(metric)
    terms = section.get(key) if isinstance(section, dict) else None
    return [str(t) for t in terms] if isinstance(terms, list) else []
