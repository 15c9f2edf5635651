"""Window aggregates: segments, keys, mergeable state, replays, the aggregate message."""

from __future__ import annotations

import copy
import json
import math
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.outputs import CaseResult, RecordSource, Versions
from worker import aggregation as agg
from worker.suites.base import Scored, State
from worker.windowing.windows import WindowKey

WINDOW = WindowKey(60.0, None, 1_714_564_800.0)  # 2024-05-01T12:00:00Z
TS = datetime(2024, 5, 1, 12, 0, 30, tzinfo=UTC)
NOW = datetime(2024, 5, 1, 12, 1, 0, tzinfo=UTC)


class CountingAggregator:
    """A tiny suite aggregator: micro precision from summed counts (extraction-shaped)."""

    def initialise(self) -> State:
        return {"tp": 0, "pred": 0, "cases": 0}

    def update(self, state: State, scored: Scored) -> State:
        tp, pred = scored.counts.get("tp", 0), scored.counts.get("pred", 0)
        assert isinstance(tp, int) and isinstance(pred, int)
        return {"tp": state["tp"] + tp, "pred": state["pred"] + pred, "cases": state["cases"] + 1}

    def merge(self, left: State, right: State) -> State:
        return {key: left[key] + right[key] for key in left}

    def figures(self, state: State) -> dict[str, Any]:
        precision = state["tp"] / state["pred"] if state["pred"] else 0.0
        return {"metrics": {"precision": precision}, "counts": dict(state)}


FAKE = CountingAggregator()


def result(
    ident: str,
    scores: dict[str, float | None],
    label: str | None = "Pass",
    offset: int | None = 0,
    partition: int = 0,
    kind: str = "case",
    counts: dict[str, Any] | None = None,
    grade: str | None = None,
) -> CaseResult:
    source = (
        None
        if offset is None
        else RecordSource(topic="llm.responses.v1", partition=partition, offset=offset)
    )
    return CaseResult.model_validate(
        {
            "id": ident,
            "suite": "extraction",
            "kind": kind,
            "ts": TS,
            "scores": scores,
            "label": label,
            "grade": grade,
            "counts": counts or {},
            "versions": Versions(scorer="1", metrics="1"),
            "source": source,
            "scored_at": TS,
        }
    )


def fold(results: list[CaseResult], reservoir_size: int = 512) -> State:
    state = agg.initialise("extraction", {"model": "m"}, WINDOW, reservoir_size)
    for item in results:
        state, _ = agg.update(state, item, FAKE)
    return state


# ---------------------------------------------------------------- segments and keys


def test_segments_are_all_cases_plus_the_configured_keys() -> None:
    segments = agg.segments_for("gpt-x", {"tenant": "acme", "app": "bot"}, ["model", "tenant"])
    assert segments == [{}, {"model": "gpt-x", "tenant": "acme"}]


def test_segment_label_beats_model_and_missing_keys_are_unknown() -> None:
    assert agg.segments_for("gpt-x", {"model": "v2"}, ["model", "persona"]) == [
        {},
        {"model": "v2", "persona": "unknown"},
    ]
    assert agg.segments_for(None, {}, ["model"]) == [{}, {"model": "unknown"}]
    assert agg.segments_for("m", {"a": "b"}, []) == [{}]


def test_segment_key_is_stable_and_unambiguous() -> None:
    assert agg.segment_key({}) == "all"
    assert agg.segment_key({"tenant": "t", "model": "m"}) == "model=m,tenant=t"
    assert agg.segment_key({"model": "a,b=c|d"}) == "model=a%2Cb%3Dc%7Cd"
    assert agg.segment_key({"model": "a", "x": "b"}) != agg.segment_key({"model": "a,x=b"})


def test_aggregate_key_has_suite_segment_window_name_and_rfc3339_start() -> None:
    assert agg.aggregate_key("safe", {}, WINDOW) == "safe|all|1m|2024-05-01T12:00:00Z"
    hopping = WindowKey(3600.0, 300.0, 1_714_565_100.0)
    assert (
        agg.aggregate_key("alignment", {"model": "m"}, hopping)
        == "alignment|model=m|1h/5m|2024-05-01T12:05:00Z"
    )
    assert agg.format_window_start(0.25) == "1970-01-01T00:00:00.250Z"


