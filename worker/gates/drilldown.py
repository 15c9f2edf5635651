"""Which published results a drill-down asks for: a window and segment, or a gate event's
worst cases. Pure: the `results` command reads the topic and hands the results in here.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from schemas.outputs import CaseResult, GateEvent
from worker.aggregation import segments_for
from worker.suites import registry


@dataclass(frozen=True)
class Query:
    """The results to show: `suite`'s cases of `[start, end)` in `segment`, or, when
    `cases` is given (`(id, kind)` pairs, e.g. a gate event's worst), exactly those."""

    suite: str
    start: datetime
    end: datetime
    segment: dict[str, str] = field(default_factory=dict)
    cases: tuple[tuple[str, str], ...] | None = None
    metric: str | None = None  # order by it, worst first
    limit: int | None = None


@dataclass(frozen=True)
class Selection:
    """The results found, in display order, and the asked-for cases that were not."""

    results: list[CaseResult]
    missing: list[str]


def window_query(
    suite: str,
    start: datetime,
    size_s: float,
    segment: Mapping[str, str],
    metric: str | None = None,
    limit: int | None = None,
) -> Query:
    return Query(
        suite, start, start + timedelta(seconds=size_s), dict(segment), None, metric, limit
    )


def gate_event_query(event: GateEvent, limit: int | None = None) -> Query:
    """The gate event's worst cases; its whole window and segment when it lists none."""
    cases = None
    if event.worst:
        cases = tuple((case.id, case.kind) for case in event.worst)
    return Query(
        suite=event.suite,
        start=event.window.start,
        end=event.window.end,
        segment=dict(event.segment),
        cases=cases,
        metric=event.worst_metric or event.metric,
        limit=limit,
    )


def in_segment(result: CaseResult, segment: Mapping[str, str]) -> bool:
    """Whether the worker counts `result` into `segment` (the same rule as aggregation)."""
    if not segment:
        return True
    return segments_for(result.model, result.labels, list(segment))[-1] == dict(segment)


def in_window(result: CaseResult, query: Query) -> bool:
    return (
        result.suite == query.suite
        and query.start <= result.ts < query.end
        and in_segment(result, query.segment)
    )


def badness(result: CaseResult, metric: str) -> float:
    """Sort key of `result` by `metric`, worst first; cases without a value go last."""
    value = result.scores.get(metric)
    if value is None or not math.isfinite(value):
        return math.inf
    return -value if registry.higher_is_worse(metric) else value


def select(results: Iterable[CaseResult], query: Query) -> Selection:
    """The results `query` asks for. A result published twice (a replay) counts once,
    the later copy winning."""
    latest: dict[tuple[str, str], CaseResult] = {}
    for result in results:
        if result.suite == query.suite:
            latest[(result.id, result.kind)] = result
    if query.cases is not None:
        found = [latest[case] for case in query.cases if case in latest]
        missing = [ident for ident, kind in query.cases if (ident, kind) not in latest]
        return Selection(found[: query.limit] if query.limit else found, missing)
    chosen = [result for result in latest.values() if in_window(result, query)]
    metric = query.metric
    if metric is not None:
        chosen.sort(key=lambda r: (badness(r, metric), r.id, r.kind))
    else:
        chosen.sort(key=lambda r: (r.ts, r.id, r.kind))
    return Selection(chosen[: query.limit] if query.limit else chosen, [])


__all__ = [
    "Query",
    "Selection",
    "badness",
    "gate_event_query",
    "in_segment",
    "in_window",
    "select",
    "window_query",
]
