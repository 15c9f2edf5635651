"""Every suite's `SuiteAggregator` keeps one contract (`worker.suites.base`): `update` and
`merge` return new states and never change their inputs, `initialise()` is the identity of
`merge`, and folding in two halves then merging equals folding everything."""

from __future__ import annotations

import copy
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from worker.suites import registry
from worker.suites.base import Scored, SuiteSpec
from worker.suites.extraction.aggregate import COUNTER_NAMES

GRADES = ("A", "B", "C", "D", "F")
LABELS = ("Pass", "Review", "Fail")


def scored_values(spec: SuiteSpec) -> st.SearchStrategy[Scored]:
    """Scored values shaped as the suite's scorer makes them (enough for its aggregator)."""
    score = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)
    metrics = [info.name for info in spec.score_metrics]
    return st.builds(
        Scored,
        scores=st.fixed_dictionaries({name: score for name in metrics}),
        label=st.sampled_from(LABELS),
        grade=st.sampled_from(GRADES),
        details=st.fixed_dictionaries({"archetype": st.sampled_from(["a", "b"])}),
        counts=st.fixed_dictionaries(
            {"turns": st.integers(0, 9), **{n: st.integers(0, 5) for n in COUNTER_NAMES}}
        ),
    )


def close(left: Any, right: Any) -> bool:
    """Equal, numbers within float rounding (sums in another order differ in the last bits)."""
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(close(left[k], right[k]) for k in left)
    if isinstance(left, list | tuple) and isinstance(right, list | tuple):
        return len(left) == len(right) and all(map(close, left, right))
    if isinstance(left, float) or isinstance(right, float):
        return math.isclose(left, right, rel_tol=1e-9, abs_tol=1e-12)
    return bool(left == right)


def fold(spec: SuiteSpec, values: list[Scored]) -> Any:
    aggregator = spec.aggregator()
    state = aggregator.initialise()
    for scored in values:
        state = aggregator.update(state, scored)
    return state


@pytest.mark.parametrize("spec", registry.specs(), ids=lambda spec: spec.name)
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_every_suite_aggregator_keeps_the_contract(spec: SuiteSpec, data: st.DataObject) -> None:
    aggregator = spec.aggregator()
    values = data.draw(st.lists(scored_values(spec), max_size=8))
    cut = data.draw(st.integers(0, len(values)))
    left, right = fold(spec, values[:cut]), fold(spec, values[cut:])
    left_before, right_before = copy.deepcopy(left), copy.deepcopy(right)

    merged = aggregator.merge(left, right)
    assert (left, right) == (left_before, right_before), "merge changed an input"
    assert close(aggregator.figures(merged), aggregator.figures(fold(spec, values)))
    assert close(
        aggregator.figures(aggregator.merge(aggregator.initialise(), merged)),
        aggregator.figures(merged),
    )

    if values:
        updated = aggregator.update(left, values[0])
        assert left == left_before, "update changed its input"
        assert updated is not left
