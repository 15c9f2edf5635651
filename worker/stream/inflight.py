"""Poison-pill protection: durable marks of the input offsets being processed.

Pure: works over a mapping (a table co-partitioned with the input in production, a dict
in tests); the caller makes the marks durable (waits for the broker to acknowledge them)
before it processes anything.

A micro-batch marks its offset range per input partition before it starts and as done
when it ends: one or two writes per batch. When a batch overlaps a range that was marked
and never done, the worker died inside it, so that partition is processed record by
record, each record marked first. A record whose own attempts exceed the limit (the
worker died that often while processing it) is a poison pill: dead-lettered, not retried.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any


class InflightGuard:
    """Marks `{key: {"first", "last", "attempts", "done"}}`, one key per input partition."""

    def __init__(self, marks: MutableMapping[str, Any], limit: int) -> None:
        self.marks = marks
        self.limit = limit
        self.suspect: dict[str, dict[str, Any]] = {}  # the unfinished range found, per key

    def begin_batch(self, key: str, first: int, last: int) -> bool:
        """Mark `[first, last]` in flight; True (and nothing marked) when it overlaps an
        unfinished range: the caller then goes record by record (`begin_record`)."""
        mark = self.marks.get(key)
        if isinstance(mark, dict) and _overlaps(mark, first, last):
            self.suspect[key] = dict(mark)
            return True
        self.suspect.pop(key, None)
        self.marks[key] = {"first": first, "last": last, "attempts": 1, "done": False}
        return False

    def is_suspect(self, key: str, offset: int) -> bool:
        """Whether `offset` lies in the range the worker died in (after `begin_batch`)."""
        crashed = self.suspect.get(key)
        return crashed is not None and crashed["first"] <= offset <= crashed["last"]

    def begin_record(self, key: str, offset: int) -> int:
        """Mark one record in flight; its attempt number (this one included). Above
        `limit`, the record is a poison pill and is marked done instead."""
        attempts = 1
        crashed = self.suspect.get(key)
        if crashed is not None and crashed["first"] <= offset <= crashed["last"]:
            attempts = int(crashed["attempts"]) + 1
        done = attempts > self.limit
        self.marks[key] = {"first": offset, "last": offset, "attempts": attempts, "done": done}
        return attempts

    def end(self, key: str) -> None:
        """The batch (or record) of `key` finished."""
        mark = self.marks.get(key)
        if isinstance(mark, dict) and _unfinished(mark):
            self.marks[key] = {**mark, "done": True}


def _unfinished(mark: Any) -> bool:
    return isinstance(mark, dict) and not mark.get("done", True) and "first" in mark


def _overlaps(mark: Any, first: int, last: int) -> bool:
    """Whether `mark` is an unfinished range that overlaps `[first, last]`."""
    return _unfinished(mark) and mark["first"] <= last and first <= mark["last"]


__all__ = ["InflightGuard"]
