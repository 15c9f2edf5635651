"""Windowed aggregates of scored results: segments, keys and mergeable window state.

Pure: no Kafka, no clock. A window's state is plain JSON-compatible data (a dict), so a
changelog-backed table can hold it; `initialise` / `update` / `merge` / `to_message`
follow the usual aggregator contract (`update` changes the state in place and returns
it, so large windows are not copied per record). The suite's own figures come from an injected
`SuiteAggregator` (looked up by the caller), never imported here.

State layout (version 1):

    {"v": 1, "suite": str, "segment": {label: value}, "window": [size, step, start],
     "count": int,
     "moments": {metric: [count, total, total_sq, min, max]},          # Moments.to_json
     "samples": {metric: {"capacity": int, "items": {sample_id: value}}},  # Reservoir
     "label_counts": {"Pass"|"Review"|"Fail": int}, "grade_counts": {"A".."F": int},
     "suite_state": <SuiteAggregator state> | None,
     "high_water": {"topic:partition": [last_offset, [sample_ids at last_offset]]},
     "seen_ids": [sample_id, ...],
     "worst_k": int,                                                   # optional
     "worst": {metric: [[value, id, kind, ts, label, model, trace_id], ...]}}  # optional

`worst` keeps, per metric, the `worst_k` worst cases of the window (lowest value first,
highest for the metrics that are not higher-is-better, per the suites' metric metadata
in `worker.suites.registry`; ties by id then kind): the drill-down from
an aggregate or a gate event to its cases. It is bounded and exactly mergeable: the worst
k of a union are among the worst k of each part. States without it (written before it
existed) read as empty.

Replays are not counted twice. A result with a `source` is a replay when its input offset
is below the high water of its input partition, or equal to it with an id already
counted at that offset (one input record can yield several results: a whole alignment
session gives one result per turn). Session results and results without a source are
checked by id instead (sessions close on timers, out of offset order). `merge` assumes its
two states counted disjoint results (e.g. different input partitions or time slices).
"""

from __future__ import annotations

import copy
import math
from bisect import insort
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from schemas.outputs import Aggregate, CaseResult, MetricSummary, WorstCase
from worker.stats import DEFAULT_RESERVOIR_SIZE, Moments, Reservoir, bootstrap_ci, sample_key
from worker.suites import registry
from worker.suites.base import Scored, State, SuiteAggregator
from worker.windows import WindowKey

STATE_VERSION = 1
DEFAULT_WORST_K = 5
ALL_CASES = "all"
UNKNOWN = "unknown"

# Characters with a meaning in keys; escaped in label keys and values.
_KEY_ESCAPES = {"%": "%25", "|": "%7C", ",": "%2C", "=": "%3D"}


# ---------------------------------------------------------------- segments and keys


def segments_for(
    model: str | None, labels: Mapping[str, str], segment_by: Sequence[str]
) -> list[dict[str, str]]:
    """The all-cases segment `{}` and the segment of all `segment_by` keys.

    A key's value is `labels[key]`; for `model` missing from the labels, the record's
    `model`; otherwise `"unknown"`.
    """
    segments: list[dict[str, str]] = [{}]
    if segment_by:
        segment: dict[str, str] = {}
        for key in segment_by:
            if key in labels:
                segment[key] = labels[key]
            elif key == "model" and model:
                segment[key] = model
            else:
                segment[key] = UNKNOWN
        segments.append(segment)
    return segments


def _escape(text: str) -> str:
    return "".join(_KEY_ESCAPES.get(char, char) for char in text)


def segment_key(segment: Mapping[str, str]) -> str:
    """Stable text of a segment: `"all"` for `{}`, else `k=v,k2=v2` sorted by key.

    `%`, `|`, `,` and `=` inside keys and values are percent-escaped so that the text is
    unambiguous inside an aggregate or gate key.
    """
    if not segment:
        return ALL_CASES
    return ",".join(f"{_escape(k)}={_escape(segment[k])}" for k in sorted(segment))


