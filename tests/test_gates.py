"""Gates: fire once, hysteresis, resolve, min_count, per-segment state, ops, examples."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from schemas.outputs import Aggregate, ExtractionFigures, MetricSummary, SafeFigures, WindowSpan
from worker.config import ConfigError, GateConfig, load_settings
from worker.gates.evaluator import GateEvaluator, gate_key, gate_value

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


def gate(metric: str, stat: str = "rate", suite: str = "safe") -> GateConfig:
    return GateConfig.model_validate(
        {"name": "r", "suite": suite, "metric": metric, "stat": stat, "threshold": 0.8}
    )


def test_value_extraction_for_rates_and_counts() -> None:
    safe = aggregate(
        0.7,
        suite="safe",
        pass_rate=0.6,
        safe=SafeFigures(pass_rates={"CR": 0.75, "overall": 0.6}, by_archetype={}),
        metrics={"CR": MetricSummary(mean=0.7, min=0.5, max=0.9, std=0.1)},
    )
    assert gate_value(gate("overall"), safe) == 0.6
    assert gate_value(gate("pass_rate"), safe) == 0.6
    assert gate_value(gate("CR"), safe) == 0.75
    assert gate_value(gate("AH"), safe) is None  # not in this aggregate's figures
    assert gate_value(gate("CR", stat="count"), safe) == 50
    assert gate_value(gate("CR", stat="max"), safe) == 0.9
    assert gate_value(gate("AC", stat="mean"), safe) is None
    extraction = aggregate(
        None,
        suite="extraction",
        extraction=ExtractionFigures(metrics={"schema_compliance_rate": 0.9}, counts={}),
    )
    assert gate_value(gate("schema_compliance_rate", suite="extraction"), extraction) == 0.9


@pytest.mark.parametrize(
    ("suite", "metric", "stat", "key"),
    [
        ("alignment", "saftey", "mean", "gates.0.metric"),
        ("safe", "safety", "mean", "gates.0.metric"),
        ("extraction", "f1", "rate", "gates.0.metric"),
        ("alignment", "safety", "rate", "gates.0.stat"),
        ("safe", "overall", "mean", "gates.0.stat"),  # the pass rate has no mean
        ("extraction", "schema_compliance_rate", "mean", "gates.0.stat"),
    ],
)
def test_a_gate_on_a_field_its_suite_lacks_is_a_config_error(
    tmp_path: Path, suite: str, metric: str, stat: str, key: str
) -> None:
    config = tmp_path / "gates.yaml"
    config.write_text(
        f"gates:\n  - {{name: g, suite: {suite}, metric: {metric}, stat: {stat},"
        " threshold: 0.5}\n",
        encoding="utf-8",
    )
    with pytest.raises(ConfigError) as error:
        load_settings(config, environ={})
    assert f"{config}: {key}: " in str(error.value)
    assert repr(metric) in str(error.value)


def test_the_default_stat_is_checked_too(tmp_path: Path) -> None:
    config = tmp_path / "gates.yaml"
    config.write_text(
        "gates:\n  - {name: g, suite: safe, metric: pass_rate, threshold: 0.5}\n",
        encoding="utf-8",
    )
    with pytest.raises(ConfigError, match=r"gates\.0\.stat"):
        load_settings(config, environ={})


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


# ---------------------------------------------------------------- staleness


def test_a_firing_gate_whose_segment_goes_quiet_resolves_with_no_data() -> None:
    evaluator = GateEvaluator([SAFETY])  # 5m windows: stale after 15m without cases
    [fired] = evaluator.evaluate(aggregate(0.5, segment={"model": "m"}))
    assert fired.reason is None
    window_end = START + timedelta(minutes=5)
    assert evaluator.resolve_stale(window_end + timedelta(minutes=14, seconds=59)) == []
    watermark = window_end + timedelta(minutes=15)
    [event] = evaluator.resolve_stale(watermark)
    assert (event.gate, event.state, event.reason) == ("safety-drop", "resolved", "no_data")
    assert event.segment == {"model": "m"}
    assert (event.value, event.count, event.ts) == (None, 0, watermark)
    assert event.window.start == START and event.window.size_s == 300
    assert not evaluator.is_firing("safety-drop", {"model": "m"})
    assert evaluator.resolve_stale(watermark + timedelta(hours=1)) == []  # once


def test_newer_cases_keep_a_firing_gate_alive_and_it_can_fire_again() -> None:
    evaluator = GateEvaluator([SAFETY])
    evaluator.evaluate(aggregate(0.5))
    evaluator.evaluate(aggregate(0.6, window_index=3))  # still firing, cases up to 20m
    assert evaluator.resolve_stale(START + timedelta(minutes=34)) == []
    assert [e.reason for e in evaluator.resolve_stale(START + timedelta(minutes=35))] == ["no_data"]
    assert [e.state for e in evaluator.evaluate(aggregate(0.5, window_index=8))] == ["firing"]


def test_an_empty_window_is_no_data_and_stale_after_is_configurable() -> None:
    quick = SAFETY.model_copy(update={"stale_after": 60.0})
    evaluator = GateEvaluator([quick])
    evaluator.evaluate(aggregate(0.5))
    evaluator.evaluate(aggregate(None, count=0, window_index=1))
    [event] = evaluator.resolve_stale(START + timedelta(minutes=6))
    assert event.reason == "no_data"


def test_quiet_resolved_gates_and_restored_state_emit_nothing_twice() -> None:
    evaluator = GateEvaluator([SAFETY])
    evaluator.evaluate(aggregate(0.99))
    assert evaluator.resolve_stale(START + timedelta(days=1)) == []
    evaluator.evaluate(aggregate(0.5, window_index=1))
    resumed = GateEvaluator([SAFETY], state=json.loads(json.dumps(evaluator.to_json())))
    assert len(resumed.resolve_stale(START + timedelta(days=1))) == 1


def test_stale_after_defaults_to_three_windows(tmp_path: Path) -> None:
    assert SAFETY.stale_after_s == 900
    config = tmp_path / "g.yaml"
    config.write_text(
        "gates:\n  - {name: g, suite: alignment, metric: safety, threshold: 0.9,"
        " window: 1m, stale_after: 10m}\n",
        encoding="utf-8",
    )
    assert load_settings(config, environ={}).gates[0].stale_after_s == 600


def test_a_no_data_resolution_is_never_stamped_before_the_firing_it_follows() -> None:
    """During a replay the firing is stamped with the wall clock while the watermark that
    ends it lies in the past: the resolution still comes after it."""
    evaluator = GateEvaluator([SAFETY])
    fired_at = START + timedelta(days=30)  # the wall clock of the replay
    [fired] = evaluator.evaluate(aggregate(0.5), fired_at)
    watermark = START + timedelta(minutes=20)  # the replayed history's event time
    [resolved] = evaluator.resolve_stale(watermark, fired_at - timedelta(seconds=5))
    assert resolved.reason == "no_data"
    assert resolved.ts >= fired.ts
    resumed = GateEvaluator([SAFETY], state=json.loads(json.dumps(evaluator.to_json())))
    [again] = resumed.evaluate(aggregate(0.5, window_index=9), START)  # a clock stepped back
    assert again.ts >= resolved.ts


def test_the_state_keeps_the_value_and_window_of_the_latest_firing() -> None:
    evaluator = GateEvaluator([SAFETY])
    evaluator.evaluate(aggregate(0.5, window_index=2))
    evaluator.evaluate(aggregate(0.99, window_index=3))
    [state] = evaluator.to_json().values()
    assert state["fired_value"] == 0.5
    assert state["fired_window_start"] == (START + timedelta(minutes=10)).timestamp()
    assert state["firing"] is False


def test_severity_defaults_to_ticket_and_takes_page_only(tmp_path: Path) -> None:
    assert SAFETY.severity == "ticket"
    config = tmp_path / "g.yaml"
    config.write_text(
        "gates: [{name: g, suite: alignment, metric: safety, threshold: 0.9, severity: pager}]\n",
        encoding="utf-8",
    )
    with pytest.raises(ConfigError, match=r"gates\.0\.severity"):
        load_settings(config, environ={})
