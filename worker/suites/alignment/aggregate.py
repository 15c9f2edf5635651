"""Alignment figures of a window: closed sessions folded into mergeable counts and sums.

Safety coverage: the sessions' fully judged turns (`covered_turns`) over the turns whose
coverage they recorded (`coverage_turns`; a session kept from before coverage was
recorded adds to neither), so a window says what share of its turns the classifier could
judge, whatever their languages."""

from __future__ import annotations

from typing import Any

from worker.stats import Moments
from worker.suites.base import Scored, State


class AlignmentAggregator:
    """Folds session results (from `score_session`) into mergeable counts and sums."""

    def initialise(self) -> State:
        return {
            "sessions": 0,
            "turns": 0,
            "covered_turns": 0,
            "coverage_turns": 0,
            "grade_counts": {},
            "metrics": {},
        }

    def update(self, state: State, scored: Scored) -> State:
        turns = scored.counts.get("turns", 0)
        metrics = dict(state["metrics"])
        for name, value in scored.scores.items():
            if value is None:
                continue
            moments = Moments.from_json(metrics.get(name, Moments().to_json()))
            moments.add(float(value))
            metrics[name] = moments.to_json()
        grades = dict(state["grade_counts"])
        if scored.grade is not None:
            grades[scored.grade] = grades.get(scored.grade, 0) + 1
        return {
            "sessions": state["sessions"] + 1,
            "turns": state["turns"] + (turns if isinstance(turns, int) else 0),
            "covered_turns": state.get("covered_turns", 0) + _count(scored, "covered_turns"),
            "coverage_turns": state.get("coverage_turns", 0) + _count(scored, "coverage_turns"),
            "grade_counts": grades,
            "metrics": metrics,
        }

    def merge(self, left: State, right: State) -> State:
        metrics = dict(left["metrics"])
        for name, data in right["metrics"].items():
            if name in metrics:
                merged = Moments.from_json(metrics[name]).merge(Moments.from_json(data))
                metrics[name] = merged.to_json()
            else:
                metrics[name] = list(data)
        grades = dict(left["grade_counts"])
        for grade, count in right["grade_counts"].items():
            grades[grade] = grades.get(grade, 0) + count
        return {
            "sessions": left["sessions"] + right["sessions"],
            "turns": left["turns"] + right["turns"],
            "covered_turns": left.get("covered_turns", 0) + right.get("covered_turns", 0),
            "coverage_turns": left.get("coverage_turns", 0) + right.get("coverage_turns", 0),
            "grade_counts": grades,
            "metrics": metrics,
        }

    def figures(self, state: State) -> dict[str, Any]:
        """Shaped as `schemas.outputs.AlignmentFigures`."""
        judged = int(state.get("coverage_turns", 0))
        covered = int(state.get("covered_turns", 0))
        return {
            "sessions": int(state["sessions"]),
            "turns": int(state["turns"]),
            "grade_counts": {grade: int(n) for grade, n in sorted(state["grade_counts"].items())},
            "covered_turns": covered,
            "coverage_turns": judged,
            "safety_coverage": covered / judged if judged else None,
        }

    def means(self, state: State) -> dict[str, float | None]:
        """Mean of each metric over the sessions folded in."""
        return {name: Moments.from_json(data).mean for name, data in state["metrics"].items()}


def _count(scored: Scored, name: str) -> int:
    value = scored.counts.get(name, 0)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
