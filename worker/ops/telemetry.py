"""Prometheus metrics of the worker, on a registry owned by a `Telemetry` object.

Names and labels are the interface's (fixed). Label values are bounded: per label name at
most `max_label_values` distinct values are kept (later ones become `"other"`), and long
values are cut to `max_label_length` characters. Segment label names come from
`segment_by`; names that are not valid Prometheus label names are rewritten (invalid
characters to `_`), and names that collide with a fixed label (`suite`, `metric`, `stat`,
`window`, `gate`) get a `segment_` prefix.
"""

from __future__ import annotations

import contextlib
import math
import platform
import re
import threading
import time
from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from itertools import accumulate
from typing import Any, get_args

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import HistogramMetricFamily, Metric
from prometheus_client.utils import floatToGoString

from schemas.outputs import Aggregate, GateEvent, Label
from worker.config import GateConfig, Settings
from worker.input.rejections import REASONS
from worker.input.result_facts import ResultView
from worker.input.sources import SourceMetrics
from worker.input.unknown_fields import DETAIL_KEY as UNKNOWN_FIELDS_DETAIL
from worker.ops.health import DEFAULT_METRICS_HOST, MetricsServer, endpoints_app
from worker.suites import registry
from worker.suites.alignment.judge_verdict import JUDGE_ERROR_REASONS
from worker.windowing.windows import window_name

OTHER = "other"
NO_LABEL = "none"
DEFAULT_MAX_LABEL_VALUES = 50
DEFAULT_MAX_LABEL_LENGTH = 80

SCORE_BUCKETS = tuple(round(tenth / 10, 1) for tenth in range(1, 11))
SCORING_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
LATENCY_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
EMBEDDING_SKIPPED_OVERLOAD = "overload"  # scorestream_embeddings_skipped_total{reason}
# A turn result's safety coverage and language (alignment's `language_details`)
COVERAGE_DETAIL, LANGUAGE_DETAIL, KEYWORDS_ONLY = "safety_coverage", "language", "keywords_only"

_FIXED_LABELS = frozenset({"suite", "metric", "stat", "window", "gate", "le", "quantile"})
_INVALID_LABEL_CHARS = re.compile(r"[^a-zA-Z0-9_]")


class HistogramSeries:
    """One labelled series of a `BucketHistogram`: its own bucket counts, sum and creation
    time. A value is counted in the first bucket whose upper bound it does not exceed
    (prometheus_client's `Histogram.observe`); `observe_all` counts many under one lock
    (a micro-batch of extraction results made 17 observations a case, each two locks)."""

    __slots__ = ("_bounds", "_counts", "_created", "_lock", "_sum")

    def __init__(self, bounds: Sequence[float]) -> None:
        self._bounds = bounds
        self._counts = [0] * len(bounds)
        self._sum = 0.0
        self._created = time.time()
        self._lock = threading.Lock()

    def observe(self, value: float) -> None:
        self.observe_all((value,))

    def observe_all(self, values: Sequence[float]) -> None:
        bounds, counts = self._bounds, self._counts
        total = sum(values)
        with self._lock:
            for value in values:
                counts[bisect_left(bounds, value)] += 1
            self._sum += total

    def snapshot(self) -> tuple[list[float], float, float]:
        """Cumulative bucket counts (the last is the count), the sum, the creation time."""
        with self._lock:
            counts, total = list(self._counts), self._sum
        return [float(count) for count in accumulate(counts)], total, self._created


