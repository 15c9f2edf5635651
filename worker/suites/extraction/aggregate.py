"""Micro-averaged extraction figures from summed per-case counters."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from worker.suites.base import Scored, State
from worker.suites.extraction.matching import prf, safe_div

# Integer counters every scored case carries; the aggregate state is their sums.
COUNTER_NAMES: tuple[str, ...] = (
    "total_samples",
    "strict_tp",
    "strict_pred_total",
    "strict_gold_total",
    "relaxed_tp",
    "relaxed_pred_total",
    "relaxed_gold_total",
    "type_tp",
    "type_pred_total",
    "type_gold_total",
    "parse_raw_success",
    "parse_repair_success",
    "parse_errors",
    "parse_extraction_failures",
    "schema_compliant",
    "hallucination_samples",
    "hallucinated_entities",
    "total_entities",
    "cot_checked",
    "cot_skipped",
    "cot_parse_fail",
    "cot_type_consistent",
    "cot_argument_consistent",
    "cot_faithful",
)

# Rates and scores, in report order (metrics-extraction.md, "Names in reports"), by group.
MATCH_RATE_NAMES: tuple[str, ...] = tuple(
    f"{level}_{measure}"
    for level in ("strict", "relaxed", "type")
    for measure in ("precision", "recall", "f1")
)
QUALITY_RATE_NAMES: tuple[str, ...] = (  # parse, schema and hallucination
    "parse_raw_success_rate",
    "parse_repair_success_rate",
    "parse_error_rate",
    "parse_extraction_failure_rate",
    "schema_compliance_rate",
    "hallucination_rate",
    "hallucination_entity_rate",
)
COT_RATE_NAMES: tuple[str, ...] = (  # diagnostics, not a main claim
    "cot_type_consistency",
    "cot_argument_consistency",
    "cot_faithfulness",
    "cot_coverage_rate",
)
RATE_NAMES: tuple[str, ...] = (*MATCH_RATE_NAMES, *QUALITY_RATE_NAMES, *COT_RATE_NAMES)
# Rates where a higher value is worse.
LOWER_IS_BETTER_RATES = frozenset(
    {
        "parse_repair_success_rate",
        "parse_error_rate",
        "parse_extraction_failure_rate",
        "hallucination_rate",
        "hallucination_entity_rate",
    }
)

# The per-case scores of a result (`Scored.scores`), in emission order.
SCORE_NAMES: tuple[str, ...] = (
    *MATCH_RATE_NAMES,
    "parse_success",
    "schema_compliant",
    "hallucinated",
    "cot_type_consistent",
    "cot_argument_consistent",
    "cot_faithful",
)

# Counters that the reports also list among their metrics.
REPORTED_COUNTER_NAMES: tuple[str, ...] = (
    "total_samples",
    "parse_raw_success",
    "parse_repair_success",
    "parse_errors",
    "parse_extraction_failures",
    "cot_checked",
    "cot_skipped",
    "cot_parse_fail",
)

REPORT_METRIC_NAMES: tuple[str, ...] = RATE_NAMES + REPORTED_COUNTER_NAMES


def counters_of(scored: Scored) -> dict[str, int]:
    """The integer counters of one scored case (missing ones are 0)."""
    counters = {}
    for name in COUNTER_NAMES:
        value = scored.counts.get(name, 0)
        counters[name] = value if isinstance(value, int) and not isinstance(value, bool) else 0
    return counters


def rates(counts: Mapping[str, int]) -> dict[str, float]:
    """Every rate and score from summed counters; any zero denominator gives 0."""
    total = counts.get("total_samples", 0)
    figures: dict[str, float] = {}
    for prefix in ("strict", "relaxed", "type"):
        precision, recall, f1 = prf(
            counts.get(f"{prefix}_tp", 0),
            counts.get(f"{prefix}_pred_total", 0),
            counts.get(f"{prefix}_gold_total", 0),
        )
        figures[f"{prefix}_precision"] = precision
        figures[f"{prefix}_recall"] = recall
        figures[f"{prefix}_f1"] = f1
    figures["parse_raw_success_rate"] = safe_div(counts.get("parse_raw_success", 0), total)
    figures["parse_repair_success_rate"] = safe_div(counts.get("parse_repair_success", 0), total)
    figures["parse_error_rate"] = safe_div(counts.get("parse_errors", 0), total)
    figures["parse_extraction_failure_rate"] = safe_div(
        counts.get("parse_extraction_failures", 0), total
    )
    figures["schema_compliance_rate"] = safe_div(counts.get("schema_compliant", 0), total)
    figures["hallucination_rate"] = safe_div(counts.get("hallucination_samples", 0), total)
    figures["hallucination_entity_rate"] = safe_div(
        counts.get("hallucinated_entities", 0), counts.get("total_entities", 0)
    )
    checked = counts.get("cot_checked", 0)
    figures["cot_type_consistency"] = safe_div(counts.get("cot_type_consistent", 0), checked)
    figures["cot_argument_consistency"] = safe_div(
        counts.get("cot_argument_consistent", 0), checked
    )
    figures["cot_faithfulness"] = safe_div(counts.get("cot_faithful", 0), checked)
    attempted = checked + counts.get("cot_skipped", 0) + counts.get("cot_parse_fail", 0)
    figures["cot_coverage_rate"] = safe_div(checked, attempted)
    return figures


class ExtractionAggregator:
    """`SuiteAggregator` of the extraction suite: the state is summed integer counters."""

    def initialise(self) -> State:
        return {name: 0 for name in COUNTER_NAMES}

    def update(self, state: State, scored: Scored) -> State:
        """`state` plus the case's counters (a new dict; `state` is left as it was)."""
        state = dict(state)
        counts = scored.counts
        for name in COUNTER_NAMES:
            value = counts.get(name, 0)
            if isinstance(value, int) and not isinstance(value, bool) and value:
                state[name] = int(state.get(name, 0)) + value
            elif name not in state:
                state[name] = 0
        return state

    def merge(self, left: State, right: State) -> State:
        return {
            name: int(left.get(name, 0)) + int(right.get(name, 0))
            for name in dict.fromkeys([*COUNTER_NAMES, *left, *right])
        }

    def figures(self, state: State) -> dict[str, Any]:
        """`{"metrics": rates, "counts": counters}`, valid for `ExtractionFigures`."""
        counts = {name: int(value) for name, value in state.items()}
        return {"metrics": rates(counts), "counts": counts}
