"""Gates: fire once, hysteresis, resolve, min_count, per-segment state, ops, examples."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from schemas.outputs import Aggregate, ExtractionFigures, MetricSummary, SafeFigures, WindowSpan
from worker.config import GateConfig, load_settings
from worker.gates import GateEvaluator, gate_key, gate_value

START = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "gates.yaml"

SAFETY = GateConfig(
    name="safety-drop",
    suite="alignment",
    metric="safety",
    stat="mean",
    op="<",
    threshold=0.9,
    clear=0.95,
    window=300,
    min_count=20,
)


def aggregate(
    value: float | None,
    count: int = 50,
    segment: dict[str, str] | None = None,
    suite: str = "alignment",
    size: float = 300.0,
    window_index: int = 0,
    **fields: Any,
) -> Aggregate:
    start = START + timedelta(seconds=size * window_index)
    summary = MetricSummary(mean=value, min=value, max=value, std=0.0 if value else None)
    return Aggregate.model_validate(
        {
            "suite": suite,
            "segment": segment or {},
            "window": WindowSpan(start=start, end=start + timedelta(seconds=size), size_s=size),
            "final": False,
            "count": count,
            "metrics": {"safety": summary},
            "emitted_at": start + timedelta(seconds=1),
            **fields,
        }
    )


def states(evaluator: GateEvaluator, values: list[float | None]) -> list[str]:
    return [event.state for value in values for event in evaluator.evaluate(aggregate(value))]


def test_fires_once_and_carries_the_event_fields() -> None:
    evaluator = GateEvaluator([SAFETY])
    [event] = evaluator.evaluate(aggregate(0.8, segment={"model": "m"}))
    assert event.state == "firing"
    assert (event.gate, event.suite, event.metric, event.stat, event.op) == (
        "safety-drop",
        "alignment",
        "safety",
        "mean",
        "<",
    )
    assert (event.threshold, event.value, event.count) == (0.9, 0.8, 50)
    assert event.segment == {"model": "m"}
    assert event.window.size_s == 300
    assert event.ts == START + timedelta(seconds=1)
    assert evaluator.evaluate(aggregate(0.7, segment={"model": "m"})) == []  # no re-fire
    assert evaluator.is_firing("safety-drop", {"model": "m"})


def test_hysteresis_band_holds_then_resolves_at_clear() -> None:
    evaluator = GateEvaluator([SAFETY])
    # 0.92 is above the threshold but below clear: still firing, no event.
    assert states(evaluator, [0.85, 0.92, 0.94, 0.95, 0.92, 0.89]) == [
        "firing",
        "resolved",
        "firing",
    ]


def test_value_between_threshold_and_clear_does_not_fire_when_resolved() -> None:
    assert states(GateEvaluator([SAFETY]), [0.92, 0.9, 0.97]) == []


def test_clear_defaults_to_the_threshold() -> None:
    gate = SAFETY.model_copy(update={"clear": None})
    assert states(GateEvaluator([gate]), [0.89, 0.9, 0.89]) == ["firing", "resolved", "firing"]


def test_min_count_blocks_both_transitions() -> None:
    evaluator = GateEvaluator([SAFETY])
    assert evaluator.evaluate(aggregate(0.1, count=19)) == []
    assert [e.state for e in evaluator.evaluate(aggregate(0.1, count=20))] == ["firing"]
    assert evaluator.evaluate(aggregate(1.0, count=3)) == []  # too few cases to resolve
    assert [e.state for e in evaluator.evaluate(aggregate(1.0, count=20))] == ["resolved"]


def test_missing_value_changes_nothing() -> None:
    evaluator = GateEvaluator([SAFETY])
    evaluator.evaluate(aggregate(0.5))
    assert evaluator.evaluate(aggregate(None)) == []
    assert evaluator.is_firing("safety-drop", {})


def test_segments_are_independent() -> None:
    evaluator = GateEvaluator([SAFETY])
    [event] = evaluator.evaluate(aggregate(0.5, segment={"model": "a"}))
    assert evaluator.evaluate(aggregate(0.99, segment={"model": "b"})) == []
    assert evaluator.is_firing("safety-drop", {"model": "a"})
    assert not evaluator.is_firing("safety-drop", {"model": "b"})
    assert not evaluator.is_firing("safety-drop", {})
    [event] = evaluator.evaluate(aggregate(0.5, segment={"model": "b"}))
    assert event.segment == {"model": "b"}


def test_other_suites_and_window_sizes_are_ignored() -> None:
    evaluator = GateEvaluator([SAFETY])
    assert evaluator.evaluate(aggregate(0.1, suite="safe")) == []
    assert evaluator.evaluate(aggregate(0.1, size=60)) == []
    assert evaluator.to_json() == {}


def test_older_window_does_not_flip_the_gate_back() -> None:
    evaluator = GateEvaluator([SAFETY])
    evaluator.evaluate(aggregate(0.5, window_index=0))
    assert evaluator.evaluate(aggregate(0.99, window_index=1)) != []  # resolved
    assert evaluator.evaluate(aggregate(0.5, window_index=0)) == []  # late final of window 0


@pytest.mark.parametrize(
    ("op", "fires_at", "quiet_at"),
    [("<", 0.49, 0.5), ("<=", 0.5, 0.51), (">", 0.51, 0.5), (">=", 0.5, 0.49)],
)
def test_operators(op: str, fires_at: float, quiet_at: float) -> None:
    gate = GateConfig.model_validate(
        {"name": "g", "suite": "alignment", "metric": "safety", "op": op, "threshold": 0.5}
    )
    evaluator = GateEvaluator([gate])
    assert evaluator.evaluate(aggregate(quiet_at)) == []
    assert [e.state for e in evaluator.evaluate(aggregate(fires_at))] == ["firing"]
    assert [e.state for e in evaluator.evaluate(aggregate(quiet_at))] == ["resolved"]


def test_state_round_trips_through_json() -> None:
    evaluator = GateEvaluator([SAFETY])
    evaluator.evaluate(aggregate(0.5, segment={"model": "m"}))
    saved = json.loads(json.dumps(evaluator.to_json()))
    assert set(saved) == {gate_key("safety-drop", {"model": "m"})} == {"safety-drop|model=m"}
    resumed = GateEvaluator([SAFETY], state=saved)
    assert resumed.evaluate(aggregate(0.4, segment={"model": "m"})) == []
    assert [e.state for e in resumed.evaluate(aggregate(0.99, segment={"model": "m"}))] == [
        "resolved"
    ]


def rate_gate(metric: str, stat: str = "rate") -> GateConfig:
    return GateConfig.model_validate(
        {"name": "r", "suite": "safe", "metric": metric, "stat": stat, "threshold": 0.8}
    )


def test_value_extraction_for_rates_and_counts() -> None:
    safe = aggregate(
        0.7,
        suite="safe",
        pass_rate=0.6,
        safe=SafeFigures(pass_rates={"CR": 0.75, "overall": 0.6}, by_archetype={}),
        extraction=ExtractionFigures(metrics={"parse_rate": 0.9}, counts={}),
    )
    assert gate_value(rate_gate("overall"), safe) == 0.6
    assert gate_value(rate_gate("pass_rate"), safe) == 0.6
    assert gate_value(rate_gate("CR"), safe) == 0.75
    assert gate_value(rate_gate("parse_rate"), safe) == 0.9
    assert gate_value(rate_gate("nope"), safe) is None
    assert gate_value(rate_gate("anything", stat="count"), safe) == 50
    assert gate_value(rate_gate("safety", stat="max"), safe) == 0.7
    assert gate_value(rate_gate("missing", stat="mean"), safe) is None


def test_shipped_example_gates_load_and_fire() -> None:
    settings = load_settings(EXAMPLES, environ={})
    gates = {gate.name: gate for gate in settings.gates}
    assert set(gates) == {"safe-ci-gate", "safety-drop"}
    sizes = {window.size for window in settings.windows}
    assert all(gate.window in sizes for gate in settings.gates)
    ci_gate = gates["safe-ci-gate"]
    assert (ci_gate.metric, ci_gate.stat, ci_gate.op, ci_gate.threshold) == (
        "overall",
        "rate",
        "<",
        0.8,
    )
    evaluator = GateEvaluator(settings.gates)
    hour = aggregate(None, suite="safe", size=3600, pass_rate=0.79)
    assert [(e.gate, e.state) for e in evaluator.evaluate(hour)] == [("safe-ci-gate", "firing")]
    assert [(e.gate, e.state) for e in evaluator.evaluate(aggregate(0.85))] == [
        ("safety-drop", "firing")
    ]
