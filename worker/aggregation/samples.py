"""The per-metric value samples behind a window's bootstrap CI, kept as JSON in the state.

A sample is `{"capacity": int, "items": {sample_id: value}}`: a `worker.stats.Reservoir`
(the `capacity` ids of smallest `sample_key`), updated here on its JSON form so a case
costs no object per metric. A full sample also keeps `order`, its ids by ascending key,
and `cutoff`, the largest key (extra fields, ignored by `Reservoir.from_json`): an item
above the cutoff is skipped at once, one below it replaces the last id in `order`. That
index is derived from `items`: `without_index` leaves it out of what is written to a
changelog, and a full sample read back without it is indexed again on its next update.
Pure.
"""

from __future__ import annotations

from bisect import insort
from collections.abc import Iterable
from typing import Any

from worker.stats import sample_key

Sample = dict[str, Any]


def empty_sample(capacity: int) -> Sample:
    return {"capacity": capacity, "items": {}}


def add(sample: Sample, ident: str, key: float, value: float) -> None:
    """`Reservoir.add` of an item of key `key` (`sample_key(ident)`), in place."""
    items: dict[str, float] = sample["items"]
    capacity = int(sample["capacity"])
    if ident in items or len(items) < capacity:
        items[ident] = value
        if len(items) >= capacity and "order" not in sample:
            _index(sample)
        return
    order: list[str] | None = sample.get("order")
    if order is None:  # full, read back without its index
        order = _index(sample)
    if key >= sample["cutoff"]:
        return
    del items[order.pop()]
    insort(order, ident, key=sample_key)
    items[ident] = value
    sample["cutoff"] = sample_key(order[-1])


def without_index(sample: Sample) -> Sample:
    """`sample` without its derived index (`order`, `cutoff`), for writing: the same
    reservoir in about 40 % fewer bytes. Shares `items` with `sample`."""
    if "order" not in sample:
        return sample
    return {"capacity": sample["capacity"], "items": sample["items"]}


def _index(sample: Sample) -> list[str]:
    """Keep the `capacity` smallest keys of a full sample and index them (`order`, `cutoff`)."""
    items: dict[str, float] = sample["items"]
    order = sorted(items, key=sample_key)
    for dropped in order[int(sample["capacity"]) :]:
        del items[dropped]
    order = order[: int(sample["capacity"])]
    sample["order"] = order
    sample["cutoff"] = sample_key(order[-1])
    return order


def merge_into(sample: Sample | None, other: Sample | None, capacity: int) -> Sample:
    """`Reservoir.merge` of two samples (the `capacity` smallest keys of the union, the
    other side's value for an id in both), written into `sample` when there is one.

    When `sample` is full and indexed, only the other side's ids below its cutoff are
    looked at: a full window taking in a small fold costs a key per id of the fold. The
    result shares nothing with `other`.
    """
    if sample is None:
        sample = empty_sample(capacity)
    items: dict[str, float] = sample["items"]
    sample["capacity"] = capacity
    if other is not None and "order" in sample and len(items) >= capacity:
        order: list[str] = sample["order"]
        cutoff = sample["cutoff"]
        indexed = "order" in other
        ids: Iterable[str] = other["order"] if indexed else other["items"]  # indexed: sorted
        for ident in ids:
            if sample_key(ident) > cutoff:
                if indexed:
                    break  # the rest are larger still
                continue
            if ident not in items:
                insort(order, ident, key=sample_key)
            items[ident] = other["items"][ident]
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
        _index(sample)
    return sample
