"""The window state of the aggregation stage: progress, admission, dedupe, emission, expiry.

Pure: no Faust, no Kafka, no clock. The store works over plain mutable mappings (Faust
tables in production, dicts in tests), one stage partition at a time.

- **Panes.** Every window configuration is cut into step-sized panes (a tumbling window is
  one pane). A result updates one pane per configuration and segment, whatever the hop
  count; a window's aggregate is the merge of its panes when it is emitted.
- **Admission.** `add` counts a result into the pane of its event time unless every window
  of that configuration containing it is closed (the partition's watermark, the minimum
  progress of its upstream channels, reached `end + grace`): such a result is late and
  changes no aggregate. A suite's upstream channels are the groups its records travel
  behind (`suite_groups`; all by default): closing and lateness both follow them.
- **Folds.** `add_fold` merges a micro-batch's results folded per pane by the score
  stage (`worker.windowing.pane_folds`): one merge per pane and configuration instead of one update
  per case. A fold's panes lie inside one pane of every configuration, so lateness is
  decided per folded pane as for a case.
- **Dedupe.** Contributions from one input partition reach a pane in offset order, so a
  pane keeps, written with it, the highest input offset it counted per input partition:
  anything at or below it is a replay, and a flush cut short between a pane and its
  series neither loses a case nor counts one twice. A fold raises it to the highest
  offset it covers; a fold all of whose offsets are at or below it is one read again and
  is skipped (folds never overlap earlier contributions, see `ScoreStage`). The series
  keeps the same marks for the panes already closed and deleted, so a replay of those is
  not mistaken for a late record.
  Sessions (no input offset) are deduplicated by id inside their pane.
- **Emission.** `advance` takes a watermark marker and returns, oldest end first, the final
  aggregates of the windows it closed (each once: a series remembers how far it closed),
  then drops the panes no open window needs. `pending` returns interim aggregates of the
  newest window holding each pane that changed (the window dashboards follow; a hopping
  pane's older windows are published once, final, when they close).
- **Write-back.** Every change (panes, series, the partition's watermark, the deletion of
  closed panes) stays in memory until `flush(partition)` writes each changed key once
  (latest value), so a micro-batch costs one changelog record per pane and series it
  touched, not one per result. Call it after the batch's final aggregates are delivered
  and before the batch is acknowledged: a batch that is interrupted (a worker stopping,
  a rebalance, a crash) leaves the tables as they were, and whoever processes it again
  closes the same windows with the same panes.
- **Closing is decided from state.** A window is due when the watermark has passed its
  `end + grace` and its series has not closed through it. After a restore the first
  marker checks every series, whether or not it moves the watermark, so a watermark
  that reached the changelog without its closes (their writes are in other changelog
  partitions) still closes them.

Mapping layout (`windows`): `pane|{suite}|{segment}|{config}|{pane start}` ->
`{"state": aggregation state of the pane, "partition": p}`;
`series|{suite}|{segment}|{config}` -> `{"partition", "suite", "segment", "config":
[size, step], "closed_through": end of the last closed window or None, "high_water":
{"topic:partition": offset}}`. `progress["agg|{p}"]` is the partition's `Watermark`.
"""

from __future__ import annotations

import copy
from collections.abc import Collection, Mapping, MutableMapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from worker import aggregation
from worker.aggregation import dedupe
from worker.input.result_facts import ResultView
from worker.suites.base import State, SuiteAggregator
from worker.windowing import pane_folds
from worker.windowing.event_time import Marker, StageProgress, Watermark
from worker.windowing.lateness import LatenessPolicy, Timeliness
from worker.windowing.windows import WindowConfig, WindowKey, pane_start_of, windows_for

PANE = "pane|"
SERIES = "series|"
PROGRESS_PREFIX = "agg"  # progress["agg|{p}"]: the partition's watermark


@dataclass(frozen=True)
class Admission:
    """What `add` did with a result."""

    counted: int = 0  # window configurations (and segments) it was counted into
    late: bool = False  # at least one of its windows was already closed
    replay: bool = False  # already counted: nothing changed
    late_cases: int = 0  # of a fold: the cases of its panes that were late


