"""A window state as its wire message, `llm.eval.aggregates.v1`. Pure."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from schemas.outputs import Aggregate, MetricSummary, WorstCase
from worker.aggregation.state import window_of
from worker.aggregation.worst import drilldown_metrics, worst_cases
from worker.stats import Moments, Reservoir, bootstrap_ci
from worker.suites import registry
from worker.suites.base import State, SuiteAggregator


def metric_summary(state: State, metric: str, confidence_intervals: bool = True) -> MetricSummary:
    """Mean, min, max, population std and a bootstrap CI (over the reservoir) of a metric.

    While the reservoir holds every value the CI is the plain bootstrap of the mean. Once
    the window has more values than the reservoir, the bootstrap of the sample estimates
    the spread of a mean of `k` values; the window's mean is over `n`, so the interval is
    centred on the exact mean and its spread scaled by sqrt(k / n).
    """
    moments = Moments.from_json(state["moments"][metric])
    ci_low = ci_high = None
    if confidence_intervals and moments.count:
        values = Reservoir.from_json(state["samples"][metric]).values()
        ci_low, ci_high = bootstrap_ci(values)
        exact_mean = moments.mean
        sampled = moments.count > len(values)
        if sampled and ci_low is not None and ci_high is not None and exact_mean is not None:
            sample_mean = math.fsum(values) / len(values)
            shrink = math.sqrt(len(values) / moments.count)
            ci_low = exact_mean + (ci_low - sample_mean) * shrink
            ci_high = exact_mean + (ci_high - sample_mean) * shrink
    return MetricSummary(
        mean=moments.mean,
        min=None if moments.low is None else float(moments.low),
        max=None if moments.high is None else float(moments.high),
        std=moments.std,
        ci_low=ci_low,
        ci_high=ci_high,
    )


def pass_rate(state: State) -> float | None:
    """Share of labelled results labelled Pass (None when nothing is labelled)."""
    labelled = sum(state["label_counts"].values())
    return state["label_counts"].get("Pass", 0) / labelled if labelled else None


def to_message(
    state: State,
    final: bool,
    emitted_at: datetime,
    aggregator: SuiteAggregator | None,
    confidence_intervals: bool = True,
    worst_metrics: Sequence[str] = (),
) -> Aggregate:
    """The `llm.eval.aggregates.v1` value of a window state.

    The suite's figures (`aggregator.figures`) go into the field named after the suite,
    validated by the suite's figures model (from the registry). `confidence_intervals=False`
    skips the bootstrap (cheaper for frequent interim emissions). A final aggregate lists
    the worst cases of the suite's headline metrics and of `worst_metrics` (those with
    values in the window).
    """
    suite = state["suite"]
    figures: dict[str, Any] = {}
    if aggregator is not None and state["suite_state"] is not None:
        spec = registry.find(suite)
        if spec is not None:
            raw = aggregator.figures(state["suite_state"])
            figures[spec.name] = spec.figures.model_validate(raw)
    return Aggregate(
        suite=suite,
        segment=dict(state["segment"]),
        window=window_of(state).span(),
        final=final,
        count=state["count"],
        metrics={
            metric: metric_summary(state, metric, confidence_intervals)
            for metric in sorted(state["moments"])
        },
        label_counts=dict(state["label_counts"]),
        pass_rate=pass_rate(state),
        emitted_at=emitted_at,
        worst=_worst_listing(state, worst_metrics) if final else None,
        **figures,
    )


def _worst_listing(state: State, extra: Sequence[str]) -> dict[str, list[WorstCase]]:
    listing = {}
    for metric in drilldown_metrics(state["suite"], extra):
        cases = worst_cases(state, metric)
        if cases:
            listing[metric] = cases
    return listing
