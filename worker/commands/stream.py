"""`scorestream worker`, `produce` and `topics`: the commands that talk to Kafka."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
import time
from pathlib import Path
from typing import Any

import orjson
from aiokafka import AIOKafkaProducer

from topics.catalog import record_key, topic_names
from topics.provision import bootstrap_servers, create_topics, group_members, list_topics
from worker.config import ConfigError, Settings, load_settings
from worker.demo.retime import MILLISECOND, event_seconds, retime, rfc3339
from worker.exit_codes import EXIT_ERROR, UsageError
from worker.ops.connection import BrokerUnavailable, within
from worker.ops.kafka_security import aiokafka_options
from worker.ops.logs import json_logging_config


def settings_for(args: argparse.Namespace) -> Settings:
    """Settings from `--config` and `--broker`; a bad config is a usage error (exit 3)."""
    overrides: dict[str, Any] = {}
    if getattr(args, "broker", None):
        overrides["broker"] = args.broker
    try:
        return load_settings(getattr(args, "config", None), overrides=overrides)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None


def broker_of(settings: Settings) -> str:
    if not settings.broker:
        raise UsageError("no broker: pass --broker, set SCORESTREAM_BROKER or `broker:` in config")
    return settings.broker


def client_options(settings: Settings) -> dict[str, Any]:
    """aiokafka client arguments from the `kafka:` and `stream:` sections."""
    try:
        return aiokafka_options(settings)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None


async def provision_topics(settings: Settings, broker: str, partitions: int | None) -> list[str]:
    """Create the missing catalog topics, within `stream.connect_timeout`."""
    create = create_topics(
        broker,
        topic_names(settings.topics),
        partitions,
        replication_factor=settings.kafka.replication_factor,
        min_insync_replicas=settings.kafka.min_insync_replicas,
        client_options=client_options(settings),
    )
    timeout = settings.stream.connect_timeout
    try:
        return await within(create, bootstrap_servers(broker), timeout, "creating topics")
    except BrokerUnavailable:
        raise
    except RuntimeError as exc:  # the broker refused a topic (e.g. replication factor)
        raise UsageError(str(exc)) from None


async def first_of_its_group(settings: Settings, broker: str) -> bool:
    """Whether the worker's consumer group has no member yet (a cold start: the whole
    group starting, nothing scored meanwhile), so that the worker may load its models
    while it joins. False when the group has members (a deploy, a scale-up, a restart
    within the session timeout: the partitions it takes over would wait for its models)
    or when the broker does not say (the safe order)."""
    bootstrap = bootstrap_servers(broker)
    count = group_members(broker, settings.app_id, client_options(settings))
    try:
        timeout = settings.stream.connect_timeout
        return await within(count, bootstrap, timeout, "describing the group") == 0
    except Exception as exc:  # e.g. not allowed to describe groups: load, then join
        logging.getLogger("scorestream").info(
            "loading before joining: the group's members are unknown (%s)", exc
        )
        return False


def run_worker(args: argparse.Namespace) -> int:
    """Run the streaming worker until interrupted."""
    from worker.ops.lag import watch_worker
    from worker.ops.startup import StartupStages, seconds_since_launch
    from worker.ops.topic_watch import STOP_DEADLINE, StopDeadline, install_topic_watch
    from worker.stream import ScorestreamApp
    from worker.stream.faust_patches import check, forbid_topic_auto_creation

    startup = StartupStages(launched=seconds_since_launch())
    with startup.stage("settings"):
        check()  # the Faust libraries its patches were tested with, before anything connects
        # the worker's topics are created with their layout, never by asking about them
        forbid_topic_auto_creation()
        settings = settings_for(args)
        broker = broker_of(settings)
    with startup.stage("topics"):
        asyncio.run(provision_topics(settings, broker, settings.stream.partitions))
    with startup.stage("suites"):
        try:
            scorer = ScorestreamApp(settings, broker)
        except ConfigError as exc:
            raise UsageError(str(exc)) from None
    scorer.scoring_pool.start_fork_server()  # it preloads while the models load
    scorer.startup = startup
    if asyncio.run(first_of_its_group(settings, broker)):
        scorer.prepare_while_joining()  # no partition is being scored: beside the join
    else:
        try:  # a running group: its partitions move only to a worker that can score
            scorer.prepare()
        except RuntimeError as exc:
            raise UsageError(str(exc)) from None
    watch_worker(scorer, settings)
    stopped_because: list[str] = []

    def close_helpers() -> None:
        scorer.telemetry.stop()
        scorer.close()

    deadline = StopDeadline(STOP_DEADLINE, EXIT_ERROR, close_helpers)

    def stop_without_topics(missing: list[str]) -> None:
        if not stopped_because:
            stopped_because.append(
                f"the Kafka broker at {bootstrap_servers(broker)} no longer has the "
                f"worker's topics {', '.join(missing)} (deleted, or the broker lost its "
                "data): start the worker again to create them"
            )
            logging.getLogger("scorestream").error("stopping: %s", stopped_because[0])
            deadline.arm()  # its commit may wait for records the missing topics never take
            signal.raise_signal(signal.SIGTERM)  # the graceful stop an operator's SIGTERM gets

    install_topic_watch(
        scorer.app, scorer.topic_names(), settings, broker, scorer.ready.is_set, stop_without_topics
    )
    _server, port = scorer.telemetry.serve(settings.metrics_port, settings.metrics_host)
    shown = "127.0.0.1" if settings.metrics_host in ("0.0.0.0", "::") else settings.metrics_host
    print(
        f"scorestream worker: metrics on http://{shown}:{port}/metrics "
        f"(listening on {settings.metrics_host})",
        file=sys.stderr,
    )
    faust_worker = scorer.worker()
    if (getattr(args, "log_format", None) or settings.log_format) == "json":
        faust_worker.logging_config = json_logging_config()
    try:
        faust_worker.execute_from_commandline()
    except SystemExit:
        if stopped_because:
            raise BrokerUnavailable(stopped_because[0]) from None
        if scorer.preparation_error is not None:
            raise UsageError(scorer.preparation_error) from None
        raise
    finally:
        deadline.cancel()
        close_helpers()
    return 0


async def produce_lines(
    bootstrap: str,
    topic: str,
    lines: list[bytes],
    rate: float | None = None,
    client_options: dict[str, Any] | None = None,
    connect_timeout: float | None = None,
) -> int:
    """Publish each line as one record (bad lines too: the worker dead-letters them).

    With `connect_timeout`, connecting fails with `BrokerUnavailable` after that long."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, **(client_options or {}))
    if connect_timeout is None:
        await producer.start()
    else:
        try:
            await within(producer.start(), bootstrap, connect_timeout, "connecting the producer")
        except BaseException:
            await producer.stop()
            raise
    try:
        started = time.monotonic()
        for index, line in enumerate(lines):
            if rate:
                delay = started + index / rate - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
            await producer.send(topic, line, key=record_key(line))
        await producer.flush()
    finally:
        await producer.stop()
    return len(lines)


