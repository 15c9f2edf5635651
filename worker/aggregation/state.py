"""The state of one window of one suite and segment: initialise, update, merge.

Plain JSON-compatible data (a dict), so a changelog-backed table can hold it. Every field
is declared once below (`FIELDS`) with its empty value and how two states' values of it
combine; `initialise` and `merge_into` are read from that declaration, and `merge` is
`merge_into` on a copy. Layout (version 1):

    {"v": 1, "suite": str, "segment": {label: value}, "window": [size, step, start],
     "reservoir_size": int, "count": int,
     "moments": {metric: [count, total, total_sq, min, max]},       # Moments.to_json
     "samples": {metric: sample},                                   # aggregation.samples
     "label_counts": {"Pass"|"Review"|"Fail": int}, "grade_counts": {"A".."F": int},
     "suite_state": <SuiteAggregator state> | None,
     "high_water": {"topic:partition": [last_offset, [ids]]},       # aggregation.dedupe
     "seen_ids": [sample_id, ...],
     "worst_k": int, "worst": {metric: [entry, ...]}}               # aggregation.worst

`merge` assumes its two states counted disjoint results (e.g. different input partitions
or time slices); the dedupe fields still make a result counted in both count once later.
States written before `worst` existed read as having none.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from worker.aggregation import dedupe, samples, worst
from worker.input.result_facts import ResultView
from worker.stats import DEFAULT_RESERVOIR_SIZE, Moments, sample_key
from worker.suites.base import Scored, State, SuiteAggregator
from worker.windowing.windows import WindowKey

STATE_VERSION = 1


@dataclass(frozen=True)
class _MergeContext:
    """What a field's merge needs besides the two values."""

    reservoir_size: int
    worst_k: int
    aggregator: SuiteAggregator | None


@dataclass(frozen=True)
class Field:
    """A window-state field: its value in an empty window, how a merge combines it
    (`combine(mine, theirs, context)` may reuse `mine`, never `theirs`) and how to copy it
    (a copy shares nothing that `combine` or `update` changes in place)."""

    empty: Callable[[], Any]
    combine: Callable[[Any, Any, _MergeContext], Any]
    copy: Callable[[Any], Any]


def _add(mine: int, theirs: int, _: _MergeContext) -> int:
    return mine + theirs


def _add_counts(mine: Mapping[str, int], theirs: Mapping[str, int], _: _MergeContext) -> Any:
    return {key: mine.get(key, 0) + theirs.get(key, 0) for key in sorted({*mine, *theirs})}


def _merge_moments(mine: dict[str, Any], theirs: Mapping[str, Any], _: _MergeContext) -> Any:
    for metric, other in theirs.items():
        moments = mine.get(metric)
        if moments is None:
            mine[metric] = Moments.from_json(other).to_json()
            continue
        moments[0] = int(moments[0]) + int(other[0])
        moments[1] = float(moments[1]) + float(other[1])
        moments[2] = float(moments[2]) + float(other[2])
        for index, pick in ((3, min), (4, max)):
            values = [value for value in (moments[index], other[index]) if value is not None]
            moments[index] = pick(values) if values else None
    return mine


def _merge_samples(mine: dict[str, Any], theirs: Mapping[str, Any], ctx: _MergeContext) -> Any:
    for metric in {*mine, *theirs}:
        mine[metric] = samples.merge_into(mine.get(metric), theirs.get(metric), ctx.reservoir_size)
    return mine


def _merge_suite_states(mine: State | None, theirs: State | None, ctx: _MergeContext) -> Any:
    if mine is None or theirs is None:
        return copy.deepcopy(mine if theirs is None else theirs)
    if ctx.aggregator is None:
        raise ValueError("merging suite states needs the suite's aggregator")
    return ctx.aggregator.merge(mine, theirs)


def _larger(mine: int, theirs: int, _: _MergeContext) -> int:
    return max(int(mine), int(theirs))


def _copy_sample(sample: Mapping[str, Any]) -> dict[str, Any]:
    copied = {**sample, "items": dict(sample["items"])}
    if "order" in sample:
        copied["order"] = list(sample["order"])
    return copied


