"""The metrics server under slow clients, on real sockets over loopback: 600 sockets that
trickle one header byte a second (reconnecting when closed) do not delay `/healthz` or
`/metrics` past 1 s, and a request trickled past the request deadline is closed."""

from __future__ import annotations

import http.client
import resource
import socket
import threading
import time
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, Counter

from worker.ops.health import METRICS_REQUEST_DEADLINE, MetricsServer, endpoints_app

TRICKLERS = 600
TRICKLE_SECONDS = 8  # one byte per socket per second, then the attack stops
# Never a complete request within the attack: a request line and a long header.
TRICKLE_REQUEST = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 64
ANSWER_WITHIN = 1.0  # seconds, for every request of a well-behaved client

pytestmark = pytest.mark.system  # seconds of real sockets: not in the fast lane


@pytest.fixture(autouse=True)
def enough_file_descriptors() -> None:
    """Both ends of every socket live in this process: about 2 x 600 descriptors."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 4 * TRICKLERS
    if soft != resource.RLIM_INFINITY and soft < wanted:
        if hard != resource.RLIM_INFINITY and hard < wanted:
            pytest.skip(f"RLIMIT_NOFILE hard limit {hard} < {wanted}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))


@pytest.fixture
def server() -> Iterator[MetricsServer]:
    registry = CollectorRegistry()
    Counter("slow_clients_probe", "present in every scrape", registry=registry).inc()
    made = MetricsServer(endpoints_app(registry, lambda: {"ready": True}), "127.0.0.1", 0)
    yield made
    made.stop()


def timed_get(port: int, path: str, timeout: float = 5.0) -> tuple[float, int, bytes]:
    """(seconds taken, status, body); a failure counts as `timeout` seconds, status 0."""
    started = time.monotonic()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        status, body = response.status, response.read()
    except OSError:
        return timeout, 0, b""
    finally:
        connection.close()
    return time.monotonic() - started, status, body


def connect(port: int) -> socket.socket | None:
    try:
        sock = socket.create_connection(("127.0.0.1", port), timeout=0.5)
    except OSError:
        return None
    sock.setblocking(False)
    return sock


def closed_by_server(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""  # the server sends nothing but its close
    except BlockingIOError:
        return False
    except OSError:
        return True


def trickle(port: int, stop: threading.Event, counts: dict[str, int]) -> None:
    """`TRICKLERS` sockets, one byte each per second for `TRICKLE_SECONDS` seconds; a
    socket the server closed is opened again, as a real attacker would."""
    sockets = [connect(port) for _ in range(TRICKLERS)]
    sent = [0] * TRICKLERS
    try:
        for second in range(TRICKLE_SECONDS):
            if stop.is_set():
                return
            tick = time.monotonic()
            for index, sock in enumerate(sockets):
                if sock is None or closed_by_server(sock):
                    if sock is not None:
                        sock.close()
                        counts["closed"] += 1
                    sock = sockets[index] = connect(port)
                    sent[index] = 0
                    if sock is None:
                        continue
                try:
                    sock.send(TRICKLE_REQUEST[sent[index] : sent[index] + 1])
                    sent[index] += 1
                except OSError:
                    pass  # closed meanwhile: reopened next second
            counts["rounds"] = second + 1
            stop.wait(max(0.0, 1.0 - (time.monotonic() - tick)))
    finally:
        for sock in sockets:
            if sock is not None:
                sock.close()


def test_healthz_and_metrics_answer_within_a_second_under_600_trickling_sockets(
    server: MetricsServer,
) -> None:
    stop = threading.Event()
    counts = {"closed": 0, "rounds": 0}
    attacker = threading.Thread(target=trickle, args=(server.port, stop, counts), daemon=True)
    attacker.start()
    timings: dict[str, list[float]] = {"/healthz": [], "/metrics": []}
    failures: list[tuple[str, int]] = []
    try:
        time.sleep(1.0)  # every trickling socket is open and has sent its first byte
        while attacker.is_alive():
            for path, taken in timings.items():
                seconds, status, body = timed_get(server.port, path)
                taken.append(seconds)
                expected = b'{"status":"ok"}' if path == "/healthz" else b"slow_clients_probe"
                if status != 200 or expected not in body:
                    failures.append((path, status))
            time.sleep(0.2)
    finally:
        stop.set()
        attacker.join(10)
    worst = {path: round(max(taken), 3) for path, taken in timings.items()}
    print(f"worst answer times under {TRICKLERS} trickling sockets: {worst}; {counts}")
    assert counts["rounds"] >= TRICKLE_SECONDS - 1, counts  # the attack really ran
    assert all(len(taken) >= 10 for taken in timings.values()), timings
    assert not failures, failures
    assert all(seconds < ANSWER_WITHIN for seconds in worst.values()), worst


def test_a_request_trickled_past_the_request_deadline_is_closed(server: MetricsServer) -> None:
    """A byte every 0.2 s keeps any idle timeout from firing; the deadline on the whole
    request (its line and headers here) closes the connection all the same."""
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    sock.setblocking(False)
    started = time.monotonic()
    closed_after = None
    try:
        for byte in TRICKLE_REQUEST[:40]:  # 8 s, never a whole request
            if closed_by_server(sock):
                closed_after = time.monotonic() - started
                break
            try:
                sock.send(bytes([byte]))
            except OSError:
                closed_after = time.monotonic() - started
                break
            time.sleep(0.2)
    finally:
        sock.close()
    assert closed_after is not None, "still open after the whole trickle"
    assert METRICS_REQUEST_DEADLINE - 0.5 <= closed_after < METRICS_REQUEST_DEADLINE + 2.5
    assert timed_get(server.port, "/healthz")[1] == 200


def test_a_kept_alive_connection_idle_past_the_deadline_still_serves(
    server: MetricsServer,
) -> None:
    """The deadline runs from a later request's first byte, not from the previous answer:
    a scraper's kept-alive connection idle between requests is left to the idle timeout."""
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    try:
        for _ in range(2):
            connection.request("GET", "/healthz")
            response = connection.getresponse()
            assert (response.status, response.read()) == (200, b'{"status":"ok"}')
            time.sleep(METRICS_REQUEST_DEADLINE + 1.5)  # past the deadline and a check
        connection.request("GET", "/metrics")
        assert connection.getresponse().status == 200
        assert connection.sock is not None  # the same connection throughout
    finally:
        connection.close()
