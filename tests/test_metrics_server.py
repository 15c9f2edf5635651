"""The metrics server on real sockets: bounded threads, idle and stalled clients timed
out, `/healthz` answering meanwhile, and the address it listens on."""

from __future__ import annotations

import http.client
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from worker.config import load_settings
from worker.ops.health import METRICS_THREADS, MetricsServer
from worker.ops.telemetry import Telemetry


@pytest.fixture
def telemetry() -> Iterator[Telemetry]:
    made = Telemetry()
    yield made
    made.stop()


def get(port: int, path: str, timeout: float = 3.0) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def open_idle(port: int, count: int, partial: bool) -> list[socket.socket]:
    """`count` connections that send nothing (or half a request) and then wait."""
    sockets = []
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        if partial:
            sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # no blank line: stalled
        sockets.append(sock)
    return sockets


def test_idle_connections_do_not_grow_threads_and_healthz_answers(
    telemetry: Telemetry,
) -> None:
    """200 idle sockets took 202 threads on the former server; now the thread count is
    the loop plus a fixed pool, and requests are answered while they stay open."""
    before = threading.active_count()
    _server, port = telemetry.serve(0, "127.0.0.1")
    assert get(port, "/healthz") == (200, b'{"status":"ok"}')
    serving = threading.active_count()
    assert serving - before <= METRICS_THREADS + 1
    idle = open_idle(port, 100, partial=False) + open_idle(port, 100, partial=True)
    try:
        time.sleep(0.5)  # the loop has accepted them
        started = time.monotonic()
        status, _ = get(port, "/healthz")
        assert status == 200 and time.monotonic() - started < 2.0
        status, body = get(port, "/metrics")
        assert status == 200 and b"scorestream_build_info" in body
        assert threading.active_count() == serving
    finally:
        for sock in idle:
            sock.close()


def test_a_stalled_client_is_timed_out(telemetry: Telemetry) -> None:
    server = MetricsServer(telemetry.wsgi_app(), "127.0.0.1", 0, idle_timeout=1)
    try:
        [silent] = open_idle(server.port, 1, partial=False)
        [stalled] = open_idle(server.port, 1, partial=True)
        started = time.monotonic()
        for sock in (silent, stalled):
            sock.settimeout(10)
            assert sock.recv(1024) == b""  # closed by the server, no answer
            sock.close()
        assert time.monotonic() - started < 5.0  # 1 s idle + the 1 s check interval
        assert get(server.port, "/healthz")[0] == 200
    finally:
        server.stop()


def test_past_the_connection_limit_new_clients_wait_and_get_through(
    telemetry: Telemetry,
) -> None:
    """The limit bounds open sockets; once idle ones time out, a waiting request is
    answered (it is queued in the backlog, not refused)."""
    server = MetricsServer(telemetry.wsgi_app(), "127.0.0.1", 0, connection_limit=5, idle_timeout=1)
    try:
        idle = open_idle(server.port, 8, partial=True)
        time.sleep(0.3)
        status, _ = get(server.port, "/healthz", timeout=8)
        assert status == 200
        for sock in idle:
            sock.close()
    finally:
        server.stop()


def test_stop_closes_the_port(telemetry: Telemetry) -> None:
    server, port = telemetry.serve(0, "127.0.0.1")
    [idle] = open_idle(port, 1, partial=False)
    telemetry.stop()
    idle.settimeout(5)  # a connection left open would time out here
    try:
        ended = idle.recv(16) == b""  # closed by the server
    except ConnectionResetError:  # not accepted yet when the listener closed (a loaded CI)
        ended = True
    assert ended
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    assert server.port == port


def test_metrics_host_binds_the_given_address(telemetry: Telemetry) -> None:
    server, port = telemetry.serve(0, "127.0.0.1")
    assert server.host == "127.0.0.1"
    outward = _outward_address()
    if outward is None:
        pytest.skip("this machine has no address besides loopback")
    with pytest.raises(OSError):
        socket.create_connection((outward, port), timeout=1).close()


def test_metrics_host_setting() -> None:
    assert load_settings(environ={}).metrics_host == "0.0.0.0"  # containers: as before
    local = load_settings(environ={"SCORESTREAM_METRICS_HOST": "127.0.0.1"})
    assert local.metrics_host == "127.0.0.1"


def _outward_address() -> str | None:
    """An address of this machine other than loopback, if it has one."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("192.0.2.1", 9))  # TEST-NET-1: no packet is sent for UDP connect
        address = str(probe.getsockname()[0])
    except OSError:
        return None
    finally:
        probe.close()
    return None if address.startswith("127.") else address
