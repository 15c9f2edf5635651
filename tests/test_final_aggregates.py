"""A backlog's final aggregates are built in the scoring processes (real child processes,
an injected clock, dict tables): the same messages as built on the event loop, in the same
order, with the gate judged on them; and when a child dies building them, the window
stage builds them itself and loses none."""

from __future__ import annotations

import logging
import os
from typing import Any

import orjson
import pytest

from schemas.outputs import Aggregate, CaseResult, GateEvent
from tests.streamkit import make_config, settings_of
from tests.test_window_stage import T0, Event, Message
from tests.test_window_stage import case as window_case
from worker.aggregation import message as aggregate_message
from worker.ops.telemetry import Telemetry
from worker.scoring_pool import ScoringPool
from worker.scoring_suites import ScoringSuites
from worker.stream import windows
from worker.stream.context import StreamContext
from worker.stream.windows import FINALS_PER_CALL, WindowStage
from worker.suites.alignment.embedding_model import HashingEmbedder
from worker.suites.registry import AGGREGATORS
from worker.windowing.event_time import INPUT_GROUP, SESSION_GROUP, Marker
from worker.windowing.pane_folds import PaneFold

MINUTES = 3 * FINALS_PER_CALL  # closed at once by one marker: several calls
GATE = {
    "name": "composite-drop",
    "suite": "safe",
    "metric": "composite",
    "op": "<",
    "threshold": 0.5,
    "window": "1m",
    "min_count": 1,
    "severity": "page",
}


class Published:
    def __init__(self) -> None:
        self.aggregates: list[Aggregate] = []
        self.gate_events: list[GateEvent] = []

    async def aggregate(self, key: str, message: Aggregate) -> None:
        self.aggregates.append(message)

    async def gate_event(self, key: str, event: GateEvent) -> None:
        self.gate_events.append(event)


def case(index: int) -> CaseResult:
    """Every 7 s, a composite of many distinct values (so the bootstrap draws every pick),
    low from the tenth minute on (the gate fires there)."""
    value = (index * 37 % 101) / 100
    low = 7 * index >= 600
    return window_case(index, 7 * index, 0.4 * value if low else 0.6 + 0.4 * value)


def backlog_events() -> list[Event]:
    """`MINUTES` minutes of folded cases, then one marker per upstream channel past all."""
    events = []
    cases = [case(index) for index in range(MINUTES * 60 // 7)]
    for start in range(0, len(cases), 16):
        fold = PaneFold("safe", {}, 60.0, AGGREGATORS["safe"])
        for result in cases[start : start + 16]:
            fold.add(result)
        value = orjson.dumps({"segment": {}, "fold": fold.to_json()})
        events.append(Event(value, Message(0, len(events))))
    partitions = settings().stream.partitions
    for group, count in ((INPUT_GROUP, 1), (SESSION_GROUP, partitions)):
        for index in range(count):
            marker = Marker(group, index, count, T0 + MINUTES * 60 + 2)
            events.append(Event(orjson.dumps({"wm": marker.to_json()}), Message(0, len(events))))
    return events


def settings() -> Any:
    windows = [{"size": "1m"}, {"size": "5m", "step": "1m"}]  # hopping: windows of 5 panes
    return settings_of(make_config(gates=[GATE], segment_by=[], windows=windows))


def stage(pool: ScoringPool | None) -> tuple[WindowStage, Published]:
    config = settings()
    published = Published()
    context = StreamContext(
        config,
        ScoringSuites.load(config, HashingEmbedder()),
        Telemetry.from_settings(config),
        published,  # type: ignore[arg-type]
        lambda: T0 + 86_400.0,
    )
    if pool is not None:
        context.scoring_pool = pool
    return WindowStage(context, {}, {}, {}), published


async def replay(pool: ScoringPool | None) -> Published:
    window_stage, published = stage(pool)
    await window_stage.process_batch(backlog_events())  # type: ignore[arg-type]
    return published


def finals(published: Published) -> list[dict[str, Any]]:
    return [a.model_dump(mode="json") for a in published.aggregates if a.final]


@pytest.mark.system
async def test_a_backlogs_finals_built_in_a_child_are_those_built_on_the_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    on_the_loop = await replay(None)  # no pool started: the stage builds them itself
    sizes = [a["window"]["size_s"] for a in finals(on_the_loop)]
    assert sizes.count(60) == MINUTES and sizes.count(300) >= MINUTES - 4
    assert all(a["metrics"]["composite"]["ci_low"] is not None for a in finals(on_the_loop))

    pool = ScoringPool(settings(), factories={})
    pool.start()
    try:

        def not_here(*args: Any, **kwargs: Any) -> Any:
            raise AssertionError("a final's bootstrap ran on the event loop's process")

        monkeypatch.setattr(aggregate_message, "bootstrap_ci", not_here)
        in_a_child = await replay(pool)
    finally:
        pool.close()
    assert finals(in_a_child) == finals(on_the_loop)
    assert [e.model_dump(mode="json") for e in in_a_child.gate_events] == [
        e.model_dump(mode="json") for e in on_the_loop.gate_events
    ]
    assert [e.state for e in in_a_child.gate_events] == ["firing"]


def die(*args: Any) -> None:
    """Stands in for `final_messages` in the child: the child dies in the call."""
    os._exit(9)


@pytest.mark.system
async def test_finals_a_child_dies_building_are_built_by_the_stage(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    on_the_loop = await replay(None)
    pool = ScoringPool(settings(), factories={})
    pool.start()
    monkeypatch.setattr(windows, "final_messages", die)
    try:
        with caplog.at_level(logging.WARNING, logger="scorestream"):
            survived = await replay(pool)
    finally:
        pool.close()
    assert finals(survived) == finals(on_the_loop)
    assert "final aggregates not built by a scoring process" in caplog.text
