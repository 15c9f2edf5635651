"""The demo's scorecard: what the output topics say, folded into one state, and its view.

Pure: the demo feeds it the records it produced and every record it reads back from the
output topics (`observe`); the scorecard counts results and dead letters, keeps the latest
aggregate of every window and the latest state of every gate, and knows when the replay is
fully accounted for: every produced record has a result or a dead letter, every session
that got a turn result is closed, and every window the results fall into has its final
aggregate. `render` draws it with rich (live in a terminal, or as plain text).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson
from pydantic import ValidationError
from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from schemas.outputs import Aggregate, CaseResult, DeadLetter, GateEvent
from worker.aggregation import aggregate_key, segment_key, segments_for
from worker.config import GateConfig, TopicNames, WindowConfig
from worker.gates.evaluator import figure_rates
from worker.suites import registry
from worker.windowing.windows import WindowKey, assign_windows

Position = tuple[int, int]  # (partition, offset) on the input topic


def metric_value(aggregate: Aggregate, where: str, name: str) -> float | None:
    """One main metric of an aggregate (None when the window does not have it).

    `where` is `mean` (a metric summary's mean), `rate` (the window's pass rate) or
    `figure` (a rate among the suite's figures); each suite's spec lists its columns.
    """
    if where == "rate":
        return aggregate.pass_rate
    if where == "figure":
        return figure_rates(aggregate).get(name)
    summary = aggregate.metrics.get(name)
    return None if summary is None else summary.mean


@dataclass
class Scorecard:
    """Everything the demo shows, folded from the records it produced and read back."""

    topics: TopicNames
    windows: Sequence[WindowConfig]
    segment_by: Sequence[str]
    gates_config: Sequence[GateConfig] = ()
    produced: dict[Position, dict[str, Any] | None] = field(default_factory=dict)
    accounted: set[Position] = field(default_factory=set)
    results: Counter[tuple[str, str]] = field(default_factory=Counter)  # (suite, kind)
    outcomes: Counter[tuple[str, str]] = field(default_factory=Counter)  # (suite, label)
    seen_results: set[tuple[str, str, str]] = field(default_factory=set)
    sessions_open: set[str] = field(default_factory=set)
    sessions_closed: set[str] = field(default_factory=set)
    expected: dict[str, set[str]] = field(default_factory=dict)  # aggregate key -> result ids
    expected_windows: dict[str, WindowKey] = field(default_factory=dict)
    aggregates: dict[str, Aggregate] = field(default_factory=dict)  # latest per key
    finals: set[str] = field(default_factory=set)
    gates: dict[str, GateEvent] = field(default_factory=dict)  # latest per gate key
    gate_history: list[GateEvent] = field(default_factory=list)
    dead_letters: Counter[str] = field(default_factory=Counter)  # by reason
    dead_by_suite: Counter[str] = field(default_factory=Counter)
    late: int = 0
    unreadable: int = 0

    # ------------------------------------------------------------ folding

    def produce(self, position: Position, line: bytes) -> None:
        """Remember a record the demo put on the input topic."""
        try:
            data = orjson.loads(line)
        except orjson.JSONDecodeError:
            data = None
        self.produced[position] = data if isinstance(data, dict) else None

    def observe(self, topic: str, key: bytes | None, value: bytes | None) -> None:
        """Fold one record read from an output topic."""
        if value is None:
            return
        try:
            if topic == self.topics.results:
                self._result(CaseResult.model_validate_json(value))
            elif topic == self.topics.aggregates:
                text = key.decode("utf-8") if key else ""
                self._aggregate(text, Aggregate.model_validate_json(value))
            elif topic == self.topics.gates:
                self._gate(GateEvent.model_validate_json(value))
            elif topic == self.topics.dead_letters:
                self._dead_letter(DeadLetter.model_validate_json(value))
        except (ValidationError, UnicodeDecodeError):
            self.unreadable += 1

    def _result(self, result: CaseResult) -> None:
        identity = (result.suite, result.kind, result.id)
        if identity in self.seen_results:
            return  # redelivered (at-least-once)
        self.seen_results.add(identity)
        self.results[(result.suite, result.kind)] += 1
        if result.label is not None:
            self.outcomes[(result.suite, result.label)] += 1
        elif result.grade is not None and result.kind != "turn":
            self.outcomes[(result.suite, result.grade)] += 1
        if result.source is not None and result.source.topic == self.topics.input:
            position = (result.source.partition, result.source.offset)
            self.accounted.add(position)
            record = self.produced.get(position)
            spec = registry.find(result.suite)
            if spec is not None and spec.scored_in_sessions and record is not None:
                session = (record.get("payload") or {}).get("session_id")
                if isinstance(session, str):
                    self.sessions_open.add(session)
        if result.kind == "session":
            self.sessions_closed.add(result.id.removeprefix("session:"))
        if result.kind == "turn":
            return  # windows aggregate cases and closed sessions
        event_time = result.ts.timestamp()
        for segment in segments_for(result.model, result.labels, self.segment_by):
            for window in assign_windows(event_time, self.windows):
                key = aggregate_key(result.suite, segment, window)
                self.expected.setdefault(key, set()).add(f"{result.kind}:{result.id}")
                self.expected_windows[key] = window

    def _aggregate(self, key: str, aggregate: Aggregate) -> None:
        if not key:
            window = WindowKey(aggregate.window.size_s, None, aggregate.window.start.timestamp())
            key = aggregate_key(aggregate.suite, aggregate.segment, window)
        current = self.aggregates.get(key)
        if current is not None and current.final and not aggregate.final:
            return
        self.aggregates[key] = aggregate
        if aggregate.final:
            self.finals.add(key)

    def _gate(self, event: GateEvent) -> None:
        self.gates[f"{event.gate}|{segment_key(event.segment)}"] = event
        self.gate_history.append(event)

    def _dead_letter(self, letter: DeadLetter) -> None:
        source = letter.source
        if source.topic == self.topics.input:
            position = (source.partition, source.offset)
            if position in self.accounted and position in self.produced:
                return  # redelivered
            self.accounted.add(position)
            record = self.produced.get(position)
            suite = record.get("suite") if record else None
            if (spec := registry.find(suite)) is not None:
                self.dead_by_suite[spec.name] += 1
        self.dead_letters[letter.error.type] += 1

    # ------------------------------------------------------------ progress

    @property
    def pending(self) -> int:
        """Produced records with neither a result nor a dead letter yet."""
        return len(set(self.produced) - self.accounted)

    @property
    def open_sessions(self) -> set[str]:
        return self.sessions_open - self.sessions_closed

    @property
    def missing_finals(self) -> list[str]:
        """Windows with results whose final aggregate has not arrived."""
        return sorted(set(self.expected) - self.finals)

    def settled(self, positions: Iterable[Position]) -> bool:
        """Whether `positions` are accounted for and every open window has caught up:
        each window's latest aggregate counts all results that fall into it."""
        if not set(positions) <= self.accounted or self.open_sessions:
            return False
        for key, ids in self.expected.items():
            aggregate = self.aggregates.get(key)
            if aggregate is None or aggregate.count < len(ids):
                return False
        return True

    @property
    def done(self) -> bool:
        """Every produced record accounted for, sessions closed, final aggregates in."""
        return (
            bool(self.produced)
            and self.pending == 0
            and not self.open_sessions
            and not self.missing_finals
        )

    @property
    def fired(self) -> list[str]:
        """Gate keys that fired at least once."""
        return sorted(
            {f"{e.gate}|{segment_key(e.segment)}" for e in self.gate_history if e.state == "firing"}
        )

    def summary(self) -> str:
        """One line with the totals (what the tests read), e.g. `records 89, accounted 89 |
        safe: cases 20 | ... | dead letters 6 | gates fired: safety-drop|all`."""
        parts = [f"records {len(self.produced)}, accounted {len(self.accounted)}"]
        for suite in registry.names():
            counts = [
                f"{kind}s {self.results[(suite, kind)]}"
                for kind in ("case", "turn", "session")
                if self.results[(suite, kind)]
            ]
            parts.append(f"{suite}: {', '.join(counts) or 'none'}")
        parts.append(f"dead letters {sum(self.dead_letters.values())}")
        parts.append(f"gates fired: {', '.join(self.fired) or 'none'}")
        return " | ".join(parts)

    # ------------------------------------------------------------ view

    def render(self, title: str, status: str, ascii_only: bool = False) -> Group:
        """The scorecard as a rich renderable."""
        style = box.ASCII if ascii_only else box.SIMPLE_HEAVY
        return Group(
            Text(title, style="bold"),
            Text(status),
            self._suites_table(style),
            self._windows_table(style),
            self._gates_table(style),
            self._dead_letter_line(),
            Text(self.summary()),
        )

    def _suites_table(self, style: box.Box) -> Table:
        table = Table(title="Results by suite", box=style, title_justify="left")
        columns = ("suite", "records", "cases", "turns", "sessions", "dead letters", "outcomes")
        for column in columns:
            table.add_column(column, justify="left" if column in ("suite", "outcomes") else "right")
        for suite in registry.names():
            records = sum(
                1 for data in self.produced.values() if data and data.get("suite") == suite
            )
            outcomes = sorted(
                ((label, count) for (name, label), count in self.outcomes.items() if name == suite),
                key=lambda item: _OUTCOME_ORDER.get(item[0], 99),
            )
            table.add_row(
                suite,
                str(records),
                str(self.results[(suite, "case")]),
                str(self.results[(suite, "turn")]),
                str(self.results[(suite, "session")]),
                str(self.dead_by_suite[suite]),
                "  ".join(f"{label} {count}" for label, count in outcomes) or "-",
            )
        return table

    def _windows_table(self, style: box.Box) -> Table:
        table = Table(
            title="Windows (all cases; cases and closed sessions)", box=style, title_justify="left"
        )
        table.add_column("suite")
        table.add_column("window")
        table.add_column("n", justify="right")
        table.add_column("main metrics (means; rates)")
        table.add_column("state")
        rows = [
            (aggregate.window.start, registry.names().index(aggregate.suite), key, aggregate)
            for key, aggregate in self.aggregates.items()
            if not aggregate.segment
        ]
        for _, _, key, aggregate in sorted(rows, key=lambda row: (row[0], row[1], row[2])):
            values = []
            for label, where, name in registry.get(aggregate.suite).scorecard:
                value = metric_value(aggregate, where, name)
                values.append(f"{label} {'-' if value is None else f'{value:.2f}'}")
            window = aggregate.window
            table.add_row(
                aggregate.suite,
                f"{_clock(window.start)}-{_clock(window.end)} ({key.split('|')[2]})",
                str(aggregate.count),
                "  ".join(values),
                "final" if aggregate.final else "open",
            )
        return table

    def _gates_table(self, style: box.Box) -> Table:
        table = Table(title="Gates", box=style, title_justify="left")
        for column in ("gate", "segment", "state", "value", "threshold", "n", "window"):
            table.add_column(column, justify="right" if column in ("value", "n") else "left")
        shown = set()
        for key in sorted(self.gates):
            event = self.gates[key]
            shown.add(event.gate)
            fired = sum(
                1
                for past in self.gate_history
                if past.state == "firing" and f"{past.gate}|{segment_key(past.segment)}" == key
            )
            state = event.state.upper() if event.state == "firing" else event.state
            if event.state == "resolved" and fired:
                state = f"resolved (fired {fired}x)"
            table.add_row(
                event.gate,
                segment_key(event.segment),
                state,
                "-" if event.value is None else f"{event.value:.2f}",
                f"{event.op} {event.threshold:g}",
                str(event.count),
                f"{_clock(event.window.start)}-{_clock(event.window.end)}",
            )
        for gate in self.gates_config:
            if gate.name not in shown:
                table.add_row(gate.name, "-", "ok", "-", f"{gate.op} {gate.threshold:g}", "-", "-")
        return table

    def _dead_letter_line(self) -> Text:
        total = sum(self.dead_letters.values())
        reasons = ", ".join(f"{reason} {n}" for reason, n in sorted(self.dead_letters.items()))
        return Text(f"Dead letters: {total}" + (f" ({reasons})" if reasons else ""))


_OUTCOME_ORDER = {"Pass": 0, "Review": 1, "Fail": 2, "A": 3, "B": 4, "C": 5, "D": 6, "F": 7}


def _clock(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%H:%M:%S")


__all__ = ["Scorecard", "metric_value"]
