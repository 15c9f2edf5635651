"""`scorestream results`: the published results of a window and segment, or of a gate
event's worst cases, read back from the results topic."""

from __future__ import annotations

import argparse
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, TopicPartition
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from schemas.envelope import parse_event_time
from schemas.outputs import CaseResult, GateEvent
from topics.provision import bootstrap_servers
from worker.commands.stream import broker_of, client_options, settings_for
from worker.config import Settings, parse_duration
from worker.connection import BrokerUnavailable, within
from worker.drilldown import Query, Selection, gate_event_query, select, window_query
from worker.exit_codes import EXIT_MISSING, EXIT_OK, UsageError
from worker.validation_errors import describe_validation_error


def run_results(args: argparse.Namespace) -> int:
    """Print the results a window/segment or a gate event points to."""
    query = query_of(args)
    settings = settings_for(args)
    broker = broker_of(settings)
    results = read_results(settings, broker, settings.topics.results)
    selection = select(results, query)
    if args.format == "json":
        sys.stdout.write(orjson.dumps(to_json(query, selection)).decode() + "\n")
    else:
        render(Console(), query, selection)
    if selection.missing:
        print(
            f"scorestream results: {len(selection.missing)} case(s) not on "
            f"{settings.topics.results}: {', '.join(selection.missing)}",
            file=sys.stderr,
        )
        return EXIT_MISSING
    return EXIT_OK


# ---------------------------------------------------------------- arguments


def query_of(args: argparse.Namespace) -> Query:
    limit = args.limit
    if limit is not None and limit <= 0:
        raise UsageError("--limit must be positive")
    if args.gate_event is not None:
        if args.suite or args.window_start or args.window or args.segment:
            raise UsageError("--gate-event takes its suite, window and segment from the event")
        query = gate_event_query(read_gate_event(args.gate_event), limit)
        return query if args.metric is None else _with_metric(query, args.metric)
    missing = [
        flag
        for flag, value in (
            ("--suite", args.suite),
            ("--window-start", args.window_start),
            ("--window", args.window),
        )
        if not value
    ]
    if missing:
        raise UsageError(f"give {', '.join(missing)} (or --gate-event FILE)")
    try:
        start = parse_event_time(args.window_start)
    except ValueError as exc:
        raise UsageError(f"--window-start: {exc}") from None
    assert start is not None
    try:
        size = parse_duration(args.window)
    except ValueError as exc:
        raise UsageError(f"--window: {exc}") from None
    return window_query(args.suite, start, size, parse_segment(args.segment), args.metric, limit)


def _with_metric(query: Query, metric: str) -> Query:
    return Query(
        query.suite, query.start, query.end, query.segment, query.cases, metric, query.limit
    )


def parse_segment(values: list[str] | None) -> dict[str, str]:
    """`--segment model=m1 --segment tenant=a` or `model=m1,tenant=a`; `all` is `{}`."""
    segment: dict[str, str] = {}
    for value in values or []:
        for part in value.split(","):
            part = part.strip()
            if not part or part == "all":
                continue
            key, sep, label = part.partition("=")
            if not sep or not key:
                raise UsageError(f"--segment: expected key=value, got {part!r}")
            segment[key.strip()] = label.strip()
    return segment


def read_gate_event(source: str) -> GateEvent:
    """A gate event (one JSON object) from a file or `-` (stdin); errors name the input
    and the field."""
    name = "<stdin>" if source == "-" else source
    try:
        text = sys.stdin.read() if source == "-" else Path(source).read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"{name}: {exc.strerror}") from None
    if not text.strip():
        raise UsageError(f"{name}: empty, expected a gate event (one JSON object)")
    try:
        data = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        lines = [line for line in text.splitlines() if line.strip()]
        if len(lines) > 1 and lines[0].lstrip().startswith("{"):
            raise UsageError(f"{name}: {len(lines)} lines, expected one gate event") from None
        raise UsageError(f"{name}:{exc.lineno}: not JSON: {exc.msg}") from None
    if not isinstance(data, dict):
        raise UsageError(f"{name}: expected a JSON object (a gate event)")
    try:
        return GateEvent.model_validate_json(orjson.dumps(data))
    except ValidationError as exc:
        raise UsageError(f"{name}: not a gate event: {describe_validation_error(exc)}") from None


# ---------------------------------------------------------------- the topic


def read_results(settings: Settings, broker: str, topic: str) -> list[CaseResult]:
    """Every result on `topic` (from the beginning up to its end when asked)."""
    import asyncio

    return asyncio.run(_read_results(settings, bootstrap_servers(broker), topic))