def format_window_start(start: float) -> str:
    """RFC 3339 UTC with a `Z`; milliseconds only when the start is not a whole second."""
    moment = datetime.fromtimestamp(start, UTC)
    if moment.microsecond:
        return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def aggregate_key(suite: str, segment: Mapping[str, str], window: WindowKey) -> str:
    """Kafka key of an aggregate: `{suite}|{segment}|{window name}|{window start}`.

    e.g. `safe|model=gpt-4o|1h/5m|2024-05-01T12:05:00Z` (start in RFC 3339 UTC).
    """
    return f"{suite}|{segment_key(segment)}|{window.name}|{format_window_start(window.start)}"


# ---------------------------------------------------------------- window state


def initialise(
    suite: str,
    segment: Mapping[str, str],
    window: WindowKey,
    reservoir_size: int = DEFAULT_RESERVOIR_SIZE,
    worst_k: int = DEFAULT_WORST_K,
) -> State:
    """Empty state of one (suite, segment, window); `reservoir_size` bounds CI samples,
    `worst_k` the worst cases kept per metric (0: none)."""
    return {
        "v": STATE_VERSION,
        "suite": suite,
        "segment": dict(segment),
        "window": window.to_json(),
        "reservoir_size": reservoir_size,
        "count": 0,
        "moments": {},
        "samples": {},
        "label_counts": {},
        "grade_counts": {},
        "suite_state": None,
        "high_water": {},
        "seen_ids": [],
        "worst_k": worst_k,
        "worst": {},
    }


def window_of(state: State) -> WindowKey:
    return WindowKey.from_json(state["window"])


def sample_id(result: CaseResult) -> str:
    """Identity of a result inside its suite: kind and id (a turn and a session differ)."""
    return f"{result.kind}:{result.id}"


def scored_from(result: CaseResult) -> Scored:
    """Rebuild the suite's `Scored` from a published result."""
    return Scored(
        scores=dict(result.scores),
        label=result.label,
        grade=result.grade,
        details=dict(result.details),
        counts=dict(result.counts),
    )


def is_replay(state: State, result: CaseResult) -> bool:
    """Whether `result` was already counted in `state` (see the module docstring)."""
    ident = sample_id(result)
    if result.source is None or result.kind == "session":
        return ident in state["seen_ids"]
    mark = state["high_water"].get(_partition_key(result))
    if mark is None:
        return False
    last_offset, ids_at_last = mark
    offset = result.source.offset
    return offset < last_offset or (offset == last_offset and ident in ids_at_last)


def _partition_key(result: CaseResult) -> str:
    assert result.source is not None
    return f"{result.source.topic}:{result.source.partition}"


def _remember(state: State, result: CaseResult) -> None:
    ident = sample_id(result)
    if result.source is None or result.kind == "session":
        insort(state["seen_ids"], ident)
        return
    key = _partition_key(result)
    offset = result.source.offset
    last_offset, ids_at_last = state["high_water"].get(key, (-1, []))
    if offset > last_offset:
        state["high_water"][key] = [offset, [ident]]
    else:
        state["high_water"][key] = [last_offset, sorted({*ids_at_last, ident})]


def update(
    state: State,
    result: CaseResult,
    aggregator: SuiteAggregator | None,
    scored: Scored | None = None,
) -> tuple[State, bool]:
    """Fold one result into `state` in place and return it; `applied` is False for a replay.

    None and non-finite scores are skipped (the metric is still listed). `aggregator` is
    the suite's `SuiteAggregator` (None: no suite figures); `scored` is
    `scored_from(result)` when the caller has it already (one result, several windows).
    """
    if is_replay(state, result):
        return state, False
    _remember(state, result)
    state["count"] += 1
    ident = sample_id(result)
    key = sample_key(ident)
    capacity = int(state["reservoir_size"])
    worst = state.setdefault("worst", {})
    worst_k = int(state.get("worst_k", DEFAULT_WORST_K))
    all_moments, samples = state["moments"], state["samples"]
    for metric, value in result.scores.items():
        moments = all_moments.get(metric)
        if moments is None:
            moments = all_moments[metric] = Moments().to_json()
        sample = samples.get(metric)
        if sample is None:
            sample = samples[metric] = {"capacity": capacity, "items": {}}
        if value is not None and math.isfinite(value):
            value = float(value)
            _moments_add(moments, value)
            _sample_add(sample, ident, key, value)
            if worst_k > 0:
                _worst_add(worst.setdefault(metric, []), metric, result, value, worst_k)
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