FIELDS: dict[str, Field] = {
    "count": Field(lambda: 0, _add, int),
    "moments": Field(dict, _merge_moments, lambda value: {m: list(v) for m, v in value.items()}),
    "samples": Field(
        dict, _merge_samples, lambda value: {m: _copy_sample(v) for m, v in value.items()}
    ),
    "label_counts": Field(dict, _add_counts, dict),
    "grade_counts": Field(dict, _add_counts, dict),
    "suite_state": Field(lambda: None, _merge_suite_states, copy.deepcopy),
    "high_water": Field(
        dict,
        lambda mine, theirs, _: dedupe.merge_high_water(mine, theirs),
        lambda value: {key: [mark[0], list(mark[1])] for key, mark in value.items()},
    ),
    "seen_ids": Field(list, lambda mine, theirs, _: dedupe.merge_seen_ids(mine, theirs), list),
    "worst": Field(
        dict,
        lambda mine, theirs, ctx: worst.merge_worst(mine, theirs, ctx.worst_k),
        lambda value: {m: [list(entry) for entry in entries] for m, entries in value.items()},
    ),
}
# The fields an interim aggregate reads (`aggregation.to_message` without confidence
# intervals or worst cases): a window's summary merges only these.
SUMMARY_FIELDS: frozenset[str] = frozenset(
    {"count", "moments", "label_counts", "grade_counts", "suite_state"}
)
# Settings of the window, not figures: a merge keeps the larger.
SIZES: dict[str, int] = {
    "reservoir_size": DEFAULT_RESERVOIR_SIZE,
    "worst_k": worst.DEFAULT_WORST_K,
}


def initialise(
    suite: str,
    segment: Mapping[str, str],
    window: WindowKey,
    reservoir_size: int = DEFAULT_RESERVOIR_SIZE,
    worst_k: int = worst.DEFAULT_WORST_K,
) -> State:
    """Empty state of one (suite, segment, window); `reservoir_size` bounds CI samples,
    `worst_k` the worst cases kept per metric (0: none)."""
    state: State = {
        "v": STATE_VERSION,
        "suite": suite,
        "segment": dict(segment),
        "window": window.to_json(),
        "reservoir_size": reservoir_size,
        "worst_k": worst_k,
    }
    for name, field in FIELDS.items():
        state[name] = field.empty()
    return state


def window_of(state: State) -> WindowKey:
    return WindowKey.from_json(state["window"])


def scored_from(result: ResultView) -> Scored:
    """Rebuild the suite's `Scored` from a published result."""
    return Scored(
        scores=dict(result.scores),
        label=result.label,
        grade=result.grade,
        details=dict(result.details),
        counts=dict(result.counts),
    )


def update(
    state: State,
    result: ResultView,
    aggregator: SuiteAggregator | None,
    scored: Scored | None = None,
) -> tuple[State, bool]:
    """Fold one result into `state` in place and return it; `applied` is False for a replay.

    None and non-finite scores are skipped (the metric is still listed). `aggregator` is
    the suite's `SuiteAggregator` (None: no suite figures); `scored` is
    `scored_from(result)` when the caller has it already (one result, several windows).
    """
    if dedupe.is_replay(state, result):
        return state, False
    dedupe.remember(state, result)
    state["count"] += 1
    ident = dedupe.sample_id(result)
    key = sample_key(ident)
    capacity = int(state["reservoir_size"])
    worst_entries = state.setdefault("worst", {})
    worst_k = int(state.get("worst_k", worst.DEFAULT_WORST_K))
    all_moments, all_samples = state["moments"], state["samples"]
    for metric, value in result.scores.items():
        moments = all_moments.get(metric)
        if moments is None:
            moments = all_moments[metric] = Moments().to_json()
        sample = all_samples.get(metric)
        if sample is None:
            sample = all_samples[metric] = samples.empty_sample(capacity)
        if value is not None and math.isfinite(value):
            value = float(value)
            _moments_add(moments, value)
            samples.add(sample, ident, key, value)
            if worst_k > 0:
                worst.add(worst_entries.setdefault(metric, []), metric, result, value, worst_k)
    if result.label is not None:
        state["label_counts"][result.label] = state["label_counts"].get(result.label, 0) + 1
    if result.grade is not None:
        state["grade_counts"][result.grade] = state["grade_counts"].get(result.grade, 0) + 1
    if aggregator is not None:
        suite_state = state["suite_state"]
        if suite_state is None:
            suite_state = aggregator.initialise()
        state["suite_state"] = aggregator.update(suite_state, scored or scored_from(result))
    return state, True


