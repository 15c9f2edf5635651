"""What the event loop reads of a result a scoring child built, without pydantic.

The score stage publishes each result's bytes as the child serialized them and only needs
a few of its fields for the key, the segments, the folds and the metrics. Reading those
with orjson into a `ResultFacts` tuple costs the loop about a quarter of validating the
whole `CaseResult` again (`bench/loop_cost.py`), mostly because it builds far fewer
objects for the garbage collector. `ResultView` is what the loop's consumers of a
result (`Publisher.result`, folds, dedupe, worst cases, telemetry) read: a `CaseResult`
and a `ResultFacts` both are one.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, NamedTuple, Protocol

import orjson

from schemas.outputs import Grade, Label


class SourceView(Protocol):
    """Where a result's input record was read (`RecordSource` or `SourceFacts`)."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...


class ResultView(Protocol):
    """The fields of a result the worker's loop reads (all but its versions and latency)."""

    @property
    def id(self) -> str: ...
    @property
    def suite(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def ts(self) -> datetime: ...
    @property
    def model(self) -> str | None: ...
    @property
    def labels(self) -> Mapping[str, str]: ...
    @property
    def scores(self) -> Mapping[str, float | None]: ...
    @property
    def label(self) -> Label | None: ...
    @property
    def grade(self) -> Grade | None: ...
    @property
    def details(self) -> Mapping[str, Any]: ...
    @property
    def counts(self) -> Mapping[str, Any]: ...
    @property
    def source(self) -> SourceView | None: ...
    @property
    def scored_at(self) -> datetime: ...
    @property
    def trace_id(self) -> str | None: ...


class SourceFacts(NamedTuple):
    topic: str
    partition: int
    offset: int


class ResultFacts(NamedTuple):
    """A result's fields as its JSON gave them (times and source as their types)."""

    id: str
    suite: str
    kind: str
    ts: datetime
    model: str | None
    labels: dict[str, str]
    scores: dict[str, float | None]
    label: Label | None
    grade: Grade | None
    details: dict[str, Any]
    counts: dict[str, Any]
    source: SourceFacts | None
    scored_at: datetime
    trace_id: str | None


def result_facts(value: bytes) -> ResultFacts:
    """The facts of a result this worker built and serialized itself (`build_result`,
    in a scoring child; trusted, so not validated again): the same values as
    `result_from_json(value)` has for these fields (`tests/test_result_json.py`, for
    arbitrary results)."""
    return facts_from_data(orjson.loads(value))


def facts_from_data(data: dict[str, Any]) -> ResultFacts:
    """`result_facts` of a result already parsed from its JSON (an item of an aggregate
    input's `results`, which this worker wrote)."""
    source = data.get("source")
    return ResultFacts(
        id=data["id"],
        suite=data["suite"],
        kind=data["kind"],
        ts=datetime.fromisoformat(data["ts"]),
        model=data.get("model"),
        labels=data.get("labels", {}),
        scores=data["scores"],
        label=data.get("label"),
        grade=data.get("grade"),
        details=data.get("details", {}),
        counts=data.get("counts", {}),
        source=None
        if source is None
        else SourceFacts(source["topic"], source["partition"], source["offset"]),
        scored_at=datetime.fromisoformat(data["scored_at"]),
        trace_id=data.get("trace_id"),
    )


__all__ = [
    "ResultFacts",
    "ResultView",
    "SourceFacts",
    "SourceView",
    "facts_from_data",
    "result_facts",
]
