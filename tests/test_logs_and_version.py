"""`scorestream --version`, JSON log lines, and the consumer-lag sampling."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
from faust.types import TP

from worker.config import load_settings
from worker.ops.lag import event_time_lag, install_lag_monitor, partition_lags, sample_lags
from worker.ops.logs import JsonFormatter
from worker.ops.telemetry import Telemetry

REPO = Path(__file__).resolve().parent.parent


def test_version_prints_the_package_version() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "worker", "--version"],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO,
    )
    assert done.returncode == 0
    assert done.stdout.strip() == "scorestream 0.1.0"


def test_json_log_lines_carry_level_logger_message_and_traceback() -> None:
    formatter = JsonFormatter()
    record = logging.LogRecord("scorestream", logging.WARNING, __file__, 1, "x=%s", (3,), None)
    entry = orjson.loads(formatter.format(record))
    assert entry["level"] == "warning" and entry["logger"] == "scorestream"
    assert entry["message"] == "x=3" and entry["ts"].endswith("+00:00")
    try:
        raise ValueError("boom")
    except ValueError:
        failed = logging.LogRecord(
            "scorestream", logging.ERROR, __file__, 1, "failed", (), sys.exc_info()
        )
    entry = orjson.loads(formatter.format(failed))
    assert "ValueError: boom" in entry["exc_info"]


def test_partition_lag_is_end_minus_next_offset_never_negative() -> None:
    lags = partition_lags({0: 100, 1: 50, 2: 7}, {0: 90, 1: None, 2: 9})
    assert lags == {0: 10, 1: 50, 2: 0}


class FakeConsumer:
    """The parts of Faust's consumer the lag sampler reads."""

    def __init__(self) -> None:
        self.assigned = {TP("in", 0), TP("in", 1), TP("other", 0)}
        self._read_offset = {TP("in", 0): 41}  # partition 1: nothing read yet
        self._committed_offset: dict[TP, int] = {}  # nothing committed yet

    def assignment(self) -> set[TP]:
        return self.assigned

    async def highwaters(self, *partitions: TP) -> dict[TP, int]:
        return {tp: {0: 50, 1: 7}[tp.partition] for tp in partitions}

    async def earliest_offsets(self, *partitions: TP) -> dict[TP, int]:
        return dict.fromkeys(partitions, 3)  # where a new group starts reading


async def test_sampled_lags_cover_only_the_assigned_partitions_of_the_topic() -> None:
    assert await sample_lags(FakeConsumer(), "in") == {0: 8, 1: 4}
    assert await sample_lags(FakeConsumer(), "absent") == {}


async def test_fetched_records_not_yet_processed_still_count_as_lag() -> None:
    consumer = FakeConsumer()
    consumer._committed_offset = {TP("in", 0): 20}  # read up to 41, processed up to 19
    assert await sample_lags(consumer, "in") == {0: 30, 1: 4}


def test_event_time_lag_is_wall_clock_minus_the_oldest_known_watermark() -> None:
    assert event_time_lag(1000.0, [990.0, 875.0, None]) == 125.0
    assert event_time_lag(1000.0, [1003.0]) == 0.0  # a watermark ahead: no lag
    assert event_time_lag(1000.0, [None]) is None
    assert event_time_lag(1000.0, []) is None


class FakeApp:
    """Collects the timers the lag monitor installs."""

    def __init__(self) -> None:
        self.consumer = FakeConsumer()
        self.timers: dict[float, Any] = {}

    def timer(self, interval: float) -> Any:
        def register(function: Any) -> Any:
            self.timers[interval] = function
            return function

        return register


async def test_the_monitor_samples_every_topic_read_and_each_stage_event_time_lag() -> None:
    app = FakeApp()
    telemetry = Telemetry()
    settings = load_settings(None, environ={})
    install_lag_monitor(
        app,
        telemetry,
        ["in", "other"],
        settings,
        watermarks=lambda: {"score": [998.0], "sessions": [990.0, 875.0], "windows": [None]},
        clock=lambda: 1000.0,
    )
    for sample in app.timers.values():
        await sample()
    lags = {
        (s.labels["topic"], s.labels["partition"]): s.value
        for metric in telemetry.registry.collect()
        for s in metric.samples
        if s.name == "scorestream_consumer_lag"
    }
    assert lags == {("in", "0"): 8, ("in", "1"): 4, ("other", "0"): 47}
    behind = {
        s.labels["stage"]: s.value
        for metric in telemetry.registry.collect()
        for s in metric.samples
        if s.name == "scorestream_event_time_lag_seconds"
    }
    assert behind == {"score": 2.0, "sessions": 125.0}  # windows: no watermark yet
