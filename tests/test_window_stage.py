"""The aggregation stage's interim aggregates, with an injected clock and dict tables:
a burst's last changes go out from the timer within `aggregate_emit_interval`, not when
the next record happens to arrive."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson

from schemas.outputs import Aggregate, CaseResult, RecordSource
from tests.streamkit import make_config, settings_of
from worker.ops.telemetry import Telemetry
from worker.scoring_suites import ScoringSuites
from worker.stream.context import StreamContext
from worker.stream.windows import WindowStage
from worker.suites.alignment.embedding_model import HashingEmbedder
from worker.suites.registry import AGGREGATORS
from worker.windowing.pane_folds import PaneFold

T0 = 1_700_000_040.0  # a whole minute


@dataclass
class Message:
    partition: int
    offset: int


@dataclass
class Event:
    value: bytes
    message: Message


class Published:
    """Stands in for the publisher: keeps the aggregates the stage sends."""

    def __init__(self) -> None:
        self.aggregates: list[Aggregate] = []

    async def aggregate(self, key: str, message: Aggregate) -> None:
        self.aggregates.append(message)

    async def gate_event(self, key: str, event: Any) -> None:  # no gates configured here
        raise AssertionError("no gate should fire")


def case(index: int, seconds: float | None = None, composite: float = 0.5) -> CaseResult:
    """A SAFE result `seconds` after T0 (default: `index`)."""
    return CaseResult.model_construct(
        id=f"c{index}",
        suite="safe",
        kind="case",
        ts=datetime.fromtimestamp(T0 + (index if seconds is None else seconds), UTC),
        model=None,
        labels={},
        scores={"composite": composite},
        label="Pass",
        grade=None,
        details={},
        counts={},
        trace_id=None,
        source=RecordSource.model_construct(topic="in", partition=0, offset=index),
    )


def folded(*indices: int) -> bytes:
    fold = PaneFold("safe", {}, 60.0, AGGREGATORS["safe"])
    for index in indices:
        fold.add(case(index))
    return orjson.dumps({"segment": {}, "fold": fold.to_json()})


class Stage:
    def __init__(self) -> None:
        self.now = T0 + 10
        settings = settings_of(make_config(aggregate_emit_interval="1s"))
        suites = ScoringSuites.load(settings, HashingEmbedder())
        self.published = Published()
        context = StreamContext(
            settings,
            suites,
            Telemetry.from_settings(settings),
            self.published,  # type: ignore[arg-type]
            lambda: self.now,
        )
        self.stage = WindowStage(context, {}, {}, {})
        self.offset = 0

    async def deliver(self, value: bytes) -> None:
        self.offset += 1
        await self.stage.process_batch([Event(value, Message(0, self.offset))])  # type: ignore[list-item]

    def counts(self) -> list[int]:
        return [aggregate.count for aggregate in self.published.aggregates]


async def test_the_end_of_a_burst_is_published_by_the_timer_within_the_interval() -> None:
    stage = Stage()
    await stage.deliver(folded(1, 2))
    assert stage.counts() == [2]  # nothing published for a second: at once
    stage.now += 0.3
    await stage.deliver(folded(3))
    assert stage.counts() == [2]  # within the interval: held back
    stage.now += 0.4
    await stage.stage.emit_due({0})
    assert stage.counts() == [2]  # still within it
    stage.now += 0.3
    await stage.stage.emit_due({0})
    assert stage.counts() == [2, 3]  # the timer publishes it, no record needed
    stage.now += 5
    await stage.stage.emit_due({0})
    assert stage.counts() == [2, 3]  # nothing changed since: nothing more
