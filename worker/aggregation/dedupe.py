"""Which results a window state has already counted: replays are never counted twice.

A result with a `source` is a replay when its input offset is below the high water of its
input partition, or equal to it with an id already counted at that offset (one input
record can yield several results: a whole alignment session gives one result per turn).
Session results and results without a source are checked by id instead (sessions close on
timers, out of offset order). Pure; works on the state's `high_water` and `seen_ids`.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterable, Mapping
from typing import Any

from worker.input.result_facts import ResultView
from worker.suites.base import State


def sample_id(result: ResultView) -> str:
    """Identity of a result inside its suite: kind and id (a turn and a session differ)."""
    return f"{result.kind}:{result.id}"


def _checked_by_id(result: ResultView) -> bool:
    return result.source is None or result.kind == "session"


def _partition_key(result: ResultView) -> str:
    assert result.source is not None
    return f"{result.source.topic}:{result.source.partition}"


def is_replay(state: State, result: ResultView) -> bool:
    """Whether `result` was already counted in `state`."""
    ident = sample_id(result)
    if _checked_by_id(result):
        return _in_sorted(state["seen_ids"], ident)
    mark = state["high_water"].get(_partition_key(result))
    if mark is None:
        return False
    last_offset, ids_at_last = mark
    offset = result.source.offset  # type: ignore[union-attr]
    return offset < last_offset or (offset == last_offset and ident in ids_at_last)


def _in_sorted(items: list[str], item: str) -> bool:
    """Whether `item` is in the sorted `items` (a binary search: a window of an hour
    holds the ids of all its sessions, and `in` read them one by one for each result)."""
    at = bisect_left(items, item)
    return at < len(items) and items[at] == item


def remember(state: State, result: ResultView) -> None:
    """Record in `state` that `result` is counted (in place)."""
    ident = sample_id(result)
    if _checked_by_id(result):
        insort(state["seen_ids"], ident)
        return
    key = _partition_key(result)
    offset = result.source.offset  # type: ignore[union-attr]
    last_offset, ids_at_last = state["high_water"].get(key, (-1, []))
    if offset > last_offset:
        state["high_water"][key] = [offset, [ident]]
    else:
        state["high_water"][key] = [last_offset, sorted({*ids_at_last, ident})]


def merge_high_water(left: Mapping[str, Any], right: Mapping[str, Any]) -> dict[str, Any]:
    """The high water of two states' union, per input partition."""
    merged: dict[str, Any] = {}
    for key in sorted({*left, *right}):
        marks = [mark for mark in (left.get(key), right.get(key)) if mark is not None]
        top = max(mark[0] for mark in marks)
        ids = sorted({ident for offset, idents in marks if offset == top for ident in idents})
        merged[key] = [top, ids]
    return merged


def merge_seen_ids(left: Iterable[str], right: Iterable[str]) -> list[str]:
    """The ids counted by either state, sorted."""
    return sorted({*left, *right})


# Offset marks: the window store's dedupe of folds into panes and series. Contributions
# from one input partition reach a pane in offset order, so the highest input offset
# counted per input partition (`{"topic:partition": offset}`) tells a re-read fold.


def offset_source(result: ResultView) -> str | None:
    """The input partition whose offsets order `result`; None when it has none (session
    results and results without a source are deduplicated by id)."""
    return None if _checked_by_id(result) else _partition_key(result)


def offset_taken(marks: Mapping[str, int], source: str | None, offset: int) -> bool:
    """Whether the input record at `offset` of `source` is at or below `marks` (already
    counted: offsets reach a pane and a series in order per input partition)."""
    if source is None:
        return False
    mark = marks.get(source)
    return mark is not None and offset <= mark


def offsets_cover(marks: Mapping[str, int], span: Mapping[str, int]) -> bool:
    """Whether `marks` has taken every offset of a fold's `span` (its last offset per
    input partition)."""
    return bool(span) and all(marks.get(source, -1) >= last for source, last in span.items())


def mark_offset(marks: dict[str, int], source: str | None, offset: int) -> None:
    """Record in `marks` that `source` is counted up to `offset` (in place)."""
    if source is not None:
        marks[source] = max(marks.get(source, -1), offset)
