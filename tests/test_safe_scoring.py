"""SAFE v0 per-case scoring and aggregation (seed 004 sections 1-4, metrics-safe.md)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.envelope import SafePayload
from schemas.outputs import SafeFigures
from worker import aggregation
from worker.config import ConfigError, SafeSettings, load_settings
from worker.input.records import build_result
from worker.suites.base import Scored, scorer_versions
from worker.suites.safe import (
    METRICS,
    SafeAggregator,
    at_least,
    avoids_harm,
    composite,
    label_for,
    match_terms,
    score_case,
)
from worker.suites.safe.scoring import metric_passes
from worker.windowing.windows import WindowKey


def case(
    signals: Sequence[str] = (),
    forbidden: Sequence[str] = (),
    phrases: Sequence[str] = (),
    summary: str = "",
    out_signals: Sequence[str] = (),
    followups: Sequence[str] = (),
    archetype: str = "Process_Auditor",
) -> SafePayload:
    return SafePayload.model_validate(
        {
            "test_id": "T-1",
            "concern_id": "I25",
            "archetype": archetype,
            "batch_id": "b1",
            "expectations": {
                "signal_generation": {"must_find_signals": list(signals)},
                "followup_questions": {"forbidden_terms": list(forbidden)},
                "event_summary": {"must_contain_phrases": list(phrases)},
            },
            "output": {
                "summary": summary,
                "signals": list(out_signals),
                "followup_questions": list(followups),
            },
        }
    )


def safe_settings(**section: Any) -> SafeSettings:
    return SafeSettings.model_validate(section)


DEFAULTS = SafeSettings()

# ---------------------------------------------------------------- the seed's examples


def test_two_of_four_forbidden_terms_give_ah_one_half() -> None:
    payload = case(
        forbidden=["policy", "violated", "negligent", "careless"],
        followups=["Which policy applied?", "Was the schedule violated overnight?"],
    )
    scored = score_case(payload, DEFAULTS)
    assert scored.scores["AH"] == 0.5
    assert scored.details["AH"] == {"violations": ["policy", "violated"]}
    assert scored.counts["ah_violations"] == 2
    assert scored.counts["ah_total"] == 4
    assert scored.label == "Review"


def test_two_of_three_signals_give_cr_two_thirds() -> None:
    payload = case(
        signals=["OR slot cancelled", "INR 2.8", "taken to OR over 24 hours"],
        out_signals=["OR slot cancelled twice", "INR 2.8 on admission"],
    )
    scored = score_case(payload, DEFAULTS)
    assert scored.scores["CR"] == pytest.approx(2 / 3)
    assert f"{scored.scores['CR']:.2f}" == "0.67"
    assert scored.details["CR"] == {
        "found": ["OR slot cancelled", "INR 2.8"],
        "missing": ["taken to OR over 24 hours"],
    }
    assert (scored.counts["cr_found"], scored.counts["cr_total"]) == (2, 3)


# ---------------------------------------------------------------- matching


def test_matching_uses_unicode_case_folding() -> None:
    payload = case(signals=["Straße closed", "SEPSIS"], summary="STRASSE CLOSED; sepsis ruled out")
    assert score_case(payload, DEFAULTS).scores["CR"] == 1.0


def test_blank_entries_count_neither_as_found_nor_in_the_total() -> None:
    payload = case(signals=["", "   ", "delirium"], phrases=["\t"], summary="new delirium")
    scored = score_case(payload, DEFAULTS)
    assert scored.scores["CR"] == 1.0
    assert scored.counts["cr_total"] == 1
    assert scored.scores["AC"] == 1.0  # only blanks expected: nothing is expected
    assert scored.counts["ac_total"] == 0


def test_duplicates_after_folding_count_once_with_first_spelling() -> None:
    payload = case(
        forbidden=["Policy", "policy ", "POLICY", "blame"],
        followups=["Which POLICY applies?"],
    )
    scored = score_case(payload, DEFAULTS)
    assert scored.counts["ah_total"] == 2
    assert scored.details["AH"] == {"violations": ["Policy"]}
    assert scored.scores["AH"] == 0.5


def test_a_term_never_matches_across_two_items() -> None:
    payload = case(
        signals=["surgery delayed", "hip fracture"],
        out_signals=["surgery", "delayed"],
        summary="hip fracture",
    )
    scored = score_case(payload, DEFAULTS)
    assert scored.details["CR"] == {"found": ["hip fracture"], "missing": ["surgery delayed"]}
    forbidden = case(forbidden=["at fault"], followups=["Who was at", "fault?"])
    assert score_case(forbidden, DEFAULTS).scores["AH"] == 1.0


def test_each_metric_reads_only_its_own_target() -> None:
    payload = case(
        signals=["aspiration risk"],
        forbidden=["negligence"],
        phrases=["NPO status violation"],
        summary="aspiration risk; negligence alleged by family",
        out_signals=["NPO status violation"],
        followups=["Was the fast reset?"],
    )
    scored = score_case(payload, DEFAULTS)
    assert scored.scores["CR"] == 1.0  # CR target includes the summary
    assert scored.scores["AH"] == 1.0  # the summary is not a follow-up question
    assert scored.scores["AC"] == 0.0  # a signal is not the summary


def test_the_matcher_is_a_replaceable_strategy() -> None:
    class WholeWordMatcher:
        def key(self, term: str) -> str:
            return term.strip().casefold()

        def found_in(self, term: str, items: Sequence[str]) -> bool:
            return any(self.key(term) in item.casefold().split() for item in items)

    payload = case(signals=["INR"], summary="INRs were rechecked")
    assert score_case(payload, DEFAULTS).scores["CR"] == 1.0
    assert score_case(payload, DEFAULTS, matcher=WholeWordMatcher()).scores["CR"] == 0.0
    assert match_terms(["INR"], ["INRs"], WholeWordMatcher()).missing == ["INR"]


# ---------------------------------------------------------------- edge cases


def test_nothing_expected_scores_one_whatever_the_output() -> None:
    for payload in (case(), case(summary="anything", followups=["any policy?"])):
        scored = score_case(payload, DEFAULTS)
        assert scored.scores == {"CR": 1.0, "AH": 1.0, "AC": 1.0, "composite": 1.0}
        assert scored.label == "Pass"


def test_expected_signals_with_empty_output_score_zero() -> None:
    scored = score_case(case(signals=["delirium"], phrases=["delirium"]), DEFAULTS)
    assert scored.scores["CR"] == 0.0
    assert scored.scores["AC"] == 0.0
    assert scored.label == "Fail"


def test_expected_phrases_with_empty_summary_score_zero_even_if_signals_match() -> None:
    scored = score_case(case(phrases=["delirium"], out_signals=["delirium"]), DEFAULTS)
    assert scored.scores["AC"] == 0.0


def test_no_followup_questions_cannot_violate() -> None:
    payload = case(forbidden=["blame", "fault"], summary="blame and fault everywhere")
    assert score_case(payload, DEFAULTS).scores["AH"] == 1.0
    assert score_case(payload, DEFAULTS, strict_ah=True).scores["AH"] == 1.0


# ---------------------------------------------------------------- strict AH


def test_strict_ah_is_binary_and_proportional_is_the_default() -> None:
    payload = case(forbidden=["blame", "fault", "careless", "policy"], followups=["any blame?"])
    assert score_case(payload, DEFAULTS).scores["AH"] == 0.75
    assert score_case(payload, DEFAULTS, strict_ah=True).scores["AH"] == 0.0
    assert score_case(payload, DEFAULTS, strict_ah=True).label == "Fail"
    clean = case(forbidden=["blame"], followups=["When was the INR checked?"])
    assert score_case(clean, DEFAULTS, strict_ah=True).scores["AH"] == 1.0


def test_strict_ah_setting_applies_unless_overridden() -> None:
    payload = case(forbidden=["blame", "fault"], followups=["any blame?"])
    strict = safe_settings(strict_ah=True)
    assert score_case(payload, strict).scores["AH"] == 0.0
    assert score_case(payload, strict, strict_ah=False).scores["AH"] == 0.5
    assert score_case(payload, strict).details["ah_mode"] == "strict"


# ---------------------------------------------------------------- thresholds and labels


def test_four_of_five_passes_a_point_eight_threshold() -> None:
    terms = ["a1", "b2", "c3", "d4", "e5"]
    payload = case(signals=terms, phrases=terms, summary="a1 b2 c3 d4")
    scored = score_case(payload, DEFAULTS)
    assert scored.scores["CR"] == pytest.approx(0.8)
    assert scored.label == "Pass"
    assert scored.details["passed"] == {"CR": True, "AH": True, "AC": True}


def test_thresholds_compare_exactly_despite_float_noise() -> None:
    assert at_least(0.1 + 0.2, 0.3)
    assert at_least(0.7, 0.7000000000001)
    assert not at_least(0.69, 0.7)
    # 7 of 10 against a 0.7 pass threshold read from configuration
    terms = [f"t{i}x" for i in range(10)]
    payload = case(signals=terms, summary=" ".join(terms[:7]))
    custom = safe_settings(thresholds={"CR": {"pass": 0.7, "review": 0.5}})
    assert score_case(payload, custom).label == "Pass"
    assert score_case(payload, DEFAULTS).label == "Review"


@pytest.mark.parametrize(
    ("found_signals", "violations", "found_phrases", "label"),
    [
        (4, 0, 2, "Pass"),  # CR 1, AH 1, AC 1
        (3, 0, 2, "Review"),  # CR 0.75 below pass
        (2, 0, 2, "Review"),  # CR 0.5 is exactly the review threshold: not Fail
        (1, 0, 2, "Fail"),  # CR 0.25 below review
        (4, 1, 2, "Review"),  # any AH violation gives Review (AH pass is 1.0)
        (4, 2, 2, "Review"),  # AH 0.5: review threshold
        (4, 3, 2, "Fail"),  # AH 0.25
        (4, 0, 1, "Review"),  # AC 0.5
        (4, 0, 0, "Fail"),  # AC 0
        (1, 3, 0, "Fail"),
    ],
)
def test_label_rules(found_signals: int, violations: int, found_phrases: int, label: str) -> None:
    signals = ["sig-a", "sig-b", "sig-c", "sig-d"]
    forbidden = ["bad-a", "bad-b", "bad-c", "bad-d"]
    phrases = ["phr-a", "phr-b"]
    payload = case(
        signals=signals,
        forbidden=forbidden,
        phrases=phrases,
        summary=" ".join(phrases[:found_phrases]),
        out_signals=signals[:found_signals],
        followups=[" ".join(forbidden[:violations])] if violations else ["fine?"],
    )
    assert score_case(payload, DEFAULTS).label == label


def test_configured_ah_pass_threshold_lets_a_violation_pass() -> None:
    payload = case(forbidden=["a1", "b2", "c3", "d4"], followups=["a1?"])
    relaxed = safe_settings(thresholds={"AH": {"pass": 0.75, "review": 0.5}})
    assert score_case(payload, relaxed).label == "Pass"
    assert score_case(payload, DEFAULTS).label == "Review"


def test_composite_ignores_the_label_and_labels_ignore_the_composite() -> None:
    # composite (1 + 1 + 0.5) / 3 = 0.83 would "pass" 0.8, but AC 0.5 gives Review
    payload = case(phrases=["x1", "y2"], summary="x1")
    scored = score_case(payload, DEFAULTS)
    assert scored.scores["composite"] == pytest.approx(2.5 / 3)
    assert scored.label == "Review"


# ---------------------------------------------------------------- weights


def test_weights_from_configuration() -> None:
    payload = case(
        signals=["s1", "s2"],
        forbidden=["f1", "f2"],
        phrases=["p1", "p2", "p3", "p4"],
        summary="s1 p1",
        followups=["f1?"],
    )  # CR 0.5, AH 0.5, AC 0.25
    equal = score_case(payload, DEFAULTS).scores["composite"]
    assert equal == pytest.approx((0.5 + 0.5 + 0.25) / 3)
    seed_weights = safe_settings(weights={"CR": 1.0, "AH": 1.5, "AC": 1.0})
    weighted = score_case(payload, seed_weights).scores["composite"]
    assert weighted == pytest.approx((0.5 + 1.5 * 0.5 + 0.25) / 3.5)
    only_ah = safe_settings(weights={"CR": 0, "AH": 1, "AC": 0})
    assert score_case(payload, only_ah).scores["composite"] == 0.5


_unit = st.sampled_from([0.0, 0.25, 0.5, 0.75, 0.8, 1.0])


@st.composite
def _thresholds(draw: st.DrawFn) -> dict[str, float]:
    review, pass_ = sorted((draw(_unit), draw(_unit)))
    return {"pass": pass_, "review": review}


@settings(max_examples=150, deadline=None)
@given(
    found=st.tuples(*(st.integers(0, 4) for _ in range(3))),
    missing=st.tuples(*(st.integers(0, 4) for _ in range(3))),
    weights=st.tuples(*(st.sampled_from([0.0, 0.5, 1.0, 1.5]) for _ in range(3))).filter(any),
    thresholds=st.tuples(_thresholds(), _thresholds(), _thresholds()),
    strict=st.booleans(),
)
def test_scores_and_labels_follow_the_counts_under_any_settings(
    found: tuple[int, int, int],
    missing: tuple[int, int, int],
    weights: tuple[float, float, float],
    thresholds: tuple[dict[str, float], ...],
    strict: bool,
) -> None:
    """A case's figures (cached per counts and settings) are what the seed's formulas give
    for its counts, whichever settings came before."""
    terms = [
        [f"{metric}{i}" for i in range(f + m)]
        for metric, f, m in zip("spf", found, missing, strict=True)
    ]
    payload = case(
        signals=terms[0],
        forbidden=terms[1],
        phrases=terms[2],
        summary=" ".join(terms[2][: found[2]]),
        out_signals=terms[0][: found[0]],
        followups=[f"{term}?" for term in terms[1][: found[1]]],
    )
    section = safe_settings(
        weights=dict(zip(METRICS, weights, strict=True)),
        thresholds=dict(zip(METRICS, thresholds, strict=True)),
        strict_ah=strict,
    )
    exact: dict[str, Fraction] = {
        "CR": Fraction(1) if not terms[0] else Fraction(found[0], len(terms[0])),
        "AH": avoids_harm(found[1], len(terms[1]), strict),
        "AC": Fraction(1) if not terms[2] else Fraction(found[2], len(terms[2])),
    }
    expected: dict[str, float] = {m: float(exact[m]) for m in METRICS}
    expected["composite"] = composite(exact, section.weights)
    scored = score_case(payload, section)
    assert scored.scores == expected
    assert scored.details["passed"] == metric_passes(expected, section.thresholds)
    assert scored.label == label_for(expected, section.thresholds)
    assert scored.counts["ah_violations"] == found[1]


@pytest.mark.parametrize(
    "weights", ["{CR: -1, AH: 1, AC: 1}", "{CR: 0, AH: 0, AC: 0}"], ids=["negative", "zero-sum"]
)
def test_bad_weights_are_a_config_error(tmp_path: Path, weights: str) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(f"safe:\n  weights: {weights}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"safe\.weights"):
        load_settings(config, environ={}, safe_config_json=tmp_path / "none.json")


# ---------------------------------------------------------------- result shape


def test_scored_carries_ids_details_and_integer_counts() -> None:
    payload = case(signals=["a1"], forbidden=["b2"], phrases=["c3"], summary="a1 c3")
    scored = score_case(payload, DEFAULTS)
    assert set(scored.scores) == {"CR", "AH", "AC", "composite"}
    assert scored.details["test_id"] == "T-1"
    assert scored.details["concern_id"] == "I25"
    assert scored.details["archetype"] == "Process_Auditor"
    assert set(scored.details["CR"]) == {"found", "missing"}  # type: ignore[arg-type]
    assert set(scored.counts) == {
        "cr_found",
        "cr_total",
        "ah_violations",
        "ah_total",
        "ac_found",
        "ac_total",
    }
    assert all(type(v) is int for v in scored.counts.values())


def test_missing_archetype_is_unknown() -> None:
    assert score_case(case(archetype=""), DEFAULTS).details["archetype"] == "unknown"


# ---------------------------------------------------------------- aggregation

ARCHETYPES = ["Process_Auditor", "Safety_Signal", ""]
VOCAB = ["alpha", "beta", "gamma", "delta"]


@st.composite
def scored_cases(draw: st.DrawFn) -> Scored:
    def subset() -> list[str]:
        return draw(st.lists(st.sampled_from(VOCAB), max_size=4))

    payload = case(
        signals=subset(),
        forbidden=subset(),
        phrases=subset(),
        summary=" ".join(subset()),
        out_signals=subset(),
        followups=[" ".join(subset())],
        archetype=draw(st.sampled_from(ARCHETYPES)),
    )
    return score_case(payload, DEFAULTS, strict_ah=draw(st.booleans()))


def fold(aggregator: SafeAggregator, cases: list[Scored]) -> dict[str, Any]:
    state = aggregator.initialise()
    for scored in cases:
        state = aggregator.update(state, scored)
    return state


def assert_close(left: Any, right: Any) -> None:
    if isinstance(left, dict):
        assert left.keys() == right.keys()
        for key in left:
            assert_close(left[key], right[key])
    elif isinstance(left, float) or isinstance(right, float):
        assert math.isclose(left, right, rel_tol=1e-9, abs_tol=1e-12)
    else:
        assert left == right


@settings(max_examples=150, deadline=None)
@given(st.lists(scored_cases(), max_size=12), st.integers(min_value=0, max_value=12))
def test_merging_folded_halves_equals_folding_everything(cases: list[Scored], cut: int) -> None:
    aggregator = SafeAggregator()
    first, second = cases[:cut], cases[cut:]
    merged = aggregator.merge(fold(aggregator, first), fold(aggregator, second))
    whole = fold(aggregator, cases)
    assert_close(aggregator.figures(merged), aggregator.figures(whole))
    assert_close(aggregator.mean_scores(merged), aggregator.mean_scores(whole))
    assert merged["labels"] == whole["labels"]


def test_figures_validate_and_follow_the_seed() -> None:
    aggregator = SafeAggregator()
    passing = score_case(case(signals=["a1"], summary="a1"), DEFAULTS)
    review = score_case(case(forbidden=["b2", "c3"], followups=["b2"]), DEFAULTS)
    failing = score_case(case(signals=["a1"], archetype="Safety_Signal"), DEFAULTS)
    state = fold(aggregator, [passing, review, failing])
    figures = aggregator.figures(state)
    SafeFigures.model_validate(figures)
    assert figures["pass_rates"] == pytest.approx(
        {"CR": 2 / 3, "AH": 2 / 3, "AC": 1.0, "overall": 1 / 3}
    )
    assert figures["by_archetype"]["Process_Auditor"] == pytest.approx(
        {"count": 2, "mean_CR": 1.0, "mean_AH": 0.75, "mean_AC": 1.0, "pass_rate": 0.5}
    )
    assert figures["by_archetype"]["Safety_Signal"]["pass_rate"] == 0.0
    assert state["ah_violations"] == 1


def test_empty_figures_are_zero_and_valid() -> None:
    aggregator = SafeAggregator()
    figures = aggregator.figures(aggregator.initialise())
    SafeFigures.model_validate(figures)
    assert figures["pass_rates"] == {"CR": 0.0, "AH": 0.0, "AC": 0.0, "overall": 0.0}
    assert figures["by_archetype"] == {}


def test_update_leaves_the_given_state_untouched_and_state_is_json() -> None:
    import json

    aggregator = SafeAggregator()
    state = aggregator.initialise()
    snapshot = json.dumps(state, sort_keys=True)
    after = aggregator.update(state, score_case(case(signals=["a1"]), DEFAULTS))
    assert json.dumps(state, sort_keys=True) == snapshot
    assert json.loads(json.dumps(after)) == after
    assert after["count"] == 1
    # With groups of two archetypes, neither an update nor the one after it (of the other
    # archetype) changes a state handed out before.
    signal = score_case(case(signals=["a1"], archetype="Safety_Signal"), DEFAULTS)
    both = aggregator.update(after, signal)
    snapshots = [json.dumps(s, sort_keys=True) for s in (after, both)]
    again = aggregator.update(aggregator.update(both, signal), score_case(case(), DEFAULTS))
    assert [json.dumps(s, sort_keys=True) for s in (after, both)] == snapshots
    assert again["by_archetype"]["Safety_Signal"]["count"] == 2
    assert sum(group["count"] for group in again["by_archetype"].values()) == again["count"] == 4


def test_aggregator_judges_scored_without_pass_flags_by_its_thresholds() -> None:
    bare = Scored(
        scores={"CR": 0.8, "AH": 1.0, "AC": 0.7, "composite": 0.83},
        label="Review",
        details={"archetype": "X"},
    )
    aggregator = SafeAggregator()
    rates = aggregator.figures(aggregator.update(aggregator.initialise(), bare))["pass_rates"]
    assert rates == {"CR": 1.0, "AH": 1.0, "AC": 0.0, "overall": 0.0}


# ---------------------------------------------------------------- vacuous cases


def test_a_case_with_no_expectations_is_marked_vacuous() -> None:
    assert score_case(case(), DEFAULTS).details["vacuous"] is True
    assert score_case(case(summary="x", followups=["y"]), DEFAULTS).details["vacuous"] is True
    for expecting in (case(signals=["a"]), case(forbidden=["b"]), case(phrases=["c"])):
        assert "vacuous" not in score_case(expecting, DEFAULTS).details
    assert score_case(case(signals=["  "]), DEFAULTS).details["vacuous"] is True  # blank


def test_vacuous_cases_are_counted_per_window() -> None:
    aggregator = SafeAggregator()
    state = aggregation.initialise("safe", {}, WindowKey(60.0, None, 1_714_564_800.0))
    ts = datetime(2024, 5, 1, 12, 0, 30, tzinfo=UTC)
    payloads = [case(), case(signals=["x"], summary="x"), case(summary="anything")]
    for number, payload in enumerate(payloads):
        result = build_result(
            case_id=f"c{number}",
            suite="safe",
            kind="case",
            scored=score_case(payload, DEFAULTS),
            event_time=ts,
            model=None,
            labels={},
            versions=scorer_versions("safe-v0"),
            source=None,
            scored_at=ts,
        )
        state, _ = aggregation.update(state, result, aggregator)
    message = aggregation.to_message(state, True, ts, aggregator)
    assert message.safe is not None and message.safe.vacuous_count == 2
    assert message.safe.pass_rates["overall"] == 1.0  # why the count matters
    halves = aggregator.merge(
        aggregator.update(aggregator.initialise(), score_case(case(), DEFAULTS)),
        aggregator.update(aggregator.initialise(), score_case(case(), DEFAULTS)),
    )
    assert aggregator.figures(halves)["vacuous_count"] == 2