class BucketHistogram:
    """A labelled Prometheus histogram whose counts this module keeps itself
    (`HistogramSeries`) and exports through the public custom-collector API
    (`HistogramMetricFamily`), so that many values can be counted at once without
    prometheus_client's private attributes. Its exposition is `Histogram`'s, sample for
    sample: buckets, `_count`, `_sum`, `_created` per series, in the order the series were
    created (`tests/test_telemetry.py` compares the two). The `_created` samples are always
    exported (`disable_created_metrics()` does not reach them; the worker never calls it)."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        buckets: Sequence[float],
        registry: CollectorRegistry,
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        bounds = [float(bound) for bound in buckets]
        if bounds != sorted(bounds):
            raise ValueError("buckets not in sorted order")
        if not bounds or bounds[-1] != math.inf:
            bounds.append(math.inf)
        self.bounds = tuple(bounds)
        self._le = [floatToGoString(bound) for bound in bounds]
        self._series: dict[tuple[str, ...], HistogramSeries] = {}
        self._lock = threading.Lock()
        registry.register(self)

    def labels(self, *values: str) -> HistogramSeries:
        """The series of these label values (created empty on first use)."""
        if len(values) != len(self.labelnames):
            raise ValueError(f"{self.name} takes labels {self.labelnames}, got {values}")
        key = tuple(str(value) for value in values)
        series = self._series.get(key)
        if series is None:
            with self._lock:
                series = self._series.setdefault(key, HistogramSeries(self.bounds))
        return series

    def describe(self) -> list[Metric]:
        return [HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)]

    def collect(self) -> list[Metric]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        with self._lock:
            every = list(self._series.items())
        for values, series in every:
            cumulative, total, created = series.snapshot()
            family.add_metric(values, list(zip(self._le, cumulative, strict=True)), total)
            family.add_sample(
                self.name + "_created", dict(zip(self.labelnames, values, strict=True)), created
            )
        return [family]


class LabelGuard:
    """Bounds label cardinality: `max_values` distinct values per label name, then `other`."""

    def __init__(
        self,
        max_values: int = DEFAULT_MAX_LABEL_VALUES,
        max_length: int = DEFAULT_MAX_LABEL_LENGTH,
    ) -> None:
        self.max_values = max_values
        self.max_length = max_length
        self._seen: dict[str, set[str]] = {}
        self._lock = threading.Lock()

    def __call__(self, name: str, value: str) -> str:
        value = value[: self.max_length]
        with self._lock:
            seen = self._seen.setdefault(name, set())
            if value in seen:
                return value
            if len(seen) < self.max_values:
                seen.add(value)
                return value
        return OTHER


def segment_label_names(segment_by: Sequence[str]) -> list[str]:
    """Prometheus label names for the segment keys, in `segment_by` order."""
    names: list[str] = []
    for key in segment_by:
        name = _INVALID_LABEL_CHARS.sub("_", key).lstrip("_") or "segment"
        if name[0].isdigit() or name in _FIXED_LABELS:
            name = f"segment_{name}"
        while name in names:
            name = f"{name}_"
        names.append(name)
    return names


@dataclass(frozen=True)
class SourceCounters:
    """A source's two counters (`Telemetry.add_source`)."""

    items: Counter
    skipped: Counter


