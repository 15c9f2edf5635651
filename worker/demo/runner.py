"""One demo run: the embedded broker, the topics, the worker in this process and the replay.

Start Tansu on a free loopback port, create the topics, produce the example stream (one
window after the other) as history the worker then catches up on, and read the output
topics back with a plain consumer (no group) into a `Scorecard`. The run ends once every
record has a result or a dead letter, every session is closed and every window's final
aggregate has arrived; `follow` keeps everything running until Ctrl-C.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from topics.catalog import record_key, topic_names
from topics.provision import create_topics
from worker.config import ConfigError, Settings
from worker.demo.console import Screen, log_to_file, say_on_stderr
from worker.demo.example_stream import phases, retime
from worker.demo.scorecard import Position, Scorecard
from worker.exit_codes import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_OK, UsageError
from worker.ops.broker import EmbeddedBroker

log = logging.getLogger("scorestream.demo")

READY_TIMEOUT = 90.0
FINISH_TIMEOUT = float(os.environ.get("SCORESTREAM_DEMO_TIMEOUT", "90"))
REPLAY_RATE = float(os.environ.get("SCORESTREAM_DEMO_RATE", "100"))  # records per second


class Demo:
    """One demo run on a started broker."""

    def __init__(
        self,
        settings: Settings,
        broker: EmbeddedBroker,
        lines: list[bytes],
        follow: bool,
        live: bool,
        log_path: Path,
    ) -> None:
        from worker.stream import gate_windows

        self.settings = settings
        self.broker = broker
        self.follow = follow
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
        self.screen = Screen(
            self.card, len(self.lines), broker.bootstrap, log_path, live, self.late
        )
        self.stop = asyncio.Event()
        self.scorer: Any = None

    def late(self) -> int:
        """Records the worker counted as late (for windows already closed)."""
        if self.scorer is None:
            return 0
        total = 0.0
        for metric in self.scorer.telemetry.late_records.collect():
            total += sum(s.value for s in metric.samples if s.name.endswith("_total"))
        return int(total)

    # ------------------------------------------------------------ steps

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        # SIGHUP: the terminal was closed; the broker runs in its own session and would
        # outlive an unhandled hang-up.
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            loop.add_signal_handler(signum, self.stop.set)
        return await self.screen.show(self._run())

    async def _run(self) -> int:
        from worker.ops.lag import watch_worker
        from worker.scoring_suites import ScoringSuites
        from worker.stream import ScorestreamApp
        from worker.stream.faust_patches import check

        settings = self.settings
        say = self.screen.say
        check()  # the Faust libraries its patches were tested with (exit 3 otherwise)
        say("creating topics")
        await create_topics(
            self.broker.url, topic_names(settings.topics), settings.stream.partitions
        )
        say("loading the scorers and the embedding model")
        try:
            suites = await asyncio.to_thread(ScoringSuites.load, settings)
            await asyncio.to_thread(suites.warm_up)
        except ConfigError as exc:
            raise UsageError(str(exc)) from None
        self.scorer = scorer = ScorestreamApp(settings, self.broker.url, suites=suites)
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
            say("starting the worker")
            await scorer.app.start()
            if not await self._until(scorer.ready.wait, READY_TIMEOUT):
                return self._interrupted() or self._fail(
                    f"the worker was not ready after {READY_TIMEOUT:.0f}s"
                )
            code = await self._finish()
            self.screen.finished = code is None
            if code is None and self.follow:
                self.screen.following = True
                say("following: the worker keeps running, Ctrl-C stops it")
                if not self.screen.live:
                    say_on_stderr(self.screen.next_steps().rstrip())
                await self.stop.wait()
            if code is None:
                code = EXIT_OK
            return code
        finally:
            outcome = self.screen.stage
            self.screen.following = False
            say("stopping")
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
            scorer.close()
            self.screen.stage = outcome

    def _serve_metrics(self) -> None:
        assert self.scorer is not None
        wanted = self.settings.metrics_port
        try:
            _server, port = self.scorer.telemetry.serve(wanted, host="127.0.0.1")
        except OSError:
            _server, port = self.scorer.telemetry.serve(0, host="127.0.0.1")
            self.screen.metrics_on(port, busy=wanted)
        else:
            self.screen.metrics_on(port)

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
                self.screen.say(f"producing window {number}/{len(self.phases)}")
                if await self._produce(producer, records) is None:
                    return False
        finally:
            await producer.stop()
        return True

    async def _finish(self) -> int | None:
        """Wait until everything is accounted for; None when it is."""
        self.screen.say("scoring: waiting for every result and the last windows to close")
        if not await self._until(lambda: self.card.done, FINISH_TIMEOUT):
            if self.stop.is_set():
                return self._interrupted()
            return self._fail(self._timeout_message())
        self.screen.say(f"done: every record accounted for in {self.screen.elapsed():.1f}s")
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
        self.screen.stage = f"FAILED: {message}"
        say_on_stderr(f"{message} (log: {self.screen.log_path})")
        return EXIT_ERROR

    def _interrupted(self) -> int:
        self.screen.stage = "interrupted"
        return EXIT_INTERRUPTED


def run(settings: Settings, lines: list[bytes], follow: bool) -> int:
    """Replay `lines` through a worker on an embedded broker; 0 once every record is
    accounted for (or at Ctrl-C with `follow`)."""
    live = sys.stdout.isatty()
    log_path = log_to_file()
    if settings.broker:
        say_on_stderr(f"runs its own embedded broker (ignoring broker {settings.broker})")
    # Outside the event loop (which handles it itself) a hang-up ends the run through
    # KeyboardInterrupt, so the broker is stopped on the way out.
    hang_up = signal.signal(signal.SIGHUP, _hang_up)
    broker = EmbeddedBroker()
    try:
        broker.start()  # (stopped below even when a signal interrupts the start)
        demo = Demo(settings, broker, lines, follow, live, log_path)
        code = asyncio.run(demo.run())
        signal.signal(signal.SIGHUP, _hang_up)  # the closed loop left the default behind
    finally:
        broker.stop()
        signal.signal(signal.SIGHUP, hang_up)
    demo.screen.final()
    return code


def _hang_up(_signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt


__all__ = ["Demo", "run"]
