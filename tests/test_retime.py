"""`worker.demo.retime` (shared by the demo and `produce --retime`) and `produce --retime`
through the command line against a real broker."""

from __future__ import annotations

import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import orjson
import pytest

from tests.streamkit import EXAMPLES, TopicReader, envelopes
from worker.demo.retime import MILLISECOND, event_seconds, retime
from worker.ops.broker import EmbeddedBroker

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC).timestamp()


def test_retime_by_milliseconds_ends_the_file_now_and_keeps_its_spacing() -> None:
    lines = [
        b'{"id": "a", "ts": 1736935800000}',
        b'{"id": "b", "ts": "2025-01-15T10:14:45Z"}',
        b'{"id": "c"}',
        b"not json",
    ]
    now = T0 + 0.4567
    out, shift = retime(lines, MILLISECOND, now)
    first, last = (event_seconds(orjson.loads(line)["ts"]) for line in out[:2])
    assert first is not None and last is not None
    assert now - 0.001 < last <= now
    assert last - first == pytest.approx(285.0)
    assert shift == pytest.approx(now - (1736935800 + 285), abs=0.001)
    assert out[2:] == lines[2:]


def test_retime_of_a_file_without_times_changes_nothing() -> None:
    lines = [b'{"id": "a"}', b"[1, 2]"]
    assert retime(lines, MILLISECOND, T0) == (lines, 0.0)


@pytest.mark.integration
async def test_produce_retime_publishes_the_file_ending_now(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    source = EXAMPLES / "safe" / "envelopes.jsonl"
    records = envelopes(source)
    before = time.time()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "worker",
            "produce",
            str(source),
            "--retime",
            "--broker",
            broker.url,
            "--topic",
            "retimed",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    after = time.time()
    assert done.returncode == 0, done.stderr
    assert "re-timed 20 records by +" in done.stderr
    async with TopicReader(broker.bootstrap, "retimed") as reader:
        await reader.until(lambda r: len(r.records["retimed"]) >= 20, timeout=30, what="records")
    sent = {value["id"]: value for value in reader.values("retimed")}
    times = [event_seconds(value["ts"]) for value in sent.values()]
    assert None not in times
    assert before - 0.001 <= max(times) <= after  # type: ignore[type-var]
    originals = [event_seconds(record["ts"]) for record in records]
    shift = max(times) - max(originals)  # type: ignore[type-var, operator]
    for record in records:  # one shift for all: the file's spacing is kept
        moved = event_seconds(sent[record["id"]]["ts"])
        assert moved == pytest.approx(event_seconds(record["ts"]) + shift, abs=0.002)
        assert sent[record["id"]]["payload"] == record["payload"]
