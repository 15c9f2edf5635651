"""bench/peer.py (scorestream against Quix Streams): its input, its count of lost cases and
the window fold it gives Quix, on a tiny input and without Quix or a broker."""

from __future__ import annotations

import importlib.util
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest

from worker.aggregation import message as aggregate_message
from worker.aggregation import state as window_state
from worker.config import load_settings
from worker.input import records as input_records
from worker.suites import registry
from worker.windowing.windows import WindowKey

MINUTE = 60.0


def load_peer() -> Any:
    path = Path(__file__).resolve().parents[1] / "bench" / "peer.py"
    spec = importlib.util.spec_from_file_location("peer_bench", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


peer = load_peer()
# 100 cases before a minute boundary and 150 after it (10 ms apart)
START = 1_767_225_600.0 - 1.0
MINUTES = (round((START + 1.0 - MINUTE) * 1000), round((START + 1.0) * 1000))


def results_of(cases: list[bytes]) -> list[dict[str, Any]]:
    """The per-case results of the envelopes, as the Quix application builds them."""
    settings = load_settings(None, overrides={}, environ={})
    spec = registry.get("safe")
    assert spec.case_scorer is not None
    score = spec.case_scorer(settings.safe)
    out = []
    for offset, line in enumerate(cases):
        record = input_records.validate_record(orjson.loads(line))
        out.append(
            input_records.build_result(
                case_id=record.id,
                suite=record.suite,
                kind="case",
                scored=score(record.payload),
                event_time=record.event_time() or datetime.now(UTC),
                model=record.model,
                labels=record.labels,
                versions=spec.versions(settings.safe),
                source=input_records.SourcePosition("in", offset % 4, offset),
                scored_at=datetime.now(UTC),
            ).model_dump(mode="json")
        )
    return out


def test_the_input_counts_its_cases_per_minute_and_sentinels_close_every_window() -> None:
    data = peer.peer_input(250, START, partitions=4)
    records = [orjson.loads(line) for line in data.cases]
    assert len({record["id"] for record in records}) == 250
    assert dict(data.per_minute) == {MINUTES[0]: 100, MINUTES[1]: 150}
    models = {record["model"] for record in records}
    assert len(models) == 2
    # one sentinel per partition and model, past the end + grace of every 1 h / 5 min
    # window that holds a case
    assert sorted((p, orjson.loads(v)["model"]) for p, v in data.sentinels) == sorted(
        (p, m) for p in range(4) for m in models
    )
    last_ts = max(record["ts"] for record in records)
    latest_hop_end = (last_ts // 300_000) * 300_000 + 3_600_000
    for _, value in data.sentinels:
        sentinel = orjson.loads(value)
        assert sentinel["ts"] > latest_hop_end + peer.MAX_GRACE_S * 1000
        assert sentinel["ts"] // 60_000 * 60_000 not in data.per_minute
    assert data.results == 250 + 8


def test_the_long_backlog_spans_hours_of_windows_and_stays_in_the_past() -> None:
    step_s = peer.SCENARIOS["long-backlog"]
    now = 1_800_000_000.0
    start = peer.history_start(20_000, step_s, now)
    data = peer.peer_input(20_000, start, step_s)
    # 20,000 cases 360 ms apart: two hours, one 60 s tumbling window per minute
    assert len(data.per_minute) == 120
    assert sum(data.per_minute.values()) == 20_000
    latest = max(orjson.loads(value)["ts"] for _, value in data.sentinels)
    assert latest <= (now - 60) * 1000


def test_lost_cases_compares_each_final_window_with_the_input() -> None:
    per_minute = {MINUTES[0]: 100, MINUTES[1]: 150}
    assert peer.lost_cases(per_minute, {MINUTES[0]: 100, MINUTES[1]: 150}) == (0, 0)
    assert peer.lost_cases(per_minute, {MINUTES[0]: 100}) == (150, 0)  # never closed
    assert peer.lost_cases(per_minute, {MINUTES[0]: 27, MINUTES[1]: 150}) == (73, 0)
    assert peer.lost_cases(per_minute, {MINUTES[0]: 101, MINUTES[1]: 149}) == (1, 1)


def test_quix_fold_gives_scorestream_figures_and_its_final_is_counted() -> None:
    data = peer.peer_input(250, START)
    results = results_of(data.cases)
    first_minute = [r for r in results if r["ts"] < "2026-01-01T00:00:00"]
    assert len(first_minute) == 100

    fold = peer.WindowFold("safe", lambda value: {}, 60.0, None)
    state = fold.initialise(first_minute[0])
    for result in first_minute[1:]:
        state = fold.reduce(state, result)
    replayed = fold.reduce(state, first_minute[5])  # at-least-once: counted once
    final = fold.close({"start": MINUTES[0], "end": MINUTES[0] + 60_000, "value": replayed})
    assert peer.final_minute_count(final) == (MINUTES[0], 100)

    # the same cases through scorestream's window fold, with its reservoir and worst cases
    aggregator = registry.get("safe").aggregator()
    key = WindowKey(60.0, None, MINUTES[0] / 1000)
    full = window_state.initialise("safe", {}, key)
    for result in first_minute:
        window_state.update(full, peer.as_result(result), aggregator)
    ours = aggregate_message.to_message(full, True, datetime.now(UTC), aggregator)
    theirs = orjson.loads(final)
    assert theirs["count"] == ours.count == 100
    assert theirs["label_counts"] == ours.label_counts
    assert theirs["pass_rate"] == pytest.approx(ours.pass_rate)
    assert theirs["safe"] == orjson.loads(ours.model_dump_json())["safe"]
    for metric, summary in ours.metrics.items():
        assert theirs["metrics"][metric]["mean"] == pytest.approx(summary.mean)
    assert peer.final_minute_count(ours.model_dump_json().encode()) == (MINUTES[0], 100)


def test_only_final_all_cases_minute_aggregates_are_counted() -> None:
    fold = peer.WindowFold("safe", lambda value: {"model": value["model"]}, 60.0, None)
    result = results_of(peer.peer_input(1, START).cases)[0]
    window = {"start": MINUTES[0], "end": MINUTES[0] + 60_000, "value": fold.initialise(result)}
    assert peer.final_minute_count(fold.close(window)) is None  # a model's window
    hopping = peer.WindowFold("safe", lambda value: {}, 3600.0, 300.0)
    window = {"start": 0, "end": 3_600_000, "value": hopping.initialise(result)}
    assert peer.final_minute_count(hopping.close(window)) is None
    interim = orjson.loads(peer.WindowFold("safe", lambda v: {}, 60.0, None).close(window))
    interim["final"] = False
    assert peer.final_minute_count(orjson.dumps(interim)) is None


def test_lean_fold_counts_the_cases_with_their_label_counts_and_means() -> None:
    results = results_of(peer.peer_input(100, START).cases)
    fold = peer.LeanFold("safe", lambda value: {}, 60.0, None)
    state = fold.initialise(results[0])
    for result in results[1:]:
        state = fold.reduce(state, result)
    final = fold.close({"start": MINUTES[0], "end": MINUTES[0] + 60_000, "value": state})
    assert peer.final_minute_count(final) == (MINUTES[0], 100)
    message = orjson.loads(final)
    labels: dict[str, int] = {}
    for result in results:
        labels[result["label"]] = labels.get(result["label"], 0) + 1
    assert message["label_counts"] == labels
    composite = [result["scores"]["composite"] for result in results]
    assert message["means"]["composite"] == pytest.approx(sum(composite) / 100)