async def _read_results(settings: Settings, bootstrap: str, topic: str) -> list[CaseResult]:
    timeout = settings.stream.connect_timeout
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        **client_options(settings),
    )
    try:
        await within(consumer.start(), bootstrap, timeout, "connecting the consumer")
        partitions = await within(
            _partitions(consumer, topic), bootstrap, timeout, f"reading the partitions of {topic}"
        )
        if not partitions:
            raise UsageError(f"topic {topic} does not exist (scorestream topics create)")
        consumer.assign(partitions)
        begin = await within(
            consumer.beginning_offsets(partitions), bootstrap, timeout, "reading offsets"
        )
        end = await within(consumer.end_offsets(partitions), bootstrap, timeout, "reading offsets")
        for partition in partitions:
            consumer.seek(partition, begin[partition])
        return await _drain(consumer, begin, end, bootstrap, timeout)
    finally:
        await consumer.stop()


async def _partitions(consumer: AIOKafkaConsumer, topic: str) -> list[TopicPartition]:
    if topic not in await consumer.topics():  # also refreshes the cluster metadata
        return []
    found = consumer.partitions_for_topic(topic)
    return [TopicPartition(topic, p) for p in sorted(found or ())]


async def _drain(
    consumer: AIOKafkaConsumer,
    begin: dict[TopicPartition, int],
    end: dict[TopicPartition, int],
    bootstrap: str,
    timeout: float,
) -> list[CaseResult]:
    """Read each partition up to the end offset seen at the start (results published
    meanwhile are not waited for). When a partition reaches the listed end, the high
    watermark its fetches reported counts once too: some brokers (the embedded Tansu)
    list a short end after a multi-record batch."""
    position = dict(begin)
    end = dict(end)
    extended: set[TopicPartition] = set()
    results: list[CaseResult] = []
    quiet_since = time.monotonic()
    while True:
        for partition in end:
            if position[partition] >= end[partition] and partition not in extended:
                extended.add(partition)
                fetched = consumer.highwater(partition)
                if fetched is not None and fetched > end[partition]:
                    end[partition] = fetched
        if all(position[p] >= end[p] for p in end):
            break
        batch = await consumer.getmany(timeout_ms=500)
        if not batch:
            if time.monotonic() - quiet_since > timeout:
                raise BrokerUnavailable(
                    f"the Kafka broker at {bootstrap} sent nothing for {timeout:g}s while "
                    "reading results (stream.connect_timeout)"
                )
            continue
        quiet_since = time.monotonic()
        for partition, messages in batch.items():
            for message in messages:
                position[partition] = message.offset + 1
                if message.value is not None:  # a fetch brings whole batches: keep them
                    parsed = _result(message.value)
                    if parsed is not None:
                        results.append(parsed)
    return results


def _result(value: bytes) -> CaseResult | None:
    try:
        return CaseResult.model_validate_json(value)
    except ValidationError:
        return None  # not a result this version reads: skipped


# ---------------------------------------------------------------- output


def to_json(query: Query, selection: Selection) -> dict[str, Any]:
    return {
        "suite": query.suite,
        "segment": query.segment,
        "window": {"start": _stamp(query.start), "end": _stamp(query.end)},
        "metric": query.metric,
        "results": [result.model_dump(mode="json") for result in selection.results],
        "missing": selection.missing,
    }


def _stamp(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def render(console: Console, query: Query, selection: Selection) -> None:
    """A table of the cases: id, kind, event time, model, label or grade, the metric,
    trace id."""
    segment = ",".join(f"{k}={v}" for k, v in sorted(query.segment.items())) or "all"
    title = f"{query.suite} | {segment} | {_stamp(query.start)} .. {_stamp(query.end)}" + (
        f" | worst by {query.metric}" if query.metric else ""
    )
    table = Table(title=title)
    for column in ("id", "kind", "ts", "model", "label", query.metric or "score", "trace_id"):
        table.add_column(column, overflow="fold")
    for result in selection.results:
        value = result.scores.get(query.metric) if query.metric else None
        table.add_row(
            result.id,
            result.kind,
            _stamp(result.ts),
            result.model or "",
            result.label or result.grade or "",
            "" if value is None else f"{value:.3f}",
            result.trace_id or "",
        )
    console.print(table)
    console.print(f"{len(selection.results)} case(s)")


__all__ = ["parse_segment", "query_of", "read_gate_event", "run_results", "to_json"]
