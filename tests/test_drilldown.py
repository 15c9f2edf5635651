"""Drill-down: the bounded, mergeable worst cases of a window, on final aggregates and gate
events, and the OpenTelemetry trace id that results echo."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.outputs import CaseResult, RecordSource, Versions
from worker import aggregation as agg
from worker.config import GateConfig
from worker.gates.evaluator import GateEvaluator, gated_metrics
from worker.input import records as input_records
from worker.suites.base import Scored, State
from worker.windowing.windows import WindowKey

WINDOW = WindowKey(60.0, None, 1_714_564_800.0)  # 2024-05-01T12:00:00Z
TS = datetime(2024, 5, 1, 12, 0, 30, tzinfo=UTC)
NOW = datetime(2024, 5, 1, 12, 1, 5, tzinfo=UTC)
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


def result(
    ident: str,
    scores: dict[str, float | None],
    offset: int,
    partition: int = 0,
    suite: str = "safe",
    label: str | None = "Pass",
    trace_id: str | None = None,
) -> CaseResult:
    return CaseResult.model_validate(
        {
            "id": ident,
            "suite": suite,
            "kind": "case",
            "ts": TS + timedelta(milliseconds=offset),
            "model": "m1",
            "scores": scores,
            "label": label,
            "versions": Versions(scorer="1", metrics="1"),
            "source": RecordSource(topic="in", partition=partition, offset=offset),
            "scored_at": TS,
            "trace_id": trace_id,
        }
    )


def fold(results: list[CaseResult], suite: str = "safe", worst_k: int = 5) -> State:
    state = agg.initialise(suite, {}, WINDOW, worst_k=worst_k)
    for item in results:
        agg.update(state, item, None)
    return state


def worst_ids(state: State, metric: str) -> list[str]:
    return [case.id for case in agg.worst_cases(state, metric)]


def test_update_keeps_the_k_lowest_worst_first_and_ties_by_id() -> None:
    values = [0.9, 0.2, 0.5, 0.2, 0.7, 0.1, 0.95, 0.2]
    cases = [result(f"c{i}", {"composite": v}, offset=i) for i, v in enumerate(values)]
    state = fold(cases, worst_k=4)
    # 0.1 (c5), then the three 0.2 in id order: c1, c3, c7; 0.5 and above are not kept.
    assert worst_ids(state, "composite") == ["c5", "c1", "c3", "c7"]
    assert [case.value for case in agg.worst_cases(state, "composite")] == [0.1, 0.2, 0.2, 0.2]


def test_worst_cases_carry_what_finds_the_case() -> None:
    state = fold([result("c1", {"composite": 0.3}, offset=7, label="Fail", trace_id=TRACE)])
    (case,) = agg.worst_cases(state, "composite")
    assert (case.id, case.kind, case.value, case.label, case.model) == (
        "c1",
        "case",
        0.3,
        "Fail",
        "m1",
    )
    assert case.ts == TS + timedelta(milliseconds=7)
    assert case.trace_id == TRACE


def test_hallucinated_is_worse_when_higher_and_none_is_skipped() -> None:
    cases = [
        result("a", {"hallucinated": 0.0, "strict_f1": None}, 0, suite="extraction"),
        result("b", {"hallucinated": 1.0, "strict_f1": 0.4}, 1, suite="extraction"),
        result("c", {"hallucinated": None, "strict_f1": 0.9}, 2, suite="extraction"),
    ]
    state = fold(cases, suite="extraction")
    assert worst_ids(state, "hallucinated") == ["b", "a"]
    assert worst_ids(state, "strict_f1") == ["b", "c"]


def test_a_replayed_result_is_not_listed_twice() -> None:
    first = result("c1", {"composite": 0.1}, offset=3)
    state = fold([first, result("c2", {"composite": 0.5}, offset=4)])
    _, applied = agg.update(state, first, None)  # replay of an older offset
    assert not applied
    _, applied = agg.update(state, result("c2", {"composite": 0.5}, offset=4), None)
    assert not applied
    assert worst_ids(state, "composite") == ["c1", "c2"]


values_with_ties = st.lists(st.sampled_from([0.0, 0.1, 0.25, 0.5, 0.75, 1.0]), max_size=40)


@settings(max_examples=150, deadline=None)
@given(values=values_with_ties, k=st.integers(1, 7), seed=st.integers(0, 10_000))
def test_merge_of_parts_equals_one_pass(values: list[float], k: int, seed: int) -> None:
    cases = [
        result(f"c{i:02d}", {"composite": v, "hallucinated": v}, offset=i, partition=i % 3)
        for i, v in enumerate(values)
    ]
    rng = random.Random(seed)
    parts: list[list[CaseResult]] = [[], [], []]
    for case in cases:
        parts[rng.randrange(3)].append(case)
    merged = agg.merge(
        agg.merge(fold(parts[0], worst_k=k), fold(parts[1], worst_k=k), None),
        fold(parts[2], worst_k=k),
        None,
    )
    one_pass = fold(cases, worst_k=k)
    assert merged["worst"] == one_pass["worst"]
    expected = sorted(cases, key=lambda c: (c.scores["composite"], c.id))[:k]
    assert worst_ids(merged, "composite") == [c.id for c in expected]


def test_merge_lists_a_case_counted_on_both_sides_once() -> None:
    shared = result("c1", {"composite": 0.1}, offset=1)
    left = fold([shared, result("c2", {"composite": 0.2}, offset=2)])
    right = fold([shared, result("c3", {"composite": 0.3}, offset=3, partition=1)])
    assert worst_ids(agg.merge(left, right, None), "composite") == ["c1", "c2", "c3"]


def test_a_state_written_before_worst_cases_existed_still_updates_and_merges() -> None:
    old = fold([result("c1", {"composite": 0.4}, offset=1)])
    del old["worst"], old["worst_k"]
    agg.update(old, result("c2", {"composite": 0.2}, offset=2), None)
    assert worst_ids(old, "composite") == ["c2"]
    legacy = fold([result("c3", {"composite": 0.1}, offset=3, partition=1)])
    del legacy["worst"], legacy["worst_k"]
    assert worst_ids(agg.merge(old, legacy, None), "composite") == ["c2"]


def test_final_aggregates_list_headline_and_gated_metrics_only() -> None:
    cases = [
        result(f"c{i}", {"composite": v, "CR": 1 - v, "AH": v}, offset=i)
        for i, v in enumerate([0.3, 0.6, 0.1])
    ]
    state = fold(cases)
    final = agg.to_message(state, True, NOW, None, worst_metrics=["CR"])
    assert final.worst is not None
    assert list(final.worst) == ["composite", "CR"]
    assert [case.id for case in final.worst["composite"]] == ["c2", "c0", "c1"]
    assert [case.id for case in final.worst["CR"]] == ["c1", "c0", "c2"]
    interim = agg.to_message(state, False, NOW, None, worst_metrics=["CR"])
    assert interim.worst is None


def gate(**fields: Any) -> GateConfig:
    base: dict[str, Any] = {
        "name": "g",
        "suite": "safe",
        "metric": "composite",
        "stat": "mean",
        "op": "<",
        "threshold": 0.8,
        "window": 60,
        "min_count": 2,
    }
    return GateConfig.model_validate({**base, **fields})


def failing_window() -> State:
    cases = [
        result(f"c{i}", {"composite": v, "AH": 1.0 - v}, offset=i, label="Fail")
        for i, v in enumerate([0.2, 0.6, 0.05, 0.4])
    ]
    return fold(cases, worst_k=3)


def test_a_firing_gate_event_lists_the_worst_cases_of_its_metric() -> None:
    gates = [gate(metric="AH", stat="mean", op="<", threshold=0.9)]
    message = agg.to_message(
        failing_window(), True, NOW, None, worst_metrics=gated_metrics(gates, "safe")
    )
    (event,) = GateEvaluator(gates).evaluate(message)
    assert event.state == "firing"
    assert event.worst_metric == "AH"
    assert event.worst is not None
    assert [case.id for case in event.worst] == ["c1", "c3", "c0"]  # AH 0.4, 0.6, 0.8


def test_a_pass_rate_gate_points_to_the_headline_metric() -> None:
    gates = [gate(metric="pass_rate", stat="rate", threshold=0.8)]
    message = agg.to_message(
        failing_window(), True, NOW, None, worst_metrics=gated_metrics(gates, "safe")
    )
    (event,) = GateEvaluator(gates).evaluate(message)
    assert event.worst_metric == "composite"
    assert event.worst is not None
    assert [case.id for case in event.worst] == ["c2", "c0", "c3"]


# ---------------------------------------------------------------- trace id


def envelope(trace_id: Any) -> bytes:
    import orjson

    return orjson.dumps({"id": "t1", "suite": "safe", "payload": {}, "trace_id": trace_id})


def test_a_valid_trace_id_is_echoed_by_the_result() -> None:
    record = input_records.decode_record(envelope(TRACE), 1 << 20)
    assert record.trace_id == TRACE
    built = input_records.build_result(
        case_id=record.id,
        suite=record.suite,
        kind="case",
        scored=Scored(scores={"composite": 1.0}),
        event_time=TS,
        model=None,
        labels={},
        versions=Versions(scorer="1", metrics="1"),
        source=None,
        scored_at=NOW,
        trace_id=record.trace_id,
    )
    assert built.model_dump(mode="json")["trace_id"] == TRACE


@pytest.mark.parametrize(
    "bad", ["0" * 32, "4BF92F3577B34DA6A3CE929D0E0E4736", TRACE[:-1], TRACE + "0", 12, "x" * 32]
)
def test_a_bad_trace_id_is_an_invalid_record(bad: Any) -> None:
    with pytest.raises(input_records.Rejected) as raised:
        input_records.decode_record(envelope(bad), 1 << 20)
    assert raised.value.reason == input_records.INVALID_RECORD
    assert "trace_id" in raised.value.message


# ---------------------------------------------------------------- `scorestream results`


def published(
    ident: str, composite: float, model: str, offset: int, labels: dict[str, str] | None = None
) -> CaseResult:
    item = result(ident, {"composite": composite}, offset=offset)
    return item.model_copy(update={"model": model, "labels": labels or {}})


def test_select_a_window_and_segment_worst_first_counting_a_republished_case_once() -> None:
    from worker.gates.drilldown import select, window_query

    start = datetime.fromtimestamp(WINDOW.start, UTC)
    results = [
        published("a", 0.9, "m1", 0),
        published("b", 0.2, "m1", 1),
        published("c", 0.1, "m2", 2),
        published("b", 0.2, "m1", 1),  # re-published after a restart
        published("d", 0.5, "m9", 3, {"model": "m1"}),  # the label wins over the record's model
    ]
    late = published("e", 0.0, "m1", 4).model_copy(update={"ts": start + timedelta(minutes=1)})
    query = window_query("safe", start, 60, {"model": "m1"}, metric="composite")
    chosen = select([*results, late], query)
    assert [r.id for r in chosen.results] == ["b", "d", "a"]
    assert chosen.missing == []


def test_select_a_gate_events_cases_in_its_order_and_names_the_missing() -> None:
    from worker.gates.drilldown import Query, select

    start = datetime.fromtimestamp(WINDOW.start, UTC)
    query = Query("safe", start, start, cases=(("c", "case"), ("x", "case"), ("a", "case")))
    chosen = select([published("a", 0.9, "m1", 0), published("c", 0.1, "m2", 2)], query)
    assert [r.id for r in chosen.results] == ["c", "a"]
    assert chosen.missing == ["x"]


def run_cli(*argv: str, stdin: str | None = None) -> tuple[int, str]:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "worker", "results", *argv],
        input=(stdin or "").encode(),
        capture_output=True,
        check=False,
        timeout=60,
    )
    return done.returncode, done.stderr.decode()


@pytest.mark.system
def test_results_usage_errors_are_one_line_and_exit_3(tmp_path: Any) -> None:
    event = tmp_path / "event.json"
    event.write_text('{"gate": "g", "state": "firing"}', encoding="utf-8")
    code, err = run_cli("--gate-event", str(event), "--broker", "kafka://127.0.0.1:1")
    assert code == 3
    assert f"{event}: not a gate event: suite: Field required" in err
    assert len(err.strip().splitlines()) == 1
    code, err = run_cli("--gate-event", "-", "--broker", "kafka://127.0.0.1:1", stdin="{oops")
    assert (code, err.startswith("scorestream results: <stdin>:1: not JSON")) == (3, True)
    code, err = run_cli("--suite", "safe", "--window", "1m")
    assert (code, "--window-start" in err) == (3, True)
    code, err = run_cli(
        *("--suite", "safe", "--window-start", "2026-01-01T12:00:00Z", "--window", "1m"),
        *("--segment", "model", "--broker", "kafka://127.0.0.1:1"),
    )
    assert (code, "--segment: expected key=value" in err) == (3, True)


@pytest.mark.system
def test_results_without_a_broker_is_one_line_and_exit_3() -> None:
    code, err = run_cli(
        *("--suite", "safe", "--window-start", "2026-01-01T12:00:00Z", "--window", "1m"),
        *("--broker", "kafka://127.0.0.1:1"),
    )
    assert code == 3
    assert err.strip().splitlines() == [
        "scorestream results: cannot connect to the Kafka broker at 127.0.0.1:1 while "
        "connecting the consumer (is it running, is the address right?)"
    ]
