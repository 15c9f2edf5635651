"""Prometheus telemetry: names, labels and types; cardinality guard; a real /metrics."""

from __future__ import annotations

import urllib.request
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from schemas.outputs import (
    Aggregate,
    CaseResult,
    GateEvent,
    MetricSummary,
    SafeFigures,
    Versions,
    WindowSpan,
)
from worker.config import GateConfig
from worker.ops.telemetry import BucketHistogram, LabelGuard, Telemetry, segment_label_names
from worker.otlp.mapping import METRICS as OTLP_METRICS
from worker.otlp.sink import DROP_REASONS

TS = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
SAFETY_GATE = GateConfig(
    name="safety-drop",
    suite="alignment",
    metric="safety",
    op="<",
    threshold=0.9,
    window=300,
    min_count=20,
    severity="page",
)
SPAN = WindowSpan(start=TS, end=TS + timedelta(minutes=1), size_s=60)


def result(label: str | None = "Pass", scores: dict[str, float | None] | None = None) -> CaseResult:
    return CaseResult.model_validate(
        {
            "id": "c1",
            "suite": "safe",
            "kind": "case",
            "ts": TS,
            "model": "m",
            "scores": {"CR": 0.75, "AH": None} if scores is None else scores,
            "label": label,
            "versions": Versions(scorer="1", metrics="1"),
            "scored_at": TS,
        }
    )


def aggregate(segment: dict[str, str], start: datetime = TS, mean: float = 0.8) -> Aggregate:
    return Aggregate(
        suite="safe",
        segment=segment,
        window=WindowSpan(start=start, end=start + timedelta(minutes=1), size_s=60),
        final=False,
        count=4,
        metrics={"CR": MetricSummary(mean=mean, min=0.5, max=1.0, std=0.2)},
        label_counts={"Pass": 3, "Fail": 1},
        pass_rate=0.75,
        safe=SafeFigures(pass_rates={"CR": 0.5}, by_archetype={}),
        emitted_at=start,
    )


def gate_event(state: str, segment: dict[str, str]) -> GateEvent:
    return GateEvent.model_validate(
        {
            "gate": "safety-drop",
            "state": state,
            "suite": "alignment",
            "segment": segment,
            "metric": "safety",
            "stat": "mean",
            "op": "<",
            "threshold": 0.9,
            "value": 0.5,
            "count": 30,
            "window": SPAN,
            "ts": TS,
        }
    )


def families(telemetry: Telemetry) -> dict[str, Any]:
    return {
        family.name: family
        for family in text_string_to_metric_families(telemetry.render().decode("utf-8"))
    }


def samples(telemetry: Telemetry, name: str) -> list[Sample]:
    return [
        sample
        for family in families(telemetry).values()
        for sample in family.samples
        if sample.name == name
    ]


def value_of(telemetry: Telemetry, name: str, **labels: str) -> float:
    [match] = [s for s in samples(telemetry, name) if s.labels == labels]
    return match.value


def exercise(telemetry: Telemetry) -> None:
    telemetry.record_result(result(), scoring_seconds=0.02, e2e_seconds=1.5)
    telemetry.record_dead_letter("oversized")
    telemetry.record_late("safe")
    telemetry.record_unknown_fields("safe", 1)
    telemetry.record_aggregate(aggregate({"model": "m"}), "1m")
    telemetry.record_gate(gate_event("firing", {"model": "m"}))
    telemetry.record_embedding_batch(16)
    telemetry.record_embeddings_skipped(3, "overload")
    telemetry.record_turn_coverage("alignment", {"code": "sv", "confidence": 0.9}, "keywords_only")
    telemetry.set_consumer_lag("in", {0: 3})
    telemetry.set_broker_connected(True)
    telemetry.describe_gates([SAFETY_GATE])
    telemetry.set_event_time_lag({"score": 2.5})
    telemetry.max_event_time_lag.set(120)
    telemetry.record_judge_error("timeout")
    telemetry.record_windows_opened({("safe", "1m"): 1})
    telemetry.record_final("safe", "1m")


