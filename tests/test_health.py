"""`/healthz`, `/readyz`, the consumer-lag gauge and build info of the metrics server,
over real HTTP; and a real worker's `/readyz` when its broker goes away and comes back."""

from __future__ import annotations

import asyncio
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from tests.streamkit import (
    WorkerProcess,
    create_layout,
    make_config,
    provision,
    settings_of,
    topic_layout,
    write_config,
)
from worker.ops.broker import EmbeddedBroker
from worker.ops.telemetry import Telemetry


@pytest.fixture
def served() -> Iterator[tuple[Telemetry, str]]:
    telemetry = Telemetry()
    _server, port = telemetry.serve(0, host="127.0.0.1")
    try:
        yield telemetry, f"http://127.0.0.1:{port}"
    finally:
        telemetry.stop()


def get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as reply:
            return reply.status, reply.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def test_healthz_answers_while_the_process_serves(served: tuple[Telemetry, str]) -> None:
    _telemetry, base = served
    assert get(base + "/healthz") == (200, b'{"status":"ok"}')


def test_readyz_follows_the_app_callback_and_the_broker_state(
    served: tuple[Telemetry, str],
) -> None:
    telemetry, base = served
    status, body = get(base + "/readyz")
    assert status == 503
    assert orjson.loads(body) == {"ready": False, "started": False, "broker": "unknown"}
    started = {"value": False}
    telemetry.set_readiness(lambda: started["value"])
    assert get(base + "/readyz")[0] == 503
    started["value"] = True
    assert get(base + "/readyz")[0] == 200  # started, broker state not known yet
    telemetry.set_broker_connected(False)
    status, body = get(base + "/readyz")
    assert status == 503 and orjson.loads(body)["broker"] == "disconnected"
    telemetry.set_broker_connected(True)
    status, body = get(base + "/readyz")
    assert status == 200
    assert orjson.loads(body) == {"ready": True, "started": True, "broker": "connected"}
    assert b"scorestream_broker_connected 1.0" in get(base + "/metrics")[1]


def test_consumer_lag_per_partition_and_revoked_partitions_vanish(
    served: tuple[Telemetry, str],
) -> None:
    telemetry, base = served
    telemetry.set_consumer_lag("llm.responses.v1", {0: 12, 1: 0, 2: 5})
    telemetry.set_consumer_lag("llm.responses.v1", {1: 3, 2: 4})  # partition 0 revoked
    body = get(base + "/metrics")[1].decode()
    lines = [line for line in body.splitlines() if line.startswith("scorestream_consumer_lag{")]
    assert sorted(lines) == [
        'scorestream_consumer_lag{partition="1",topic="llm.responses.v1"} 3.0',
        'scorestream_consumer_lag{partition="2",topic="llm.responses.v1"} 4.0',
    ]


def test_build_info_names_the_version(served: tuple[Telemetry, str]) -> None:
    _telemetry, base = served
    body = get(base + "/metrics")[1].decode()
    (line,) = [line for line in body.splitlines() if line.startswith("scorestream_build_info{")]
    assert 'version="0.1.0"' in line and line.endswith(" 1.0")


def wait_for(url: str, status: int, broker: str, timeout: float) -> None:
    """Poll `/readyz` until it answers `status` with this broker state."""
    deadline = time.monotonic() + timeout
    while True:
        got, body = get(url)
        if got == status and orjson.loads(body)["broker"] == broker:
            return
        assert time.monotonic() < deadline, f"/readyz still {got} {body!r}"
        time.sleep(0.5)


@pytest.mark.integration
def test_readyz_follows_the_broker_going_away_and_coming_back(tmp_path: Path) -> None:
    broker = EmbeddedBroker().start()
    config = make_config()
    config["stream"] = {**config["stream"], "connect_timeout": 2}
    asyncio.run(provision(settings_of(config), broker.url))
    worker = WorkerProcess(write_config(tmp_path / "c.yaml", config), broker.url, tmp_path / "w")
    worker.start()
    try:
        worker.wait_ready()
        base = worker.metrics_url().removesuffix("/metrics")
        wait_for(base + "/readyz", 200, "connected", 30)
        layout = asyncio.run(topic_layout(broker.bootstrap))
        broker.stop()
        wait_for(base + "/readyz", 503, "disconnected", 20)
        assert b"scorestream_broker_connected 0.0" in get(base + "/metrics")[1]
        # Tansu keeps nothing on disk; a restarted Kafka broker still has its topics.
        broker = EmbeddedBroker(port=broker.port).start()
        asyncio.run(create_layout(broker.bootstrap, layout))
        wait_for(base + "/readyz", 200, "connected", 90)
        assert worker.process is not None and worker.process.poll() is None
    finally:
        worker.stop()
        broker.stop()


@pytest.mark.integration
def test_a_worker_whose_topics_vanish_exits_3_and_starting_it_again_creates_them(
    tmp_path: Path,
) -> None:
    broker = EmbeddedBroker().start()
    config = make_config()
    config["stream"] = {**config["stream"], "connect_timeout": 2}
    settings = settings_of(config)
    asyncio.run(provision(settings, broker.url))
    worker = WorkerProcess(write_config(tmp_path / "c.yaml", config), broker.url, tmp_path / "w")
    worker.start()
    try:
        worker.wait_ready()
        before = asyncio.run(topic_layout(broker.bootstrap))
        broker.stop()
        broker = EmbeddedBroker(port=broker.port).start()  # Tansu keeps nothing: no topics
        assert worker.process is not None
        assert worker.process.wait(90) == 3
        log = worker.log()
        assert f"no longer has the worker's topics {settings.topics.aggregates}, " in log
        assert f"{settings.app_id}-windows-changelog" in log
        worker.start()  # as its supervisor would
        worker.wait_ready(occurrence=2)
        assert asyncio.run(topic_layout(broker.bootstrap)) == before
    finally:
        worker.stop()
        broker.stop()