# ---------------------------------------------------------------- update and message


def test_message_summarises_each_metric_and_skips_missing_scores() -> None:
    state = fold(
        [
            result("a", {"f1": 0.2, "cot": None}, "Pass", offset=1, counts={"tp": 1, "pred": 2}),
            result("b", {"f1": 0.4, "cot": None}, "Fail", offset=2, counts={"tp": 1, "pred": 2}),
            result("c", {"f1": 0.9, "cot": None}, None, offset=3, grade="B"),
        ]
    )
    message = agg.to_message(state, final=True, emitted_at=NOW, aggregator=FAKE)
    f1 = message.metrics["f1"]
    assert message.count == 3 and message.final
    assert f1.mean == pytest.approx(0.5)
    assert (f1.min, f1.max) == (0.2, 0.9)
    assert f1.std == pytest.approx(math.sqrt(((0.3**2) + (0.1**2) + (0.4**2)) / 3))
    assert f1.ci_low is not None and f1.ci_high is not None and f1.mean is not None
    assert 0.2 <= f1.ci_low <= f1.mean <= f1.ci_high <= 0.9
    assert message.metrics["cot"].mean is None  # listed, never a number
    assert message.label_counts == {"Pass": 1, "Fail": 1}
    assert message.pass_rate == 0.5  # of labelled cases only
    assert message.extraction is not None
    assert message.extraction.metrics == {"precision": 0.5}
    assert message.safe is None and message.alignment is None
    assert message.window.start == datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
    assert message.window.size_s == 60
    assert message.segment == {"model": "m"}
    assert state["grade_counts"] == {"B": 1}


def test_pass_rate_is_none_without_labels_and_ci_can_be_skipped() -> None:
    state = fold([result("a", {"f1": 1.0}, None, offset=1)])
    message = agg.to_message(state, False, NOW, FAKE, confidence_intervals=False)
    assert message.pass_rate is None
    assert message.metrics["f1"].ci_low is None


def test_safe_figures_land_in_the_safe_field() -> None:
    class SafeLike(CountingAggregator):
        def figures(self, state: State) -> dict[str, Any]:
            return {"pass_rates": {"overall": 1.0}, "by_archetype": {}}

    state = agg.initialise("safe", {}, WINDOW)
    state, _ = agg.update(state, result("a", {"CR": 1.0}, offset=1), SafeLike())
    message = agg.to_message(state, False, NOW, SafeLike())
    assert message.safe is not None and message.safe.pass_rates == {"overall": 1.0}
    assert message.extraction is None


def test_state_is_plain_json() -> None:
    state = fold([result("a", {"f1": 0.5}, offset=1), result("b", {"f1": None}, offset=None)])
    assert json.loads(json.dumps(state)) == state


def test_replayed_offset_is_not_counted_again() -> None:
    state = fold([result("a", {"f1": 0.5}, offset=7)])
    state, applied = agg.update(state, result("a", {"f1": 0.5}, offset=7), FAKE)
    assert not applied
    state, applied = agg.update(state, result("z", {"f1": 0.5}, offset=3), FAKE)
    assert not applied  # below the high water of its partition
    state, applied = agg.update(state, result("z", {"f1": 0.5}, offset=3, partition=1), FAKE)
    assert applied  # another partition has its own high water
    assert state["count"] == 2


def test_several_results_of_one_input_record_all_count() -> None:
    turns = [result(f"s1:{i}", {"f1": 0.5}, offset=4, kind="turn") for i in range(3)]
    state = fold([*turns, *turns])
    assert state["count"] == 3