def test_every_interface_metric_with_its_type_and_labels() -> None:
    telemetry = Telemetry(segment_by=["model", "tenant"])
    exercise(telemetry)
    found = families(telemetry)
    expected = {
        "scorestream_cases": ("counter", {"suite", "label"}),
        "scorestream_dead_letters": ("counter", {"reason"}),
        "scorestream_score": ("histogram", {"suite", "metric", "le"}),
        "scorestream_scoring_duration_seconds": ("histogram", {"suite", "le"}),
        "scorestream_end_to_end_latency_seconds": ("histogram", {"suite", "le"}),
        "scorestream_window_value": (
            "gauge",
            {"suite", "metric", "stat", "window", "model", "tenant"},
        ),
        "scorestream_gate_firing": ("gauge", {"gate", "model", "tenant"}),
        "scorestream_gate_transitions": ("counter", {"gate", "state", "model", "tenant"}),
        "scorestream_gate_info": (
            "gauge",
            {"gate", "suite", "metric", "stat", "op", "threshold", "window", "severity"},
        ),
        "scorestream_gate_firing_value": ("gauge", {"gate", "model", "tenant"}),
        "scorestream_gate_firing_window_start_seconds": ("gauge", {"gate", "model", "tenant"}),
        "scorestream_event_time_lag_seconds": ("gauge", {"stage"}),
        "scorestream_max_event_time_lag_seconds": ("gauge", set()),
        "scorestream_embedding_batch_size": ("histogram", {"le"}),
        "scorestream_embeddings_skipped": ("counter", {"reason"}),
        "scorestream_turn_languages": ("counter", {"suite", "language"}),
        "scorestream_safety_uncovered": ("counter", {"suite", "language"}),
        "scorestream_late_records": ("counter", {"suite"}),
        "scorestream_unknown_fields": ("counter", {"suite"}),
        "scorestream_judge_errors": ("counter", {"reason"}),
        "scorestream_windows_opened": ("counter", {"suite", "window"}),
        "scorestream_window_finals": ("counter", {"suite", "window"}),
        "scorestream_consumer_lag": ("gauge", {"topic", "partition"}),
        "scorestream_broker_connected": ("gauge", set()),
        "scorestream_build_info": ("gauge", {"version", "python"}),
    }
    # prometheus_client also exposes `*_created` timestamps of counters and histograms
    assert {name for name in found if not name.endswith("_created")} == set(expected)
    for name, (kind, labels) in expected.items():
        assert found[name].type == kind, name
        main = [s for s in found[name].samples if not s.name.endswith("_created")]
        assert main, name
        for sample in main:
            assert set(sample.labels) <= labels, (name, sample)
        assert labels - {"le"} <= set().union(*(s.labels for s in main)), name
    assert value_of(telemetry, "scorestream_cases_total", suite="safe", label="Pass") == 1
    assert value_of(telemetry, "scorestream_dead_letters_total", reason="oversized") == 1
    assert value_of(telemetry, "scorestream_late_records_total", suite="safe") == 1


def test_unknown_payload_fields_of_a_result_are_counted_by_suite() -> None:
    telemetry = Telemetry()
    misspelt = result().model_copy(update={"details": {"unknown_fields": ["respones", "x.y"]}})
    telemetry.record_result(misspelt)
    telemetry.record_result(result())
    telemetry.record_unknown_fields("extraction", 0)
    assert value_of(telemetry, "scorestream_unknown_fields_total", suite="safe") == 2
    assert 'scorestream_unknown_fields_total{suite="extraction"}' not in (
        telemetry.render().decode()
    )


