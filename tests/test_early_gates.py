"""Provisional gate verdicts (`worker.gates.early`): the sample, its folds, the gate's
rules for a sample against the full window, and the window stage replaying a history
with an injected clock (dict tables) while the session stage's watermark lags."""

from __future__ import annotations

import math
import random
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

from schemas.outputs import (
    Aggregate,
    CaseResult,
    MetricSummary,
    Versions,
    WindowSpan,
)
from tests.streamkit import make_config, settings_of
from tests.test_gate_stage import Published
from tests.test_window_stage import T0, Event, Message
from worker.config import GateConfig
from worker.gates.early import (
    EarlyFolds,
    EarlyTurns,
    EarlyWindows,
    Pace,
    is_sampled,
    merge_state,
)
from worker.gates.evaluator import GateEvaluator
from worker.ops.telemetry import Telemetry
from worker.scoring_suites import ScoringSuites
from worker.stream.context import StreamContext
from worker.stream.windows import WindowStage
from worker.suites.alignment.embedding_model import HashingEmbedder
from worker.windowing.event_time import INPUT_GROUP, SESSION_GROUP, Marker

GATE = {
    "name": "safety-drop",
    "suite": "alignment",
    "metric": "safety",
    "stat": "mean",
    "op": "<",
    "threshold": 0.9,
    "clear": 0.95,
    "window": "1m",
    "min_count": 5,
}
GATE_CONFIG = GateConfig.model_validate(GATE)
AFTER = 5.0  # early_gates.after
GRACE = 1.0  # make_config's


# ---------------------------------------------------------------- the sample


def test_the_sample_is_uniform_and_the_same_in_every_process() -> None:
    ids = [f"s{n}:{n % 4}" for n in range(20_000)]
    chosen = [ident for ident in ids if is_sampled(ident, 0.1)]
    assert 0.09 < len(chosen) / len(ids) < 0.11
    assert not any(is_sampled(ident, 0.0) for ident in ids[:500])
    assert all(is_sampled(ident, 1.0) for ident in ids[:500])
    script = (
        "from worker.gates.early import is_sampled\n"
        f"print(sum(is_sampled(f's{{n}}:{{n % 4}}', 0.1) for n in range({len(ids)})))"
    )
    other = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout
    assert int(other) == len(chosen)  # a scoring process elsewhere picks the same turns


def fold_of(turns: list[tuple[str, float, float | None]]) -> dict[str, Any]:
    """The state of the 1-minute window at T0 after folding (id, ts, safety or None)."""
    folds = EarlyFolds(sizes=[60.0], metrics=["safety"], suite="alignment")
    for ident, ts, safety in turns:
        scores: list[dict[str, float | None]] | None = None
        if safety is not None:
            scores = [{"safety": safety, "authenticity": None}]
        folds.add([{}], ts, EarlyTurns(1, scores), (ident, "turn", "m1", None))
    ((_, value),) = folds.take()
    ((size, start, state),) = orjson.loads(value)["early"]["windows"]
    assert (size, start) == (60.0, T0)
    return dict(state)


def test_folds_merge_to_the_fold_of_their_union() -> None:
    rng = random.Random(7)
    turns = [
        (f"t{n}", T0 + rng.uniform(0, 59), rng.choice([None, 0.0, 0.5, 1.0])) for n in range(200)
    ]
    whole = fold_of(turns)
    merged = fold_of(turns[:70])
    merge_state(merged, fold_of(turns[70:]), 5)
    assert merged["seen"] == whole["seen"] == 200
    assert merged["judged"] == whole["judged"] == sum(s is not None for _, _, s in turns)
    count, total, _, low, high = merged["metrics"]["safety"]
    assert [count, low, high] == whole["metrics"]["safety"][:1] + whole["metrics"]["safety"][3:]
    assert abs(total - whole["metrics"]["safety"][1]) < 1e-9
    assert merged["worst"] == whole["worst"]  # the five lowest, ties by id
    assert [entry[0] for entry in merged["worst"]["safety"]] == [0.0] * 5


