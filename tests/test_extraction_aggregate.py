"""`ExtractionAggregator`: micro-averaging from summed counters, exact merges."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from schemas.envelope import ExtractionPayload
from schemas.outputs import ExtractionFigures
from worker.config import load_settings
from worker.suites.base import Scored
from worker.suites.extraction import (
    COUNTER_NAMES,
    RATE_NAMES,
    ExtractionAggregator,
    load_context,
    score_case,
)

AGG = ExtractionAggregator()
ROOT = Path(__file__).parent.parent


def fold(cases: list[Scored]) -> dict[str, int]:
    state = AGG.initialise()
    for scored in cases:
        state = AGG.update(state, scored)
    return state


def counted(**counts: int) -> Scored:
    return Scored(scores={}, counts={"total_samples": 1, **counts})


def test_micro_averaging_is_not_an_average_of_per_case_f1() -> None:
    perfect = counted(strict_tp=1, strict_pred_total=1, strict_gold_total=1)
    wrong = counted(strict_tp=0, strict_pred_total=9, strict_gold_total=9)
    metrics = AGG.figures(fold([perfect, wrong]))["metrics"]
    # per-case F1 are 1.0 and 0.0 (mean 0.5); micro: P = R = 1/10
    assert metrics["strict_precision"] == pytest.approx(0.1)
    assert metrics["strict_recall"] == pytest.approx(0.1)
    assert metrics["strict_f1"] == pytest.approx(0.1)


def test_rates_and_their_denominators() -> None:
    cases = [
        counted(
            parse_raw_success=1,
            schema_compliant=1,
            total_entities=3,
            cot_checked=1,
            cot_type_consistent=1,
            cot_argument_consistent=1,
            cot_faithful=1,
        ),
        counted(
            parse_repair_success=1,
            schema_compliant=1,
            hallucination_samples=1,
            hallucinated_entities=2,
            total_entities=5,
            cot_checked=1,
            cot_type_consistent=1,
        ),
        counted(parse_errors=1, parse_extraction_failures=1, cot_skipped=1),
        counted(parse_errors=1, cot_parse_fail=1),
    ]
    figures = AGG.figures(fold(cases))
    m = figures["metrics"]
    assert m["parse_raw_success_rate"] == 0.25
    assert m["parse_repair_success_rate"] == 0.25
    assert m["parse_error_rate"] == 0.5
    assert m["parse_extraction_failure_rate"] == 0.25
    assert m["schema_compliance_rate"] == 0.5
    assert m["hallucination_rate"] == 0.25
    assert m["hallucination_entity_rate"] == 0.25  # 2 of 8 checked arguments
    assert m["cot_type_consistency"] == 1.0  # over cot_checked (2), not total_samples
    assert m["cot_argument_consistency"] == 0.5
    assert m["cot_faithfulness"] == 0.5
    assert m["cot_coverage_rate"] == 0.5  # 2 / (2 + 1 + 1)
    assert figures["counts"]["total_samples"] == 4


def test_every_zero_denominator_gives_zero() -> None:
    figures = AGG.figures(AGG.initialise())
    assert set(figures["metrics"]) == set(RATE_NAMES)
    assert all(value == 0.0 for value in figures["metrics"].values())
    ExtractionFigures.model_validate(figures)


def test_figures_are_valid_extraction_figures_for_the_examples() -> None:
    settings = load_settings(ROOT / "examples/extraction/config.yaml", environ={})
    ctx = load_context(settings.extraction)
    with (ROOT / "examples/extraction/cases.jsonl").open(encoding="utf-8") as handle:
        rows = [json.loads(line) for line in handle if line.strip()]
    scored = [score_case(ExtractionPayload.model_validate(row), ctx) for row in rows]
    figures = ExtractionFigures.model_validate(AGG.figures(fold(scored)))
    assert figures.counts["total_samples"] == len(rows)
    assert set(figures.metrics) == set(RATE_NAMES)
    assert 0 < figures.metrics["strict_f1"] < 1
    # any split of the batch merges back exactly
    half = len(scored) // 2
    assert AGG.merge(fold(scored[:half]), fold(scored[half:])) == fold(scored)


counters = st.fixed_dictionaries({name: st.integers(0, 50) for name in COUNTER_NAMES})
cases = st.lists(counters.map(lambda c: Scored(scores={}, counts=dict(c))), max_size=12)


@given(left=cases, right=cases)
def test_merge_of_folds_equals_fold_of_concatenation(
    left: list[Scored], right: list[Scored]
) -> None:
    merged = AGG.merge(fold(left), fold(right))
    assert merged == fold(left + right)
    assert AGG.figures(merged) == AGG.figures(fold(left + right))


def test_non_counter_values_are_not_summed() -> None:
    scored = Scored(
        scores={}, counts={"total_samples": 1, "parse_method": "raw_json", "repair_steps": ["x"]}
    )
    state = fold([scored])
    assert state["total_samples"] == 1
    assert "parse_method" not in state and "repair_steps" not in state
    json.dumps(state)


def test_update_leaves_the_given_state_untouched() -> None:
    state = AGG.initialise()
    snapshot = dict(state)
    after = AGG.update(state, counted(strict_tp=2, total_samples=1))
    assert state == snapshot
    assert after["strict_tp"] == 2 and after["total_samples"] == 1