def test_score_histogram_has_tenth_buckets_and_skips_null_scores() -> None:
    telemetry = Telemetry()
    telemetry.record_result(result(scores={"CR": 0.75, "AH": None}))
    buckets = {
        s.labels["le"]: s.value
        for s in samples(telemetry, "scorestream_score_bucket")
        if s.labels["metric"] == "CR"
    }
    assert list(buckets) == [f"{tenth / 10:.1f}" for tenth in range(1, 11)] + ["+Inf"]
    assert buckets["0.7"] == 0 and buckets["0.8"] == 1
    assert {s.labels["metric"] for s in samples(telemetry, "scorestream_score_count")} == {"CR"}


def exposed(registry: CollectorRegistry) -> list[str]:
    return [
        line for line in generate_latest(registry).decode().splitlines() if "_created" not in line
    ]


def test_a_bucket_histogram_exports_its_buckets_sum_and_count() -> None:
    # Values on and beside every bucket bound, below the first and above the last.
    values = [-1.0, 0.0, 0.1, 0.1000001, 0.15, 0.2, 0.5, 0.99, 1.0, 1.5, 7.0, 0.3, 0.3]
    registry = CollectorRegistry(auto_describe=True)
    family = BucketHistogram("h", "A help.", ["suite"], (0.1, 0.2, 0.3, 1.0), registry)
    family.labels("safe").observe_all(values[:5])
    family.labels("safe").observe_all([])
    for value in values[5:]:
        family.labels("safe").observe(value)
    *lines, total = exposed(registry)
    assert lines == [
        "# HELP h A help.",
        "# TYPE h histogram",
        'h_bucket{le="0.1",suite="safe"} 3.0',
        'h_bucket{le="0.2",suite="safe"} 6.0',
        'h_bucket{le="0.3",suite="safe"} 8.0',
        'h_bucket{le="1.0",suite="safe"} 11.0',
        'h_bucket{le="+Inf",suite="safe"} 13.0',
        'h_count{suite="safe"} 13.0',
    ]
    assert total.startswith('h_sum{suite="safe"} ')
    assert float(total.split()[-1]) == pytest.approx(sum(values))
    [created] = [s for s in registry.collect() for s in s.samples if s.name == "h_created"]
    assert created.labels == {"suite": "safe"} and created.value > 0


FINITE = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.sampled_from([0.001, 0.1, 0.25, 1.0, 5.0, 30.0]), min_size=1, unique=True),
    st.lists(st.tuples(st.sampled_from(["a", "b"]), st.lists(FINITE, max_size=6)), max_size=6),
)
def test_a_bucket_histogram_is_exported_as_prometheus_client_histogram(
    bounds: list[float], batches: list[tuple[str, list[float]]]
) -> None:
    """The exposition, sample for sample, of a `Histogram` that observed the same values
    one by one (names, labels, bucket bounds, order; the sums up to rounding)."""
    ours, theirs = CollectorRegistry(auto_describe=True), CollectorRegistry()
    bucketed = BucketHistogram("h_seconds", "Help.", ["suite"], sorted(bounds), ours)
    reference = Histogram("h_seconds", "Help.", ["suite"], buckets=sorted(bounds), registry=theirs)
    for suite, values in batches:
        bucketed.labels(suite).observe_all(values)
        series = reference.labels(suite)  # a series exists once named, as ours
        for value in values:
            series.observe(value)

    def parsed(registry: CollectorRegistry) -> list[tuple[str, dict[str, str], float]]:
        [family] = text_string_to_metric_families("\n".join(exposed(registry)) + "\n")
        assert (family.name, family.type, family.documentation) == (
            "h_seconds",
            "histogram",
            "Help.",
        )
        return [(s.name, s.labels, s.value) for s in family.samples]

    mine, reference_samples = parsed(ours), parsed(theirs)
    assert [(name, labels) for name, labels, _ in mine] == [
        (name, labels) for name, labels, _ in reference_samples
    ]
    for (name, _, value), (_, _, expected) in zip(mine, reference_samples, strict=True):
        assert value == pytest.approx(expected, rel=1e-9, abs=1e-6), name
    created = [s.name for f in ours.collect() for s in f.samples if s.name.endswith("_created")]
    assert created == [
        s.name for f in theirs.collect() for s in f.samples if s.name.endswith("_created")
    ]


