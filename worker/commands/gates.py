"""`scorestream gates`: the gate events of the gates topic, as the latest state of each
gate and segment, or every event of a time range."""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from schemas.envelope import parse_event_time
from schemas.outputs import GateEvent
from worker.commands.readback import read_topic
from worker.commands.stream import broker_of, settings_for
from worker.config import Settings, format_duration, parse_duration
from worker.exit_codes import EXIT_OK, UsageError
from worker.gates.history import events_since, latest_states


def run_gates(args: argparse.Namespace) -> int:
    """Print the latest state per gate and segment, or the events since `--since`."""
    since = None if args.since is None else parse_since(args.since, datetime.now(UTC))
    settings = settings_for(args)
    events = read_gate_events(settings, broker_of(settings))
    if since is None:
        shown = latest_states(events, args.gate)
        title = "latest state per gate and segment"
    else:
        shown = events_since(events, since, args.gate)
        title = f"gate events since {_stamp(since)}"
    if args.format == "json":
        sys.stdout.write(orjson.dumps([event_json(event) for event in shown]).decode() + "\n")
    else:
        render(Console(), title, shown)
    return EXIT_OK


def parse_since(text: str, now: datetime) -> datetime:
    """`--since`: a duration back from `now` (`90m`, `2h`, `1d`) or an RFC 3339 time."""
    try:
        return now - timedelta(seconds=parse_duration(text.strip()))
    except ValueError:
        pass
    try:
        moment = parse_event_time(text)
    except ValueError as exc:
        raise UsageError(
            f"--since: {exc} (give a duration such as 2h, or an RFC 3339 time)"
        ) from None
    assert moment is not None
    return moment


def read_gate_events(settings: Settings, broker: str) -> list[GateEvent]:
    """Every gate event on the gates topic, in topic order (records of another shape are
    skipped)."""
    return read_topic(settings, broker, settings.topics.gates, _gate_event)


def _gate_event(value: bytes) -> GateEvent | None:
    try:
        return GateEvent.model_validate_json(value)
    except ValidationError:
        return None


def event_json(event: GateEvent) -> dict[str, Any]:
    """A gate event as on the topic (`scorestream results --gate-event` reads it back)."""
    return event.model_dump(mode="json", exclude_none=True)


def segment_text(segment: dict[str, str]) -> str:
    """`model=m1,tenant=a`, or `all` for the all-cases segment (as `--segment` takes it)."""
    return ",".join(f"{key}={value}" for key, value in sorted(segment.items())) or "all"


def _stamp(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def _number(value: float | None) -> str:
    return "" if value is None else f"{value:.4g}"


def render(console: Console, title: str, events: list[GateEvent]) -> None:
    """One row per event: when, gate, segment, state (why, or the sample it was decided
    on), what was measured against what, over which window."""
    table = Table(title=title)
    for column in ("ts", "gate", "segment", "state", "value", "threshold", "count", "window"):
        table.add_column(column, overflow="fold")
    for event in events:
        state = event.state if event.reason is None else f"{event.state} ({event.reason})"
        if event.provisional:  # decided on a sample of the window's turns
            state += f" (provisional, {event.coverage or 0:.0%} of the turns)"
        size = timedelta(seconds=event.window.size_s)
        table.add_row(
            _stamp(event.ts),
            event.gate,
            segment_text(event.segment),
            state,
            f"{event.suite} {event.metric} {event.stat} {_number(event.value)}".rstrip(),
            f"{event.op} {_number(event.threshold)}",
            str(event.count),
            f"{_stamp(event.window.start)} +{_format_size(size)}",
        )
    console.print(table)
    firing = sum(event.state == "firing" for event in events)
    console.print(f"{len(events)} event(s), {firing} firing")


def _format_size(size: timedelta) -> str:
    return format_duration(size.total_seconds())


__all__ = ["event_json", "parse_since", "read_gate_events", "run_gates", "segment_text"]