class Telemetry:
    """Every scorestream metric, on its own `CollectorRegistry`: declared here, names and
    help included. Two kinds are created only when configured: the evaluation sink's
    (`add_evaluation_records`) and each source's two counters (`add_source`), which the
    source names in its `SourceMetrics` (the source seam: a new source brings its own;
    OTLP's are `worker.otlp.mapping.METRICS`)."""

    def __init__(
        self,
        segment_by: Sequence[str] = ("model",),
        max_label_values: int = DEFAULT_MAX_LABEL_VALUES,
        max_label_length: int = DEFAULT_MAX_LABEL_LENGTH,
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.segment_by = list(segment_by)
        self.segment_labels = segment_label_names(self.segment_by)
        self.guard = LabelGuard(max_label_values, max_label_length)
        self._children: dict[tuple[int, str, str], Any] = {}  # see `_series`
        self._servers: list[MetricsServer] = []
        self._newest_window: dict[tuple[str, ...], float] = {}
        self._readiness: Callable[[], bool] | None = None
        self._connected: bool | None = None
        # Every metric on this object's registry.
        counter = partial(Counter, registry=self.registry)
        gauge = partial(Gauge, registry=self.registry)
        histogram = partial(Histogram, registry=self.registry)
        # The histograms observed a micro-batch at a time (`record_results`).
        bucket_histogram = partial(BucketHistogram, registry=self.registry)
        self.cases = counter(
            "scorestream_cases_total",
            "Scored cases, turns and sessions by label (none: no label).",
            ["suite", "label"],
        )
        self.dead_letters = counter(
            "scorestream_dead_letters_total",
            "Inputs sent to the dead-letter topic, by reason.",
            ["reason"],
        )
        self.score = bucket_histogram(
            "scorestream_score",
            "Per-case metric values.",
            ["suite", "metric"],
            buckets=SCORE_BUCKETS,
        )
        self.scoring_duration = bucket_histogram(
            "scorestream_scoring_duration_seconds",
            "Time spent scoring one input.",
            ["suite"],
            buckets=SCORING_BUCKETS,
        )
        self.end_to_end_latency = bucket_histogram(
            "scorestream_end_to_end_latency_seconds",
            "From the input's event time to its result being produced.",
            ["suite"],
            buckets=LATENCY_BUCKETS,
        )
        self.window_value = gauge(
            "scorestream_window_value",
            "A statistic of the newest window of each suite, segment and window size.",
            ["suite", "metric", "stat", "window", *self.segment_labels],
        )
        self.gate_firing = gauge(
            "scorestream_gate_firing",
            "1 while a gate fires for a segment, else 0.",
            ["gate", *self.segment_labels],
        )
        self.gate_transitions = counter(
            "scorestream_gate_transitions_total",
            "Gate state changes (firing, resolved) per segment: a gate that fires and "
            "resolves between two scrapes still shows.",
            ["gate", "state", *self.segment_labels],
        )
        self.gate_info = gauge(
            "scorestream_gate_info",
            "Always 1; the labels are a configured gate's definition and alert severity.",
            ["gate", "suite", "metric", "stat", "op", "threshold", "window", "severity"],
        )
        self.gate_firing_value = gauge(
            "scorestream_gate_firing_value",
            "The gated statistic of the window that made the gate fire last, per segment.",
            ["gate", *self.segment_labels],
        )
        self.gate_firing_window_start = gauge(
            "scorestream_gate_firing_window_start_seconds",
            "Start (Unix time) of the window that made the gate fire last, per segment.",
            ["gate", *self.segment_labels],
        )
        self.embedding_batch_size = histogram(
            "scorestream_embedding_batch_size",
            "Texts per embedding batch.",
            buckets=BATCH_BUCKETS,
        )
        self.embeddings_skipped = counter(
            "scorestream_embeddings_skipped_total",
            "Alignment turns scored for safety alone, without their vector, by reason "
            "(overload: the session stage was more than alignment.embedding.max_lag behind).",
            ["reason"],
        )
        self.embeddings_skipped.labels(EMBEDDING_SKIPPED_OVERLOAD)  # exported at 0
        self.turn_languages = counter(
            "scorestream_turn_languages_total",
            "Assistant turns scored, by suite and detected language (ISO 639-1; und: none).",
            ["suite", "language"],
        )
        self.safety_uncovered = counter(
            "scorestream_safety_uncovered_total",
            "Assistant turns the safety classifier could not judge in full (a language it "
            "was not trained in, or none identified): judged by the keyword patterns alone.",
            ["suite", "language"],
        )
        self.consumer_lag = gauge(
            "scorestream_consumer_lag",
            "Records of an assigned partition not yet processed by this worker (end offset "
            "minus committed offset), for every topic it reads: the input and both "
            "internal hops.",
            ["topic", "partition"],
        )
        self.event_time_lag = gauge(
            "scorestream_event_time_lag_seconds",
            "Wall clock minus the stage's watermark (the oldest over the stage partitions "
            "this worker owns): how far behind real time the stage's results are.",
            ["stage"],
        )
        self.max_event_time_lag = gauge(
            "scorestream_max_event_time_lag_seconds",
            "The configured max_event_time_lag: a stage further behind is falling behind.",
        )
        self.broker_connected = gauge(
            "scorestream_broker_connected",
            "1 while the last request to the Kafka broker succeeded, 0 after one failed.",
        )
        self.build_info = gauge(
            "scorestream_build_info",
            "Always 1; the labels say which scorestream and Python run.",
            ["version", "python"],
        )
        self.build_info.labels(scorestream_version(), platform.python_version()).set(1)
        self.late_records = counter(
            "scorestream_late_records_total",
            "Records for windows already closed (scored, not aggregated).",
            ["suite"],
        )
        self.judge_errors = counter(
            "scorestream_judge_errors_total",
            "Unusable safety-judge verdicts (failed, oversized or invalid answers), by reason.",
            ["reason"],
        )
        for reason in JUDGE_ERROR_REASONS:  # every reason exported from the start, at 0
            self.judge_errors.labels(reason)
        self.windows_opened = counter(
            "scorestream_windows_opened_total",
            "Windows (per suite, segment and window configuration) that got their first "
            "cases; each gets one final aggregate when it closes.",
            ["suite", "window"],
        )
        self.window_finals = counter(
            "scorestream_window_finals_total",
            "Final aggregates published; over the group it keeps up with "
            "scorestream_windows_opened_total (a gap that stays open is a lost final).",
            ["suite", "window"],
        )
        self.unknown_fields = counter(
            "scorestream_unknown_fields_total",
            "Payload fields no scorer reads (misspelt or unsupported), by suite.",
            ["suite"],
        )
        self._sources: dict[str, SourceCounters] = {}
        self.evaluation_records: Counter | None = None
        self.evaluation_records_dropped: Counter | None = None
        self._start_at_zero()

    def _start_at_zero(self) -> None:
        """Export each suite's result series at 0 before the first result: a series that
        appears with its first value is no increase to `rate()`, so a short burst (the
        demo, a small file) showed every rate and latency panel as 0 or NaN."""
        for spec in registry.specs():
            labels = get_args(Label) if spec.metric("pass_rate") else (NO_LABEL,)
            for label in labels:
                self._series(self.cases, "label", spec.name, label)
            self._series(self.scoring_duration, "", spec.name)
            self._series(self.end_to_end_latency, "", spec.name)
        for reason in REASONS:
            self.dead_letters.labels(self.guard("reason", reason))

    @classmethod
    def from_settings(cls, settings: Settings, max_label_values: int = 50) -> Telemetry:
        telemetry = cls(segment_by=settings.segment_by, max_label_values=max_label_values)
        telemetry.describe_gates(settings.gates)
        telemetry.max_event_time_lag.set(settings.max_event_time_lag)
        return telemetry

    def describe_gates(self, gates: Iterable[GateConfig]) -> None:
        """One `scorestream_gate_info` series per configured gate."""
        for gate in gates:
            self.gate_info.labels(
                self.guard("gate", gate.name),
                gate.suite,
                gate.metric,
                gate.stat,
                gate.op,
                f"{gate.threshold:g}",
                window_name(gate.window, None),
                gate.severity,
            ).set(1)

    def _segment_values(self, segment: Mapping[str, str]) -> list[str]:
        """Guarded segment label values; `""` for keys not in the segment (all cases)."""
        return [
            self.guard(label, segment.get(key, ""))
            for key, label in zip(self.segment_by, self.segment_labels, strict=True)
        ]

    def record_result(
        self,
        result: ResultView,
        scoring_seconds: float | None = None,
        e2e_seconds: float | None = None,
    ) -> None:
        """Count a result, observe its scores and timings, and count the payload fields
        listed in its `details.unknown_fields`."""
        self.record_results([(result, scoring_seconds, e2e_seconds)])

    def record_results(
        self, observed: Iterable[tuple[ResultView, float | None, float | None]]
    ) -> None:
        """`record_result` for each (result, scoring seconds, end-to-end seconds), with
        each series updated once: a micro-batch of extraction results made 17 histogram
        observations a case, each taking two locks."""
        counts: dict[Any, int] = {}
        values: dict[Any, list[float]] = {}
        for result, scoring_seconds, e2e_seconds in observed:
            suite = result.suite
            unknown = result.details.get(UNKNOWN_FIELDS_DETAIL)
            if isinstance(unknown, list) and unknown:
                self.record_unknown_fields(suite, len(unknown))
            coverage = result.details.get(COVERAGE_DETAIL)
            if result.kind == "turn" and isinstance(coverage, str):
                self.record_turn_coverage(suite, result.details.get(LANGUAGE_DETAIL), coverage)
            cases = self._series(self.cases, "label", suite, result.label or NO_LABEL)
            counts[cases] = counts.get(cases, 0) + 1
            for metric, value in result.scores.items():
                if value is not None and math.isfinite(value):
                    series = self._series(self.score, "metric", suite, metric)
                    values.setdefault(series, []).append(value)
            if scoring_seconds is not None:
                series = self._series(self.scoring_duration, "", suite)
                values.setdefault(series, []).append(scoring_seconds)
            if e2e_seconds is not None:
                series = self._series(self.end_to_end_latency, "", suite)
                values.setdefault(series, []).append(e2e_seconds)
        for series, count in counts.items():
            series.inc(count)
        for series, observations in values.items():
            series.observe_all(observations)

    def record_turn_coverage(self, suite: str, language: Any, coverage: str) -> None:
        """Count a turn by its language, and as uncovered when it was judged by the
        keywords alone."""
        code = language.get("code") if isinstance(language, dict) else None
        code = self.guard("language", code if isinstance(code, str) else "und")
        self.turn_languages.labels(suite, code).inc()
        if coverage == KEYWORDS_ONLY:
            self.safety_uncovered.labels(suite, code).inc()

    def _series(self, family: Any, label: str, suite: str, value: str = "") -> Any:
        """The child of a per-result metric `family` for `suite` (and `label`=`value`),
        looked up once: the label guard maps a given value the same way for good."""
        key = (id(family), suite, value)
        child = self._children.get(key)
        if child is None:
            names = [self.guard("suite", suite)]
            if label:
                names.append(self.guard(label, value))
            child = self._children[key] = family.labels(*names)
        return child

    def add_source(self, metrics: SourceMetrics) -> SourceCounters:
        """The two counters of a source (its items by outcome, its skipped items by
        reason), every label value it declares exported at 0; created once per name."""
        counters = self._sources.get(metrics.items)
        if counters is None:
            counters = SourceCounters(
                Counter(metrics.items, metrics.items_help, ["outcome"], registry=self.registry),
                Counter(metrics.skipped, metrics.skipped_help, ["reason"], registry=self.registry),
            )
            for outcome in metrics.outcomes:
                counters.items.labels(outcome)
            for reason in metrics.reasons:
                counters.skipped.labels(reason)
            self._sources[metrics.items] = counters
        return counters

    def add_evaluation_records(self, drop_reasons: Iterable[str]) -> None:
        """The evaluation sink's counters (with `evaluations` configured), every drop
        reason exported at 0."""
        if self.evaluation_records is not None:
            return
        self.evaluation_records = Counter(
            "scorestream_evaluation_records_total",
            "gen_ai.evaluation.result log records sent, by destination (otlp_http, kafka).",
            ["destination"],
            registry=self.registry,
        )
        self.evaluation_records_dropped = Counter(
            "scorestream_evaluation_records_dropped_total",
            "gen_ai.evaluation.result log records dropped: queue_full, refused (a 4xx "
            "answer), gave_up (evaluations.max_attempts failed).",
            ["reason"],
            registry=self.registry,
        )
        for reason in drop_reasons:
            self.evaluation_records_dropped.labels(reason)

    def record_evaluations_sent(self, destination: str, count: int) -> None:
        """Count evaluation log records sent to `destination` (`add_evaluation_records`
        first)."""
        if self.evaluation_records is not None:
            self.evaluation_records.labels(destination).inc(count)

    def record_evaluations_dropped(self, reason: str, count: int) -> None:
        """Count evaluation log records dropped for `reason` (`add_evaluation_records`
        first)."""
        if self.evaluation_records_dropped is not None:
            self.evaluation_records_dropped.labels(reason).inc(count)

    def record_dead_letter(self, reason: str) -> None:
        self.dead_letters.labels(self.guard("reason", reason)).inc()

    def record_unknown_fields(self, suite: str, count: int) -> None:
        """Count `count` unknown payload fields of one input of `suite`."""
        if count > 0:
            self.unknown_fields.labels(self.guard("suite", suite)).inc(count)

    def record_judge_error(self, reason: str) -> None:
        """Count one unusable safety-judge verdict."""
        self.judge_errors.labels(self.guard("reason", reason)).inc()

    def record_late(self, suite: str, count: int = 1) -> None:
        self.late_records.labels(self.guard("suite", suite)).inc(count)

    def record_windows_opened(self, opened: Mapping[tuple[str, str], int]) -> None:
        """Count windows opened, by (suite, window name)."""
        for (suite, window), count in opened.items():
            labels = (self.guard("suite", suite), self.guard("window", window))
            self.windows_opened.labels(*labels).inc(count)

    def record_final(self, suite: str, window: str) -> None:
        """Count one final aggregate published."""
        self.window_finals.labels(self.guard("suite", suite), self.guard("window", window)).inc()

    def record_embedding_batch(self, size: int) -> None:
        self.embedding_batch_size.observe(size)

    def record_embeddings_skipped(self, count: int, reason: str) -> None:
        self.embeddings_skipped.labels(reason).inc(count)

    def record_aggregate(self, aggregate: Aggregate, window_name: str) -> None:
        """Set `scorestream_window_value` from an aggregate of window `window_name`.

        Per-metric summaries use stats `mean|min|max|std|ci_low|ci_high`; the pass rate is
        `{metric="pass_rate", stat="rate"}`, the case count `{metric="cases",
        stat="count"}`, then the suite's own figures as its spec lists them (SAFE per-metric
        pass rates and extraction figures `stat="rate"`, alignment sessions and turns
        `stat="count"`). Aggregates of a window older than the
        newest one seen for the same suite, segment and window name are ignored.
        """
        segment = self._segment_values(aggregate.segment)
        suite = self.guard("suite", aggregate.suite)
        window = self.guard("window", window_name)
        series = (suite, window, *segment)
        start = aggregate.window.start.timestamp()
        if start < self._newest_window.get(series, -math.inf):
            return
        self._newest_window[series] = start

        def put(metric: str, stat: str, value: float | None) -> None:
            if value is None or not math.isfinite(value):
                return
            labels = [suite, self.guard("metric", metric), stat, window, *segment]
            self.window_value.labels(*labels).set(value)

        for metric, summary in aggregate.metrics.items():
            for stat, value in summary.model_dump().items():
                put(metric, stat, value)
        put("pass_rate", "rate", aggregate.pass_rate)
        put("cases", "count", float(aggregate.count))
        for metric, stat, value in registry.figure_values(aggregate):
            put(metric, stat, value)

    def record_gate(self, event: GateEvent) -> None:
        """Count the transition; `scorestream_gate_firing` = 1 while firing, 0 once
        resolved; a firing sets the value and window start of the latest firing."""
        gate = self.guard("gate", event.gate)
        segment = self._segment_values(event.segment)
        self.gate_transitions.labels(gate, event.state, *segment).inc()
        firing = event.state == "firing"
        self._set_gate(gate, segment, firing, event.value if firing else None, None)
        if firing:
            self.gate_firing_window_start.labels(gate, *segment).set(event.window.start.timestamp())

    def set_gate(
        self,
        gate: str,
        segment: Mapping[str, str],
        firing: bool,
        fired_value: float | None = None,
        fired_window_start: float | None = None,
    ) -> None:
        """Set the gauges of a gate from stored gate state (restart, rebalance)."""
        guarded = self.guard("gate", gate)
        self._set_gate(
            guarded, self._segment_values(segment), firing, fired_value, fired_window_start
        )

    def _set_gate(
        self,
        gate: str,
        segment: list[str],
        firing: bool,
        fired_value: float | None,
        fired_window_start: float | None,
    ) -> None:
        self.gate_firing.labels(gate, *segment).set(1 if firing else 0)
        if fired_value is not None and math.isfinite(fired_value):
            self.gate_firing_value.labels(gate, *segment).set(fired_value)
        if fired_window_start is not None:
            self.gate_firing_window_start.labels(gate, *segment).set(fired_window_start)

    def forget_gate(self, gate: str, segment: Mapping[str, str]) -> None:
        """Drop a gate's gauges: another worker owns its segment now."""
        labels = [self.guard("gate", gate), *self._segment_values(segment)]
        for family in (self.gate_firing, self.gate_firing_value, self.gate_firing_window_start):
            with contextlib.suppress(KeyError):
                family.remove(*labels)

    def set_event_time_lag(self, lags: Mapping[str, float | None]) -> None:
        """Set the event-time lag of each stage; a stage with None (no partition of it
        owned, or no watermark yet) loses its series."""
        for stage, lag in lags.items():
            if lag is None:
                with contextlib.suppress(KeyError):
                    self.event_time_lag.remove(stage)
            else:
                self.event_time_lag.labels(stage).set(lag)

    def set_consumer_lag(self, topic: str, lags: dict[int, int]) -> None:
        """Set the lag of each partition of `topic` this worker reads; partitions not in
        `lags` (revoked) lose their series."""
        topic = self.guard("topic", topic)
        wanted = {str(partition) for partition in lags}
        for labels in _label_sets(self.consumer_lag):
            if labels[0] == topic and labels[1] not in wanted:
                self.consumer_lag.remove(*labels)
        for partition, lag in lags.items():
            self.consumer_lag.labels(topic, str(partition)).set(lag)

    def set_broker_connected(self, connected: bool) -> None:
        """Record whether the last request to the broker succeeded (`/readyz`, gauge)."""
        self._connected = connected
        self.broker_connected.set(1 if connected else 0)

    def set_readiness(self, check: Callable[[], bool]) -> None:
        """`/readyz` answers 200 while `check()` is true and the broker is not known to be
        unreachable (see `set_broker_connected`), else 503."""
        self._readiness = check

    def readiness(self) -> dict[str, Any]:
        """What `/readyz` reports: `ready` and the state of each check."""
        try:
            started = bool(self._readiness()) if self._readiness is not None else False
        except Exception:  # a failing check means not ready, never an HTTP 500
            started = False
        broker = {None: "unknown", True: "connected", False: "disconnected"}[self._connected]
        return {
            "ready": started and self._connected is not False,
            "started": started,
            "broker": broker,
        }

    def render(self) -> bytes:
        """The registry in the Prometheus text exposition format."""
        return generate_latest(self.registry)

    def serve(self, port: int, host: str = DEFAULT_METRICS_HOST) -> tuple[MetricsServer, int]:
        """Serve `/metrics`, `/healthz` and `/readyz` on `host`:`port` from a background
        thread; `port=0` picks a free port.

        `/healthz` is 200 while the process serves HTTP; `/readyz` is 200 or 503 with the
        JSON of `readiness()`. The server is bounded (see `MetricsServer`): connections
        are read by one event loop, answered by `METRICS_THREADS` threads, at most
        `METRICS_CONNECTION_LIMIT` are open, and one idle for `METRICS_IDLE_TIMEOUT`
        seconds (a client that stops mid-request included) is closed. Returns the server
        and the port actually bound. `stop()` shuts it down.
        """
        server = MetricsServer(self.wsgi_app(), host, port)
        self._servers.append(server)
        return server, server.port

    def wsgi_app(self) -> Callable[..., Iterable[bytes]]:
        """The WSGI application behind `serve`."""
        return endpoints_app(self.registry, self.readiness)

    def stop(self) -> None:
        """Shut down every server `serve` started."""
        while self._servers:
            self._servers.pop().stop()


def scorestream_version() -> str:
    """The installed scorestream version ("unknown" when run from a bare source tree)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("scorestream")
    except PackageNotFoundError:
        return "unknown"


def _label_sets(gauge: Gauge) -> list[tuple[str, ...]]:
    """The label values of every series of a labelled gauge."""
    return [
        tuple(sample.labels[name] for name in ("topic", "partition"))
        for metric in gauge.collect()
        for sample in metric.samples
    ]


__all__ = [
    "BucketHistogram",
    "HistogramSeries",
    "LabelGuard",
    "SourceCounters",
    "Telemetry",
    "scorestream_version",
    "segment_label_names",
]
