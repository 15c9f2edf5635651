"""Which `metric` / `stat` pairs a gate can watch in each suite's aggregates.

Plain data, no imports from the suites (the configuration validates gates with it, and
the suites import the configuration); `tests/test_gate_fields.py` checks these names
against what the scorers and aggregators really emit.
"""

from __future__ import annotations

from collections.abc import Mapping

SUMMARY_STATS: tuple[str, ...] = ("mean", "min", "max", "std", "ci_low", "ci_high")

# Metric names of `Aggregate.metrics` (the per-result scores), per suite.
SCORE_METRICS: Mapping[str, tuple[str, ...]] = {
    "safe": ("CR", "AH", "AC", "composite"),
    "extraction": (
        "strict_precision",
        "strict_recall",
        "strict_f1",
        "relaxed_precision",
        "relaxed_recall",
        "relaxed_f1",
        "type_precision",
        "type_recall",
        "type_f1",
        "parse_success",
        "schema_compliant",
        "hallucinated",
        "cot_type_consistent",
        "cot_argument_consistent",
        "cot_faithful",
    ),
    "alignment": (
        "authenticity",
        "style_sim",
        "traits",
        "lexicon",
        "safety",
        "stability",
        "overall",
    ),
}

# Metric names a `rate` gate reads: the window pass rate (`pass_rate` / `overall`, only
# for suites with per-case labels), SAFE per-metric pass rates, extraction figures.
RATE_METRICS: Mapping[str, tuple[str, ...]] = {
    "safe": ("pass_rate", "overall", "CR", "AH", "AC"),
    "extraction": (
        "strict_precision",
        "strict_recall",
        "strict_f1",
        "relaxed_precision",
        "relaxed_recall",
        "relaxed_f1",
        "type_precision",
        "type_recall",
        "type_f1",
        "parse_raw_success_rate",
        "parse_repair_success_rate",
        "parse_error_rate",
        "parse_extraction_failure_rate",
        "schema_compliance_rate",
        "hallucination_rate",
        "hallucination_entity_rate",
        "cot_type_consistency",
        "cot_argument_consistency",
        "cot_faithfulness",
        "cot_coverage_rate",
    ),
    "alignment": (),
}

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
