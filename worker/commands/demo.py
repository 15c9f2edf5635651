"""`scorestream demo`: embedded broker, worker and the bundled stream, with a live scorecard.

One command, nothing else running: start Tansu on a free loopback port, create the topics,
run the worker in this process, replay `examples/demo/stream.jsonl` (re-timed to the
present by whole windows) and read the output topics back with a plain consumer (no group)
into a `Scorecard`, drawn a few times a second. The replay goes window by window: the
records of one window are produced, then the demo waits until their results and
aggregates are in before the next window starts, so no record arrives after its window
closed whatever order the partitions are consumed in. It ends, with the final scorecard,
once every record is accounted for, every session is closed and every window's final
aggregate has arrived; `--follow` keeps everything running until Ctrl-C.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import math
import os
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from rich.console import Console, RenderableType
from rich.live import Live

from topics.provision import create_topics
from worker.broker import TANSU_STREAM_SETTINGS, EmbeddedBroker
from worker.cli import EXIT_ERROR, UsageError
from worker.commands.stream import read_lines, record_key, topic_names
from worker.config import ConfigError, Settings, load_settings
from worker.scorecard import Position, Scorecard

log = logging.getLogger("scorestream.demo")

REPO = Path(__file__).resolve().parents[2]
DEMO_DIR = REPO / "examples" / "demo"
DEFAULT_CONFIG = DEMO_DIR / "config.yaml"
STREAM = DEMO_DIR / "stream.jsonl"

# Tansu's tuning (worker.broker) is applied to every `stream` key the configuration does
# not set; the batch size always.
EMBEDDED_STREAM: dict[str, Any] = dict(TANSU_STREAM_SETTINGS)
READY_TIMEOUT = 90.0
FINISH_TIMEOUT = float(os.environ.get("SCORESTREAM_DEMO_TIMEOUT", "90"))
REPLAY_RATE = float(os.environ.get("SCORESTREAM_DEMO_RATE", "100"))  # records per second
REFRESH = 0.25


# ---------------------------------------------------------------- settings and stream


def resolve_paths(settings: Settings, base: Path) -> Settings:
    """Relative paths of the config that do not exist from the working directory are taken
    relative to `base` (the config file's directory)."""

    def fix(path: Path | None) -> Path | None:
        if path is None or path.is_absolute() or path.exists():
            return path
        candidate = base / path
        return candidate if candidate.exists() else path

    alignment = settings.alignment.model_copy(
        update={
            "personas_dir": fix(settings.alignment.personas_dir),
            "safety_patterns": fix(settings.alignment.safety_patterns),
        }
    )
    schemas = {name: fix(path) or path for name, path in settings.extraction.schemas.items()}
    extraction = settings.extraction.model_copy(update={"schemas": schemas})
    return settings.model_copy(update={"alignment": alignment, "extraction": extraction})


def demo_settings(config: str | None) -> Settings:
    """The demo's settings: `--config` (else the bundled demo config) tuned for Tansu."""
    path = Path(config) if config else DEFAULT_CONFIG
    try:
        settings = load_settings(path)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    chosen = settings.stream.model_fields_set
    tuning = {k: v for k, v in EMBEDDED_STREAM.items() if k not in chosen}
    tuning["exact_changelog_ends"] = True  # always: Tansu's ListOffsets is short
    stream = settings.stream.model_validate({**settings.stream.model_dump(), **tuning})
    settings = settings.model_copy(update={"stream": stream})
    return resolve_paths(settings, path.resolve().parent)


def event_seconds(value: Any) -> float | None:
    """Epoch seconds of an envelope `ts` (RFC 3339 string or epoch milliseconds)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value) / 1000.0
    if isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value)
        except ValueError:
            return None
        return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()
    return None


def retime(lines: list[bytes], unit: float, now: float) -> tuple[list[bytes], float]:
    """Shift every `ts` by the whole number of `unit`s that brings the last one closest to
    `now` without passing it (window boundaries stay where the stream put them).

    Returns the lines and the shift in seconds; lines that are not JSON objects or have no
    readable `ts` are kept as they are.
    """
    decoded: list[tuple[dict[str, Any] | None, float | None]] = []
    for line in lines:
        try:
            data = orjson.loads(line)
        except orjson.JSONDecodeError:
            data = None
        if not isinstance(data, dict):
            decoded.append((None, None))
            continue
        decoded.append((data, event_seconds(data.get("ts"))))
    times = [seconds for _, seconds in decoded if seconds is not None]
    if not times:
        return lines, 0.0
    shift = math.floor((now - max(times)) / unit) * unit
    out = []
    for line, (data, seconds) in zip(lines, decoded, strict=True):
        if data is None or seconds is None:
            out.append(line)
            continue
        moment = datetime.fromtimestamp(seconds + shift, UTC)
        data["ts"] = moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
        out.append(orjson.dumps(data))
    return out, shift


def phases(lines: list[bytes], unit: float) -> list[list[bytes]]:
    """Consecutive records grouped by the `unit`-sized window of their `ts` (records without
    a readable `ts` join the group of the record before them)."""
    groups: list[list[bytes]] = []
    current: float | None = None
    for line in lines:
        try:
            data = orjson.loads(line)
        except orjson.JSONDecodeError:
            data = None
        seconds = event_seconds(data.get("ts")) if isinstance(data, dict) else None
        bucket = None if seconds is None else math.floor(seconds / unit)
        if not groups or (bucket is not None and bucket != current and current is not None):
            groups.append([])
        if bucket is not None:
            current = bucket
        groups[-1].append(line)
    return groups


# ---------------------------------------------------------------- the run


class Demo:
    """One demo run on a started broker."""

    def __init__(
        self,
        settings: Settings,
        broker: EmbeddedBroker,
        lines: list[bytes],
        follow: bool,
        console: Console,
        live: bool,
        log_path: Path,
    ) -> None:
        from worker.stream import gate_windows

        self.settings = settings
        self.broker = broker
        self.follow = follow
        self.console = console
        self.live = live
        self.log_path = log_path
        self.windows = gate_windows(settings)
        self.card = Scorecard(
            topics=settings.topics,
            windows=self.windows,
            segment_by=settings.segment_by,
            gates_config=settings.gates,
        )
        self.phase_unit = min(w.step or w.size for w in self.windows)
        shift_unit = max(w.size for w in self.windows)
        self.lines, self.shift = retime(lines, shift_unit, time.time())
        self.phases = phases(self.lines, self.phase_unit)
        self.stage = "starting"
        self.metrics_url = "-"
        self.metrics_note = ""
        self.started = time.monotonic()
        self.stop = asyncio.Event()
        self.scorer: Any = None

    # ------------------------------------------------------------ view

    def late(self) -> int:
        if self.scorer is None:
            return 0
        total = 0.0
        for metric in self.scorer.telemetry.late_records.collect():
            total += sum(s.value for s in metric.samples if s.name.endswith("_total"))
        return int(total)

    def status(self) -> str:
        card = self.card
        card.late = self.late()
        finals = len(card.expected) - len(card.missing_finals)
        return (
            f"broker {self.broker.bootstrap}  |  metrics {self.metrics_url}{self.metrics_note}"
            f"  |  log {self.log_path}\n"
            f"{self.stage}  |  produced {len(card.produced)}/{len(self.lines)}, "
            f"awaiting {card.pending}, open sessions {len(card.open_sessions)}, "
            f"final windows {finals}/{len(card.expected)}, late {card.late}  |  "
            f"{time.monotonic() - self.started:.1f}s"
        )

    def view(self, ascii_only: bool = False) -> RenderableType:
        return self.card.render("scorestream demo", self.status(), ascii_only=ascii_only)

    def say(self, message: str) -> None:
        """Progress: the status line live, a stderr line otherwise."""
        self.stage = message
        if not self.live:
            print(f"scorestream demo: {message}", file=sys.stderr, flush=True)

    # ------------------------------------------------------------ steps

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, self.stop.set)
        if not self.live:
            return await self._run()
        with Live(self.view(), console=self.console, auto_refresh=False, transient=False) as live:
            refresher = asyncio.create_task(self._refresh(live.update))
            try:
                return await self._run()
            finally:
                refresher.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await refresher
                live.update(self.view(), refresh=True)

    async def _refresh(self, update: Callable[..., None]) -> None:
        while True:
            update(self.view(), refresh=True)
            await asyncio.sleep(REFRESH)

    async def _run(self) -> int:
        from worker.engines import Engines
        from worker.lag import watch_worker
        from worker.stream import ScorestreamApp

        settings = self.settings
        self.say("creating topics")
        await create_topics(
            self.broker.url, topic_names(settings.topics), settings.stream.partitions
        )
        self.say("loading the scorers and the embedding model")
        try:
            engines = await asyncio.to_thread(Engines.load, settings)
            await asyncio.to_thread(engines.warm_up)
        except ConfigError as exc:
            raise UsageError(str(exc)) from None
        self.scorer = scorer = ScorestreamApp(settings, self.broker.url, engines=engines)
        watch_worker(scorer, settings)
        self._serve_metrics()
        consumer = AIOKafkaConsumer(
            settings.topics.results,
            settings.topics.aggregates,
            settings.topics.gates,
            settings.topics.dead_letters,
            bootstrap_servers=self.broker.bootstrap,
            group_id=None,
            auto_offset_reset="earliest",
        )
        reader: asyncio.Task[None] | None = None
        try:
            await consumer.start()
            reader = asyncio.create_task(self._read(consumer))
            if not await self._replay():
                return self._interrupted()
            self.say("starting the worker")
            await scorer.app.start()
            if not await self._until(scorer.ready.wait, READY_TIMEOUT):
                return self._interrupted() or self._fail(
                    f"the worker was not ready after {READY_TIMEOUT:.0f}s"
                )
            code = await self._finish()
            if code is None and self.follow:
                self.say("following: the worker keeps running, Ctrl-C stops it")
                await self.stop.wait()
            if code is None:
                code = 0
            return code
        finally:
            outcome = self.stage
            self.say("stopping")
            if reader is not None:
                reader.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await reader
            with contextlib.suppress(Exception):
                await consumer.stop()
            try:
                await asyncio.wait_for(scorer.app.stop(), 30)
            except Exception:
                log.exception("stopping the worker")
            scorer.telemetry.stop()
            scorer.executor.shutdown(wait=False)
            self.stage = outcome

    def _serve_metrics(self) -> None:
        assert self.scorer is not None
        wanted = self.settings.metrics_port
        try:
            _server, port = self.scorer.telemetry.serve(wanted, host="127.0.0.1")
        except OSError:
            _server, port = self.scorer.telemetry.serve(0, host="127.0.0.1")
            self.metrics_note = f" (port {wanted} is busy)"
            if not self.live:
                print(
                    f"scorestream demo: port {wanted} is busy; /metrics is on port {port}",
                    file=sys.stderr,
                )
        self.metrics_url = f"http://127.0.0.1:{port}/metrics"
        if not self.live:
            print(f"scorestream demo: metrics on {self.metrics_url}", file=sys.stderr)

    async def _read(self, consumer: AIOKafkaConsumer) -> None:
        while True:
            batches = await consumer.getmany(timeout_ms=200)
            for partition, messages in batches.items():
                for message in messages:
                    self.card.observe(partition.topic, message.key, message.value)

    async def _until(self, condition: Callable[[], Any], timeout: float) -> bool:
        """Wait for `condition` (a coroutine function or a predicate) unless stopped or
        timed out; True when it came true."""
        deadline = time.monotonic() + timeout
        while not self.stop.is_set():
            if asyncio.iscoroutinefunction(condition):
                waiter = asyncio.ensure_future(condition())
                stopper = asyncio.ensure_future(self.stop.wait())
                done, pending = await asyncio.wait(
                    {waiter, stopper}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
                )
                for task in pending:
                    task.cancel()
                return waiter in done
            if condition():
                return True
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.1)
        return False

    async def _replay(self) -> bool:
        """Produce the whole stream before the worker starts, as history it catches up
        on: its windows close by their own timestamps. False when interrupted."""
        producer = AIOKafkaProducer(bootstrap_servers=self.broker.bootstrap, linger_ms=0)
        await producer.start()
        try:
            for number, records in enumerate(self.phases, start=1):
                self.say(f"producing window {number}/{len(self.phases)}")
                if await self._produce(producer, records) is None:
                    return False
        finally:
            await producer.stop()
        return True

    async def _finish(self) -> int | None:
        """Wait until everything is accounted for; None when it is."""
        self.say("scoring: waiting for every result and the last windows to close")
        if not await self._until(lambda: self.card.done, FINISH_TIMEOUT):
            if self.stop.is_set():
                return self._interrupted()
            return self._fail(self._timeout_message())
        self.say(f"done: every record accounted for in {time.monotonic() - self.started:.1f}s")
        return None

    async def _produce(
        self, producer: AIOKafkaProducer, records: list[bytes]
    ) -> list[Position] | None:
        positions = []
        for line in records:
            if self.stop.is_set():
                return None
            sent = time.monotonic()
            meta = await producer.send_and_wait(
                self.settings.topics.input, line, key=record_key(line)
            )
            position = (meta.partition, meta.offset)
            self.card.produce(position, line)
            positions.append(position)
            delay = 1.0 / REPLAY_RATE - (time.monotonic() - sent)
            if delay > 0:
                await asyncio.sleep(delay)
        return positions

    def _timeout_message(self) -> str:
        card = self.card
        missing = []
        if card.pending:
            missing.append(f"{card.pending} records without a result or dead letter")
        if card.open_sessions:
            missing.append(f"open sessions {', '.join(sorted(card.open_sessions))}")
        if card.missing_finals:
            shown = ", ".join(card.missing_finals[:3])
            more = len(card.missing_finals) - 3
            missing.append(
                f"{len(card.missing_finals)} windows without a final aggregate ({shown}"
                + (f" and {more} more)" if more > 0 else ")")
            )
        return f"timed out after {FINISH_TIMEOUT:.0f}s waiting for " + "; ".join(missing)

    def _fail(self, message: str) -> int:
        self.stage = f"FAILED: {message}"
        print(f"scorestream demo: {message} (log: {self.log_path})", file=sys.stderr)
        return EXIT_ERROR

    def _interrupted(self) -> int:
        self.stage = "interrupted"
        return 130


# ---------------------------------------------------------------- entry point


def _log_to_file() -> Path:
    """Send every log record to a file: the terminal is the scorecard's."""
    path = Path(tempfile.gettempdir()) / f"scorestream-demo-{os.getpid()}.log"
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    logging.captureWarnings(True)
    return path


def run_demo(args: argparse.Namespace) -> int:
    """Run the demo; 0 once the replay is fully accounted for (or Ctrl-C with --follow)."""
    settings = demo_settings(getattr(args, "config", None))
    if not STREAM.is_file():
        raise UsageError(f"the bundled example stream is missing: {STREAM}")
    lines = read_lines(STREAM)
    live = sys.stdout.isatty()
    console = Console() if live else Console(width=160, no_color=True, highlight=False)
    log_path = _log_to_file()
    if settings.broker:
        print(
            f"scorestream demo: runs its own embedded broker (ignoring broker {settings.broker})",
            file=sys.stderr,
        )
    with EmbeddedBroker() as broker:
        demo = Demo(settings, broker, lines, bool(args.follow), console, live, log_path)
        code = asyncio.run(demo.run())
    if not live:
        console.print(demo.view(ascii_only=True))
    return code


__all__ = ["demo_settings", "phases", "resolve_paths", "retime", "run_demo"]