def test_a_window_closes_on_the_input_watermark_and_is_due_after_the_wait() -> None:
    windows = EarlyWindows(grace=GRACE, after=AFTER)
    state = fold_of([("t1", T0 + 1, 0.0), ("t2", T0 + 2, None)])
    windows.add(0, {}, {"suite": "alignment", "windows": [[60.0, T0, state]]})
    assert windows.close(0, T0 + 60, now=100.0) == 0  # end, not end + grace
    assert windows.close(0, T0 + 61, now=100.0) == 1
    assert windows.due(0, 104.9) == []
    (due,) = windows.due(0, 105.0)
    assert due.coverage == 0.5 and due.end == T0 + 60
    assert windows.due(0, 200.0) == []  # taken once


def test_a_pace_says_when_a_watermark_reaches_a_moment() -> None:
    pace = Pace(span=4.0)
    assert pace.eta(T0 + 60, 100.0) is None
    pace.observe(100.0, T0 + 40)
    pace.observe(101.0, T0 + 40.5)
    assert pace.eta(T0 + 60, 101.0) is None  # under half a span: not known yet
    pace.observe(102.0, T0 + 41)
    assert pace.eta(T0 + 60, 102.0) == 38.0  # half an event second per wall second
    assert pace.eta(T0 + 60, 103.0) == 37.0
    assert pace.eta(T0 + 41, 103.0) == 0.0
    for now in (110.0, 111.0, 112.0):
        pace.observe(now, T0 + 45)
    assert pace.eta(T0 + 60, 112.0) == 37.5  # over the last span and a bit: 4 s in 10
    for now in (113.0, 114.0, 115.0, 116.0):
        pace.observe(now, T0 + 45)  # standing still for a span
    assert pace.eta(T0 + 60, 116.0) == math.inf


# ---------------------------------------------------------------- the gate's rules


def aggregate(start: float, mean: float, count: int = 20) -> Aggregate:
    moment = datetime.fromtimestamp(start, UTC)
    return Aggregate(
        suite="alignment",
        segment={},
        window=WindowSpan(start=moment, end=moment + timedelta(seconds=60), size_s=60),
        final=True,
        count=count,
        metrics={"safety": MetricSummary(mean=mean, min=0.0, max=1.0, std=0.1)},
        emitted_at=moment,
    )


def judge(evaluator: GateEvaluator, start: float, mean: float, sample: bool) -> list[str]:
    return [event.state for event in evaluator.evaluate(aggregate(start, mean), None, sample)]


def test_a_sample_fires_and_its_own_full_window_confirms_or_resolves_it() -> None:
    evaluator = GateEvaluator([GATE_CONFIG])
    assert judge(evaluator, T0, 0.5, sample=True) == ["firing"]
    assert judge(evaluator, T0, 0.4, sample=False) == []  # confirmed: no second page
    evaluator = GateEvaluator([GATE_CONFIG])
    assert judge(evaluator, T0, 0.5, sample=True) == ["firing"]
    assert judge(evaluator, T0, 0.99, sample=False) == ["resolved"]  # the sample was wrong


def test_a_sample_is_not_judged_for_a_window_judged_in_full() -> None:
    evaluator = GateEvaluator([GATE_CONFIG])
    assert judge(evaluator, T0, 0.99, sample=False) == []
    assert judge(evaluator, T0, 0.1, sample=True) == []  # the full verdict stands
    assert judge(evaluator, T0 - 60, 0.1, sample=True) == []


def test_full_windows_behind_the_sample_never_page_twice_nor_resolve_a_newer_page() -> None:
    evaluator = GateEvaluator([GATE_CONFIG])
    assert judge(evaluator, T0, 0.5, sample=True) == ["firing"]  # the burst, sampled
    assert judge(evaluator, T0 - 60, 0.99, sample=False) == []  # older and safe: no resolve
    assert judge(evaluator, T0 + 60, 0.99, sample=True) == ["resolved"]  # the sample moves on
    assert judge(evaluator, T0, 0.5, sample=False) == []  # the burst in full: paged already
    assert judge(evaluator, T0 + 60, 0.99, sample=False) == []
    # a window no sample judged (too few turns sampled) still pages when it arrives late
    assert judge(evaluator, T0 + 120, 0.99, sample=True) == []
    assert evaluator.evaluate(aggregate(T0 + 180, 0.2, count=2), None, True) == []
    assert judge(evaluator, T0 + 180, 0.5, sample=False) == ["firing"]
    state = evaluator.to_json()["safety-drop|all"]
    assert GateEvaluator([GATE_CONFIG], {"safety-drop|all": state}).to_json() == {
        "safety-drop|all": state
    }  # the samples' windows survive a restart with the gate table


