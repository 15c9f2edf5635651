"""Windowed aggregates of scored results, split by job. Pure: no Kafka, no clock.

- `keys`: the segments a result belongs to and the Kafka key of an aggregate;
- `state`: one window's mergeable state, its fields declared once with how they merge
  (`initialise` / `update` / `merge_into`, and `merge` = `merge_into` on a copy);
- `dedupe`: which results a state has already counted (replays count once);
- `samples`: the value samples behind the bootstrap CIs;
- `worst`: the worst cases per metric (the drill-down);
- `message`: a state as its `llm.eval.aggregates.v1` message.

The suite's own fold is an injected `SuiteAggregator` (looked up by the caller); the
suites' metric metadata (headline metrics, which metrics are worse when higher, the
figures model) comes from `worker.suites.registry`. The names below are the package's
public interface.
"""

from worker.aggregation.dedupe import is_replay, sample_id
from worker.aggregation.keys import (
    ALL_CASES,
    aggregate_key,
    format_window_start,
    segment_key,
    segment_values,
    segments_for,
)
from worker.aggregation.message import metric_summary, pass_rate, to_message
from worker.aggregation.state import (
    SUMMARY_FIELDS,
    initialise,
    merge,
    merge_into,
    merge_panes,
    scored_from,
    update,
    window_of,
)
from worker.aggregation.worst import DEFAULT_WORST_K, drilldown_metrics, merge_worst, worst_cases
from worker.stats import DEFAULT_RESERVOIR_SIZE

__all__ = [
    "ALL_CASES",
    "DEFAULT_RESERVOIR_SIZE",
    "DEFAULT_WORST_K",
    "SUMMARY_FIELDS",
    "aggregate_key",
    "drilldown_metrics",
    "format_window_start",
    "initialise",
    "is_replay",
    "merge",
    "merge_into",
    "merge_panes",
    "merge_worst",
    "metric_summary",
    "pass_rate",
    "sample_id",
    "scored_from",
    "segment_key",
    "segment_values",
    "segments_for",
    "to_message",
    "update",
    "window_of",
    "worst_cases",
]
