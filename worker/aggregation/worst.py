"""A window's worst cases per metric: the drill-down from an aggregate or a gate event to
the cases behind it.

Per metric the state keeps the `worst_k` worst entries `[value, id, kind, ts, label,
model, trace_id]` (lowest value first; highest for the metrics a suite declares
higher-is-worse in its metric metadata; ties by id then kind). Bounded and exactly
mergeable: the worst k of a union are among the worst k of each part. Pure.
"""

from __future__ import annotations

from bisect import insort
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from schemas.outputs import WorstCase
from worker.input.result_facts import ResultView
from worker.suites import registry
from worker.suites.base import State

DEFAULT_WORST_K = 5

Entries = list[list[Any]]


def _order(metric: str) -> Any:
    """Sort key of the entries of `metric`: worst first, then by id and kind."""
    sign = -1.0 if registry.higher_is_worse(metric) else 1.0

    def order(entry: Sequence[Any]) -> tuple[float, str, str]:
        return (sign * entry[0], entry[1], entry[2])

    return order


def add(entries: Entries, metric: str, result: ResultView, value: float, worst_k: int) -> None:
    """Keep `result` among the `worst_k` worst entries of `metric` if it is one of them."""
    if len(entries) >= worst_k:  # the common case, without building an entry: not worse
        sign = -1.0 if registry.higher_is_worse(metric) else 1.0
        bound = entries[-1]
        mine, theirs = sign * value, sign * bound[0]
        if mine > theirs or (mine == theirs and (result.id, result.kind) >= (bound[1], bound[2])):
            return
    entry = [
        value,
        result.id,
        result.kind,
        result.ts.timestamp(),
        result.label,
        result.model,
        result.trace_id,
    ]
    entries[:] = [kept for kept in entries if (kept[1], kept[2]) != (entry[1], entry[2])]
    insort(entries, entry, key=_order(metric))
    del entries[worst_k:]


def merge_worst(
    left: Mapping[str, Entries], right: Mapping[str, Entries], worst_k: int
) -> dict[str, Entries]:
    """The worst cases of the union of two windows' results, per metric (a case in both
    is kept once)."""
    merged: dict[str, Entries] = {}
    for metric in sorted({*left, *right}):
        unique: dict[tuple[str, str], list[Any]] = {}
        for entry in [*left.get(metric, []), *right.get(metric, [])]:
            unique.setdefault((entry[1], entry[2]), list(entry))
        merged[metric] = sorted(unique.values(), key=_order(metric))[:worst_k]
    return merged


def worst_cases(state: State, metric: str) -> list[WorstCase]:
    """The window's worst cases for `metric`, worst first (empty when none kept)."""
    return [
        WorstCase(
            id=ident,
            kind=kind,
            ts=datetime.fromtimestamp(ts, UTC),
            value=value,
            label=label,
            model=model,
            trace_id=trace_id,
        )
        for value, ident, kind, ts, label, model, trace_id in state.get("worst", {}).get(metric, [])
    ]


def drilldown_metrics(suite: str, extra: Sequence[str] = ()) -> list[str]:
    """The metrics whose worst cases a final aggregate lists: the suite's headline
    metrics, then `extra` (e.g. the gated metrics), without repeats."""
    spec = registry.find(suite)
    return list(dict.fromkeys([*(spec.headline if spec else ()), *extra]))