# ---------------------------------------------------------------- the window stage


class Stage:
    """A window stage with the gate, an injected clock and dict tables."""

    def __init__(self) -> None:
        self.now = T0 + 61.0
        config = make_config(gates=[GATE], segment_by=[], early_gates={"after": f"{AFTER:g}s"})
        settings = settings_of(config)
        self.published = Published()
        context = StreamContext(
            settings,
            ScoringSuites.load(settings, HashingEmbedder()),
            Telemetry.from_settings(settings),
            self.published,  # type: ignore[arg-type]
            lambda: self.now,
        )
        self.gates: dict[str, Any] = {}
        self.stage = WindowStage(context, {}, {}, self.gates)
        self.offset = 0

    async def deliver(self, *values: bytes) -> None:
        events = []
        for value in values:
            self.offset += 1
            events.append(Event(value, Message(0, self.offset)))
        await self.stage.process_batch(events)  # type: ignore[arg-type]

    def markers(self, group: str, value: float) -> list[bytes]:
        count = 1 if group == INPUT_GROUP else self.stage.settings.stream.partitions
        return [
            orjson.dumps({"wm": Marker(group, index, count, value).to_json()})
            for index in range(count)
        ]

    def events(self) -> list[tuple[str, bool, float | None]]:
        return [(e.state, e.provisional, e.coverage) for e in self.published.gate_events]


def sample(turns: int, unsafe: int, judged: int) -> bytes:
    """The score stage's fold of `turns` turns in the minute at T0, `judged` of them
    judged, the first `unsafe` of those unsafe."""
    folds = EarlyFolds(sizes=[60.0], metrics=["safety"], suite="alignment")
    for n in range(turns):
        scores: list[dict[str, float | None]] | None = None
        if n < judged:
            scores = [{"safety": 0.0 if n < unsafe else 1.0}]
        folds.add([{}], T0 + n * 0.1, EarlyTurns(1, scores), (f"t{n}", "turn", "m1", None))
    ((_, value),) = folds.take()
    return value


def sessions(safety: list[float], start: float = T0) -> bytes:
    """Closed sessions' results in the minute at `start`, as the session stage sends."""
    results = [
        CaseResult.model_construct(
            id=f"session:s{n}",
            suite="alignment",
            kind="session",
            ts=datetime.fromtimestamp(start + 1 + n * 0.1, UTC),
            model="m1",
            labels={},
            scores={"safety": value},
            label=None,
            grade=None,
            details={},
            counts={"turns": 4},
            trace_id=None,
            source=None,
            versions=Versions(scorer="test", metrics="1.0"),
            scored_at=datetime.fromtimestamp(start + 62, UTC),
        ).model_dump(mode="json")
        for n, value in enumerate(safety)
    ]
    return orjson.dumps({"segment": {}, "results": results})


