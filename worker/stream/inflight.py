"""Poison-pill protection: durable marks of the input offsets being processed.

Pure: works over a mapping (a table co-partitioned with the input in production, a dict
in tests); the caller makes the marks durable (waits for the broker to acknowledge them)
before it processes anything.

A micro-batch marks its offset range per input partition before it starts and as done
when it ends: one or two writes per batch. A batch may begin while batches before it
still finish (`worker/stream/overlap.py`): the mark then covers all their ranges until
the earliest ends, so a crash while any of them runs sends them all record by record. When a
batch overlaps a range that was marked and never done, the worker died inside it, so
that partition is processed record by record, each record marked first. A record whose
own attempts exceed the limit (the worker died that often while processing it) is a
poison pill: dead-lettered, not retried.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any


class InflightGuard:
    """Marks `{key: {"first", "last", "attempts", "done", "reached", "ahead"?}}`, one key per
    input partition (`ahead`: an unfinished range not reached yet, see `begin_batch`;
    `reached`: see `reached`)."""

    def __init__(self, marks: MutableMapping[str, Any], limit: int) -> None:
        self.marks = marks
        self.limit = limit
        self.suspect: dict[str, list[dict[str, Any]]] = {}  # unfinished ranges found, per key
        # Ranges this guard began as batches and not ended yet, per key, oldest first.
        self.open: dict[str, list[tuple[int, int]]] = {}

    def begin_batch(self, key: str, first: int, last: int) -> bool:
        """Mark `[first, last]` in flight; True (and nothing marked) when it overlaps an
        unfinished range: the caller then goes record by record (`begin_record`). An
        unfinished range the batch ends before (a replay can start behind it) is kept in
        the new mark as `ahead`, so reaching it later still goes record by record. While
        batches this guard began are not ended, the mark is theirs (not a crash) and
        covers them too."""
        before = self.marks.get(key)
        own = self.open.get(key, [])
        crashed = _ahead_range(before) if own else _unfinished_ranges(before)
        if any(found["first"] <= last and first <= found["last"] for found in crashed):
            self.suspect[key] = crashed
            return True
        self.suspect.pop(key, None)
        own.append((first, last))
        self.open[key] = own
        start, end = min(begun for begun, _ in own), max(ended for _, ended in own)
        mark = {"first": start, "last": end, "attempts": 1, "done": False}
        self.marks[key] = _with_reached(_with_ahead(mark, crashed), before)
        return False

    def is_suspect(self, key: str, offset: int) -> bool:
        """Whether `offset` lies in a range the worker died in (after `begin_batch`)."""
        return _containing(self.suspect.get(key, []), offset) is not None

    def begin_record(self, key: str, offset: int) -> int:
        """Mark one record in flight; its attempt number (this one included). Above
        `limit`, the record is a poison pill and is marked done instead."""
        crashed = self.suspect.get(key, [])
        found = _containing(crashed, offset)
        attempts = 1 if found is None else int(found["attempts"]) + 1
        done = attempts > self.limit
        mark = {"first": offset, "last": offset, "attempts": attempts, "done": done}
        self.marks[key] = _with_reached(_with_ahead(mark, crashed), self.marks.get(key))
        return attempts

    def reached(self, key: str) -> int | None:
        """The highest offset of `key` any batch or record was ever begun at (None: no mark,
        nothing begun under the guard). It never moves back: a replay record by record
        behind a batch that died keeps the batch's end."""
        return _reached(self.marks.get(key))

    def end(self, key: str) -> None:
        """The batch (or record) of `key` begun first and not ended yet finished; the
        mark keeps the ranges of later batches still open."""
        own = self.open.get(key, [])
        if own:
            own.pop(0)
        mark = self.marks.get(key)
        if own and isinstance(mark, dict):
            start = min(begun for begun, _ in own)
            self.marks[key] = {**mark, "first": start, "last": max(e for _, e in own)}
            return
        self.open.pop(key, None)
        if isinstance(mark, dict) and _unfinished(mark):
            self.marks[key] = {**mark, "done": True}


def _unfinished(mark: Any) -> bool:
    return isinstance(mark, dict) and not mark.get("done", True) and "first" in mark


def _unfinished_ranges(mark: Any) -> list[dict[str, Any]]:
    """The ranges a mark says the worker died in: its own when unfinished, and the one
    it keeps `ahead` of the reader."""
    found = []
    if _unfinished(mark):
        found.append({name: mark[name] for name in ("first", "last", "attempts")})
    if isinstance(mark, dict) and isinstance(mark.get("ahead"), dict):
        found.append(dict(mark["ahead"]))
    return found


def _ahead_range(mark: Any) -> list[dict[str, Any]]:
    """The crashed range a mark keeps `ahead` of the reader (none: an empty list)."""
    if isinstance(mark, dict) and isinstance(mark.get("ahead"), dict):
        return [dict(mark["ahead"])]
    return []


def _containing(ranges: list[dict[str, Any]], offset: int) -> dict[str, Any] | None:
    return next((found for found in ranges if found["first"] <= offset <= found["last"]), None)


def _reached(mark: Any) -> int | None:
    """A mark's `reached` (older marks without it: the furthest range they hold)."""
    if not isinstance(mark, dict) or "last" not in mark:
        return None
    offsets = [int(mark["last"]), int(mark.get("reached", -1))]
    if isinstance(mark.get("ahead"), dict):
        offsets.append(int(mark["ahead"]["last"]))
    return max(offsets)


def _with_reached(mark: dict[str, Any], before: Any) -> dict[str, Any]:
    """`mark` with `reached`: the furthest of its own range and the mark it replaces."""
    reached = _reached(before)
    mark["reached"] = max(int(mark["last"]), -1 if reached is None else reached)
    return mark


def _with_ahead(mark: dict[str, Any], crashed: list[dict[str, Any]]) -> dict[str, Any]:
    """`mark`, keeping the nearest crashed range that lies beyond it as `ahead`."""
    ahead = [found for found in crashed if found["first"] > mark["last"]]
    if ahead:
        mark["ahead"] = min(ahead, key=lambda found: int(found["first"]))
    return mark


__all__ = ["InflightGuard"]