def _sample_add(sample: dict[str, Any], ident: str, key: float, value: float) -> None:
    """`Reservoir.add` for an item of key `key` (`sample_key(ident)`), cheap per case.

    A full sample also keeps `order`, its ids by ascending key, and `cutoff`, the largest
    key (extra fields, ignored by `Reservoir.from_json`): an item above the cutoff is
    skipped at once, one below it replaces the last id in `order`.
    """
    items: dict[str, float] = sample["items"]
    capacity = int(sample["capacity"])
    if ident in items or len(items) < capacity:
        items[ident] = value
        if len(items) >= capacity and "order" not in sample:
            _index_sample(sample)
        return
    if key >= sample["cutoff"]:
        return
    order: list[str] | None = sample.get("order")
    if order is None:
        order = _index_sample(sample)
    del items[order.pop()]
    insort(order, ident, key=sample_key)
    items[ident] = value
    sample["cutoff"] = sample_key(order[-1])


def _index_sample(sample: dict[str, Any]) -> list[str]:
    """Keep the `capacity` smallest keys of a full sample and index them (`order`, `cutoff`)."""
    items: dict[str, float] = sample["items"]
    order = sorted(items, key=sample_key)
    for dropped in order[int(sample["capacity"]) :]:
        del items[dropped]
    order = order[: int(sample["capacity"])]
    sample["order"] = order
    sample["cutoff"] = sample_key(order[-1])
    return order


def _worst_order(metric: str) -> Any:
    """Sort key of worst-case entries of `metric`: worst first, then by id and kind."""
    sign = -1.0 if registry.higher_is_worse(metric) else 1.0

    def order(entry: Sequence[Any]) -> tuple[float, str, str]:
        return (sign * entry[0], entry[1], entry[2])

    return order


def _worst_add(
    entries: list[list[Any]], metric: str, result: CaseResult, value: float, worst_k: int
) -> None:
    """Keep `result` among the `worst_k` worst entries of `metric` if it is one of them."""
    if len(entries) >= worst_k:  # the common case, without building an entry: not worse
        sign = -1.0 if registry.higher_is_worse(metric) else 1.0
        bound = entries[-1]
        mine, theirs = sign * value, sign * bound[0]
        if mine > theirs or (mine == theirs and (result.id, result.kind) >= (bound[1], bound[2])):
            return
    order = _worst_order(metric)
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
    insort(entries, entry, key=order)
    del entries[worst_k:]


def merge_worst(
    left: Mapping[str, list[list[Any]]], right: Mapping[str, list[list[Any]]], worst_k: int
) -> dict[str, list[list[Any]]]:
    """The worst cases of the union of two windows' results, per metric (a case in both
    is kept once)."""
    merged: dict[str, list[list[Any]]] = {}
    for metric in sorted({*left, *right}):
        unique: dict[tuple[str, str], list[Any]] = {}
        for entry in [*left.get(metric, []), *right.get(metric, [])]:
            unique.setdefault((entry[1], entry[2]), list(entry))
        merged[metric] = sorted(unique.values(), key=_worst_order(metric))[:worst_k]
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


def _merge_samples(
    left: dict[str, Any] | None, right: dict[str, Any] | None, capacity: int
) -> dict[str, Any]:
    """`Reservoir.merge` of two samples (the `capacity` smallest keys of the union, the
    right side's value for an id in both), indexed when full (`order`, `cutoff`).

    When one side is full at `capacity` and indexed, its sorted `order` is kept and only
    the other side's ids below its cutoff are inserted: a full window taking in a fold
    looks up a key per id of the fold, not per id of both."""
    sides = [side for side in (left, right) if side is not None]
    items: dict[str, float] = {}
    for side in sides:
        items.update(side["items"])
    if len(items) < capacity:
        return {"capacity": capacity, "items": items}
    # (a side holds at most its own capacity, and `capacity` is the larger of the two)
    full = [side for side in sides if "order" in side and len(side["items"]) >= capacity]
    if full:
        kept = full[0]
        order = list(kept["order"])
        cutoff = kept["cutoff"]
        for side in sides:
            if side is kept:
                continue
            for ident in side.get("order", side["items"]):  # ascending keys, when indexed
                key = sample_key(ident)
                if key > cutoff:
                    if "order" in side:
                        break  # the rest are larger still
                    continue
                if ident not in kept["items"]:
                    insort(order, ident, key=sample_key)
        del order[capacity:]
    else:
        order = sorted(items, key=sample_key)[:capacity]
    return {
        "capacity": capacity,
        "items": {ident: items[ident] for ident in order},
        "order": order,
        "cutoff": sample_key(order[-1]),
    }