def read_lines(path: Path) -> list[bytes]:
    """Non-blank lines of a JSONL file, as bytes."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"{path}: {exc.strerror}") from None
    return [line.rstrip(b"\r") for line in data.split(b"\n") if line.strip()]


def retimed(lines: list[bytes], now: float) -> list[bytes]:
    """The lines with every `ts` shifted by one amount so that the last ends `now`, and a
    line on stderr saying by how much and what span they cover."""
    out, shift = retime(lines, MILLISECOND, now)
    times = [t for t in map(_event_seconds_of, out) if t is not None]
    if not times:
        print("--retime: no record has a readable ts; produced as they are", file=sys.stderr)
        return out
    print(
        f"re-timed {len(times)} records by {shift:+.3f}s: "
        f"{rfc3339(min(times))} .. {rfc3339(max(times))}",
        file=sys.stderr,
    )
    return out


def _event_seconds_of(line: bytes) -> float | None:
    try:
        data = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    return event_seconds(data.get("ts")) if isinstance(data, dict) else None


def run_produce(args: argparse.Namespace) -> int:
    settings = settings_for(args)
    broker = broker_of(settings)
    lines = read_lines(Path(args.file))
    if getattr(args, "retime", False):
        lines = retimed(lines, time.time())
    topic = args.topic or settings.topics.input
    if getattr(args, "as_otlp", False):
        lines, topic = _as_otlp(lines, settings, args.topic)
    if args.rate is not None and args.rate <= 0:
        raise UsageError("--rate must be positive")
    bootstrap = bootstrap_servers(broker)
    timeout = settings.stream.connect_timeout
    produce = produce_lines(bootstrap, topic, lines, args.rate, client_options(settings), timeout)
    sent = asyncio.run(produce)
    print(f"produced {sent} records to {topic}", file=sys.stderr)
    return 0


def _as_otlp(lines: list[bytes], settings: Settings, topic: str | None) -> tuple[list[bytes], str]:
    """The alignment turns of `lines` as span messages, and the span topic."""
    from worker.otlp.as_spans import envelopes_as_spans
    from worker.otlp.settings import OtlpSourceSettings

    source = settings.sources.otlp or OtlpSourceSettings()
    made = envelopes_as_spans(lines, source.encoding)
    if made.skipped:
        print(f"left out {made.skipped} records that are no alignment turn", file=sys.stderr)
    print(f"{made.spans} turns as spans in {len(made.messages)} messages", file=sys.stderr)
    return made.messages, topic or source.topic


def run_topics(args: argparse.Namespace) -> int:
    settings = settings_for(args)
    broker = broker_of(settings)
    names = topic_names(settings.topics)
    if args.action == "create":
        created = asyncio.run(provision_topics(settings, broker, None))
        for name in created:
            print(f"created {name}")
        if not created:
            print("all topics exist")
        return 0
    listing = list_topics(broker, names, client_options(settings))
    timeout = settings.stream.connect_timeout
    statuses = asyncio.run(within(listing, bootstrap_servers(broker), timeout, "listing topics"))
    for status in statuses:
        found = "missing" if status.partitions is None else f"{status.partitions} partitions"
        print(f"{status.name:32} {found:16} (catalog: {status.expected_partitions})")
    return 0