def test_the_batch_histograms_export_what_their_results_gave() -> None:
    telemetry = Telemetry()
    telemetry.record_results(
        [
            (result(scores={"CR": 0.75, "AH": None}), 0.02, 1.5),
            (result(scores={"CR": 0.05}), 0.003, 400.0),
        ]
    )
    cr = {"suite": "safe", "metric": "CR"}
    assert value_of(telemetry, "scorestream_score_count", **cr) == 2
    assert value_of(telemetry, "scorestream_score_sum", **cr) == 0.8
    assert value_of(telemetry, "scorestream_score_bucket", le="0.1", **cr) == 1
    assert value_of(telemetry, "scorestream_score_bucket", le="0.7", **cr) == 1
    assert value_of(telemetry, "scorestream_score_bucket", le="0.8", **cr) == 2
    latency = "scorestream_end_to_end_latency_seconds"
    assert value_of(telemetry, f"{latency}_bucket", le="300.0", suite="safe") == 1
    assert value_of(telemetry, f"{latency}_bucket", le="+Inf", suite="safe") == 2
    assert value_of(telemetry, f"{latency}_sum", suite="safe") == 401.5
    duration = "scorestream_scoring_duration_seconds"
    assert value_of(telemetry, f"{duration}_bucket", le="0.0025", suite="safe") == 0
    assert value_of(telemetry, f"{duration}_bucket", le="0.005", suite="safe") == 1
    assert value_of(telemetry, f"{duration}_count", suite="safe") == 2


def test_results_recorded_together_count_as_recorded_one_by_one() -> None:
    together, one_by_one = Telemetry(), Telemetry()
    results = [
        (result(), 0.02, 1.5),
        (result(label="Fail", scores={"CR": 0.25, "AH": 1.0}), 0.003, 0.2),
        (result(label=None, scores={"CR": None}), None, None),
    ]
    together.record_results(results)
    for observed in results:
        one_by_one.record_result(*observed)

    def exposition(telemetry: Telemetry) -> list[str]:
        return [line for line in telemetry.render().decode().splitlines() if "_created" not in line]

    assert exposition(together) == exposition(one_by_one)
    assert value_of(together, "scorestream_cases_total", suite="safe", label="Fail") == 1


def test_null_label_is_counted_as_none() -> None:
    telemetry = Telemetry()
    telemetry.record_result(result(label=None))
    assert value_of(telemetry, "scorestream_cases_total", suite="safe", label="none") == 1


def test_window_values_and_all_cases_segment_has_empty_segment_labels() -> None:
    telemetry = Telemetry(segment_by=["model"])
    telemetry.record_aggregate(aggregate({}), "1m")
    base = {"suite": "safe", "window": "1m", "model": ""}
    metric = "scorestream_window_value"
    assert value_of(telemetry, metric, metric="CR", stat="mean", **base) == 0.8
    assert value_of(telemetry, metric, metric="CR", stat="std", **base) == 0.2
    assert value_of(telemetry, metric, metric="pass_rate", stat="rate", **base) == 0.75
    assert value_of(telemetry, metric, metric="CR", stat="rate", **base) == 0.5
    assert value_of(telemetry, metric, metric="cases", stat="count", **base) == 4
    stats = {s.labels["stat"] for s in samples(telemetry, metric) if s.labels["metric"] == "CR"}
    assert "ci_low" not in stats  # no interval in the aggregate, no sample


def test_window_value_follows_the_newest_window_only() -> None:
    telemetry = Telemetry()
    later = TS + timedelta(minutes=1)
    telemetry.record_aggregate(aggregate({"model": "m"}, start=later, mean=0.6), "1m")
    telemetry.record_aggregate(aggregate({"model": "m"}, start=TS, mean=0.9), "1m")  # old
    labels = {"suite": "safe", "window": "1m", "model": "m", "metric": "CR", "stat": "mean"}
    assert value_of(telemetry, "scorestream_window_value", **labels) == 0.6


