"""The window state of the aggregation stage: progress, admission, dedupe, emission, expiry.

Pure: no Faust, no Kafka, no clock. The store works over plain mutable mappings (Faust
tables in production, dicts in tests), one stage partition at a time; everything it keeps
is in those mappings except caches it can rebuild (`forget` drops them after a rebalance).

- `add` counts a result into the open windows of its event time. A window is closed once
  the partition's watermark (the minimum progress over its upstream channels, see
  `worker.eventtime`) reached `end + grace`; a result for a closed window is late: it
  changes no aggregate. A replay (same case, same time, already counted) is skipped.
- `advance` takes a watermark marker; the windows it closes come back as final
  emissions, oldest end first, and their state is deleted, so each closes exactly once.
- `pending` returns the interim state of windows changed since they were last emitted.

Mapping layout: `windows[aggregate key] = {"state": window state, "partition": p}`;
`seen["{suite}|{segment}|{kind}:{id}"] = [event time, p]`; `progress["agg|{p}"]` is the
partition's `Watermark`.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

from schemas.outputs import CaseResult
from worker import aggregation
from worker.config import WindowConfig
from worker.eventtime import Marker, Watermark
from worker.suites.base import State, SuiteAggregator
from worker.windows import WindowKey, assign_windows

SEEN_PURGE_EVERY = 30  # watermark advances of a partition between purges of `seen`


@dataclass(frozen=True)
class Admission:
    """What `add` did with a result."""

    counted: int = 0  # windows it was counted into
    late: bool = False  # at least one of its windows was already closed
    replay: bool = False  # already counted: nothing changed


@dataclass(frozen=True)
class Emission:
    """A window's state to publish: interim (`final` False) or final."""

    key: str  # the aggregate's Kafka key
    state: State
    final: bool

    @property
    def window(self) -> WindowKey:
        return aggregation.window_of(self.state)


