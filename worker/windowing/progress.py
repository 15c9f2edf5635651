"""Event-time progress of a stage's partitions, kept in a table: restore, observe, persist.

One `ProgressTable` per stage (the session stage and the window stage each have one): a
partition's `Watermark` is restored from the table on first use (with the channels it must
hear from), moved by the markers it observes, and written back at `flush`, so a stage that
writes its other state at the end of a micro-batch writes its progress with it. `forget`
drops the cache (after a rebalance the table has the truth) and anything not flushed.
Pure: the table is any mutable mapping (a Faust table in production, a dict in tests).
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from typing import Any

from worker.windowing.watermark import Marker, Watermark


class ProgressTable:
    """Watermarks of one stage's partitions over `table`, under keys `{prefix}|{p}`."""

    def __init__(
        self, table: MutableMapping[str, Any], prefix: str, channel_groups: Mapping[str, int]
    ) -> None:
        self.table = table
        self.prefix = prefix
        self.channel_groups = dict(channel_groups)  # group -> channel count (0: unknown)
        self._watermarks: dict[int, Watermark] = {}
        self._pending: dict[int, Any] = {}  # partition -> watermark to write at the flush

    def key(self, partition: int) -> str:
        return f"{self.prefix}|{partition}"

    def watermark(self, partition: int) -> Watermark:
        """The partition's watermark (restored from the table on first use)."""
        watermark = self._watermarks.get(partition)
        if watermark is None:
            watermark = Watermark.from_json(self.table.get(self.key(partition)))
            for group, count in self.channel_groups.items():
                watermark.expect(group, count)
            self._watermarks[partition] = watermark
        return watermark

    def value(self, partition: int) -> float | None:
        """The partition's watermark value (None until every channel reported)."""
        return self.watermark(partition).value()

    def observe(self, partition: int, marker: Marker) -> bool:
        """Take a marker; whether the watermark moved. A change is written at `flush`."""
        watermark = self.watermark(partition)
        before = watermark.to_json()
        moved = watermark.observe(marker)
        after = watermark.to_json()
        if after != before:
            self._pending[partition] = after
        return moved

    def pending_partitions(self) -> set[int]:
        return set(self._pending)

    def flush(self, partition: int | None = None) -> int:
        """Write the changed watermarks (of `partition`, or all); how many."""
        written = 0
        for owner, value in list(self._pending.items()):
            if partition is not None and owner != partition:
                continue
            self.table[self.key(owner)] = value
            del self._pending[owner]
            written += 1
        return written

    def forget(self) -> None:
        """Drop the cache and unwritten changes (their input was not acknowledged)."""
        self._watermarks.clear()
        self._pending.clear()
