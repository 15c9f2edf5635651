"""Event-time windows: which windows an event time falls into."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from worker.config import WindowConfig
from worker.windowing.windows import WindowKey, pane_start_of, pane_width, window_ends, windows_for

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


@pytest.mark.parametrize(
    "config",
    [WindowConfig(size=60), WindowConfig(size=3600, step=300), WindowConfig(size=10, step=2.5)],
)
def test_window_ends_are_those_of_the_windows_containing_the_event(config: WindowConfig) -> None:
    """The hot path's arithmetic agrees with `windows_for`, boundaries and rounding included."""
    times = [0.0, 1e-9, 59.999999, 60.0, 299.9999999, 300.0, 1_700_000_000.1, 1_700_000_100.0]
    times += [1_700_000_000 + step * 0.37 for step in range(400)]
    for event_time in times:
        windows = windows_for(event_time, config)
        assert window_ends(event_time, config) == (windows[0].end, windows[-1].end)


@pytest.mark.parametrize(
    ("windows", "width"),
    [
        ([WindowConfig(size=60), WindowConfig(size=3600, step=300)], 60.0),
        ([WindowConfig(size=60), WindowConfig(size=90)], 30.0),
        ([WindowConfig(size=1.5)], 1.5),
        ([WindowConfig(size=0.0005)], None),  # no whole number of milliseconds
    ],
)
def test_a_pane_lies_inside_one_pane_of_every_configuration(
    windows: list[WindowConfig], width: float | None
) -> None:
    assert pane_width(windows) == width
    if width is None:
        return
    for event_time in (1_700_000_000.0, 1_700_000_059.999, 1_700_000_060.0, 17.25):
        start = pane_start_of(event_time, width)
        assert start <= event_time < start + width
        for window in windows:  # everything in the pane shares its windows
            assert windows_for(start, window) == windows_for(event_time, window)