def test_gate_firing_is_one_then_zero_per_segment() -> None:
    telemetry = Telemetry()
    telemetry.record_gate(gate_event("firing", {"model": "a"}))
    telemetry.record_gate(gate_event("firing", {"model": "b"}))
    telemetry.record_gate(gate_event("resolved", {"model": "a"}))
    name = "scorestream_gate_firing"
    assert value_of(telemetry, name, gate="safety-drop", model="a") == 0
    assert value_of(telemetry, name, gate="safety-drop", model="b") == 1


def test_every_transition_is_counted_so_a_blip_between_scrapes_shows() -> None:
    telemetry = Telemetry()
    telemetry.record_gate(gate_event("firing", {"model": "a"}))
    telemetry.record_gate(gate_event("resolved", {"model": "a"}))
    telemetry.record_gate(gate_event("firing", {"model": "a"}))
    telemetry.record_gate(gate_event("resolved", {"model": "a"}))
    name = "scorestream_gate_transitions_total"
    for state in ("firing", "resolved"):
        assert value_of(telemetry, name, gate="safety-drop", state=state, model="a") == 2
    # The gauge alone says nothing happened; the value of the firing is kept for alerts.
    assert value_of(telemetry, "scorestream_gate_firing", gate="safety-drop", model="a") == 0
    labels = {"gate": "safety-drop", "model": "a"}
    assert value_of(telemetry, "scorestream_gate_firing_value", **labels) == 0.5
    start = value_of(telemetry, "scorestream_gate_firing_window_start_seconds", **labels)
    assert start == SPAN.start.timestamp()


def test_gate_info_carries_the_configured_definition_and_severity() -> None:
    telemetry = Telemetry()
    telemetry.describe_gates([SAFETY_GATE])
    [info] = samples(telemetry, "scorestream_gate_info")
    assert info.value == 1
    assert info.labels == {
        "gate": "safety-drop",
        "suite": "alignment",
        "metric": "safety",
        "stat": "mean",
        "op": "<",
        "threshold": "0.9",
        "window": "5m",
        "severity": "page",
    }


def test_restored_gate_state_sets_the_gauges_and_forgetting_drops_them() -> None:
    telemetry = Telemetry()
    telemetry.set_gate("safety-drop", {"model": "a"}, True, 0.4, 1000.0)
    labels = {"gate": "safety-drop", "model": "a"}
    assert value_of(telemetry, "scorestream_gate_firing", **labels) == 1
    assert value_of(telemetry, "scorestream_gate_firing_value", **labels) == 0.4
    telemetry.forget_gate("safety-drop", {"model": "a"})
    for name in ("scorestream_gate_firing", "scorestream_gate_firing_value"):
        assert samples(telemetry, name) == []


def test_event_time_lag_per_stage_and_a_stage_without_watermark_has_no_series() -> None:
    telemetry = Telemetry()
    telemetry.set_event_time_lag({"score": 1.0, "sessions": 125.0, "windows": 130.0})
    telemetry.set_event_time_lag({"score": 1.0, "sessions": 125.0, "windows": None})
    name = "scorestream_event_time_lag_seconds"
    assert {s.labels["stage"]: s.value for s in samples(telemetry, name)} == {
        "score": 1.0,
        "sessions": 125.0,
    }


def test_cardinality_guard_maps_overflow_to_other_and_truncates() -> None:
    guard = LabelGuard(max_values=2, max_length=5)
    assert [guard("model", v) for v in ("a", "b", "c", "a", "d")] == [
        "a",
        "b",
        "other",
        "a",
        "other",
    ]
    assert guard("tenant", "c") == "c"  # bounds are per label name
    assert guard("tenant", "abcdefgh") == "abcde"


