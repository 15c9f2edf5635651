"""`scorestream results`: the published results of a window and segment, of a gate
event's worst cases, or of a gate's latest firing (`--gate`, found on the gates topic),
read back from the results topic."""

from __future__ import annotations

import argparse
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from schemas.envelope import parse_event_time
from schemas.outputs import CaseResult, GateEvent
from worker.commands.gates import read_gate_events, segment_text
from worker.commands.readback import read_topic
from worker.commands.stream import broker_of, settings_for
from worker.config import Settings, parse_duration
from worker.exit_codes import EXIT_MISSING, EXIT_OK, UsageError
from worker.gates.drilldown import Query, Selection, gate_event_query, select, window_query
from worker.gates.history import latest_firing
from worker.input.validation_errors import describe_validation_error


def run_results(args: argparse.Namespace) -> int:
    """Print the results a window/segment, a gate event or a gate's latest firing points
    to."""
    query = None if args.gate is not None else query_of(args)
    check_gate_usage(args)
    settings = settings_for(args)
    broker = broker_of(settings)
    event = None
    if args.gate is not None:
        segment = None if args.segment is None else parse_segment(args.segment)
        event = latest_firing(read_gate_events(settings, broker), args.gate, segment)
        if event is None:
            where = "" if segment is None else f" for segment {segment_text(segment)}"
            print(
                f"scorestream results: gate {args.gate} has not fired{where} "
                f"(no firing event on {settings.topics.gates}; see scorestream gates)",
                file=sys.stderr,
            )
            return EXIT_MISSING
        query = gate_event_query(event, args.limit)
        if args.metric is not None:
            query = _with_metric(query, args.metric)
    assert query is not None
    results = read_results(settings, broker, settings.topics.results)
    selection = select(results, query)
    if args.format == "json":
        shown = to_json(query, selection)
        if event is not None:
            shown["gate_event"] = event.model_dump(mode="json", exclude_none=True)
        sys.stdout.write(orjson.dumps(shown).decode() + "\n")
    else:
        console = Console()
        if event is not None:
            console.print(describe_firing(event))
        render(console, query, selection)
    if selection.missing:
        print(
            f"scorestream results: {len(selection.missing)} case(s) not on "
            f"{settings.topics.results}: {', '.join(selection.missing)}",
            file=sys.stderr,
        )
        return EXIT_MISSING
    return EXIT_OK


def check_gate_usage(args: argparse.Namespace) -> None:
    """`--gate` takes the suite and window from the gate's latest firing."""
    if args.gate is None:
        return
    if args.limit is not None and args.limit <= 0:
        raise UsageError("--limit must be positive")
    clashing = [
        flag
        for flag, value in (
            ("--gate-event", args.gate_event),
            ("--suite", args.suite),
            ("--window-start", args.window_start),
            ("--window", args.window),
        )
        if value
    ]
    if clashing:
        raise UsageError(
            f"--gate takes its suite and window from the gate's latest firing: "
            f"drop {', '.join(clashing)}"
        )


def describe_firing(event: GateEvent) -> str:
    """One line on the gate event a drill-down starts from."""
    segment = segment_text(event.segment)
    value = "?" if event.value is None else f"{event.value:.4g}"
    return (
        f"{event.gate} fired at {_stamp(event.ts)} for {segment}: {event.suite} "
        f"{event.metric} {event.stat} {value} {event.op} {event.threshold:g} "
        f"({event.count} cases, window from {_stamp(event.window.start)})"
    )


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
        raise UsageError(f"give {', '.join(missing)} (or --gate NAME, or --gate-event FILE)")
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
    return read_topic(settings, broker, topic, _result)


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
    languages = [result_languages(result) for result in selection.results]
    columns = ["id", "kind", "ts", "model", "label", query.metric or "score", "trace_id"]
    if any(languages):
        columns.insert(5, "language")
    for column in columns:
        table.add_column(column, overflow="fold")
    for result, language in zip(selection.results, languages, strict=True):
        value = result.scores.get(query.metric) if query.metric else None
        row = [
            result.id,
            result.kind,
            _stamp(result.ts),
            result.model or "",
            result.label or result.grade or "",
            "" if value is None else f"{value:.3f}",
            result.trace_id or "",
        ]
        if any(languages):
            row.insert(5, language)
        table.add_row(*row)
    console.print(table)
    console.print(f"{len(selection.results)} case(s)")


def result_languages(result: CaseResult) -> str:
    """The language of a turn result (`details.language`), or of a session's flagged
    turns (their `classifier_findings`, else its turns' `safety_coverage.languages`), with
    `*` after one the safety classifier does not cover; "" when the result names none."""
    details = result.details
    language = details.get("language")
    if isinstance(language, dict):
        uncovered = details.get("safety_coverage") == "keywords_only"
        return f"{language.get('code', '')}{'*' if uncovered else ''}"
    findings = details.get("classifier_findings")
    findings = findings if isinstance(findings, list) else []
    found = [f.get("language") for f in findings if isinstance(f, dict)]
    coverage = details.get("safety_coverage")
    languages = coverage.get("languages") if isinstance(coverage, dict) else None
    if not any(found) and isinstance(languages, dict):
        found = list(languages)
    return ",".join(dict.fromkeys(str(code) for code in found if code))


__all__ = [
    "parse_segment",
    "query_of",
    "read_gate_event",
    "result_languages",
    "run_results",
    "to_json",
]
