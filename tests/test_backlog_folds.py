"""A backlog folds (issue 25): with the poison-pill guard the score stage folds every
input record past the furthest offset any batch was begun at (`InflightGuard.reached`),
so a worker catching up on records no one processed sends one fold per batch and
segment instead of every result case by case. Records an earlier attempt may have
contributed (at or before that offset) still go case by case, and the windows count
each case once. Replayed through the score and window stages with dict tables."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from tests.test_batch_progress import GRACE, T0, Event, Pipeline, minute
from worker.stream.publish import MARKER_KEY, Folding
from worker.stream.scoring import ScoreStage
from worker.stream.windows import gate_windows
from worker.suites.registry import AGGREGATORS
from worker.windowing.windows import pane_width


class GuardedPipeline(Pipeline):
    """The pipeline with the worker's score stage: in-flight marks and folding."""

    def __init__(self, marks: dict[str, Any]) -> None:
        super().__init__(input_partitions=1)
        self.marks = marks
        self.restart()

    def restart(self, committed: int | None = None) -> None:
        """A new score stage over the same marks (a worker started again); the input
        offset `committed` is the consumer's for partition 0 (None: never committed)."""
        settings = self.context.settings
        width = pane_width(gate_windows(settings))
        assert width is not None
        folding = Folding(width, AGGREGATORS, settings.reservoir_size)
        app = self.score.app
        tp = next(iter(app.consumer.assignment()))
        app.consumer._committed_offset = {} if committed is None else {tp: committed}
        app.consumer._read_offset = {}  # Faust's (`stream_offsets`)
        self.score = ScoreStage(self.context, app, self.marks, None, folding)

    def replay(self, first: int, times: list[float]) -> list[Event]:
        """Input records of partition 0 read again from offset `first`."""
        self.offsets[0] = first
        return [self.case(0, ts) for ts in times]


def contributions(sent: list[Any]) -> list[dict[str, Any]]:
    return [
        orjson.loads(item.value)
        for item in sent
        if item.topic == "aggregate-input" and item.key != MARKER_KEY
    ]


@pytest.fixture
def pipeline() -> Any:
    built = GuardedPipeline({})
    yield built
    built.close()


async def test_a_backlog_no_one_processed_goes_to_the_windows_as_folds(
    pipeline: GuardedPipeline,
) -> None:
    sent = await pipeline.batch(*(pipeline.case(0, T0 + n) for n in range(10)))
    sent += await pipeline.batch(*(pipeline.case(0, T0 + 10 + n) for n in range(10)))
    # One fold per batch (segment_by is empty: the all-cases segment only).
    assert [("fold" in c, "results" in c) for c in contributions(sent)] == [(True, False)] * 2
    await pipeline.batch(pipeline.case(0, T0 + 60 + GRACE + 1))
    assert pipeline.final_counts() == {minute(T0): 20}


async def test_a_replay_of_what_a_dead_worker_contributed_goes_case_by_case_and_counts_once(
    pipeline: GuardedPipeline,
) -> None:
    await pipeline.batch(*(pipeline.case(0, T0 + n) for n in range(10)))  # offsets 0..9
    # The worker dies before committing: the next one reads from offset 0 again, with
    # ten records more. Only those past the marks (10..19) can fold.
    pipeline.restart()
    sent = await pipeline.batch(*pipeline.replay(0, [T0 + n for n in range(20)]))
    kinds = contributions(sent)
    assert [len(c["results"]) for c in kinds if "results" in c] == [10]
    assert [c["fold"]["count"] for c in kinds if "fold" in c] == [10]
    await pipeline.batch(pipeline.case(0, T0 + 60 + GRACE + 1))
    assert pipeline.final_counts() == {minute(T0): 20}  # not 30: the replay counted once


async def test_a_commit_past_the_marks_means_a_worker_without_them_ran_so_nothing_folds(
    pipeline: GuardedPipeline,
) -> None:
    await pipeline.batch(*(pipeline.case(0, T0 + n) for n in range(10)))  # marks reach 9
    # A worker with `poison_pill_attempts: 0` then processed and committed up to 30: what
    # it contributed is not in the marks, so the high watermark bounds the folds again
    # (the fake consumer reports none: everything goes case by case).
    pipeline.restart(committed=30)
    sent = await pipeline.batch(*pipeline.replay(30, [T0 + 30 + n for n in range(5)]))
    assert [("fold" in c, "results" in c) for c in contributions(sent)] == [(False, True)]