def _add_counts(left: Mapping[str, int], right: Mapping[str, int]) -> dict[str, int]:
    return {key: left.get(key, 0) + right.get(key, 0) for key in sorted({*left, *right})}


def _merge_high_water(left: Mapping[str, Any], right: Mapping[str, Any]) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for key in sorted({*left, *right}):
        marks = [mark for mark in (left.get(key), right.get(key)) if mark is not None]
        top = max(mark[0] for mark in marks)
        ids = sorted({ident for offset, idents in marks if offset == top for ident in idents})
        merged[key] = [top, ids]
    return merged


def _check_mergeable(left: State, right: State) -> None:
    if (left["suite"], left["segment"], left["window"]) != (
        right["suite"],
        right["segment"],
        right["window"],
    ):
        raise ValueError("cannot merge the states of different windows or segments")


def merge(left: State, right: State, aggregator: SuiteAggregator | None) -> State:
    """State of the union of two disjoint sets of results of the same window."""
    _check_mergeable(left, right)
    moments = {}
    samples = {}
    capacity = max(int(left["reservoir_size"]), int(right["reservoir_size"]))
    worst_k = max(
        int(left.get("worst_k", DEFAULT_WORST_K)), int(right.get("worst_k", DEFAULT_WORST_K))
    )
    for metric in sorted({*left["moments"], *right["moments"]}):
        moments[metric] = (
            Moments.from_json(left["moments"].get(metric, Moments().to_json()))
            .merge(Moments.from_json(right["moments"].get(metric, Moments().to_json())))
            .to_json()
        )
        samples[metric] = _merge_samples(
            left["samples"].get(metric), right["samples"].get(metric), capacity
        )
    left_suite, right_suite = left["suite_state"], right["suite_state"]
    if left_suite is None or right_suite is None:
        suite_state = copy.deepcopy(left_suite if right_suite is None else right_suite)
    elif aggregator is None:
        raise ValueError("merging suite states needs the suite's aggregator")
    else:
        suite_state = aggregator.merge(left_suite, right_suite)
    return {
        "v": STATE_VERSION,
        "suite": left["suite"],
        "segment": dict(left["segment"]),
        "window": list(left["window"]),
        "reservoir_size": capacity,
        "count": left["count"] + right["count"],
        "moments": moments,
        "samples": samples,
        "label_counts": _add_counts(left["label_counts"], right["label_counts"]),
        "grade_counts": _add_counts(left["grade_counts"], right["grade_counts"]),
        "suite_state": suite_state,
        "high_water": _merge_high_water(left["high_water"], right["high_water"]),
        "seen_ids": sorted({*left["seen_ids"], *right["seen_ids"]}),
        "worst_k": worst_k,
        "worst": merge_worst(left.get("worst", {}), right.get("worst", {}), worst_k),
    }


