"""A micro-batch's results folded per pane before they travel to the window stage.

Pure: no Kafka, no clock. The score stage folds the results of one suite and segment in
a micro-batch into one aggregation state per pane of `width` seconds (`pane_width`: it
divides every window size and step, so a pane's results share all their windows). The
window stage then merges a few states per batch into its panes instead of updating every
window configuration once per case.

A fold remembers, per input partition, the highest input offset it covers (`span`).
Folds carry only input records that no earlier owner of their partition can have
contributed (the score stage sends those case by case, see `ScoreStage`), so a fold
the window stage has already counted is one it reads again after a restart: every
offset of its span is at or below the series' high water.

Wire form: `{"suite", "width", "count", "span": {"topic:partition": offset},
"panes": [aggregation state of window [width, None, pane start], ...]}`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from worker import aggregation
from worker.input.result_facts import ResultView
from worker.suites.base import Scored, State, SuiteAggregator
from worker.windowing.windows import WindowKey, pane_start_of


class PaneFold:
    """The results of one suite and segment, folded per pane."""

    def __init__(
        self,
        suite: str,
        segment: Mapping[str, str],
        width: float,
        aggregator: SuiteAggregator | None,
        reservoir_size: int = aggregation.DEFAULT_RESERVOIR_SIZE,
    ) -> None:
        self.suite = suite
        self.segment = dict(segment)
        self.width = width
        self.aggregator = aggregator
        self.reservoir_size = reservoir_size
        self.panes: dict[float, State] = {}
        self.span: dict[str, int] = {}
        self.count = 0

    def add(self, result: ResultView, scored: Scored | None = None) -> None:
        """Fold a case result read from an input partition (it must have a `source`)."""
        if result.source is None or result.suite != self.suite:
            raise ValueError("a fold takes case results of its suite with their source")
        start = pane_start_of(result.ts.timestamp(), self.width)
        state = self.panes.get(start)
        if state is None:
            window = WindowKey(self.width, None, start)
            state = aggregation.initialise(self.suite, self.segment, window, self.reservoir_size)
            self.panes[start] = state
        _, applied = aggregation.update(state, result, self.aggregator, scored)
        if not applied:
            return
        self.count += 1
        source = f"{result.source.topic}:{result.source.partition}"
        self.span[source] = max(self.span.get(source, -1), result.source.offset)

    @classmethod
    def union(cls, folds: Sequence[PaneFold], segment: Mapping[str, str]) -> PaneFold:
        """One fold of `segment` holding the results of `folds` (disjoint folds of the same
        suite and width: e.g. the all-cases segment from the folds of each model)."""
        first = folds[0]
        union = cls(first.suite, segment, first.width, first.aggregator, first.reservoir_size)
        for fold in folds:
            for start, state in fold.panes.items():
                piece = {**state, "segment": dict(segment)}
                held = union.panes.get(start)
                union.panes[start] = (
                    piece if held is None else aggregation.merge(held, piece, first.aggregator)
                )
            for source, last in fold.span.items():
                union.span[source] = max(union.span.get(source, -1), last)
            union.count += fold.count
        return union

    def to_json(self) -> dict[str, Any]:
        return {
            "suite": self.suite,
            "width": self.width,
            "count": self.count,
            "span": dict(self.span),
            "panes": [self.panes[start] for start in sorted(self.panes)],
        }


def count_of(pane: State) -> int:
    """How many results a folded pane holds."""
    return int(pane["count"])


def start_of(pane: State) -> float:
    """Start of a folded pane (its window is `[width, None, start]`)."""
    return float(pane["window"][2])


__all__ = ["PaneFold", "count_of", "start_of"]