def test_results_without_source_and_sessions_are_checked_by_id() -> None:
    session = result("s1", {"overall": 0.7}, offset=9, kind="session")
    late_session = result("s0", {"overall": 0.6}, offset=2, kind="session")  # closed by timer
    sourceless = result("x", {"overall": 0.9}, offset=None)
    state = fold([session, late_session, sourceless, session, sourceless])
    assert state["count"] == 3


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["a", "b", "s1", "s10", "s2", "x"]), max_size=12))
def test_sessions_count_once_each_whatever_their_order(ids: list[str]) -> None:
    """Session ids are looked up in the state's sorted list by binary search."""
    sessions = [result(ident, {"overall": 0.5}, offset=1, kind="session") for ident in ids]
    state = fold(sessions)
    assert state["count"] == len(set(ids))
    assert state["seen_ids"] == sorted(f"session:{ident}" for ident in set(ids))


def test_reservoir_stays_bounded_and_keeps_the_same_sample_as_the_foundation() -> None:
    from worker.stats import Reservoir

    results = [result(f"r{i}", {"f1": i / 100}, offset=i) for i in range(100)]
    state = fold(results, reservoir_size=8)
    reference = Reservoir(8)
    for item in results:
        reference.add(agg.sample_id(item), item.scores["f1"] or 0.0)
    assert state["samples"]["f1"]["items"] == reference.items
    assert state["moments"]["f1"][0] == 100  # moments still cover every case


def test_merging_states_of_different_windows_is_refused() -> None:
    other = agg.initialise("extraction", {"model": "m"}, WindowKey(60.0, None, 0.0))
    with pytest.raises(ValueError, match="different windows"):
        agg.merge(fold([]), other, FAKE)


# ---------------------------------------------------------------- properties

score = st.one_of(st.none(), st.floats(min_value=0, max_value=1, allow_nan=False))


@st.composite
def result_lists(draw: st.DrawFn) -> list[CaseResult]:
    """Results as a consumer sees them: offsets ascending within each input partition."""
    size = draw(st.integers(min_value=0, max_value=25))
    next_offset = {0: 0, 1: 0, 2: 0}
    items = []
    for index in range(size):
        partition = draw(st.sampled_from([0, 1, 2, None]))
        offset = None
        if partition is not None:
            next_offset[partition] += draw(st.integers(min_value=1, max_value=3))
            offset = next_offset[partition]
        items.append(
            result(
                f"c{index}",
                {"f1": draw(score), "em": draw(score)},
                draw(st.sampled_from(["Pass", "Review", "Fail", None])),
                offset=offset,
                partition=partition or 0,
                counts={"tp": draw(st.integers(0, 3)), "pred": draw(st.integers(0, 3))},
            )
        )
    return items


def assert_same_figures(left: State, right: State) -> None:
    assert left["count"] == right["count"]
    assert left["label_counts"] == right["label_counts"]
    assert left["high_water"] == right["high_water"]
    assert left["seen_ids"] == right["seen_ids"]
    assert left["suite_state"] == right["suite_state"]
    assert set(left["moments"]) == set(right["moments"])
    for metric in left["moments"]:
        for a, b in zip(left["moments"][metric], right["moments"][metric], strict=True):
            assert (a is None and b is None) or a == pytest.approx(b, abs=1e-9)
        assert left["samples"][metric]["items"] == right["samples"][metric]["items"]
    left_msg = agg.to_message(left, True, NOW, FAKE)
    right_msg = agg.to_message(right, True, NOW, FAKE)
    for metric, summary in left_msg.metrics.items():
        for name, value in summary.model_dump().items():
            other = getattr(right_msg.metrics[metric], name)
            assert (value is None and other is None) or value == pytest.approx(other, abs=1e-9)
    assert left_msg.pass_rate == right_msg.pass_rate


def any_split(
    results: list[CaseResult], data: st.DataObject
) -> tuple[list[CaseResult], list[CaseResult]]:
    """The results in two groups, each result's group drawn (order kept in each)."""
    sides = data.draw(st.lists(st.booleans(), min_size=len(results), max_size=len(results)))
    pairs = list(zip(results, sides, strict=True))
    return [item for item, side in pairs if side], [item for item, side in pairs if not side]


