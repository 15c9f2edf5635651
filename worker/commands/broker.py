"""`scorestream broker`: the embedded broker in the foreground, for streaming without Docker.

Starts Tansu (`worker.ops.broker.EmbeddedBroker`, in memory) on a loopback port, prints the
settings a worker needs on it and runs until Ctrl-C, SIGTERM or SIGHUP (terminal closed),
which stop the broker with it. Exit 3 when the port is taken or the broker dies.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from types import FrameType

import yaml

from topics.provision import bootstrap_servers
from worker.commands.stream import settings_for
from worker.exit_codes import EXIT_ERROR, EXIT_OK, UsageError
from worker.ops.broker import TANSU_STREAM_SETTINGS, EmbeddedBroker, port_in_use

DEFAULT_PORT = 9092
POLL = 0.5  # seconds between two checks that the broker still runs


class _Stop(Exception):
    """A stop signal arrived."""


def chosen_port(args: argparse.Namespace) -> int:
    """`--port`, else the port of `--broker` / SCORESTREAM_BROKER / the config's broker,
    else 9092."""
    if args.port is not None:
        if not 0 < args.port < 65536:
            raise UsageError(f"--port {args.port} is not a TCP port")
        return int(args.port)
    broker = settings_for(args).broker
    if not broker:
        return DEFAULT_PORT
    first = bootstrap_servers(broker).split(",")[0]
    _host, _, port = first.rpartition(":")
    if not port.isdigit():
        raise UsageError(f"broker {broker!r} names no port: pass --port")
    return int(port)


def worker_settings(url: str) -> str:
    """The YAML a worker's config needs on this broker."""
    stream = {key: TANSU_STREAM_SETTINGS[key] for key in sorted(TANSU_STREAM_SETTINGS)}
    text = yaml.safe_dump({"broker": url, "stream": stream}, sort_keys=False)
    return "".join(f"  {line}\n" for line in text.splitlines())


def _raise_stop(signum: int, _frame: FrameType | None) -> None:
    raise _Stop(signal.Signals(signum).name)


def run_broker(args: argparse.Namespace) -> int:
    """Run the embedded broker until a stop signal; 0 then, 3 if it cannot start or dies."""
    port = chosen_port(args)
    if port_in_use(args.host, port):
        raise UsageError(
            f"port {port} on {args.host} is in use (another broker?): pass --port N, and "
            "the same port in the worker's broker URL"
        )
    broker = EmbeddedBroker(port=port, host=args.host)
    # SIGINT too, not Python's KeyboardInterrupt: a process started with SIGINT ignored
    # (a background job of a script, and all it starts) would not stop on Ctrl-C otherwise
    previous = {
        signum: signal.signal(signum, _raise_stop)
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    }
    try:
        try:
            broker.start()
        except RuntimeError as exc:
            print(f"scorestream broker: {exc}", file=sys.stderr)
            return EXIT_ERROR
        print(
            f"scorestream broker: Tansu on {broker.url} (in memory: its data goes when it "
            "stops; Ctrl-C stops it)\n"
            "A worker on it needs these settings (deploy/config.embedded.yaml has them for "
            f"port {DEFAULT_PORT}):\n{worker_settings(broker.url)}"
            f"log: {broker.log_path}",
            flush=True,
        )
        while True:
            process = broker.process
            if process is None or process.poll() is not None:
                code = None if process is None else process.returncode
                print(
                    f"scorestream broker: the broker stopped (exit {code}); see {broker.log_path}",
                    file=sys.stderr,
                )
                return EXIT_ERROR
            time.sleep(POLL)
    except (KeyboardInterrupt, _Stop):
        print("scorestream broker: stopping", file=sys.stderr, flush=True)
        return EXIT_OK
    finally:
        broker.stop()
        for signum, handler in previous.items():
            signal.signal(signum, handler)


__all__ = ["DEFAULT_PORT", "chosen_port", "run_broker", "worker_settings"]
