"""Which sessions a partition's watermark has reached, without reading every session.

A session stage closes a session once its partition's watermark passes the session's
latest turn by the idle timeout, and forgets a closed session's tombstone as long after
it closed (`SessionWindows`). Reading the whole session table for that at every
watermark step costs the open sessions' count each time; `SessionDeadlines` keeps, per
partition, the sessions ordered by the watermark they wait for (a heap each of open
sessions by latest turn and of tombstones by closing time) and hands out only those
whose current entry that watermark reached, each once, in that order.

Every write of a session entry is noted (`note`); an entry superseded later stays in
its heap until the watermark reaches it and is dropped then (the table's entry no
longer matches it). After a rebalance (`forget`), and when a heap has grown to more
than twice the entries it was built from (a watermark that stood still while sessions
were written), a partition's heaps are built again from the table at its next `due`.
Pure: no I/O, no clock."""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from typing import Any

from worker.windowing.event_time import SessionWindows

# A partition's heaps are rebuilt once they hold more than twice what they were built
# from, and this many entries more.
REBUILD_SLACK = 4096


class _Heaps:
    """One partition's open sessions (by latest turn) and tombstones (by closing time)."""

    def __init__(self) -> None:
        self.open: list[tuple[float, str]] = []
        self.closed: list[tuple[float, str]] = []
        self.limit = REBUILD_SLACK

    def push(self, session_id: str, entry: Mapping[str, Any]) -> None:
        if entry.get("closed"):
            heapq.heappush(self.closed, (float(entry["at"]), session_id))
        else:
            heapq.heappush(self.open, (float(entry["ts"]), session_id))

    def __len__(self) -> int:
        return len(self.open) + len(self.closed)


class SessionDeadlines:
    """Per partition, the sessions in the order the session windows act on them."""

    def __init__(self, rule: SessionWindows) -> None:
        self.rule = rule
        self._partitions: dict[int, _Heaps] = {}

    def note(self, session_id: str, entry: Mapping[str, Any]) -> None:
        """A session's entry was written (open state or a closed session's tombstone)."""
        heaps = self._partitions.get(int(entry["partition"]))
        if heaps is None:  # built from the table when it is next needed
            return
        heaps.push(session_id, entry)
        if len(heaps) > heaps.limit:
            del self._partitions[int(entry["partition"])]

    def forget(self) -> None:
        """Build every partition's heaps from the table again (after a rebalance)."""
        self._partitions.clear()

    def due(
        self, partition: int, watermark: float, table: Mapping[str, Any]
    ) -> list[tuple[str, dict[str, Any]]]:
        """The sessions of `partition` whose entry in `table` `watermark` reached, with
        that entry: open sessions that closed idle (oldest latest turn first), then
        tombstones that may be dropped (oldest first), as the table holds them now."""
        heaps = self._partitions.get(partition)
        if heaps is None:
            heaps = self._partitions[partition] = self._build(partition, table)
        rule = self.rule
        reached: dict[str, dict[str, Any]] = {}  # an entry written twice is in a heap twice
        while heaps.open and rule.idle_close(heaps.open[0][0], watermark) is not None:
            ts, session_id = heapq.heappop(heaps.open)
            entry = _entry(table, session_id, partition)
            if entry is not None and not entry.get("closed") and entry["ts"] == ts:
                reached[session_id] = entry
        while heaps.closed and rule.tombstone_expired(heaps.closed[0][0], watermark):
            at, session_id = heapq.heappop(heaps.closed)
            entry = _entry(table, session_id, partition)
            if entry is not None and entry.get("closed") and entry["at"] == at:
                reached[session_id] = entry
        return list(reached.items())

    @staticmethod
    def _build(partition: int, table: Mapping[str, Any]) -> _Heaps:
        heaps = _Heaps()
        for session_id, entry in table.items():
            if isinstance(entry, dict) and entry.get("partition") == partition:
                heaps.push(session_id, entry)
        heaps.limit = 2 * len(heaps) + REBUILD_SLACK
        return heaps


def _entry(table: Mapping[str, Any], session_id: str, partition: int) -> dict[str, Any] | None:
    """The table's entry for a session of `partition`, if it has one."""
    entry = table.get(session_id)
    return entry if isinstance(entry, dict) and entry.get("partition") == partition else None


__all__ = ["REBUILD_SLACK", "SessionDeadlines"]
