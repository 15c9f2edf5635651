"""Late-record log lines: which closed window, by how much, and at most one per interval."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

import pytest

from worker.config import WindowConfig
from worker.windowing.late_records import LateRecordLog, closed_window, describe
from worker.windowing.lateness import LatenessPolicy

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC).timestamp()
MINUTE = WindowConfig(size=60)
HOUR_BY_5M = WindowConfig(size=3600, step=300)


def test_a_record_for_a_closed_window_names_it_and_how_long_it_was_closed() -> None:
    window = closed_window(T0 + 30, T0 + 3600, [MINUTE, HOUR_BY_5M], LatenessPolicy(10))
    assert window is not None
    assert (window.config, window.start, window.end) == (MINUTE, T0, T0 + 60)
    assert window.late_by == 3600 - 70
    line = describe("safe", T0 + 30, window)
    assert "a record of suite safe at 2026-01-01T12:00:30.000Z" in line
    assert "1m window 2026-01-01T12:00:00.000Z .. 2026-01-01T12:01:00.000Z" in line
    assert "closed 58m 50s before" in line
    assert "changes no aggregate" in line and "--retime" in line


def test_open_windows_and_an_unknown_watermark_are_not_late() -> None:
    assert closed_window(T0 + 30, T0 + 69.9, [MINUTE], LatenessPolicy(10)) is None
    assert closed_window(T0 + 30, None, [MINUTE], LatenessPolicy(10)) is None
    # the oldest hopping window containing it closes first
    window = closed_window(T0 + 30, T0 + 3600 + 10, [HOUR_BY_5M], LatenessPolicy(10))
    assert window is not None and (window.start, window.end) == (T0 - 3300, T0 + 300)


def test_one_line_per_suite_and_interval_counting_the_ones_between(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = [0.0]
    late = LateRecordLog(
        [MINUTE],
        LatenessPolicy(10),
        logging.getLogger("test.late"),
        interval=10,
        clock=lambda: clock[0],
    )
    watermark = T0 + 3600
    with caplog.at_level(logging.WARNING, logger="test.late"):
        late.record("safe", T0 + 1, watermark)
        late.records("safe", [(T0 + 60, 3), (T0 + 3590, 4)], watermark)  # 3 late, 4 open
        late.record("extraction", T0 + 1, watermark)
        clock[0] = 10.0
        late.records("safe", [(T0 + 120, 2), (T0 + 180, 5)], watermark)
    lines = [record.getMessage() for record in caplog.records]
    assert len(lines) == 3
    assert lines[0].startswith("late: a record of suite safe")
    assert lines[1].startswith("late: a record of suite extraction")
    assert lines[2].startswith("late: 7 records of suite safe at 2026-01-01T12:02:00.000Z")
    assert lines[2].endswith("(3 more late records of safe since the last line)")
