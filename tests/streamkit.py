"""Helpers for the integration tests: a broker per test, settings tuned for Tansu,
in-process and subprocess workers, and reading topics back."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import yaml
from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from topics.catalog import topic_names
from topics.provision import create_topics
from worker.commands.stream import produce_lines
from worker.config import Settings, load_settings
from worker.ops.broker import TANSU_STREAM_SETTINGS
from worker.stream import ScorestreamApp

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"

TANSU_STREAM = TANSU_STREAM_SETTINGS


def make_config(**overrides: Any) -> dict[str, Any]:
    """A config for one test: unique app id and topics, Tansu tuning, short windows."""
    tag = uuid.uuid4().hex[:8]
    config: dict[str, Any] = {
        "app_id": f"it-{tag}",
        "topics": {
            "input": f"in-{tag}",
            "results": f"results-{tag}",
            "aggregates": f"aggregates-{tag}",
            "gates": f"gates-{tag}",
            "dead_letters": f"dlq-{tag}",
        },
        "segment_by": ["model"],
        "windows": [{"size": "1m"}],
        "grace": "1s",
        "idle_timeout": "1s",
        "metrics_port": 0,
        "stream": dict(TANSU_STREAM),
        "extraction": {
            "schemas": {"duee": str(EXAMPLES / "extraction" / "duee_fin_schema.jsonl")},
            "default_schema": "duee",
        },
        "alignment": {"personas_dir": str(EXAMPLES / "personas"), "session_idle_timeout": "3s"},
    }
    for key, value in overrides.items():
        config[key] = value
    return config


def settings_of(config: dict[str, Any]) -> Settings:
    return load_settings(None, overrides=config, environ={})


def write_config(path: Path, config: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def tunetide_turn(session: int, turn: int, text: str, final: bool) -> dict[str, Any]:
    """An alignment envelope: turn `turn` of session `s{session}` of the tunetide persona,
    model m1, with id `s{session}:{turn}`."""
    return {
        "id": f"s{session}:{turn}",
        "suite": "alignment",
        "model": "m1",
        "payload": {
            "session_id": f"s{session}",
            "turn_index": turn,
            "persona_id": "tunetide",
            "text": text,
            "final": final,
        },
    }


def envelopes(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def retime(
    records: Iterable[dict[str, Any]], window_s: int = 60, step_ms: int = 5, lead_s: float = 0.0
) -> list[dict[str, Any]]:
    """Give records consecutive event times that end `lead_s` before a window boundary in
    the recent past, so their windows close about `lead_s + grace` after they are read."""
    items = [dict(record) for record in records]
    now = datetime.now(UTC)
    boundary = datetime.fromtimestamp((now.timestamp() // window_s) * window_s, UTC)
    start = boundary - timedelta(seconds=lead_s, milliseconds=step_ms * (len(items) + 1))
    for index, record in enumerate(items):
        stamp = start + timedelta(milliseconds=step_ms * index)
        record["ts"] = stamp.isoformat().replace("+00:00", "Z")
    return items


def live(records: Iterable[dict[str, Any]], step_ms: int = 5) -> list[dict[str, Any]]:
    """Give records consecutive event times from now on, as live traffic has."""
    items = [dict(record) for record in records]
    start = datetime.now(UTC)
    for index, record in enumerate(items):
        stamp = start + timedelta(milliseconds=step_ms * index)
        record["ts"] = stamp.isoformat().replace("+00:00", "Z")
    return items


def as_lines(records: Iterable[dict[str, Any]]) -> list[bytes]:
    return [orjson.dumps(record) for record in records]


async def provision(settings: Settings, broker_url: str) -> None:
    await create_topics(broker_url, topic_names(settings.topics), settings.stream.partitions)


async def topic_layout(bootstrap: str) -> dict[str, int]:
    """Every topic on the broker with its partition count."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        described = await admin.describe_topics(await admin.list_topics())
        return {info["topic"]: len(info["partitions"]) for info in described}
    finally:
        await admin.close()


async def create_layout(bootstrap: str, layout: dict[str, int]) -> None:
    """Create the topics of a `topic_layout` (a broker that kept its topics, not its data)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, n, 1) for name, n in sorted(layout.items())])
    finally:
        await admin.close()


async def produce(bootstrap: str, topic: str, lines: list[bytes]) -> None:
    await produce_lines(bootstrap, topic, lines)


class TopicReader:
    """Reads topics from the beginning (no consumer group) and keeps every record."""

    def __init__(self, bootstrap: str, *topics: str) -> None:
        self.consumer = AIOKafkaConsumer(
            *topics, bootstrap_servers=bootstrap, auto_offset_reset="earliest"
        )
        self.records: dict[str, list[tuple[bytes | None, Any]]] = {t: [] for t in topics}

    async def __aenter__(self) -> TopicReader:
        await self.consumer.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.consumer.stop()

    async def poll(self, seconds: float = 0.5) -> None:
        batch = await self.consumer.getmany(timeout_ms=int(seconds * 1000))
        for partition, messages in batch.items():
            for message in messages:
                self.records[partition.topic].append((message.key, orjson.loads(message.value)))

    async def until(self, condition: Any, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not condition(self):
            if time.monotonic() > deadline:
                counts = {topic: len(items) for topic, items in self.records.items()}
                raise AssertionError(f"timed out after {timeout}s waiting for {what}: {counts}")
            await self.poll()

    def values(self, topic: str) -> list[Any]:
        return [value for _, value in self.records[topic]]

    def keyed(self, topic: str) -> list[tuple[str, Any]]:
        return [((key or b"").decode(), value) for key, value in self.records[topic]]


class InProcessWorker:
    """A `ScorestreamApp` started on the test's event loop."""

    def __init__(self, settings: Settings, broker_url: str) -> None:
        self.scorer = ScorestreamApp(settings, broker_url)

    async def __aenter__(self) -> ScorestreamApp:
        await self.scorer.app.start()
        await asyncio.wait_for(self.scorer.ready.wait(), 60)
        return self.scorer

    async def __aexit__(self, *exc: object) -> None:
        await self.scorer.app.stop()
        self.scorer.close()


class WorkerProcess:
    """`scorestream worker` in a subprocess, as an operator runs it."""

    def __init__(self, config_path: Path, broker_url: str, log_path: Path) -> None:
        self.args = [
            sys.executable,
            "-m",
            "worker",
            "worker",
            "--broker",
            broker_url,
            "--config",
            str(config_path),
        ]
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> WorkerProcess:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                self.args, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        return self

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def metrics_url(self, timeout: float = 60.0) -> str:
        """The /metrics URL the worker announced last (a restart announces a new one)."""
        deadline = time.monotonic() + timeout
        while not (found := re.findall(r"metrics on (http://\S+/metrics)", self.log())):
            if time.monotonic() > deadline:
                raise AssertionError(f"no metrics URL announced:\n{self.log()[-4000:]}")
            time.sleep(0.1)
        return str(found[-1])

    def wait_ready(self, timeout: float = 90.0, occurrence: int = 1) -> None:
        deadline = time.monotonic() + timeout
        while len(re.findall(r"scorestream worker ready", self.log())) < occurrence:
            assert self.process is not None
            if self.process.poll() is not None:
                raise AssertionError(f"worker exited early:\n{self.log()[-4000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"worker not ready after {timeout}s:\n{self.log()[-4000:]}")
            time.sleep(0.1)

    def kill(self) -> None:
        """SIGKILL: no shutdown, no commit, no flush."""
        assert self.process is not None
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(10)

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)