def merge_into(target: State, other: State, aggregator: SuiteAggregator | None) -> State:
    """`merge(target, other, aggregator)` written into `target`, which is returned.

    For a caller that owns `target` and replaces it with the merge (the window store
    taking a fold into a pane, or adding up a window's panes): the samples are merged in
    place instead of copied. `other` is left as it was and shares nothing with the result.
    """
    _check_mergeable(target, other)
    capacity = max(int(target["reservoir_size"]), int(other["reservoir_size"]))
    worst_k = max(
        int(target.get("worst_k", DEFAULT_WORST_K)), int(other.get("worst_k", DEFAULT_WORST_K))
    )
    moments, samples = target["moments"], target["samples"]
    for metric in {*moments, *other["moments"]}:
        theirs = other["moments"].get(metric)
        mine = moments.get(metric)
        if mine is None or theirs is None:
            moments[metric] = Moments.from_json(mine or theirs).to_json()
        else:
            _moments_merge(mine, theirs)
        samples[metric] = _merge_samples_into(
            samples.get(metric), other["samples"].get(metric), capacity
        )
    mine_suite, their_suite = target["suite_state"], other["suite_state"]
    if mine_suite is None or their_suite is None:
        target["suite_state"] = copy.deepcopy(mine_suite if their_suite is None else their_suite)
    elif aggregator is None:
        raise ValueError("merging suite states needs the suite's aggregator")
    else:
        target["suite_state"] = aggregator.merge(mine_suite, their_suite)
    target["v"] = STATE_VERSION
    target["reservoir_size"] = capacity
    target["count"] += other["count"]
    target["label_counts"] = _add_counts(target["label_counts"], other["label_counts"])
    target["grade_counts"] = _add_counts(target["grade_counts"], other["grade_counts"])
    target["high_water"] = _merge_high_water(target["high_water"], other["high_water"])
    target["seen_ids"] = sorted({*target["seen_ids"], *other["seen_ids"]})
    target["worst_k"] = worst_k
    target["worst"] = merge_worst(target.get("worst", {}), other.get("worst", {}), worst_k)
    return target


def _moments_merge(moments: list[Any], other: Sequence[Any]) -> None:
    """`Moments.merge` on the state's JSON lists, into `moments`."""
    moments[0] = int(moments[0]) + int(other[0])
    moments[1] = float(moments[1]) + float(other[1])
    moments[2] = float(moments[2]) + float(other[2])
    for index, pick in ((3, min), (4, max)):
        values = [value for value in (moments[index], other[index]) if value is not None]
        moments[index] = pick(values) if values else None


def _merge_samples_into(
    sample: dict[str, Any] | None, other: dict[str, Any] | None, capacity: int
) -> dict[str, Any]:
    """`_merge_samples(sample, other, capacity)`, written into `sample` when there is one."""
    if sample is None:
        return _merge_samples(None, other, capacity)
    items: dict[str, float] = sample["items"]
    sample["capacity"] = capacity
    if other is not None and "order" in sample and len(items) >= capacity:
        # Full and indexed: only the other side's ids below the cutoff can get in.
        order: list[str] = sample["order"]
        cutoff = sample["cutoff"]
        indexed = "order" in other
        for ident in other.get("order", other["items"]):  # ascending keys, when indexed
            if sample_key(ident) > cutoff:
                if indexed:
                    break  # the rest are larger still
                continue
            if ident not in items:
                insort(order, ident, key=sample_key)
            items[ident] = other["items"][ident]  # the other side's value, as `merge`
        for dropped in order[capacity:]:
            del items[dropped]
        del order[capacity:]
        sample["cutoff"] = sample_key(order[-1])
        return sample
    if other is not None:
        items.update(other["items"])
    if len(items) < capacity:
        sample.pop("order", None)
        sample.pop("cutoff", None)
    else:
        _index_sample(sample)
    return sample


# ---------------------------------------------------------------- the wire message


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
    validated by the suite's figures model. `confidence_intervals=False` skips the
    bootstrap (cheaper for frequent interim emissions). A final aggregate lists the worst
    cases of the suite's headline metrics and of `worst_metrics` (those with values in the
    window).
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


__all__ = [
    "ALL_CASES",
    "DEFAULT_RESERVOIR_SIZE",
    "DEFAULT_WORST_K",
    "aggregate_key",
    "drilldown_metrics",
    "format_window_start",
    "initialise",
    "is_replay",
    "merge",
    "merge_into",
    "merge_worst",
    "metric_summary",
    "pass_rate",
    "sample_id",
    "scored_from",
    "segment_key",
    "segments_for",
    "to_message",
    "update",
    "window_of",
    "worst_cases",
]
