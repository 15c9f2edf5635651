"""Mergeable statistics: moments, the bottom-k reservoir, bootstrap intervals."""

from __future__ import annotations

import collections
import itertools
import statistics

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from worker.stats import (
    Moments,
    Reservoir,
    bootstrap_ci,
    bootstrap_diff_ci,
    bootstrap_means,
    mean,
    percentiles,
    sample_grid,
)

scores = st.lists(st.floats(min_value=0.0, max_value=1.0), min_size=1, max_size=60)


@given(scores, scores)
def test_merged_moments_equal_moments_of_everything(left: list[float], right: list[float]) -> None:
    a, b, both = Moments(), Moments(), Moments()
    for value in left:
        a.add(value)
        both.add(value)
    for value in right:
        b.add(value)
        both.add(value)
    merged = a.merge(b)
    assert merged.count == both.count
    assert merged.mean == pytest.approx(statistics.fmean(left + right))
    assert merged.std == pytest.approx(statistics.pstdev(left + right), abs=1e-6)
    assert (merged.low, merged.high) == (min(left + right), max(left + right))
    assert Moments.from_json(merged.to_json()) == merged


@given(st.lists(st.integers(min_value=0, max_value=500), unique=True), st.integers(1, 40))
def test_reservoir_of_a_union_is_the_merge_of_reservoirs(ids: list[int], capacity: int) -> None:
    half = len(ids) // 2
    left, right, whole = Reservoir(capacity), Reservoir(capacity), Reservoir(capacity)
    for item in ids[:half]:
        left.add(str(item), item / 500)
        whole.add(str(item), item / 500)
    for item in ids[half:]:
        right.add(str(item), item / 500)
        whole.add(str(item), item / 500)
    assert left.merge(right).items == whole.items
    assert len(whole.items) == min(capacity, len(ids))


def test_reservoir_ignores_replays_and_samples_uniformly() -> None:
    sample = Reservoir(100)
    for index in range(10_000):
        sample.add(f"case-{index}", float(index))
    before = dict(sample.items)
    for index in range(10_000):  # the same cases again: nothing changes
        sample.add(f"case-{index}", float(index))
    assert sample.items == before
    # A uniform sample of 0..9999 has a mean near 5000 (sd of the mean ~290).
    assert abs(statistics.fmean(sample.values()) - 5000) < 1200


def test_bootstrap_ci_is_seeded_and_covers_the_mean() -> None:
    rng = np.random.default_rng(3)
    values = list(rng.normal(0.8, 0.1, size=200))
    low, high = bootstrap_ci(values)
    assert (low, high) == bootstrap_ci(values)  # deterministic
    assert low is not None and high is not None
    assert low < statistics.fmean(values) < high
    # The 95% interval of a mean of 200 values with sd 0.1 is about +-0.014.
    assert 0.02 < high - low < 0.04
    assert bootstrap_ci([]) == (None, None)
    assert bootstrap_ci([0.5]) == (0.5, 0.5)


def test_paired_difference_interval_detects_a_shift() -> None:
    rng = np.random.default_rng(5)
    baseline = rng.uniform(0.6, 0.9, size=100)
    candidate = baseline - 0.05 + rng.normal(0, 0.01, size=100)
    low, high = bootstrap_diff_ci(list(baseline), list(candidate), paired=True)
    assert low is not None and high is not None and high < 0 and low < -0.04 < high + 0.02
    unpaired = bootstrap_diff_ci(list(baseline), list(candidate), paired=False)
    assert unpaired[0] is not None and unpaired[1] is not None
    assert unpaired[1] - unpaired[0] > high - low  # pairing removes the case-to-case spread
    with pytest.raises(ValueError):
        bootstrap_diff_ci([0.1, 0.2], [0.3], paired=True)


def test_mean_of_nothing_is_zero() -> None:
    assert mean([]) == 0.0
    assert mean([0.25, 0.75]) == 0.5


@pytest.mark.parametrize(
    "values",
    [
        [0.0, 0.5, 1.0, 1.0, 0.5, 1.0, 0.0, 1.0] * 16,  # on a grid: sums of steps are drawn
        [0.1, 0.37, 2**-0.5, 0.9, 0.37, 0.9, 0.1, 0.9] * 16,  # few distinct: counts are drawn
        [0.25, 1.0, 1.0, 0.25, 1.0] * 20,  # two values: how often the larger is picked
        [i / 127 for i in range(128)],  # all distinct: every pick is drawn
    ],
    ids=["grid", "few-distinct", "two-values", "all-distinct"],
)
def test_bootstrap_means_follow_the_resampling_distribution(values: list[float]) -> None:
    """Either way of resampling gives means centred on the sample mean with the spread of
    a mean of n draws with replacement: population std / sqrt(n)."""
    data = np.asarray(values)
    means = bootstrap_means(data, 20_000, np.random.default_rng(3))
    assert means.shape == (20_000,)
    assert means.mean() == pytest.approx(data.mean(), abs=0.002)
    assert means.std() == pytest.approx(data.std() / np.sqrt(data.size), rel=0.03)


def test_means_on_a_grid_have_the_exact_distribution_of_resampled_means() -> None:
    """Four values on a grid of 9 steps (0, 4/9, 1, 1): every resample of 4 picks listed
    (256 of them, equally likely) gives the exact distribution of the resampled means,
    15 values; 200,000 means drawn on the grid match it (a chi-square statistic with 14
    degrees of freedom: 99.9 % of samples stay under 36.1)."""
    data = np.asarray([0.0, 4 / 9, 1.0, 1.0])
    assert sample_grid(np.unique(data)) == (9, pytest.approx([0, 4, 9]))
    exact: dict[float, float] = {}
    for picks in itertools.product(data, repeat=data.size):
        key = round(float(np.mean(picks)), 9)
        exact[key] = exact.get(key, 0.0) + 1 / data.size**data.size
    draws = 200_000
    means = bootstrap_means(data, draws, np.random.default_rng(11))
    drawn = collections.Counter(round(float(value), 9) for value in means)
    assert set(drawn) <= set(exact)
    chi_square = sum((drawn[key] - draws * p) ** 2 / (draws * p) for key, p in exact.items())
    assert len(exact) == 15 and chi_square < 36.1


@pytest.mark.parametrize(
    ("values", "steps"),
    [
        ([0.0, 0.25, 0.5, 2 / 3, 1.0], 12),  # shares of 4 and of 3 checks
        ([0.25, 0.5, 5 / 9, 2 / 3, 5 / 6, 8 / 9, 1.0], 27),  # weighted sums of such shares
        ([1 / 3, 0.5, 2 / 3, 1.0], 4),
        ([0.1, 0.37, 2**-0.5], None),  # not on a grid
        ([0.0, 1 / 997, 1.0], None),  # a grid of more than GRID_STEPS steps
        ([0.5, 0.5], None),  # no range
    ],
)
def test_sample_grid_finds_the_grid_of_scores(values: list[float], steps: int | None) -> None:
    grid = sample_grid(np.unique(np.asarray(values)))
    assert (grid[0] if grid is not None else None) == steps


@given(
    st.lists(st.floats(min_value=-1e6, max_value=1e6), min_size=1, max_size=300),
    st.lists(st.floats(min_value=0.0, max_value=100.0), min_size=1, max_size=4),
)
def test_percentiles_are_numpys(values: list[float], percents: list[float]) -> None:
    data = np.asarray(values)
    assert percentiles(data, percents) == [float(v) for v in np.percentile(data, percents)]