@dataclass(frozen=True)
class Emission:
    """A window's aggregate state to publish: interim (`final` False) or final.

    `state` is the merge of the window's `panes` into its `empty` state. `advance(...,
    merged=False)` leaves that merge to the first read of `state`, or to another process
    (`aggregation.merge_panes`: the window stage sends a final's `empty` and `panes` to a scoring
    process, which builds the message there); either must come before the store changes
    again, since panes change in place."""

    key: str  # the aggregate's Kafka key
    final: bool
    empty: State  # the window's state before its panes (`aggregation.initialise`)
    panes: tuple[State, ...]  # the window's panes, as they were when it was emitted
    aggregator: SuiteAggregator | None = field(default=None, compare=False)

    @property
    def window(self) -> WindowKey:
        return aggregation.window_of(self.empty)

    @cached_property
    def state(self) -> State:
        return aggregation.merge_panes(self.empty, self.panes, self.aggregator)

    @cached_property
    def summary(self) -> State:
        """What an interim aggregate reads of `state` (`aggregation.SUMMARY_FIELDS`:
        counts, moments, the suite's figures), merged without the samples, worst cases
        and dedupe marks, which cost most of a merge and only a final reads."""
        return aggregation.merge_panes(
            self.empty, self.panes, self.aggregator, aggregation.SUMMARY_FIELDS
        )


def _step(config: WindowConfig) -> float:
    return float(config.step) if config.step is not None else float(config.size)


def _window_key(config: WindowConfig, start: float) -> WindowKey:
    size = float(config.size)
    step = None if config.step is None or config.step == config.size else float(config.step)
    return WindowKey(size, step, start)


