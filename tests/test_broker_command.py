"""`scorestream broker`: the embedded broker in the foreground, as a user runs it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from worker.config import load_settings
from worker.ops.broker import (
    TANSU_STREAM_SETTINGS,
    EmbeddedBroker,
    ephemeral_port_range,
    free_port,
    port_in_use,
)

REPO = Path(__file__).resolve().parent.parent
EMBEDDED_CONFIG = REPO / "deploy" / "config.embedded.yaml"


def scorestream_broker(*args: str, sigint_ignored: bool = False) -> subprocess.Popen[str]:
    """The command in a session of its own, SIGINT as a terminal's foreground process gets
    it (`sigint_ignored`: as a script's background job, and all it starts, gets it)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCORESTREAM_")}
    disposition = signal.SIG_IGN if sigint_ignored else signal.SIG_DFL
    return subprocess.Popen(
        [sys.executable, "-m", "worker", "broker", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**env, "PYTHONUNBUFFERED": "1"},
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, disposition),
    )


def wait_listening(port: int, process: subprocess.Popen[str], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not port_in_use("127.0.0.1", port):
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the broker did not listen"
        time.sleep(0.1)


def test_embedded_config_has_what_the_broker_says_a_worker_needs() -> None:
    settings = load_settings(EMBEDDED_CONFIG, environ={})
    assert settings.broker == "kafka://127.0.0.1:9092"
    stream = settings.stream.model_dump()
    for key, value in TANSU_STREAM_SETTINGS.items():
        assert stream[key] == value, key
    assert settings.alignment.personas_dir is not None
    assert (REPO / settings.alignment.personas_dir).is_dir()


@pytest.mark.integration
@pytest.mark.parametrize(
    ("stop", "sigint_ignored"),
    [
        (signal.SIGINT, False),
        # a background job of a script starts with SIGINT ignored: Ctrl-C still stops it
        # (Python raises no KeyboardInterrupt then; CI started so once hung here)
        (signal.SIGINT, True),
        (signal.SIGTERM, False),
        (signal.SIGHUP, False),
    ],
    ids=["SIGINT", "SIGINT-started-ignored", "SIGTERM", "SIGHUP"],
)
def test_broker_prints_the_worker_settings_and_stops_with_its_broker(
    stop: signal.Signals, sigint_ignored: bool
) -> None:
    port = free_port()
    process = scorestream_broker("--port", str(port), sigint_ignored=sigint_ignored)
    try:
        wait_listening(port, process)
        assert process.stdout is not None
        printed = ""
        while "log:" not in printed:
            printed += process.stdout.readline()
        settings = yaml.safe_load(
            printed.split("needs these settings", 1)[1].split("\n", 1)[1].rsplit("log:", 1)[0]
        )
        assert settings["broker"] == f"kafka://127.0.0.1:{port}"
        assert settings["stream"] == TANSU_STREAM_SETTINGS
        os.killpg(process.pid, stop)
        _out, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)
    assert process.returncode == 0, err
    assert not port_in_use("127.0.0.1", port), "the broker outlived the command"


@pytest.mark.integration
def test_a_busy_port_is_one_line_and_exit_3(broker: EmbeddedBroker) -> None:
    process = scorestream_broker("--port", str(broker.port))
    _out, err = process.communicate(timeout=60)
    assert process.returncode == 3
    assert f"port {broker.port} on 127.0.0.1 is in use" in err
    assert "Traceback" not in err


def test_a_free_port_is_one_no_outgoing_connection_can_take_before_it_is_bound() -> None:
    # A port from the ephemeral range can become a client's source port between being
    # chosen and being bound (a worker's /metrics failed "Address already in use" in CI).
    ports = {free_port() for _ in range(20)}
    assert all(port < ephemeral_port_range()[0] for port in ports)
    assert len(ports) > 1, "every caller would race for one port"
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", ports.pop()))
        server.listen()


def test_a_port_out_of_range_is_a_usage_error() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "worker", "broker", "--port", "70000"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 3
    assert "--port 70000 is not a TCP port" in done.stderr


def test_the_port_comes_from_the_broker_url_when_not_given() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCORESTREAM_")}
    with EmbeddedBroker() as running:  # its port is taken: the command names it
        done = subprocess.run(
            [sys.executable, "-m", "worker", "broker"],
            capture_output=True,
            text=True,
            timeout=60,
            env={**env, "SCORESTREAM_BROKER": running.url},
            check=False,
        )
    assert done.returncode == 3
    assert f"port {running.port} on 127.0.0.1 is in use" in done.stderr