class WindowStore:
    """Windowed aggregates of one worker's aggregation partitions over plain mappings."""

    def __init__(
        self,
        windows: MutableMapping[str, Any],
        seen: MutableMapping[str, Any],
        progress: MutableMapping[str, Any],
        *,
        configs: list[WindowConfig],
        grace: float,
        aggregators: Mapping[str, SuiteAggregator],
        reservoir_size: int = aggregation.DEFAULT_RESERVOIR_SIZE,
        dedupe_horizon: float = 7200.0,
        channel_groups: Mapping[str, int] | None = None,
    ) -> None:
        self.windows = windows
        self.seen = seen
        self.progress = progress
        self.configs = list(configs)
        self.grace = grace
        self.aggregators = aggregators
        self.reservoir_size = reservoir_size
        self.dedupe_horizon = dedupe_horizon
        self.channel_groups = dict(channel_groups or {})
        self._watermarks: dict[int, Watermark] = {}
        self._open: dict[int, set[str]] = {}
        self._dirty: set[str] = set()
        self._advances: dict[int, int] = {}

    # ---------------------------------------------------------------- progress

    def watermark(self, partition: int) -> Watermark:
        """The partition's watermark (restored from `progress` on first use)."""
        watermark = self._watermarks.get(partition)
        if watermark is None:
            watermark = Watermark.from_json(self.progress.get(_progress_key(partition)))
            for group, count in self.channel_groups.items():
                watermark.expect(group, count)
            self._watermarks[partition] = watermark
        return watermark

    def is_closed(self, partition: int, window: WindowKey) -> bool:
        return self.watermark(partition).has_passed(window.end + self.grace)

    def forget(self) -> None:
        """Drop caches (after a rebalance another worker may have moved the state)."""
        self._watermarks.clear()
        self._open.clear()
        self._dirty.clear()

    # ---------------------------------------------------------------- admission

    def add(self, partition: int, result: CaseResult, segment: Mapping[str, str]) -> Admission:
        """Count `result` into its open windows for `segment`."""
        event_time = result.ts.timestamp()
        seen_key = _seen_key(result, segment)
        seen = self.seen.get(seen_key)
        if seen is not None and seen[0] == event_time:
            return Admission(replay=True)
        keys = assign_windows(event_time, self.configs)
        open_windows = [window for window in keys if not self.is_closed(partition, window)]
        aggregator = self.aggregators.get(result.suite)
        index = self._index(partition)
        counted = 0
        for window in open_windows:
            key = aggregation.aggregate_key(result.suite, segment, window)
            stored = self.windows.get(key)
            state = (
                stored["state"]
                if stored
                else aggregation.initialise(result.suite, segment, window, self.reservoir_size)
            )
            state, applied = aggregation.update(state, result, aggregator)
            if applied:
                self.windows[key] = {"state": state, "partition": partition}
                index.add(key)
                self._dirty.add(key)
                counted += 1
        self.seen[seen_key] = [event_time, partition]
        return Admission(counted=counted, late=len(open_windows) < len(keys))

    # ---------------------------------------------------------------- emission

    def advance(self, partition: int, marker: Marker) -> list[Emission]:
        """Apply a watermark marker; the windows it closes, as final emissions."""
        watermark = self.watermark(partition)
        before = watermark.to_json()
        moved = watermark.observe(marker)
        if watermark.to_json() != before:
            self.progress[_progress_key(partition)] = watermark.to_json()
        if not moved:
            return []
        self._advances[partition] = self._advances.get(partition, 0) + 1
        if self._advances[partition] % SEEN_PURGE_EVERY == 0:
            self._purge_seen(partition, watermark)
        return self._close_due(partition)

    def pending(self, partition: int) -> list[Emission]:
        """Interim emissions of the partition's windows changed since last emitted."""
        emissions = []
        for key in sorted(self._index(partition) & self._dirty):
            stored = self.windows.get(key)
            if stored is not None:
                emissions.append(Emission(key, stored["state"], final=False))
            self._dirty.discard(key)
        return emissions

    def open_windows(self, partition: int) -> list[WindowKey]:
        """The partition's open windows (for inspection and tests)."""
        return sorted(
            (aggregation.window_of(self.windows[key]["state"]) for key in self._index(partition)),
            key=WindowKey.sort_key,
        )

    def _close_due(self, partition: int) -> list[Emission]:
        index = self._index(partition)
        closing = []
        for key in index:
            state = self.windows[key]["state"]
            window = aggregation.window_of(state)
            if self.is_closed(partition, window):
                closing.append((window.end, key, state))
        closing.sort(key=lambda item: (item[0], item[1]))
        emissions = []
        for _end, key, state in closing:
            del self.windows[key]
            index.discard(key)
            self._dirty.discard(key)
            emissions.append(Emission(key, state, final=True))
        return emissions

    def _index(self, partition: int) -> set[str]:
        """Keys of the partition's open windows, read from the mapping once."""
        index = self._open.get(partition)
        if index is None:
            index = {
                key
                for key, stored in self.windows.items()
                if isinstance(stored, dict) and stored.get("partition") == partition
            }
            self._open[partition] = index
        return index

    # ---------------------------------------------------------------- expiry

    def _purge_seen(self, partition: int, watermark: Watermark) -> None:
        """Forget case ids far behind the watermark: replays come within minutes, and
        windows that old are closed anyway."""
        current = watermark.value()
        if current is None:
            return
        largest = max((float(config.size) for config in self.configs), default=0.0)
        oldest_kept = current - largest - self.grace - self.dedupe_horizon
        for key, (event_time, owner) in list(self.seen.items()):
            if owner == partition and event_time < oldest_kept:
                del self.seen[key]


def _progress_key(partition: int) -> str:
    return f"agg|{partition}"


def _seen_key(result: CaseResult, segment: Mapping[str, str]) -> str:
    return f"{result.suite}|{aggregation.segment_key(segment)}|{aggregation.sample_id(result)}"


__all__ = ["SEEN_PURGE_EVERY", "Admission", "Emission", "WindowStore"]
