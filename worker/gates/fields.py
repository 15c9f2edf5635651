"""Which `metric` / `stat` pairs a gate can watch in each suite's aggregates.

Read from the suites' metric metadata in `worker.suites.registry` (per-result scores and
the figures a `rate` gate reads); `tests/test_gate_fields.py` checks these names against
what the scorers and aggregators really emit.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from worker.suites import registry
from worker.suites.base import MetricInfo, SuiteSpec

SUMMARY_STATS: tuple[str, ...] = ("mean", "min", "max", "std", "ci_low", "ci_high")


class _MetricNames(Mapping[str, tuple[str, ...]]):
    """Metric names per registered suite, read from its spec."""

    def __init__(self, field: str) -> None:
        self.field = field

    def _infos(self, spec: SuiteSpec) -> tuple[MetricInfo, ...]:
        infos: tuple[MetricInfo, ...] = getattr(spec, self.field)
        return infos

    def __getitem__(self, suite: str) -> tuple[str, ...]:
        spec = registry.find(suite)
        if spec is None:
            raise KeyError(suite)
        return tuple(info.name for info in self._infos(spec))

    def __iter__(self) -> Iterator[str]:
        return iter(registry.names())

    def __len__(self) -> int:
        return len(registry.names())


# Metric names of `Aggregate.metrics` (the per-result scores), per suite.
SCORE_METRICS: Mapping[str, tuple[str, ...]] = _MetricNames("score_metrics")
# Metric names a `rate` gate reads: the window pass rate (`pass_rate` / `overall`, only
# for suites with per-case labels) and the rates of the suite's figures.
RATE_METRICS: Mapping[str, tuple[str, ...]] = _MetricNames("rate_metrics")

COUNT_METRICS = ("count", "cases")  # "cases": the name of the count in Prometheus


def gate_metrics(suite: str, stat: str) -> tuple[str, ...]:
    """The metric names a gate of `suite` with statistic `stat` can watch."""
    if stat in SUMMARY_STATS:
        return SCORE_METRICS.get(suite, ())
    if stat == "rate":
        return RATE_METRICS.get(suite, ())
    if stat == "count":  # the window's case count; the metric only names the gate's subject
        names = (*SCORE_METRICS.get(suite, ()), *RATE_METRICS.get(suite, ()), *COUNT_METRICS)
        return tuple(dict.fromkeys(names))
    return ()


def suite_metrics(suite: str) -> tuple[str, ...]:
    """Every metric name a gate of `suite` can watch with some statistic."""
    return gate_metrics(suite, "count")


def metric_problem(suite: str, metric: str) -> str | None:
    """Why `metric` is no field of `suite`'s aggregates (e.g. a misspelling), or None."""
    known = suite_metrics(suite)
    if metric in known:
        return None
    return f"{metric!r} is not a metric of {suite} aggregates (known: {', '.join(known)})"


def stat_problem(suite: str, metric: str, stat: str) -> str | None:
    """Why `stat` cannot be read for a known `metric` of `suite`, or None."""
    allowed = gate_metrics(suite, stat)
    if metric in allowed:
        return None
    if not allowed:
        return f"{metric!r}: {suite} aggregates have no {stat!r} statistic"
    usable = [s for s in (*SUMMARY_STATS, "rate", "count") if metric in gate_metrics(suite, s)]
    return f"{metric!r} of {suite} aggregates has no {stat!r} (use: {', '.join(usable)})"


__all__ = [
    "COUNT_METRICS",
    "RATE_METRICS",
    "SCORE_METRICS",
    "SUMMARY_STATS",
    "gate_metrics",
    "metric_problem",
    "stat_problem",
    "suite_metrics",
]
