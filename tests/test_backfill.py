"""Backfill (README: Backfill) and late records, with the shipped example config.

History produced before its own worker starts is scored into windows of its own time,
all of them closed with a final aggregate and none late. The same history produced again
into that worker, now caught up with the wall clock, is late: results, no aggregate, and
a log line naming the closed window."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.streamkit import EXAMPLES, TopicReader, WorkerProcess, envelopes
from worker.demo.retime import event_seconds
from worker.ops.broker import EmbeddedBroker, free_port

REPO = Path(__file__).resolve().parent.parent
CONFIG = REPO / "examples" / "backfill" / "config.yaml"
HISTORY = EXAMPLES / "safe" / "envelopes.jsonl"

pytestmark = pytest.mark.integration


def scorestream(*args: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "worker", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def minute_windows(values: list[dict[str, Any]]) -> dict[float, dict[str, Any]]:
    """The newest SAFE all-cases 60 s aggregate of each window (final wins)."""
    newest: dict[float, dict[str, Any]] = {}
    for value in values:
        if value["suite"] == "safe" and not value["segment"] and value["window"]["size_s"] == 60:
            start = event_seconds(value["window"]["start"])
            assert start is not None
            if not newest.get(start, {}).get("final"):
                newest[start] = value
    return newest


async def test_backfill_scores_history_into_its_own_windows_and_late_history_is_logged(
    broker: EmbeddedBroker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in ("SCORESTREAM_CONFIG", "SCORESTREAM_BROKER"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("SCORESTREAM_METRICS_PORT", str(free_port()))
    history = envelopes(HISTORY)
    expected_windows = {r["ts"] // 60_000 * 60.0 for r in history}  # epoch milliseconds
    scorestream("topics", "create", "--config", str(CONFIG), "--broker", broker.url)
    scorestream("produce", str(HISTORY), "--config", str(CONFIG), "--broker", broker.url)
    worker = WorkerProcess(CONFIG, broker.url, tmp_path / "worker.log").start()
    try:
        async with TopicReader(
            broker.bootstrap, "llm.eval.results.v1", "llm.eval.aggregates.v1"
        ) as reader:

            def all_final(r: TopicReader) -> bool:
                windows = minute_windows(r.values("llm.eval.aggregates.v1"))
                return set(windows) == expected_windows and all(
                    w["final"] for w in windows.values()
                )

            await reader.until(all_final, timeout=150, what="every history window final")
            windows = minute_windows(reader.values("llm.eval.aggregates.v1"))
            assert sum(w["count"] for w in windows.values()) == len(history)
            assert "late:" not in worker.log()

            # The same history again: the worker's watermark now follows the wall clock.
            scorestream("produce", str(HISTORY), "--config", str(CONFIG), "--broker", broker.url)
            await reader.until(
                lambda r: (
                    len(r.values("llm.eval.results.v1")) >= 2 * len(history)
                    and "late:" in worker.log()
                ),
                timeout=60,
                what="the second round's results and a late-record log line",
            )
            await reader.poll(1.0)
            assert minute_windows(reader.values("llm.eval.aggregates.v1")) == windows
    finally:
        worker.stop()
    line = next(line for line in worker.log().splitlines() if "late:" in line)
    assert "records of suite safe at 2025-01-15T10:10:00.000Z" in line
    assert "for the 1m window 2025-01-15T10:" in line
    assert "changes no aggregate" in line