def folds_of_any_split(
    results: list[CaseResult], data: st.DataObject
) -> tuple[State, State, int, int]:
    """The two groups of `any_split` folded with reservoirs of drawn, maybe different,
    capacities: (left, right, left capacity, right capacity)."""
    some, others = any_split(results, data)
    small, large = data.draw(st.integers(1, 6)), data.draw(st.integers(1, 6))
    return fold(some, small), fold(others, large), small, large


@settings(max_examples=60, deadline=None)
@given(results=result_lists(), data=st.data())
def test_merge_of_any_split_equals_folding_everything(
    results: list[CaseResult], data: st.DataObject
) -> None:
    some, others = any_split(results, data)
    left, right = fold(some, 4), fold(others, 4)
    assert_same_figures(agg.merge(left, right, FAKE), fold(results, 4))


@settings(max_examples=60, deadline=None)
@given(results=result_lists(), data=st.data())
def test_replaying_a_suffix_changes_nothing(results: list[CaseResult], data: st.DataObject) -> None:
    start = data.draw(st.integers(min_value=0, max_value=len(results)))
    state = fold(results, 4)
    before = copy.deepcopy(state)
    for item in results[start:]:
        state, applied = agg.update(state, item, FAKE)
        assert not applied
    assert state == before


@settings(max_examples=60, deadline=None)
@given(results=result_lists(), data=st.data())
def test_update_order_does_not_change_the_figures(
    results: list[CaseResult], data: st.DataObject
) -> None:
    """Any interleaving a consumer may see (each partition still in offset order)."""
    shuffled = data.draw(st.permutations(results))
    by_partition: dict[int | None, list[CaseResult]] = {}
    for item in sorted(results, key=lambda r: r.source.offset if r.source else 0):
        by_partition.setdefault(item.source.partition if item.source else None, []).append(item)
    queues = {part: iter(items) for part, items in by_partition.items() if part is not None}
    interleaved = [
        next(queues[item.source.partition]) if item.source else item for item in shuffled
    ]
    assert_same_figures(fold(interleaved, 4), fold(results, 4))


@settings(max_examples=80, deadline=None)
@given(results=result_lists(), data=st.data())
def test_merging_into_a_state_equals_merge_and_leaves_the_other_side_alone(
    results: list[CaseResult], data: st.DataObject
) -> None:
    left, right, _, _ = folds_of_any_split(results, data)
    right_before = copy.deepcopy(right)
    merged = agg.merge_into(copy.deepcopy(left), right, FAKE)
    assert merged == agg.merge(left, right, FAKE)
    agg.update(merged, result("later", {"f1": 0.5, "em": 0.25}, offset=None), FAKE)
    assert right == right_before  # nothing of the other side was taken over by reference


@settings(max_examples=80, deadline=None)
@given(results=result_lists(), data=st.data())
def test_an_interim_aggregate_from_the_summary_merge_is_the_one_from_the_full_merge(
    results: list[CaseResult], data: st.DataObject
) -> None:
    """The window stage merges only `SUMMARY_FIELDS` for an interim aggregate: whatever
    the panes, the message is the one the full merge gives, and the panes are unchanged."""
    panes = [fold(part, data.draw(st.integers(1, 6))) for part in any_split(results, data)]
    before = copy.deepcopy(panes)
    empty = agg.initialise("extraction", {"model": "m"}, WINDOW, 4)
    summary = agg.merge_panes(empty, panes, FAKE, agg.SUMMARY_FIELDS)
    full = agg.merge_panes(empty, panes, FAKE)
    interim = agg.to_message(summary, False, NOW, FAKE, confidence_intervals=False)
    expected = agg.to_message(full, False, NOW, FAKE, confidence_intervals=False)
    assert interim.model_dump() == expected.model_dump()
    assert panes == before
    assert summary["samples"] == {} and summary["worst"] == {}  # what it skipped


