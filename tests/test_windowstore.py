"""The window store and event-time progress, replaying histories with an injected clock:
a worker that is behind never turns an in-order case late, every window closes once."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson
import pytest

from schemas.outputs import CaseResult, RecordSource
from worker.config import WindowConfig
from worker.input import records as input_records
from worker.suites.registry import AGGREGATORS
from worker.windowing.event_time import (
    InvalidEventTime,
    Marker,
    PartitionClock,
    Watermark,
    check_event_time,
)
from worker.windowing.lateness import LatenessPolicy
from worker.windowing.pane_folds import PaneFold
from worker.windowing.store import Emission, WindowStore
from worker.windowing.windows import pane_width

T0 = 1_700_000_040.0  # a whole minute: 2023-11-14T22:14:00Z
MINUTE = [WindowConfig(size=60)]
GRACE = 10.0
IDLE = 10.0


def result(case_id: str, ts: float, offset: int, partition: int = 0) -> CaseResult:
    return CaseResult.model_construct(
        id=case_id,
        suite="safe",
        kind="case",
        ts=datetime.fromtimestamp(ts, UTC),
        model=None,
        labels={},
        scores={"composite": 1.0},
        label="Pass",
        grade=None,
        details={},
        counts={},
        source=RecordSource.model_construct(topic="in", partition=partition, offset=offset),
    )


@dataclass
class Replay:
    """Input partitions read by a score stage (one `PartitionClock` each) and one
    aggregation partition (a `WindowStore` over dicts that play the Faust tables)."""

    partitions: int = 2
    windows: list[WindowConfig] = field(default_factory=lambda: list(MINUTE))
    tables: dict[str, dict[str, Any]] = field(
        default_factory=lambda: {"windows": {}, "progress": {}}
    )
    logs: dict[int, list[float]] = field(default_factory=dict)  # the input partitions
    clocks: dict[int, PartitionClock] = field(default_factory=dict)
    finals: list[Emission] = field(default_factory=list)
    late: list[str] = field(default_factory=list)
    # Fold each micro-batch per pane, as the score stage does from `fold_from` on (the
    # high watermark of an input partition when its owner first read it).
    fold: bool = False
    fold_from: dict[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.store = self.new_store()
        for partition in range(self.partitions):
            self.logs.setdefault(partition, [])

    def new_store(self) -> WindowStore:
        return WindowStore(
            self.tables["windows"],
            self.tables["progress"],
            configs=self.windows,
            lateness=LatenessPolicy(GRACE),
            aggregators=AGGREGATORS,
            channel_groups={"in": 0},
        )

    def produce(self, partition: int, *times: float) -> None:
        self.logs[partition].extend(times)

    def restart(self, now: float) -> None:
        """A new owner: caches gone, tables kept, clocks start from the committed offsets."""
        self.store = self.new_store()
        self.fold_from = {p: len(log) for p, log in self.logs.items()}
        committed = {p: clock.next_offset for p, clock in self.clocks.items()}
        self.clocks = {
            p: PartitionClock(quiet_since=now, next_offset=committed.get(p, 0) or 0)
            for p in range(self.partitions)
        }

    def clock(self, partition: int, now: float) -> PartitionClock:
        if partition not in self.clocks:
            self.clocks[partition] = PartitionClock(quiet_since=now, next_offset=0)
        return self.clocks[partition]

    def read(self, partition: int, count: int, now: float) -> None:
        """Read (and count) the next `count` records of `partition` at wall time `now`."""
        clock = self.clock(partition, now)
        start = clock.next_offset or 0
        fold = PaneFold("safe", {}, pane_width(self.windows) or 0.0, AGGREGATORS["safe"])
        folded: list[str] = []
        for offset in range(start, min(start + count, len(self.logs[partition]))):
            ts = self.logs[partition][offset]
            case_id = f"p{partition}-{offset}"
            case = result(case_id, ts, offset, partition)
            if self.fold and offset >= self.fold_from.get(partition, 0):
                fold.add(case)
                folded.append(case_id)
            else:
                admission = self.store.add(0, case, {})
                if admission.late:
                    self.late.append(case_id)
            clock.observe(offset, ts, now)
        if fold.count:  # after the batch's cases, as `Publisher.contribute` sends them
            wire = orjson.loads(orjson.dumps(fold.to_json()))
            admission = self.store.add_fold(0, wire, {})
            self.late.extend(f"one of {folded}" for _ in range(admission.late_cases))
        self.store.flush()  # the end of a micro-batch

    def tick(self, now: float) -> None:
        """The progress timer: idle partitions follow the wall clock, markers go out."""
        for partition in range(self.partitions):
            clock = self.clock(partition, now)
            clock.follow_wall_clock(now, len(self.logs[partition]), IDLE)
            if clock.progress is not None:
                marker = Marker("in", partition, self.partitions, clock.progress)
                self.finals.extend(self.store.advance(0, marker))
        self.store.flush()

    def counted(self) -> int:
        return sum(emission.state["count"] for emission in self.finals)

    def final_keys(self) -> list[str]:
        return [emission.key for emission in self.finals]


FOLDED = pytest.mark.parametrize("fold", [False, True], ids=["case-by-case", "folded"])


def interleave(replay: Replay, now: float, batch: int = 5) -> None:
    """Read every partition to its end in small alternating batches, ticking between."""
    while any(
        (replay.clock(p, now).next_offset or 0) < len(replay.logs[p])
        for p in range(replay.partitions)
    ):
        for partition in range(replay.partitions):
            replay.read(partition, batch, now)
        replay.tick(now)
        now += 0.1


@FOLDED
def test_backlog_at_start_is_read_in_order_and_nothing_is_late(fold: bool) -> None:
    replay = Replay(fold=fold)
    for partition in range(2):
        replay.produce(partition, *(T0 + i * 0.5 + partition * 0.25 for i in range(200)))
    start = T0 + 3600  # the worker starts an hour after the records were written
    interleave(replay, start)
    assert replay.late == []
    replay.tick(start + 60)  # caught up and quiet: progress follows the wall clock
    replay.tick(start + 60 + IDLE)
    assert replay.counted() == 400
    assert len(replay.finals) == len(set(replay.final_keys())) == 2  # [T0, +60), [+60, +120)


@FOLDED
def test_downtime_longer_than_window_and_grace_loses_nothing(fold: bool) -> None:
    replay = Replay(fold=fold)
    for partition in range(2):
        replay.produce(partition, *(T0 + i for i in range(100)))
    now = T0 + 50
    for partition in range(2):
        replay.read(partition, 50, now)
    replay.tick(now)
    replay.restart(now + 300)  # down five minutes
    interleave(replay, now + 300)
    replay.tick(now + 400)
    replay.tick(now + 400 + IDLE)
    assert replay.late == []
    assert replay.counted() == 200


@FOLDED
def test_two_partitions_far_apart_hold_the_watermark_at_the_slower(fold: bool) -> None:
    replay = Replay(fold=fold)
    replay.produce(0, *(T0 + 3600 + i for i in range(30)))  # an hour ahead
    replay.produce(1, *(T0 + i for i in range(30)))
    replay.produce(1, *(T0 + 30 + i for i in range(60)))  # more to come on the slow one
    now = T0 + 3700
    replay.read(0, 30, now)
    replay.read(1, 30, now)
    replay.tick(now)
    assert replay.store.watermark(0).value() == T0 + 29
    replay.read(1, 60, now)
    assert replay.late == []  # the slow partition's records are on time
    replay.tick(now)
    assert replay.final_keys() == ["safe|all|1m|2023-11-14T22:14:00Z"]
    assert replay.counted() == 60  # the first minute of the slow partition only


@FOLDED
def test_an_idle_partition_stops_holding_back_only_when_caught_up_and_quiet(fold: bool) -> None:
    replay = Replay(fold=fold)
    replay.produce(0, *(T0 + i for i in range(91)))  # the last one stays unread: a backlog
    replay.produce(1, T0)
    now = T0 + 90
    replay.read(0, 90, now)
    replay.read(1, 1, now)
    replay.tick(now)
    assert replay.store.watermark(0).value() == T0  # partition 1 holds it back
    replay.tick(now + IDLE - 1)
    assert replay.finals == []
    replay.tick(now + IDLE)  # partition 1 quiet for the idle timeout: wall clock
    assert replay.store.watermark(0).value() == T0 + 89
    replay.produce(1, T0 + 95)  # a backlog again: no more wall-clock moves
    replay.tick(now + 3 * IDLE)
    assert replay.clocks[1].progress == now + IDLE


@FOLDED
def test_a_partition_that_never_had_a_record_follows_the_wall_clock_once_idle(fold: bool) -> None:
    replay = Replay(fold=fold)
    replay.produce(0, *(T0 + i for i in range(71)))  # the last one stays unread: a backlog
    now = T0 + 70
    replay.read(0, 70, now)
    replay.tick(now)
    assert replay.store.watermark(0).value() is None  # partition 1 not heard from
    replay.tick(now + IDLE)
    assert replay.store.watermark(0).value() == T0 + 69
    replay.read(0, 1, now + IDLE)
    replay.tick(now + IDLE)
    assert replay.counted() == 60  # [T0, T0 + 60) closed at T0 + 70


@FOLDED
def test_a_rebalance_hands_a_partition_over_without_late_records_or_second_finals(
    fold: bool,
) -> None:
    replay = Replay(fold=fold)
    for partition in range(2):
        replay.produce(partition, *(T0 + i for i in range(120)))
    now = T0 + 120
    for partition in range(2):
        replay.read(partition, 60, now)
    replay.tick(now)
    replay.restart(now + 5)  # the aggregation partition and the input partitions move
    # The new owner re-reads from the committed offsets: here, ten records back.
    for clock in replay.clocks.values():
        clock.next_offset = (clock.next_offset or 0) - 10
    interleave(replay, now + 5)
    replay.tick(now + 200)
    replay.tick(now + 200 + IDLE)
    assert replay.late == []
    assert replay.counted() == 240
    assert len(replay.final_keys()) == len(set(replay.final_keys())) == 2


@FOLDED
def test_yesterdays_data_closes_by_its_own_timestamps(fold: bool) -> None:
    replay = Replay(partitions=1, fold=fold)
    yesterday = T0 - 86400
    replay.produce(0, *(yesterday + i for i in range(300)))
    now = T0
    for _ in range(60):
        replay.read(0, 5, now)
        replay.tick(now)  # never quiet: a backlog does not follow the wall clock
    assert [emission.window.start for emission in replay.finals] == [
        yesterday + 60 * i for i in range(4)
    ]
    assert replay.late == []


@FOLDED
def test_a_record_behind_a_closed_window_is_late_and_changes_nothing(fold: bool) -> None:
    replay = Replay(partitions=1, fold=fold)
    replay.produce(0, *(T0 + i for i in range(80)), T0 + 5)
    replay.read(0, 80, T0 + 80)
    replay.tick(T0 + 80)
    assert replay.counted() == 60
    replay.read(0, 1, T0 + 81)
    assert len(replay.late) == 1 and "p0-80" in replay.late[0]
    replay.tick(T0 + 200)
    assert replay.counted() == 80  # the late record counted nowhere


def test_a_replayed_case_is_neither_late_nor_counted_twice() -> None:
    store = Replay(partitions=1).store
    assert store.add(0, result("c1", T0 + 1, offset=1), {}).counted == 1
    assert store.add(0, result("c1", T0 + 1, offset=1), {}).replay  # re-sent: same offset
    store.advance(0, Marker("in", 0, 1, T0 + 80))  # the window closes
    again = store.add(0, result("c1", T0 + 1, offset=1), {})
    assert again.replay and not again.late
    later = store.add(0, result("c2", T0 + 2, offset=2), {})
    assert later.late and not later.replay


@FOLDED
def test_hopping_windows_cost_one_pane_per_case_and_merge_on_emission(fold: bool) -> None:
    hourly = [WindowConfig(size=3600, step=300)]
    base = T0 + 60  # a whole five minutes
    replay = Replay(partitions=1, windows=hourly, fold=fold)
    replay.produce(0, *(base + 60 * i for i in range(130)))  # a case a minute, 130 minutes
    replay.read(0, 130, base + 7800)
    panes = [key for key in replay.tables["windows"] if key.startswith("pane|")]
    assert len(panes) == 26  # one per 5 minutes, not one per window
    replay.tick(base + 7800)
    replay.tick(base + 7800 + IDLE)  # caught up and quiet: everything up to now closes
    counts = {emission.window.start: emission.state["count"] for emission in replay.finals}
    assert counts[base] == 60  # [base, base + 1h): sixty cases merged from twelve panes
    assert counts[base - 3300] == 5  # the first window holding `base` has one pane of data
    assert len(counts) == 26  # every window that ended by now, each closed once
    assert len(replay.store.open_windows(0)) == 11  # the ones still open hold the rest
    assert len([k for k in replay.tables["windows"] if k.startswith("pane|")]) == 11


def test_each_changed_key_is_written_once_per_flush() -> None:
    writes: list[str] = []

    class Recording(dict[str, Any]):
        def __setitem__(self, key: str, value: Any) -> None:
            writes.append(key)
            super().__setitem__(key, value)

    store = WindowStore(
        Recording(), {}, configs=MINUTE, lateness=LatenessPolicy(GRACE), aggregators=AGGREGATORS
    )
    for offset in range(100):
        store.add(0, result(f"c{offset}", T0 + offset * 0.5, offset), {})
    assert writes == []
    assert store.flush(0) == 2  # the pane and its series
    assert sorted(writes) == ["pane|safe|all|1m|1700000040.0", "series|safe|all|1m"]


def test_interim_emissions_list_changed_windows_once() -> None:
    store = Replay(partitions=1).store
    store.add(0, result("a", T0 + 1, 1), {})
    store.add(0, result("b", T0 + 2, 2), {"model": "m"})
    assert sorted(emission.key for emission in store.pending(0)) == [
        "safe|all|1m|2023-11-14T22:14:00Z",
        "safe|model=m|1m|2023-11-14T22:14:00Z",
    ]
    assert store.pending(0) == []


def test_watermark_is_the_minimum_and_never_moves_back() -> None:
    mark = Watermark()
    mark.expect("in")
    assert mark.value() is None
    mark.observe(Marker("in", 0, 2, T0 + 10))
    assert mark.value() is None  # channel 1 has not reported
    mark.observe(Marker("in", 1, 2, T0 + 5))
    assert mark.value() == T0 + 5
    mark.observe(Marker("in", 1, 2, T0 + 1))  # an older marker (a replay)
    assert mark.value() == T0 + 5
    assert Watermark.from_json(mark.to_json()) == mark


@pytest.mark.parametrize(
    ("event_time", "why"), [(T0 + 301, "ahead"), (-1.0, "before 1970"), (T0 + 1e9, "ahead")]
)
def test_far_future_and_pre_1970_times_are_rejected(event_time: float, why: str) -> None:
    with pytest.raises(InvalidEventTime, match=why):
        check_event_time(event_time, T0, max_future_skew=300)
    with pytest.raises(input_records.Rejected) as rejected:
        moment = datetime.fromtimestamp(max(event_time, -1.0), UTC)
        input_records.usable_event_time(moment, datetime.fromtimestamp(T0, UTC), 300)
    assert rejected.value.reason == "invalid_timestamp"


@pytest.mark.parametrize("ts", ['"0000-01-01T00:00:00Z"', "99999999999999999", '"9999-99-99"'])
def test_unparseable_times_are_invalid_timestamp_dead_letters(ts: str) -> None:
    raw = f'{{"id": "x", "suite": "safe", "ts": {ts}, "payload": {{}}}}'.encode()
    with pytest.raises(input_records.Rejected) as rejected:
        input_records.decode_record(raw, 1 << 20)
    assert rejected.value.reason == "invalid_timestamp"


def test_interim_emission_of_a_hopping_pane_is_its_newest_window_only() -> None:
    hourly = [WindowConfig(size=3600, step=300)]
    store = WindowStore(
        {}, {}, configs=hourly, lateness=LatenessPolicy(GRACE), aggregators=AGGREGATORS
    )
    base = T0 + 60  # a whole five minutes
    store.add(0, result("a", base + 10, 1), {})
    [emission] = store.pending(0)
    assert emission.window.start == base and emission.window.size == 3600
    assert not emission.final and emission.state["count"] == 1


@pytest.mark.parametrize("input_only", [True, False], ids=["input-only", "every-group"])
def test_a_suite_only_the_score_stage_counts_closes_on_the_input_markers_alone(
    input_only: bool,
) -> None:
    """SAFE results never pass the session stage, so its windows need not wait for the
    session stage's markers; the input partitions still bound them (the minimum, a
    partition behind holds them), and what they call late follows the same watermark."""
    store = WindowStore(
        {},
        {},
        configs=MINUTE,
        lateness=LatenessPolicy(GRACE),
        aggregators=AGGREGATORS,
        channel_groups={"in": 0, "sess": 1},
        suite_groups={"safe": {"in"}} if input_only else None,
    )
    store.add(0, result("a", T0 + 5, 0, partition=0), {})
    store.add(0, result("b", T0 + 50, 0, partition=1), {})
    closes = T0 + 60 + GRACE
    assert store.advance(0, Marker("in", 0, 2, closes + 30)) == []
    assert store.advance(0, Marker("in", 1, 2, T0 + 55)) == []  # partition 1 is behind
    assert not store.add(0, result("c", T0 + 58, 1, partition=1), {}).late
    finals = store.advance(0, Marker("in", 1, 2, closes))  # the session stage is silent
    if input_only:
        assert [(e.final, e.state["count"]) for e in finals] == [(True, 3)]
        assert store.add(0, result("d", T0 + 59, 2, partition=1), {}).late
        assert store.advance(0, Marker("sess", 0, 1, closes)) == []  # closed once
    else:
        assert finals == []
        assert not store.add(0, result("d", T0 + 59, 2, partition=1), {}).late
        finals = store.advance(0, Marker("sess", 0, 1, closes))
        assert [(e.final, e.state["count"]) for e in finals] == [(True, 4)]