async def test_a_late_full_window_is_judged_on_its_sample_once_its_pace_shows_it() -> None:
    stage = Stage()
    await stage.deliver(*stage.markers(SESSION_GROUP, T0))  # the session stage, stuck
    burst = sample(turns=80, unsafe=10, judged=20)
    await stage.deliver(burst, *stage.markers(INPUT_GROUP, T0 + 61))
    stage.now += 1
    await stage.deliver(*stage.markers(INPUT_GROUP, T0 + 62))
    assert stage.events() == []  # the full windows' pace is not known yet
    stage.now += 2
    await stage.deliver(*stage.markers(INPUT_GROUP, T0 + 64))
    # 3 s of a watermark standing still: the full window cannot close within the wait
    assert stage.events() == [("firing", True, 0.25)]  # 20 of the window's 80 turns
    (page,) = stage.published.gate_events
    assert page.value == 0.5 and page.count == 20
    assert page.worst_metric == "safety"
    assert [case.id for case in page.worst or []] == ["t0", "t1", "t2", "t3", "t4"]
    # the session stage catches up: the full window confirms the page without a second one
    await stage.deliver(sessions([0.0] * 10 + [1.0] * 10), *stage.markers(SESSION_GROUP, T0 + 61))
    assert stage.events() == [("firing", True, 0.25)]
    await stage.deliver(sessions([1.0] * 20, T0 + 60), *stage.markers(SESSION_GROUP, T0 + 121))
    await stage.deliver(*stage.markers(INPUT_GROUP, T0 + 121))
    assert stage.events()[1:] == [("resolved", False, 1.0)]


async def test_without_a_known_pace_the_sample_waits_out_the_wait() -> None:
    stage = Stage()
    await stage.deliver(*stage.markers(SESSION_GROUP, T0))
    burst = sample(turns=80, unsafe=10, judged=20)
    await stage.deliver(burst, *stage.markers(INPUT_GROUP, T0 + 61))
    stage.stage.full_pace.clear()  # as after a rebalance
    stage.now += AFTER - 0.1
    await stage.deliver(*stage.markers(INPUT_GROUP, T0 + 62))
    assert stage.events() == []
    stage.now += 0.1
    await stage.deliver(*stage.markers(INPUT_GROUP, T0 + 63))
    assert stage.events() == [("firing", True, 0.25)]


async def test_a_full_window_on_time_is_never_judged_on_its_sample() -> None:
    stage = Stage()
    await stage.deliver(*stage.markers(SESSION_GROUP, T0 + 57))
    burst = sample(turns=80, unsafe=10, judged=20)
    await stage.deliver(burst, *stage.markers(INPUT_GROUP, T0 + 61))
    for behind in (3, 2):  # the session stage keeps pace, 4 s and then 3 s behind
        stage.now += 1
        await stage.deliver(*stage.markers(SESSION_GROUP, T0 + 61 - behind))
    assert stage.events() == []  # at its pace the full window closes within the wait
    stage.now += 1
    await stage.deliver(sessions([0.0] * 10 + [1.0] * 10), *stage.markers(SESSION_GROUP, T0 + 61))
    assert stage.events() == [("firing", False, 1.0)]  # every session counted
    stage.now += 10
    await stage.deliver(*stage.markers(INPUT_GROUP, T0 + 70))
    assert stage.events() == [("firing", False, 1.0)]  # and the sample was not judged


async def test_a_safe_sample_pages_nobody_and_never_silences_its_full_window() -> None:
    stage = Stage()
    await stage.deliver(*stage.markers(SESSION_GROUP, T0))
    await stage.deliver(sample(turns=40, unsafe=0, judged=20), *stage.markers(INPUT_GROUP, T0 + 61))
    stage.now += AFTER
    await stage.deliver(*stage.markers(INPUT_GROUP, T0 + 62))
    assert stage.events() == []  # judged, safe: nothing to say
    assert stage.gates["safety-drop|all"]["sampled"] == [T0]
    stage.stage.forget()  # a rebalance between the sample and the full window
    await stage.deliver(sessions([0.0] * 20), *stage.markers(SESSION_GROUP, T0 + 61))
    assert stage.events() == [("firing", False, 1.0)]  # the full window still pages


def test_the_gates_command_says_a_page_was_decided_on_a_sample() -> None:
    from rich.console import Console

    from worker.commands.gates import render
    from worker.gates.early import as_provisional

    evaluator = GateEvaluator([GATE_CONFIG])
    (event,) = evaluator.evaluate(aggregate(T0, 0.5), None, True)
    console = Console(record=True, width=200)
    render(console, "gates", [as_provisional(event, 0.25)])
    assert "firing (provisional, 25% of the turns)" in console.export_text()