def test_ci_of_a_window_larger_than_its_reservoir_matches_the_full_bootstrap() -> None:
    """A sampled window's CI is close to the CI from every value, and holds the mean."""
    import random

    from worker.stats import bootstrap_ci

    rng = random.Random(7)
    values = [min(1.0, max(0.0, rng.gauss(0.7, 0.15))) for _ in range(5000)]
    window = WindowKey(60.0, None, 0.0)
    state = agg.initialise("safe", {}, window, reservoir_size=128)
    for index, value in enumerate(values):
        state, _ = agg.update(state, _ci_result(index, value), None)
    summary = agg.metric_summary(state, "composite")
    full_low, full_high = bootstrap_ci(values)
    assert summary.ci_low is not None and summary.ci_high is not None
    assert summary.ci_low < summary.mean < summary.ci_high
    full_width = full_high - full_low
    assert abs((summary.ci_high - summary.ci_low) - full_width) < 0.3 * full_width
    assert summary.mean == pytest.approx(sum(values) / len(values))


def _ci_result(index: int, value: float) -> CaseResult:
    return CaseResult.model_validate(
        {
            "id": f"c{index}",
            "suite": "safe",
            "kind": "case",
            "ts": "2026-01-01T00:00:30Z",
            "scores": {"composite": value},
            "versions": {"scorer": "t", "metrics": "t"},
            "scored_at": "2026-01-01T00:00:30Z",
        },
        strict=False,
    )


@settings(max_examples=60, deadline=None)
@given(results=result_lists(), data=st.data())
def test_merging_samples_of_different_capacities_keeps_the_smallest_keys_of_the_union(
    results: list[CaseResult], data: st.DataObject
) -> None:
    from worker.stats import Reservoir

    left, right, small, large = folds_of_any_split(results, data)
    merged = agg.merge(left, right, FAKE)
    for metric in merged["samples"]:
        expected = Reservoir.from_json(left["samples"].get(metric, Reservoir(small).to_json()))
        expected = expected.merge(
            Reservoir.from_json(right["samples"].get(metric, Reservoir(large).to_json()))
        )
        assert merged["samples"][metric]["items"] == expected.items


def written_and_read_back(state: State) -> State:
    """`state` as a restore reads it from the windows changelog (`compact`, then JSON)."""
    from worker.aggregation.state import compact

    return json.loads(json.dumps(compact(state)))


@settings(max_examples=80, deadline=None)
@given(results=result_lists(), data=st.data())
def test_a_state_written_without_its_sample_index_goes_on_as_the_one_kept_in_memory(
    results: list[CaseResult], data: st.DataObject
) -> None:
    capacity = data.draw(st.integers(1, 6))
    cut = data.draw(st.integers(0, len(results)))
    kept = fold(results[:cut], capacity)
    restored = written_and_read_back(kept)
    assert all("order" not in sample for sample in restored["samples"].values())
    for item in results[cut:]:
        kept, _ = agg.update(kept, item, FAKE)
        restored, _ = agg.update(restored, item, FAKE)
    assert_same_figures(restored, kept)
    # and merging either way round, into or from a state read back, is unchanged
    other = fold(results[:cut], data.draw(st.integers(1, 6)))
    assert_same_figures(
        agg.merge(written_and_read_back(other), restored, FAKE), agg.merge(other, kept, FAKE)
    )
    assert_same_figures(
        agg.merge(kept, written_and_read_back(other), FAKE), agg.merge(kept, other, FAKE)
    )


def test_a_full_sample_is_written_in_fewer_bytes_without_its_index() -> None:
    from worker.aggregation.state import compact

    state = fold([result(f"r{i}", {"f1": i / 500, "em": 1.0}, offset=i) for i in range(2_000)])
    assert all("order" in sample for sample in state["samples"].values())  # full, indexed
    whole, written = len(json.dumps(state)), len(json.dumps(compact(state)))
    assert written < 0.75 * whole
    assert (
        json.loads(json.dumps(compact(state)))["samples"]["f1"]["items"]
        == (state["samples"]["f1"]["items"])
    )
