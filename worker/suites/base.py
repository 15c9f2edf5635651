"""Contracts shared by the scoring suites.

A suite is a set of pure functions (no I/O, no Kafka, no clock):
- a scorer turns one case (or turn, or session) into a `Scored`;
- a `SuiteAggregator` folds `Scored` values into mergeable, JSON-compatible state
  (initialise / update / merge / figures), used alike by windows and batch reports;
- a `BatchScorer` drives `scorestream score` for one suite and returns a `BatchReport`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic import JsonValue
from rich.console import Console

from schemas.outputs import CountValue, Grade, Label

SCORER_VERSION = "0.1.0"


@dataclass(frozen=True)
class Scored:
    """The outcome of scoring one case, turn or session."""

    scores: Mapping[str, float | None]
    label: Label | None = None
    grade: Grade | None = None
    details: dict[str, JsonValue] = field(default_factory=dict)
    counts: dict[str, CountValue] = field(default_factory=dict)


# Aggregate state is plain JSON-compatible data so that tables can persist it.
State = dict[str, Any]


class SuiteAggregator(Protocol):
    """Folds the `Scored` values of one suite into mergeable state."""

    def initialise(self) -> State: ...

    def update(self, state: State, scored: Scored) -> State: ...

    def merge(self, left: State, right: State) -> State: ...

    def figures(self, state: State) -> dict[str, Any]:
        """The suite's batch figures, shaped as its `schemas.outputs` *Figures model."""
        ...


@dataclass(frozen=True)
class BatchItem:
    """One input row of `scorestream score`, already validated into a payload."""

    id: str
    payload: Any
    model: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    source: str = ""  # "file:line", for messages
    unknown_fields: tuple[str, ...] = ()  # payload keys no model field reads


class BatchReport(Protocol):
    """The outcome of scoring a batch offline."""

    def to_json(self) -> dict[str, Any]: ...

    def render_console(self, console: Console, verbose: bool = False) -> None: ...

    def to_markdown(self) -> str: ...

    def exit_code(self) -> int:
        """0 all Pass (or nothing failed), 1 any Fail, 2 any Review and no Fail."""
        ...

    def report_stem(self) -> str:
        """File name stem for reports written without `--output`."""
        ...


class BatchScorer(Protocol):
    """Drives `scorestream score` for one suite.

    Made by the suite's `make_batch_scorer(settings: Settings, options: BatchOptions)`.
    """

    def native_payload(self, row: dict[str, Any]) -> Any:
        """Validate a native row of this suite into its payload model.

        Raises `pydantic.ValidationError` or `ValueError` naming the offending field.
        """
        ...

    def native_id(self, row: dict[str, Any], fallback: str) -> str:
        """The case id of a native row (`fallback` is "file:line")."""
        ...

    def score(self, items: list[BatchItem]) -> BatchReport: ...


@dataclass(frozen=True)
class BatchOptions:
    """Command-line options of `scorestream score` that suites may use."""

    strict_ah: bool = False
    concern: str | None = None
    judge: bool = False
    verbose: bool = False


def exit_code_for_labels(labels: list[Label | None]) -> int:
    """Seed 004 section 7.3: 1 on any Fail, else 2 on any Review, else 0."""
    if "Fail" in labels:
        return 1
    if "Review" in labels:
        return 2
    return 0


def grade_for(value: float | None) -> Grade | None:
    """Letter grade on the raw value: A >= 0.9, B >= 0.8, C >= 0.7, D >= 0.6, else F."""
    if value is None:
        return None
    value = round(value, 9)  # 0.9 computed as 0.8999999999 still earns an A
    for grade, floor in (("A", 0.9), ("B", 0.8), ("C", 0.7), ("D", 0.6)):
        if value >= floor:
            return grade  # type: ignore[return-value]
    return "F"
