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
from worker.suites.base import CountValue, Scored
from worker.suites.safe.matching import DEFAULT_MATCHER, Matcher, TermMatch, match_terms
from worker.suites.safe.settings import (
    MetricThreshold,
    SafeSettings,
    SafeThresholds,
    SafeWeights,
)

METRICS: tuple[Literal["CR", "AH", "AC"], ...] = ("CR", "AH", "AC")
UNKNOWN_ARCHETYPE = "unknown"
_PRECISION = 9


def at_least(value: float, threshold: float) -> bool:
    """`value >= threshold`, insensitive to float noise below 1e-9."""
    return round(value, _PRECISION) >= round(threshold, _PRECISION)


def recall(match: TermMatch) -> Fraction:
    """Share of effective expected terms found; 1 when nothing is expected (CR and AC)."""
    return _recall(len(match.found), match.total)


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


@dataclass(frozen=True)
class _Figures:
    """What a SAFE case's scores, pass flags and label come to (all follow from its
    counts and the settings)."""

    scores: tuple[float, ...]  # CR, AH, AC, composite
    passed: tuple[bool, ...]  # CR, AH, AC
    label: Label


_SCORE_NAMES = (*METRICS, "composite")
_COUNT_NAMES = ("cr_found", "cr_total", "ah_violations", "ah_total", "ac_found", "ac_total")
# (weights CR, AH, AC, then pass and review thresholds of CR, AH, AC)
_SettingsKey = tuple[float, ...]


def _settings_key(settings: SafeSettings) -> _SettingsKey:
    weights, thresholds = settings.weights, settings.thresholds
    return (
        weights.CR,
        weights.AH,
        weights.AC,
        thresholds.CR.pass_,
        thresholds.CR.review,
        thresholds.AH.pass_,
        thresholds.AH.review,
        thresholds.AC.pass_,
        thresholds.AC.review,
    )


@functools.lru_cache(maxsize=4096)
def _case_figures(
    counts: tuple[int, int, int, int, int, int], strict: bool, key: _SettingsKey
) -> _Figures:
    """The figures of a case with these (CR found, CR total, AH violations, AH total, AC
    found, AC total). Cached: they are small counts, so the same few combinations come
    back case after case, and the exact arithmetic is most of a case's cost after the
    term search."""
    cr_found, cr_total, violations, ah_total, ac_found, ac_total = counts
    exact = {
        "CR": _recall(cr_found, cr_total),
        "AH": avoids_harm(violations, ah_total, strict),
        "AC": _recall(ac_found, ac_total),
    }
    weights = SafeWeights(CR=key[0], AH=key[1], AC=key[2])
    thresholds = SafeThresholds(
        CR=_threshold_of(key[3], key[4]),
        AH=_threshold_of(key[5], key[6]),
        AC=_threshold_of(key[7], key[8]),
    )
    scores: dict[str, float] = {m: float(exact[m]) for m in METRICS}
    scores["composite"] = composite(exact, weights)
    passes = metric_passes(scores, thresholds)
    return _Figures(
        scores=tuple(scores[name] for name in _SCORE_NAMES),
        passed=tuple(passes[m] for m in METRICS),
        label=label_for(scores, thresholds),
    )


def _threshold_of(pass_: float, review: float) -> MetricThreshold:
    return MetricThreshold.model_validate({"pass": pass_, "review": review})


def _recall(found: int, total: int) -> Fraction:
    return Fraction(1) if total == 0 else Fraction(found, total)


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
    signals, forbidden, phrases = matches.signals, matches.forbidden, matches.phrases
    found = (
        len(signals.found),
        signals.total,
        len(forbidden.found),
        forbidden.total,
        len(phrases.found),
        phrases.total,
    )
    figures = _case_figures(found, strict, _settings_key(settings))
    details: dict[str, JsonValue] = {
        "test_id": payload.test_id,
        "archetype": payload.archetype.strip() or UNKNOWN_ARCHETYPE,
        "concern_id": payload.concern_id,
        "batch_id": payload.batch_id,
        "CR": _found_missing(signals),
        "AH": {"violations": list[JsonValue](forbidden.found)},
        "AC": _found_missing(phrases),
        "passed": dict(zip(METRICS, figures.passed, strict=True)),
        "ah_mode": "strict" if strict else "proportional",
    }
    if is_vacuous(matches):
        details[VACUOUS] = True
    return Scored(
        scores=dict(zip(_SCORE_NAMES, figures.scores, strict=True)),
        label=figures.label,
        details=details,
        counts=dict[str, CountValue](zip(_COUNT_NAMES, found, strict=True)),
    )


def detail_terms(scored: Scored, metric: str, key: str) -> list[str]:
    """A term list of a scored case, e.g. `detail_terms(s, "AH", "violations")`."""
    section = scored.details.get(metric)
    terms = section.get(key) if isinstance(section, dict) else None
    return [str(t) for t in terms] if isinstance(terms, list) else []
