"""Every command that talks to Kafka fails with one clear line and exit 3 when no broker
listens, or when something accepts connections and never answers (within
`stream.connect_timeout`); never a traceback."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from worker.ops.broker import free_port

REPO = Path(__file__).resolve().parent.parent
CONNECT_TIMEOUT = 2.0

COMMANDS = {
    "topics list": ["topics", "list"],
    "topics create": ["topics", "create"],
    "produce": ["produce", str(REPO / "examples" / "safe" / "envelopes.jsonl")],
    "worker": ["worker"],
}


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A loopback TCP server that accepts connections and never sends a byte."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield int(listener.getsockname()[1])
    finally:
        stop.set()
        thread.join(2)
        for connection in accepted:
            connection.close()
        listener.close()
    assert accepted, "the command never connected"


def scorestream(args: list[str], port: int, tmp_path: Path) -> tuple[int, str, float]:
    config = tmp_path / "config.yaml"
    config.write_text(
        f"stream: {{connect_timeout: {CONNECT_TIMEOUT}}}\nmetrics_port: 0\n", encoding="utf-8"
    )
    started = time.monotonic()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "worker",
            *args,
            "--broker",
            f"kafka://127.0.0.1:{port}",
            "--config",
            str(config),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "HOME": str(Path.home()), "PYTHONPATH": str(REPO)},
        cwd=tmp_path,
    )
    return done.returncode, done.stderr, time.monotonic() - started


@pytest.mark.system
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_no_broker_is_one_line_and_exit_3(command: str, tmp_path: Path) -> None:
    port = free_port()
    code, stderr, _elapsed = scorestream(COMMANDS[command], port, tmp_path)
    assert code == 3, stderr
    assert "Traceback" not in stderr
    (line,) = stderr.strip().splitlines()
    assert line.startswith(f"scorestream {COMMANDS[command][0]}: cannot connect")
    assert f"127.0.0.1:{port}" in line


@pytest.mark.system
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_broker_that_never_answers_times_out_with_a_message(
    command: str, silent_server: int, tmp_path: Path
) -> None:
    code, stderr, elapsed = scorestream(COMMANDS[command], silent_server, tmp_path)
    assert code == 3, stderr
    assert "Traceback" not in stderr
    (line,) = stderr.strip().splitlines()
    assert f"127.0.0.1:{silent_server} did not answer within 2s" in line
    assert "stream.connect_timeout" in line
    assert elapsed < CONNECT_TIMEOUT + 15  # interpreter start-up + the timeout, not 40 s