class WindowStore:
    """Windowed aggregates of one worker's aggregation partitions over plain mappings."""

    def __init__(
        self,
        windows: MutableMapping[str, Any],
        progress: MutableMapping[str, Any],
        *,
        configs: list[WindowConfig],
        lateness: LatenessPolicy,
        aggregators: Mapping[str, SuiteAggregator],
        reservoir_size: int = aggregation.DEFAULT_RESERVOIR_SIZE,
        channel_groups: Mapping[str, int] | None = None,
        suite_groups: Mapping[str, Collection[str]] | None = None,
        pane_width: float | None = None,
    ) -> None:
        self.windows = windows
        self.progress = progress
        self.configs = {config.name: config for config in configs}
        self.lateness = lateness
        self.aggregators = aggregators
        self.reservoir_size = reservoir_size
        # The partitions' watermarks (and which markers may close a window: `pane_width`
        # is the pane every configuration's windows end on, None: unknown).
        self.stage_progress = StageProgress(
            progress, PROGRESS_PREFIX, channel_groups or {}, lateness, pane_width
        )
        # The channel groups whose markers each suite's records travel behind (a suite not
        # listed: every group). A suite only the score stage counts closes its windows on
        # the input partitions' progress, without waiting for the session stage's hop.
        self.suite_groups = {suite: frozenset(g) for suite, g in (suite_groups or {}).items()}
        self._series: dict[int, dict[str, set[float]]] = {}  # series key -> pane starts
        self._pending: dict[str, Any] = {}  # changed since the last flush
        self._deleted: dict[str, int] = {}  # keys to delete at the flush -> partition
        self._checked: set[int] = set()  # partitions whose closes were checked since restore
        self._opened: dict[tuple[str, str], int] = {}  # (suite, window name) -> windows
        self._dirty_panes: set[str] = set()  # changed since the last interim emission

    # ---------------------------------------------------------------- progress

    def watermark(self, partition: int) -> Watermark:
        """The partition's watermark (restored from `progress` on first use)."""
        return self.stage_progress.watermark(partition)

    def watermark_of(self, partition: int, suite: str) -> float | None:
        """The partition's watermark as it bounds `suite`'s windows: the minimum over the
        channel groups its records travel behind (None until all of them reported)."""
        return self.watermark(partition).value(self.suite_groups.get(suite))

    def is_closed(self, partition: int, window: WindowKey, suite: str) -> bool:
        return self.lateness.is_closed(window.end, self.watermark_of(partition, suite))

    def forget(self) -> None:
        """Drop caches (after a rebalance another worker may have moved the state).
        Only between batches: a pane's state is merged into in place, so a change not
        flushed yet would stay in the mapping's value with the pane's old offset marks,
        and its input, not acknowledged, would count again when read again. Faust's
        rebalance signals come when no batch is in hand (revocation waits for every
        event to be acknowledged; recovery ends before the stream resumes)."""
        self.stage_progress.forget()
        self._series.clear()
        self._pending.clear()
        self._deleted.clear()
        self._checked.clear()
        self._dirty_panes.clear()

    # ---------------------------------------------------------------- admission

    def add(self, partition: int, result: ResultView, segment: Mapping[str, str]) -> Admission:
        """Count `result` into the pane of each window configuration for `segment`."""
        event_time = result.ts.timestamp()
        segkey = aggregation.segment_key(segment)
        aggregator = self.aggregators.get(result.suite)
        source = dedupe.offset_source(result)
        offset = result.source.offset if result.source is not None else -1
        counted = 0
        late = replay = False
        watermark = self.watermark_of(partition, result.suite)
        scored = aggregation.scored_from(result) if aggregator is not None else None
        for name, config in self.configs.items():
            series_key = f"{SERIES}{result.suite}|{segkey}|{name}"
            series = self._series_state(series_key, partition, result.suite, segment, config)
            timeliness = self.lateness.timeliness(event_time, config, watermark)
            if timeliness is Timeliness.LATE:
                if dedupe.offset_taken(series["high_water"], source, offset):
                    replay = True
                else:
                    late = True
                    dedupe.mark_offset(series["high_water"], source, offset)
                    self._pending[series_key] = series
                continue
            step = _step(config)
            pane_start = pane_start_of(event_time, step)
            pane_key = f"{PANE}{result.suite}|{segkey}|{name}|{pane_start!r}"
            stored = self._get(pane_key)
            marks = _pane_marks(stored, series["high_water"])
            if dedupe.offset_taken(marks, source, offset):
                replay = True
                continue
            late = late or timeliness is Timeliness.PARTLY_LATE
            dedupe.mark_offset(series["high_water"], source, offset)
            self._pending[series_key] = series
            state = (
                stored["state"]
                if stored
                else aggregation.initialise(
                    result.suite,
                    segment,
                    WindowKey(step, None, pane_start),
                    self.reservoir_size,
                )
            )
            state, applied = aggregation.update(state, result, aggregator, scored)
            if applied:
                marks = dict(marks)
                dedupe.mark_offset(marks, source, offset)
                self._put(pane_key, {"state": state, "partition": partition, "marks": marks})
                self._index(partition).setdefault(series_key, set()).add(pane_start)
                self._dirty_panes.add(pane_key)
                counted += 1
            else:
                replay = True
        if replay and not counted:
            return Admission(replay=True)
        return Admission(counted=counted, late=late)

    def add_fold(
        self, partition: int, fold: Mapping[str, Any], segment: Mapping[str, str]
    ) -> Admission:
        """Merge a micro-batch's folded panes (`worker.windowing.pane_folds`) for `segment` into
        each window configuration; a pane that has already taken every offset of the fold
        (read again after a restart) does not take it twice."""
        suite = str(fold["suite"])
        span: Mapping[str, int] = fold["span"]
        segkey = aggregation.segment_key(segment)
        aggregator = self.aggregators.get(suite)
        watermark = self.watermark_of(partition, suite)
        counted = 0
        late_panes: set[float] = set()
        replay = False
        for name, config in self.configs.items():
            series_key = f"{SERIES}{suite}|{segkey}|{name}"
            series = self._series_state(series_key, partition, suite, segment, config)
            series_marks = dict(series["high_water"])  # as before this fold
            step = _step(config)
            taken: dict[float, bool] = {}  # target pane -> this fold counted in it before
            for pane in fold["panes"]:
                start = pane_folds.start_of(pane)
                timeliness = self.lateness.timeliness(start, config, watermark)
                if timeliness is Timeliness.LATE:
                    if dedupe.offsets_cover(series_marks, span):
                        replay = True
                    else:
                        late_panes.add(start)
                    continue
                target = pane_start_of(start, step)
                pane_key = f"{PANE}{suite}|{segkey}|{name}|{target!r}"
                stored = self._get(pane_key)
                if target not in taken:
                    taken[target] = dedupe.offsets_cover(_pane_marks(stored, series_marks), span)
                if taken[target]:
                    replay = True
                    continue
                if timeliness is Timeliness.PARTLY_LATE:
                    late_panes.add(start)
                piece = copy.copy(pane)
                piece["window"] = [step, None, target]
                if stored is None:
                    empty = aggregation.initialise(
                        suite, segment, WindowKey(step, None, target), self.reservoir_size
                    )
                    state = aggregation.merge(empty, piece, aggregator)
                else:  # the store's own state (the changelog has its serialised value)
                    state = aggregation.merge_into(stored["state"], piece, aggregator)
                marks = dict(_pane_marks(stored, series_marks))
                for source, last in span.items():
                    dedupe.mark_offset(marks, source, last)
                self._put(pane_key, {"state": state, "partition": partition, "marks": marks})
                self._index(partition).setdefault(series_key, set()).add(target)
                self._dirty_panes.add(pane_key)
                counted += 1
            if not dedupe.offsets_cover(series_marks, span):
                for source, last in span.items():
                    dedupe.mark_offset(series["high_water"], source, last)
                self._pending[series_key] = series
        if replay and not counted:
            return Admission(replay=True)
        late_cases = sum(
            pane_folds.count_of(p) for p in fold["panes"] if pane_folds.start_of(p) in late_panes
        )
        return Admission(counted=counted, late=bool(late_panes), late_cases=late_cases)

    # ---------------------------------------------------------------- emission

    def advance(self, partition: int, marker: Marker, merged: bool = True) -> list[Emission]:
        """Apply a watermark marker; the windows now due, as final emissions (those it
        closes, and after a restore any the restored watermark had already passed), their
        panes already merged unless `merged` is False (see `Emission`)."""
        watermark = self.watermark(partition)
        group_sets = {None, *self.suite_groups.values()}
        before = [watermark.value(groups) for groups in group_sets]
        self.stage_progress.observe(partition, marker)
        after = [watermark.value(groups) for groups in group_sets]
        moved = after != before
        if all(value is None for value in after) or (not moved and partition in self._checked):
            return []
        if partition not in self._checked:
            # The first close since a restore reads the series from the tables again: an
            # index read while the table was still being recovered (a timer runs during a
            # rebalance) would miss series, and their windows would never close.
            self._series.pop(partition, None)
            self._checked.add(partition)
        return self._close_due(partition, merged)

    def pending(self, partition: int) -> list[Emission]:
        """Interim emissions of the newest open window of each pane changed since last time,
        each with its `summary` merged now (its full `state` only when read)."""
        due: dict[str, tuple[str, WindowConfig, float]] = {}
        for series_key, starts in self._index(partition).items():
            series = self._get(series_key)
            if series is None:
                continue
            config = self.configs.get(series["config_name"])
            if config is None:
                continue
            current = self.watermark_of(partition, series["suite"])
            for pane_start in starts:
                pane_key = _pane_key(series_key, pane_start)
                if pane_key not in self._dirty_panes:
                    continue
                self._dirty_panes.discard(pane_key)
                # The newest window holding the pane (a hopping pane is in size/step
                # windows; the older ones get their final aggregate when they close).
                window = _window_key(config, pane_start)
                if self.lateness.is_closed(window.end, current):
                    continue
                key = self._aggregate_key(series, window)
                due[key] = (series_key, config, window.start)
        emissions = []
        for key in sorted(due):
            series_key, config, start = due[key]
            emission = self._emission(series_key, config, start, key, final=False, merged=False)
            _ = emission.summary  # the panes as they are now
            emissions.append(emission)
        return emissions

    def open_windows(self, partition: int) -> list[WindowKey]:
        """Windows with data not closed yet (for inspection and tests)."""
        found: set[WindowKey] = set()
        for series_key, starts in self._index(partition).items():
            series = self._get(series_key)
            config = self.configs.get(series["config_name"]) if series else None
            if config is None:
                continue
            current = self.watermark_of(partition, series["suite"])
            for pane_start in starts:
                for window in windows_for(pane_start, config):
                    if not self.lateness.is_closed(window.end, current):
                        found.add(window)
        return sorted(found, key=WindowKey.sort_key)

    def _close_due(self, partition: int, merged: bool = True) -> list[Emission]:
        closing: list[tuple[float, str, str, WindowConfig, float]] = []
        for series_key, starts in self._index(partition).items():
            series = self._get(series_key)
            config = self.configs.get(series["config_name"]) if series else None
            if series is None or config is None or not starts:
                continue
            watermark = self.watermark_of(partition, series["suite"])
            if watermark is None:
                continue
            closed_through = series.get("closed_through")
            step = _step(config)
            candidates = {
                window.start
                for pane_start in starts
                for window in windows_for(pane_start, config)
                if self.lateness.is_closed(window.end, watermark)
                and (closed_through is None or window.end > closed_through)
            }
            for start in candidates:
                window = _window_key(config, start)
                key = self._aggregate_key(series, window)
                closing.append((window.end, key, series_key, config, start))
            boundary = self.lateness.closed_through(watermark, step)
            if closed_through is None or boundary > closed_through:
                series = self._own(series_key, series)
                series["closed_through"] = boundary
                self._pending[series_key] = series
        closing.sort(key=lambda item: (item[0], item[1]))
        emissions = [
            self._emission(series_key, config, start, key, final=True, merged=merged)
            for _end, key, series_key, config, start in closing
        ]
        self._drop_closed_panes(partition)
        return emissions

    def _drop_closed_panes(self, partition: int) -> None:
        """Delete the panes every window of which has closed."""
        for series_key, starts in self._index(partition).items():
            series = self._get(series_key)
            config = self.configs.get(series["config_name"]) if series else None
            if series is None or config is None or series.get("closed_through") is None:
                continue
            closed_through = float(series["closed_through"])
            for pane_start in sorted(starts):
                if pane_start + float(config.size) > closed_through:
                    break
                self._delete(_pane_key(series_key, pane_start), partition)
                starts.discard(pane_start)

    def _emission(
        self,
        series_key: str,
        config: WindowConfig,
        start: float,
        key: str,
        final: bool,
        merged: bool = True,
    ) -> Emission:
        """The window starting at `start`: the merge of its panes (made now if `merged`)."""
        series = self._get(series_key)
        assert series is not None
        window = _window_key(config, start)
        step = _step(config)
        aggregator = self.aggregators.get(series["suite"])
        empty = aggregation.initialise(
            series["suite"], series["segment"], window, self.reservoir_size
        )
        panes = []
        for pane_start in _pane_starts(start, window.end, step):
            stored = self._get(_pane_key(series_key, pane_start))
            if stored is not None:
                panes.append(stored["state"])
        emission = Emission(key, final, empty, tuple(panes), aggregator)
        if merged:
            _ = emission.state  # the panes as they are now
        return emission

    # ---------------------------------------------------------------- write-back

    def flush(self, partition: int | None = None) -> int:
        """Write the changes (of `partition`, or all) to the mappings; how many.

        Order: panes and series first, then the watermark, then the deletion of closed
        panes, so a flush cut short leaves no pane deleted whose series does not record
        its window as closed."""
        written = 0
        created: list[str] = []
        for key, value in list(self._pending.items()):
            if partition is not None and value.get("partition") != partition:
                continue
            if key.startswith(PANE) and key not in self.windows:
                created.append(key)
            self.windows[key] = value
            del self._pending[key]
            written += 1
        self._count_opened(created)
        written += self.stage_progress.flush(partition)
        for key, owner in list(self._deleted.items()):
            if partition is not None and owner != partition:
                continue
            if key in self.windows:
                del self.windows[key]
            del self._deleted[key]
            written += 1
        return written

    def take_opened(self) -> dict[tuple[str, str], int]:
        """Windows that got their first pane in the tables since the last call, by
        (suite, window name): each should get one final aggregate when it closes."""
        opened, self._opened = self._opened, {}
        return opened

    def _count_opened(self, created: list[str]) -> None:
        """Count the windows none of whose panes was in the tables before `created`."""
        fresh = set(created)
        windows: set[tuple[str, float]] = set()
        for key in created:
            series_key, _, start = key[len(PANE) :].rpartition("|")
            series = self._get(SERIES + series_key)
            config = self.configs.get(series["config_name"]) if series else None
            if config is None:
                continue
            step = _step(config)
            partition = int(series["partition"])
            suite = str(series["suite"])
            for window in windows_for(float(start), config):
                seen = (series_key, window.start) in windows
                if seen or self.is_closed(partition, window, suite):
                    continue
                panes = _pane_starts(window.start, window.end, step)
                if any(
                    (k := f"{PANE}{series_key}|{p!r}") in self.windows and k not in fresh
                    for p in panes
                ):
                    continue
                windows.add((series_key, window.start))
                name = (str(series["suite"]), config.name)
                self._opened[name] = self._opened.get(name, 0) + 1

    def pending_partitions(self) -> set[int]:
        """Partitions with changes not flushed yet."""
        return (
            {int(value["partition"]) for value in self._pending.values()}
            | self.stage_progress.pending_partitions()
            | set(self._deleted.values())
        )

    def _get(self, key: str) -> Any:
        value = self._pending.get(key)
        if value is not None:
            return value
        if key in self._deleted:
            return None
        return self.windows.get(key)

    def _put(self, key: str, value: Any) -> None:
        self._deleted.pop(key, None)
        self._pending[key] = value

    def _delete(self, key: str, partition: int) -> None:
        self._pending.pop(key, None)
        self._dirty_panes.discard(key)
        self._deleted[key] = partition

    # ---------------------------------------------------------------- series

    def _series_state(
        self,
        series_key: str,
        partition: int,
        suite: str,
        segment: Mapping[str, str],
        config: WindowConfig,
    ) -> dict[str, Any]:
        series = self._get(series_key)
        if series is not None:
            return self._own(series_key, series)
        self._index(partition).setdefault(series_key, set())
        return {
            "partition": partition,
            "suite": suite,
            "segment": dict(segment),
            "config_name": config.name,
            "closed_through": None,
            "high_water": {},
        }

    def _own(self, series_key: str, series: dict[str, Any]) -> dict[str, Any]:
        """The series to change in this batch: a copy of the table's value (changed in
        place it would differ from its changelog until the flush)."""
        if self._pending.get(series_key) is series:
            return series
        return {**series, "high_water": dict(series["high_water"])}

    def _aggregate_key(self, series: Mapping[str, Any], window: WindowKey) -> str:
        return aggregation.aggregate_key(series["suite"], series["segment"], window)

    def _index(self, partition: int) -> dict[str, set[float]]:
        """Series of the partition and their pane starts, read from the mapping (and the
        changes not flushed yet) once."""
        index = self._series.get(partition)
        if index is None:
            index = {}
            stored = [(k, v) for k, v in list(self.windows.items()) if k not in self._deleted]
            for key, value in [*stored, *self._pending.items()]:
                if not isinstance(value, dict) or value.get("partition") != partition:
                    continue
                if key.startswith(SERIES):
                    index.setdefault(key, set())
                elif key.startswith(PANE):
                    series_key, _, start = key[len(PANE) :].rpartition("|")
                    index.setdefault(SERIES + series_key, set()).add(float(start))
            self._series[partition] = index
        return index


def _pane_key(series_key: str, pane_start: float) -> str:
    return f"{PANE}{series_key[len(SERIES) :]}|{pane_start!r}"


def _pane_starts(start: float, end: float, step: float) -> list[float]:
    """Starts of the step-sized panes of the window [start, end)."""
    starts = []
    pane = start
    while pane < end - step / 2:
        starts.append(pane)
        pane += step
    return starts


def _pane_marks(stored: Mapping[str, Any] | None, series_marks: Mapping[str, int]) -> Any:
    """The input offsets a pane has counted: its own (written with it, so a flush cut
    short between a pane and its series counts nothing twice and loses nothing); a pane
    written before panes kept them falls back on its series'."""
    if stored is None:
        return {}
    return stored.get("marks", series_marks)
