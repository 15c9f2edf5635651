"""`scorestream topics` and `scorestream produce` through a real subprocess and broker."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.streamkit import EXAMPLES, TopicReader, envelopes
from worker.ops.broker import EmbeddedBroker

pytestmark = pytest.mark.integration


def scorestream(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "worker", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "HOME": str(Path.home())},
    )


def test_topics_create_then_list(broker: EmbeddedBroker) -> None:
    created = scorestream("topics", "create", "--broker", broker.url)
    assert created.returncode == 0, created.stderr
    assert "created llm.responses.v1" in created.stdout
    again = scorestream("topics", "create", "--broker", broker.url)
    assert again.returncode == 0 and "all topics exist" in again.stdout
    listed = scorestream("topics", "list", "--broker", broker.url)
    assert listed.returncode == 0, listed.stderr
    lines = {line.split()[0]: line for line in listed.stdout.splitlines()}
    assert "4 partitions" in lines["llm.responses.v1"]
    assert "1 partitions" in lines["llm.responses.v1.dlq"]


def test_a_command_without_a_broker_is_a_usage_error() -> None:
    done = scorestream("topics", "list")
    assert done.returncode == 3
    assert "no broker" in done.stderr


async def test_produce_publishes_each_line_with_the_advisory_key(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    source = EXAMPLES / "alignment" / "envelopes.jsonl"
    records = envelopes(source)
    done = scorestream("produce", str(source), "--broker", broker.url, "--topic", "in-test")
    assert done.returncode == 0, done.stderr
    async with TopicReader(broker.bootstrap, "in-test") as reader:
        await reader.until(
            lambda r: len(r.records["in-test"]) >= len(records), timeout=30, what="records"
        )
    keys = sorted(key for key, _ in reader.keyed("in-test"))
    assert keys == sorted(record["payload"]["session_id"] for record in records)
