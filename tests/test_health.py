"""`/healthz`, `/readyz`, the consumer-lag gauge and build info of the metrics server,
over real HTTP."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator

import orjson
import pytest

from worker.telemetry import Telemetry


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