def _moments_add(moments: list[Any], value: float) -> None:
    """`Moments.add` on the state's JSON list, in place (no object per metric and case)."""
    moments[0] += 1
    moments[1] += value
    moments[2] += value * value
    low, high = moments[3], moments[4]
    if low is None or value < low:
        moments[3] = value
    if high is None or value > high:
        moments[4] = value


def _check_mergeable(left: State, right: State) -> None:
    if (left["suite"], left["segment"], left["window"]) != (
        right["suite"],
        right["segment"],
        right["window"],
    ):
        raise ValueError("cannot merge the states of different windows or segments")


def merge_into(
    target: State,
    other: State,
    aggregator: SuiteAggregator | None,
    fields: frozenset[str] | None = None,
) -> State:
    """The state of the union of two disjoint sets of results of the same window, written
    into `target` (which is returned); `other` is left as it was and shares nothing with
    the result. For a caller that owns `target` (the window store taking a fold into a
    pane, or adding up a window's panes). With `fields`, only those are merged and the
    others keep `target`'s values (a summary: `SUMMARY_FIELDS`)."""
    _check_mergeable(target, other)
    for name, default in SIZES.items():
        target[name] = max(int(target.get(name, default)), int(other.get(name, default)))
    context = _MergeContext(target["reservoir_size"], target["worst_k"], aggregator)
    for name, field in FIELDS.items():
        if fields is not None and name not in fields:
            continue
        mine, theirs = target.get(name), other.get(name)  # absent in older states: empty
        target[name] = field.combine(
            field.empty() if mine is None else mine,
            field.empty() if theirs is None else theirs,
            context,
        )
    target["v"] = STATE_VERSION
    return target


def merge(left: State, right: State, aggregator: SuiteAggregator | None) -> State:
    """`merge_into` on a copy of `left`: a new state, sharing nothing with either side."""
    return merge_into(copy_state(left), right, aggregator)


def merge_panes(
    empty: State,
    panes: Sequence[State],
    aggregator: SuiteAggregator | None,
    fields: frozenset[str] | None = None,
) -> State:
    """A window's state: its pane states merged into a copy of its `empty` state
    (`initialise`); the result shares nothing with either. With `fields` (`SUMMARY_FIELDS`
    for an interim aggregate), only those are merged: the rest stay empty, so such a
    summary is for a message without confidence intervals or worst cases, never stored."""
    merged = copy_state(empty)
    for stored in panes:
        pane = copy.copy(stored)
        pane["window"] = merged["window"]
        merged = merge_into(merged, pane, aggregator, fields)
    return merged


def copy_state(state: State) -> State:
    """A copy of `state` that `update` and `merge_into` can change without touching it."""
    copied = dict(state)
    copied["segment"] = dict(state["segment"])
    copied["window"] = list(state["window"])
    for name, field in FIELDS.items():
        value = state.get(name)
        if value is not None:
            copied[name] = field.copy(value)
    return copied


def compact(state: State) -> State:
    """`state` as written to a changelog: its samples without their derived index
    (`samples.without_index`), read back as the same state. Shares the rest with `state`."""
    stored = state.get("samples")
    if not stored:
        return state
    return {**state, "samples": {m: samples.without_index(s) for m, s in stored.items()}}


__all__ = [
    "FIELDS",
    "STATE_VERSION",
    "SUMMARY_FIELDS",
    "Field",
    "compact",
    "copy_state",
    "initialise",
    "merge",
    "merge_into",
    "merge_panes",
    "scored_from",
    "update",
    "window_of",
]