def test_segment_values_beyond_the_limit_collapse_into_other() -> None:
    telemetry = Telemetry(segment_by=["model"], max_label_values=3)
    for index in range(10):
        telemetry.record_aggregate(aggregate({"model": f"m{index}"}), "1m")
    models = {s.labels["model"] for s in samples(telemetry, "scorestream_window_value")}
    assert models == {"m0", "m1", "m2", "other"}


def test_segment_label_names_are_valid_and_do_not_collide() -> None:
    assert segment_label_names(["model", "app.name", "suite", "9lives"]) == [
        "model",
        "app_name",
        "segment_suite",
        "segment_9lives",
    ]


def test_separate_objects_have_separate_registries() -> None:
    first, second = Telemetry(), Telemetry()
    first.record_dead_letter("parse")
    assert value_of(first, "scorestream_dead_letters_total", reason="parse") == 1
    found = samples(second, "scorestream_dead_letters_total")
    assert found and all(sample.labels["reason"] != "parse" for sample in found)


def test_result_series_are_exported_at_zero_before_the_first_result() -> None:
    """So that the first burst is an increase `rate()` sees (a series appearing with its
    first value counts as none)."""
    telemetry = Telemetry()
    assert value_of(telemetry, "scorestream_cases_total", suite="safe", label="Fail") == 0
    assert value_of(telemetry, "scorestream_cases_total", suite="alignment", label="none") == 0
    latency = "scorestream_end_to_end_latency_seconds_count"
    assert value_of(telemetry, latency, suite="extraction") == 0
    assert value_of(telemetry, "scorestream_dead_letters_total", reason="invalid_json") == 0


def test_metrics_endpoint_serves_the_registry_over_http() -> None:
    telemetry = Telemetry()
    telemetry.record_dead_letter("oversized")
    _server, port = telemetry.serve(0, host="127.0.0.1")
    try:
        assert port > 0
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
            assert reply.status == 200
            body = reply.read().decode("utf-8")
    finally:
        telemetry.stop()
    names = {s.name for f in text_string_to_metric_families(body) for s in f.samples}
    assert "scorestream_dead_letters_total" in names
    assert 'scorestream_dead_letters_total{reason="oversized"} 1.0' in body


def test_the_configured_sinks_and_sources_add_their_counters() -> None:
    telemetry = Telemetry()
    before = families(telemetry)
    assert not {name for name in before if "evaluation_records" in name or "otlp" in name}
    telemetry.add_evaluation_records(DROP_REASONS)
    telemetry.add_evaluation_records(DROP_REASONS)  # once
    counters = telemetry.add_source(OTLP_METRICS)
    assert telemetry.add_source(OTLP_METRICS) is counters
    telemetry.record_evaluations_sent("kafka", 3)
    telemetry.record_evaluations_dropped("refused", 2)
    counters.items.labels("mapped").inc(4)
    found = families(telemetry)
    for name, label in [
        ("scorestream_evaluation_records", "destination"),
        ("scorestream_evaluation_records_dropped", "reason"),
        ("scorestream_otlp_spans", "outcome"),
        ("scorestream_otlp_unmapped_spans", "reason"),
    ]:
        assert found[name].type == "counter", name
        assert {tuple(s.labels) for s in found[name].samples} == {(label,)}, name
    assert value_of(telemetry, "scorestream_evaluation_records_total", destination="kafka") == 3
    for reason in DROP_REASONS:  # exported at 0 from the start
        expected = 2 if reason == "refused" else 0
        assert (
            value_of(telemetry, "scorestream_evaluation_records_dropped_total", reason=reason)
            == expected
        )
    assert value_of(telemetry, "scorestream_otlp_spans_total", outcome="mapped") == 4
    assert value_of(telemetry, "scorestream_otlp_spans_total", outcome="duplicate") == 0
    assert value_of(telemetry, "scorestream_otlp_unmapped_spans_total", reason="no_content") == 0
