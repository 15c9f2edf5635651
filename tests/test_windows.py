"""Event-time windows: assignment, watermark, closing each window once, late records."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from worker.config import WindowConfig
from worker.windows import TrackedWindow, Watermark, WindowKey, WindowTracker, windows_for

MINUTE = WindowConfig(size=60)
HOUR_BY_5M = WindowConfig(size=3600, step=300)
BASE = 1_699_999_800.0  # 5-minute aligned


def test_tumbling_window_contains_the_event_and_is_aligned() -> None:
    [key] = windows_for(BASE + 61.5, MINUTE)
    assert key == WindowKey(60.0, None, BASE + 60)
    assert key.end == BASE + 120
    assert key.name == "1m"


def test_event_on_a_boundary_belongs_to_the_window_starting_there() -> None:
    [key] = windows_for(BASE + 60, MINUTE)
    assert key.start == BASE + 60


def test_hopping_event_is_in_size_over_step_windows() -> None:
    keys = windows_for(BASE + 10, HOUR_BY_5M)
    assert len(keys) == 12
    assert [k.start for k in keys] == [BASE - 300 * back for back in range(11, -1, -1)]
    assert all(k.name == "1h/5m" and k.contains(BASE + 10) for k in keys)


def test_step_equal_to_size_is_tumbling() -> None:
    [key] = windows_for(BASE, WindowConfig(size=60, step=60))
    assert key.step is None and key.name == "1m"


@given(
    event_time=st.floats(min_value=0, max_value=4e9, allow_nan=False),
    config=st.sampled_from(
        [MINUTE, HOUR_BY_5M, WindowConfig(size=0.5, step=0.25), WindowConfig(size=7)]
    ),
)
def test_every_window_assigned_contains_the_event(event_time: float, config: WindowConfig) -> None:
    keys = windows_for(event_time, config)
    hop = config.step or config.size
    assert len(keys) == round(config.size / hop)
    assert all(key.start <= event_time < key.end for key in keys)


def test_span_is_the_wire_window() -> None:
    span = WindowKey(60.0, None, BASE).span()
    assert span.start == datetime.fromtimestamp(BASE, UTC)
    assert (span.end - span.start).total_seconds() == 60
    assert span.size_s == 60


def test_watermark_is_largest_time_plus_wall_clock_elapsed() -> None:
    mark = Watermark()
    assert mark.value(now=5.0) is None
    mark.observe(100.0, now=1000.0)
    mark.observe(90.0, now=1001.0)  # older record: ignored
    assert mark.value(now=1001.0) == 101.0
    assert mark.value(now=1030.0) == 130.0
    mark.observe(500.0, now=1030.0)  # replayed history runs ahead of the wall clock
    assert mark.value(now=1030.0) == 500.0
    assert mark.max_event_time == 500.0


def test_watermark_never_moves_backwards() -> None:
    mark = Watermark()
    mark.observe(100.0, now=0.0)
    mark.observe(120.0, now=50.0)  # 120 > largest seen, but < extrapolated 150
    assert mark.value(now=50.0) == 150.0
    assert mark.value(now=60.0) == 160.0


def test_window_closes_at_end_plus_grace() -> None:
    mark = Watermark()
    key = WindowKey(60.0, None, 0.0)
    mark.observe(30.0, now=0.0)
    assert not mark.has_closed(key, grace=10.0, now=39.9)
    assert mark.has_closed(key, grace=10.0, now=40.0)


def tracker(grace: float = 10.0) -> WindowTracker:
    return WindowTracker(windows=[MINUTE], grace=grace)


def test_windows_close_when_traffic_stops() -> None:
    track = tracker()
    admission = track.admit("safe", "all", BASE + 5, now=0.0)
    assert not admission.is_late
    assert track.due(now=60.0) == []  # watermark BASE + 65 < end + grace = BASE + 70
    closed = track.due(now=65.0)
    assert closed == [TrackedWindow("safe", "all", WindowKey(60.0, None, BASE))]
    assert track.due(now=500.0) == []  # each window closes exactly once


def test_replayed_history_closes_by_its_own_timestamps() -> None:
    track = tracker()
    for offset in range(0, 600, 7):  # ten minutes of events replayed in an instant
        track.admit("safe", "all", BASE + offset, now=0.0)
    closed = track.due(now=0.0)
    # watermark BASE + 595: windows ending at or before BASE + 585 are closed
    assert [t.window.start for t in closed] == [BASE + 60 * i for i in range(9)]


def test_record_for_a_closed_window_is_late_and_registers_nothing() -> None:
    track = tracker()
    track.admit("safe", "all", BASE + 5, now=0.0)
    track.admit("safe", "all", BASE + 200, now=0.0)
    track.due(now=0.0)
    late = track.admit("safe", "all", BASE + 6, now=0.0)
    assert late.is_late and late.open == []
    assert [t.window.start for t in late.late] == [BASE]
    assert all(t.window.start != BASE for t in track.open)


def test_record_behind_watermark_but_within_grace_is_on_time() -> None:
    track = tracker(grace=10.0)
    track.admit("safe", "all", BASE + 65, now=0.0)  # watermark BASE + 65 < BASE + 60 + 10
    admission = track.admit("safe", "all", BASE + 59, now=0.0)
    assert not admission.is_late


def test_late_for_a_window_never_opened_in_that_segment() -> None:
    track = tracker()
    track.admit("safe", "all", BASE + 500, now=0.0)
    admission = track.admit("safe", "model=m", BASE + 1, now=0.0)
    assert admission.is_late


def test_hopping_record_can_be_late_for_some_windows_only() -> None:
    track = WindowTracker(windows=[MINUTE, HOUR_BY_5M], grace=10.0)
    track.admit("safe", "all", BASE + 300, now=0.0)
    track.due(now=0.0)
    admission = track.admit("safe", "all", BASE + 30, now=0.0)
    assert [t.window.name for t in admission.late] == ["1m"]
    assert len(admission.open) == 12


def test_segments_and_suites_close_independently_but_on_one_watermark() -> None:
    track = tracker()
    track.admit("safe", "all", BASE + 1, now=0.0)
    track.admit("extraction", "model=m", BASE + 2, now=0.0)
    closed = track.due(now=100.0)
    assert {(t.suite, t.segment) for t in closed} == {("safe", "all"), ("extraction", "model=m")}


def test_closed_windows_are_forgotten_after_the_horizon_but_still_late() -> None:
    track = tracker(grace=10.0)
    track.admit("safe", "all", BASE + 1, now=0.0)
    track.due(now=69.0)
    assert len(track.closed) == 1
    track.due(now=69.0 + 60 + 10 + 1)  # end + horizon behind the watermark
    assert track.closed == set()
    assert track.admit("safe", "all", BASE + 2, now=200.0).is_late


def test_tracker_state_round_trips_through_json() -> None:
    track = tracker()
    track.admit("safe", "all", BASE + 1, now=0.0)
    track.admit("safe", "all", BASE + 100, now=0.0)
    track.due(now=0.0)
    restored = WindowTracker.from_json(
        json.loads(json.dumps(track.to_json())), windows=[MINUTE], grace=10.0
    )
    assert restored.open == track.open
    assert restored.closed == track.closed
    assert restored.watermark.value(now=5.0) == track.watermark.value(now=5.0)
    assert restored.admit("safe", "all", BASE + 2, now=0.0).is_late


@pytest.mark.parametrize("grace", [0.0, 10.0])
def test_window_due_exactly_at_end_plus_grace(grace: float) -> None:
    track = tracker(grace=grace)
    track.admit("safe", "all", BASE, now=0.0)
    track.admit("safe", "all", BASE + 60 + grace - 0.001, now=0.0)
    assert track.due(now=0.0) == []
    assert len(track.due(now=0.001)) == 1
