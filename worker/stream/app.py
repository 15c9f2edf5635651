"""The Faust application: topics, tables, the three stages' agents and the progress timer.

Data flow (topic names from settings.topics; `{app}` is settings.app_id):

    llm.responses.v1 --score--> llm.eval.results.v1, llm.responses.v1.dlq
                     |--------> {app}-aggregate-input     (safe, extraction: by suite|segment)
                     '--------> {app}-alignment-turns     (alignment: by session_id)
    {app}-alignment-turns --sessions--> llm.eval.results.v1, {app}-aggregate-input
    {app}-aggregate-input --windows--> llm.eval.aggregates.v1, llm.eval.gates.v1

Watermark markers follow the same paths: every worker's timer sends the progress of the
input partitions it reads to every partition of both internal topics; the session stage
passes its own watermark on to the aggregation. Tables are written only from the stream
partitioned like them.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

import faust

from topics.provision import bootstrap_servers
from worker.config import Settings
from worker.ops.kafka_security import aiokafka_options, faust_options, internal_topic_configs
from worker.ops.startup import StartupStages
from worker.ops.telemetry import Telemetry, scorestream_version
from worker.scoring_suites import ScoringSuites
from worker.stream import faust_patches
from worker.stream.context import StreamContext
from worker.stream.durable_table import durable_table
from worker.stream.mark_writer import MarkWriter
from worker.stream.partitioner import partition_for_key
from worker.stream.publish import Folding, Publisher, StreamTopics
from worker.stream.raw_schema import RawSchema
from worker.stream.scoring import ScoreStage
from worker.stream.sessions import SessionStage
from worker.stream.sources import SourceStage, configured_sources
from worker.stream.window_codec import WINDOW_STATE_CODEC
from worker.stream.windows import WindowStage
from worker.suites.registry import AGGREGATORS

if TYPE_CHECKING:  # the sink (httpx, OTLP protobufs) is imported only when configured
    from worker.otlp.sink import EvaluationSink

log = logging.getLogger("scorestream")

# The garbage collector's thresholds once the worker is ready (`gc.set_threshold`): a
# young collection every 50,000 allocations instead of 700 (see `_on_ready`).
GC_THRESHOLD = (50_000, 20, 20)

# Keys and values as bytes; decoding takes them as fetched (`raw_schema`).
RAW: dict[str, Any] = {
    "schema": RawSchema(),
    "key_type": bytes,
    "key_serializer": "raw",
    "value_type": bytes,
    "value_serializer": "raw",
}


def faust_settings(settings: Settings, broker: str) -> dict[str, Any]:
    """Faust `App` options from our settings."""
    stream = settings.stream
    options: dict[str, Any] = {
        "broker": broker,
        "store": "memory://",
        "processing_guarantee": "at_least_once",
        "topic_partitions": stream.partitions,
        "topic_replication_factor": 1,
        "table_standby_replicas": 0,
        "broker_session_timeout": stream.session_timeout,
        "broker_rebalance_timeout": stream.rebalance_timeout,
        "broker_heartbeat_interval": stream.heartbeat_interval,
        "broker_commit_interval": stream.commit_interval,
        "consumer_auto_offset_reset": "earliest",
        "web_enabled": False,
        # Tables live in memory; keep Faust's data directory out of the working tree.
        "datadir": str(Path(tempfile.gettempdir()) / f"scorestream-{settings.app_id}-data"),
    }
    options["producer_max_request_size"] = settings.limits.max_output_bytes
    options["producer_linger"] = stream.producer_linger
    options["producer_partitioner"] = partition_for_key  # Kafka's default, faster
    if stream.producer_max_batch_size is not None:
        options["producer_max_batch_size"] = stream.producer_max_batch_size
    options.update(faust_options(settings))  # TLS / SASL, replication
    return options


class ScorestreamApp:
    """Builds the Faust app, its topics, tables, stages and timer from settings."""

    def __init__(
        self,
        settings: Settings,
        broker: str,
        suites: ScoringSuites | None = None,
        telemetry: Telemetry | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.suites = suites or ScoringSuites.load(settings)
        self.telemetry = telemetry or Telemetry.from_settings(settings)
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="embed")
        self.ready = asyncio.Event()
        self.startup: StartupStages | None = None  # the launch's stages, logged when ready
        # `prepare_while_joining`: the models and scoring processes, being prepared
        self.preparing: Future[None] | None = None
        self.joining_from: float | None = None  # the start-up clock when the join began
        self.preparation_error: str | None = None  # why the preparation failed, if it did

        app_id = settings.app_id
        partitions = settings.stream.partitions
        options = faust_settings(settings, broker)
        self.app = app = faust.App(app_id, **options)
        names = settings.topics
        internal = internal_topic_configs(settings)
        self.topics = StreamTopics(
            input=app.topic(names.input, **RAW),
            results=app.topic(names.results, **RAW),
            aggregates=app.topic(names.aggregates, **RAW),
            gates=app.topic(names.gates, **RAW),
            dead_letters=app.topic(names.dead_letters, **RAW),
            turns=app.topic(
                f"{app_id}-alignment-turns",
                partitions=partitions,
                internal=True,
                config=internal,
                **RAW,
            ),
            aggregate_input=app.topic(
                f"{app_id}-aggregate-input",
                partitions=partitions,
                internal=True,
                config=internal,
                **RAW,
            ),
        )
        self.publisher = Publisher(self.topics, settings, self.telemetry)
        context = StreamContext(settings, self.suites, self.telemetry, self.publisher, clock)
        self.scoring_pool = context.scoring_pool

        def table(name: str) -> Any:
            return app.Table(
                name, partitions=partitions, key_type=str, extra_topic_configs=internal
            )

        # Watermarks of the two downstream stages ("sess|p", "agg|p"), co-partitioned
        # with both internal topics.
        self.progress = table("progress")
        self.sessions = table("sessions")
        self.windows = table("windows")  # panes and series of the aggregation stage
        self.windows.value_serializer = WINDOW_STATE_CODEC  # read by its `send_changelog`
        self.gate_states = table("gates")
        # Input offset ranges in flight, by input partition, written from the input's own
        # events: co-partitioned with the input topic (it has `stream.partitions` too).
        # Their own producer: every batch waits for its marks (`mark_writer.py`).
        self.mark_writer = MarkWriter(bootstrap_servers(broker), aiokafka_options(settings))
        self.inflight = durable_table(
            app,
            "inflight",
            self.mark_writer,
            partitions=partitions,
            key_type=str,
            extra_topic_configs=internal,
        )
        width = context.pane_width
        folding = None if width is None else Folding(width, AGGREGATORS, settings.reservoir_size)
        self.scoring = ScoreStage(context, app, self.inflight, self.ready, folding)
        self.session_stage = SessionStage(
            context,
            self.sessions,
            self.progress,
            self.executor,
        )
        self.window_stage = WindowStage(context, self.windows, self.progress, self.gate_states)
        app.agent(self.topics.input, name="score")(self.scoring.agent)
        app.agent(self.topics.turns, name="sessions")(self.session_stage.agent)
        app.agent(self.topics.aggregate_input, name="windows")(self.window_stage.agent)
        self.source_stages = self._add_sources(context)
        self.evaluations = self._add_evaluation_sink()
        app.timer(settings.stream.tick_interval)(self._tick)
        app.timer(settings.aggregate_emit_interval)(self._emit_interim)
        app.on_startup_finished = self._on_ready
        app.on_before_shutdown.connect(self._stop_mark_writer)
        faust_patches.install(app, settings)  # after the agents: the seek guard reads them
        app.on_partitions_revoked.connect(self._on_revoked)
        app.on_rebalance_complete.connect(self._on_recovered)

    def _add_sources(self, context: StreamContext) -> list[SourceStage]:
        """An agent per configured source (`configured_sources`; OTLP: `sources.otlp`),
        on the source's topic: its messages become records on the input topic."""
        # Sources of session turns (OTLP spans become alignment turns): a persona is known
        # when the suite that keeps sessions has it.
        personas = getattr(self.suites.sessions, "personas", ())
        stages = []
        for topic_name, source in configured_sources(
            self.settings, lambda persona: persona in personas
        ):
            stage = SourceStage(context, source)
            topic = self.app.topic(topic_name, **RAW)
            self.app.agent(topic, name=source.name)(stage.agent)
            stages.append(stage)
        return stages

    def _add_evaluation_sink(self) -> EvaluationSink | None:
        """Results with a trace id also go out as gen_ai.evaluation.result log records
        (`evaluations`), flushed by a timer."""
        sink_settings = self.settings.evaluations
        if sink_settings is None:
            return None
        from worker.otlp.sink import DROP_REASONS, EvaluationSink

        self.telemetry.add_evaluation_records(DROP_REASONS)
        produce = None
        if sink_settings.topic is not None:
            topic = self.app.topic(sink_settings.topic, **RAW)
            publisher = self.publisher

            async def produce(value: bytes) -> object:
                return await publisher.send(topic, b"", value)

        sink = EvaluationSink(
            sink_settings,
            scorestream_version(),
            produce=produce,
            on_sent=self.telemetry.record_evaluations_sent,
            on_dropped=self.telemetry.record_evaluations_dropped,
        )
        self.publisher.evaluations = sink
        self.app.timer(sink_settings.flush_interval)(self._flush_evaluations)
        self.app.on_before_shutdown.connect(self._drain_evaluations)
        return sink

    async def _flush_evaluations(self) -> None:
        if self.evaluations is None:
            return
        try:
            await self.evaluations.flush()
        except Exception:  # a timer error would stop the worker: log it, try next time
            log.exception("sending evaluation records failed")

    async def _drain_evaluations(self, sender: Any, /, *args: Any, **kwargs: Any) -> None:
        """At a stop (the consumer stopped, the producer not yet): send what is queued."""
        if self.evaluations is None:
            return
        try:
            await asyncio.wait_for(self.evaluations.close(), self.settings.stream.rebalance_timeout)
        except Exception:  # the stop goes on; what was not sent is lost (and logged)
            log.exception("sending the last evaluation records failed")

    async def _stop_mark_writer(self, sender: Any, /, *args: Any, **kwargs: Any) -> None:
        """At a stop: the marks written so far leave, then their producer closes."""
        await self.mark_writer.stop()

    def prepare(self) -> None:
        """Load the models and start the scoring processes (timed as two start-up stages)."""
        startup = self.startup
        with startup.stage("models") if startup else nullcontext():
            self.suites.warm_up()
        with startup.stage("scoring processes") if startup else nullcontext():
            self.scoring_pool.start()

    def prepare_while_joining(self) -> None:
        """`prepare` in the embedding thread while the worker joins its consumer group
        (seconds the broker decides, mostly waiting): ready after the longer of the two
        instead of after both. Only for the first member of a group (`run_worker`): a
        worker joining a running group prepares first, so that the partitions it takes
        over never wait for its models. Nothing reads a model before it is loaded: the
        scoring pool scores nothing until this is done (a record that arrives meanwhile
        waits), and the session stage's embedding calls queue behind it in the same one
        thread. `/readyz` waits for both (`_on_ready`)."""
        self.preparing = self.executor.submit(self.prepare)
        self.preparing.add_done_callback(_log_failure)  # at once: the join may take long
        self.scoring_pool.prepared_by(self.preparing)
        if self.startup is not None:
            self.joining_from = self.startup.now()

    async def _prepared(self) -> bool:
        """Wait for `prepare_while_joining`; False (the worker stopping, with the reason
        logged and kept for the command's exit) when it failed."""
        if self.preparing is None:
            return True
        try:
            await asyncio.wrap_future(self.preparing)
        except Exception as exc:
            self.preparation_error = f"the scorers could not be prepared: {exc}"
            log.error("stopping: %s", self.preparation_error)
            signal.raise_signal(signal.SIGTERM)  # the graceful stop an operator's gets
            return False
        return True

    def close(self) -> None:
        """Stop the embedding thread and the scoring processes (after the app stopped)."""
        self.executor.shutdown(wait=False)
        self.scoring_pool.close()

    async def _on_ready(self) -> None:
        if self.startup is not None:
            self.startup.mark("joining the group", since=self.joining_from)
        if not await self._prepared():
            return
        # What start-up built (modules, the scorers, Faust's and aiokafka's objects) lives
        # as long as the worker: out of the garbage collector's sight from now on. Its
        # full collections otherwise walked all of it every few thousand results, in the
        # middle of the loop's work (`bench/peer.py`: 1.45 s of 2 s spent collecting).
        gc.collect()
        gc.freeze()
        # Young objects live for a micro-batch (its results' facts, folds, records) and die
        # by reference counting; at the default threshold (700 allocations) a young
        # collection ran every few results and promoted batches to the older generations,
        # whose collections walked them again: 0.93 s of collecting while catching up on
        # 40,000 SAFE cases (`bench/peer.py`), 0.33 s with this threshold.
        gc.set_threshold(*GC_THRESHOLD)
        self.ready.set()
        log.info("scorestream worker ready")
        if self.startup is not None:
            log.info("%s", self.startup.summary())

    def topic_names(self) -> set[str]:
        """Every topic the worker reads or writes: the catalog's, its two internal hops
        and its tables' changelogs."""
        names = {topic.get_topic_name() for topic in vars(self.topics).values()}
        tables = (self.progress, self.sessions, self.windows, self.gate_states, self.inflight)
        return names | {table.changelog_topic.get_topic_name() for table in tables}

    def _on_revoked(self, sender: Any, /, *args: Any, signal: Any, **kwargs: Any) -> None:
        """After a rebalance every cache is rebuilt from the tables."""
        self.scoring.forget()
        self.session_stage.forget()
        self.window_stage.forget()

    def _on_recovered(self, sender: Any, /, *args: Any, signal: Any, **kwargs: Any) -> None:
        """The tables are recovered: drop anything a timer read from them meanwhile."""
        self._on_revoked(sender, *args, signal=signal, **kwargs)

    def _settled(self) -> bool:
        """Started, and not in a rebalance: the tables of the owned partitions are whole
        (during a rebalance they are still being recovered)."""
        return self.ready.is_set() and not self.app.rebalancing

    async def _tick(self) -> None:
        """Send the progress of this worker's input partitions; sync the gate gauges."""
        if not self.ready.is_set():
            return
        try:
            await self.scoring.send_progress()
        except Exception:  # a timer error would stop the worker: log it, try next tick
            log.exception("sending progress failed")
            return
        if self._settled():
            self.window_stage.restore_gauges(self._owned_window_partitions())

    async def _emit_interim(self) -> None:
        """Every `aggregate_emit_interval`: publish the interim aggregates that changed, so
        the last changes of a burst go out without waiting for a record or a tick."""
        if not self._settled():
            return
        try:
            await self.window_stage.emit_due(self._owned_window_partitions())
        except Exception:  # a timer error would stop the worker: log it, try next time
            log.exception("publishing interim aggregates failed")

    def _owned_window_partitions(self) -> set[int]:
        aggregate_input = self.topics.aggregate_input.get_topic_name()
        return {
            tp.partition for tp in self.app.consumer.assignment() if tp.topic == aggregate_input
        }

    def worker(self, loglevel: str = "info") -> faust.Worker:
        """A Faust `Worker` running this app (it replaces the app's start-up hook with its
        own, so ours is chained after it)."""
        scorer = self

        class _Worker(faust.Worker):
            async def on_startup_finished(self) -> None:
                await super().on_startup_finished()
                await scorer._on_ready()

        return _Worker(self.app, loglevel=loglevel)


def _log_failure(preparing: Future[None]) -> None:
    if not preparing.cancelled() and preparing.exception() is not None:
        log.error(
            "the scorers could not be prepared (%r): the worker stops once it has joined",
            preparing.exception(),
        )


__all__ = ["RAW", "ScorestreamApp", "faust_settings"]
