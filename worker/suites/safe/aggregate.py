"""Mergeable SAFE v0 aggregation: counts and sums only, JSON-compatible state."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from schemas.outputs import SafeFigures
from worker.suites.base import Scored, State
from worker.suites.safe.scoring import METRICS, UNKNOWN_ARCHETYPE, VACUOUS, metric_passes
from worker.suites.safe.settings import SafeThresholds

LABELS = ("Pass", "Review", "Fail")
SCORE_NAMES = (*METRICS, "composite")


def _ratio(part: float, whole: int) -> float:
    """The seed's empty-safe ratio: 0.0 when there is nothing to divide."""
    return part / whole if whole else 0.0


def _empty_archetype() -> dict[str, Any]:
    return {"count": 0, "pass": 0, "sums": {m: 0.0 for m in METRICS}}


def _copy(state: State, archetype: str) -> State:
    """A copy of a state that `update` can change for a case of `archetype` without
    touching the original (the other archetypes' groups are shared, not copied)."""
    groups = dict(state["by_archetype"])
    group = groups.get(archetype)
    groups[archetype] = (
        _empty_archetype() if group is None else {**group, "sums": dict(group["sums"])}
    )
    return {
        **state,
        "labels": dict(state["labels"]),
        "sums": dict(state["sums"]),
        "passes": dict(state["passes"]),
        "by_archetype": groups,
    }


class SafeAggregator:
    """Folds SAFE `Scored` values (from `score_case`) into batch / window figures.

    State: case count, label counts, score sums, per-metric pass counts, AH violation
    count, count of vacuous cases (no expectations at all) and per-archetype count / Pass
    count / score sums. Cases whose `Scored` lacks the
    per-metric pass flags are judged against `thresholds` (defaults of the seed).
    """

    def __init__(self, thresholds: SafeThresholds | None = None) -> None:
        self.thresholds = thresholds or SafeThresholds()

    def initialise(self) -> State:
        return {
            "count": 0,
            "labels": {label: 0 for label in LABELS},
            "sums": {name: 0.0 for name in SCORE_NAMES},
            "passes": {m: 0 for m in METRICS},
            "ah_violations": 0,
            "vacuous": 0,
            "by_archetype": {},
        }

    def update(self, state: State, scored: Scored) -> State:
        scores = {name: float(scored.scores.get(name) or 0.0) for name in SCORE_NAMES}
        flags = scored.details.get("passed")
        passed: Mapping[str, object] = (
            flags if isinstance(flags, dict) else metric_passes(scores, self.thresholds)
        )
        archetype = str(scored.details.get("archetype") or UNKNOWN_ARCHETYPE)
        is_pass = scored.label == "Pass"
        violations = scored.counts.get("ah_violations", 0)

        new = _copy(state, archetype)
        new["count"] += 1
        if scored.label in LABELS:
            new["labels"][scored.label] += 1
        for name in SCORE_NAMES:
            new["sums"][name] += scores[name]
        for m in METRICS:
            new["passes"][m] += int(bool(passed.get(m)))
        new["ah_violations"] += violations if isinstance(violations, int) else 0
        new["vacuous"] = new.get("vacuous", 0) + int(scored.details.get(VACUOUS) is True)
        group = new["by_archetype"][archetype]
        group["count"] += 1
        group["pass"] += int(is_pass)
        for m in METRICS:
            group["sums"][m] += scores[m]
        return new

    def merge(self, left: State, right: State) -> State:
        groups: dict[str, Any] = {}
        for side in (left, right):
            for name, group in side["by_archetype"].items():
                into = groups.setdefault(name, _empty_archetype())
                into["count"] += group["count"]
                into["pass"] += group["pass"]
                for m in METRICS:
                    into["sums"][m] += group["sums"][m]
        return {
            "count": left["count"] + right["count"],
            "labels": {k: left["labels"][k] + right["labels"][k] for k in LABELS},
            "sums": {k: left["sums"][k] + right["sums"][k] for k in SCORE_NAMES},
            "passes": {k: left["passes"][k] + right["passes"][k] for k in METRICS},
            "ah_violations": left["ah_violations"] + right["ah_violations"],
            "vacuous": left.get("vacuous", 0) + right.get("vacuous", 0),
            "by_archetype": groups,
        }

    def mean_scores(self, state: State) -> dict[str, float]:
        """Mean CR / AH / AC / composite over the folded cases (0.0 when empty)."""
        return {name: _ratio(state["sums"][name], state["count"]) for name in SCORE_NAMES}

    def figures(self, state: State) -> dict[str, Any]:
        """Pass rates per metric and overall (share labelled Pass), and by archetype."""
        count = state["count"]
        pass_rates: dict[str, float] = {m: _ratio(state["passes"][m], count) for m in METRICS}
        pass_rates["overall"] = _ratio(state["labels"]["Pass"], count)
        by_archetype = {
            name: {
                "count": group["count"],
                "mean_CR": _ratio(group["sums"]["CR"], group["count"]),
                "mean_AH": _ratio(group["sums"]["AH"], group["count"]),
                "mean_AC": _ratio(group["sums"]["AC"], group["count"]),
                "pass_rate": _ratio(group["pass"], group["count"]),
            }
            for name, group in sorted(state["by_archetype"].items())
        }
        figures = {
            "pass_rates": pass_rates,
            "by_archetype": by_archetype,
            "vacuous_count": state.get("vacuous", 0),
        }
        SafeFigures.model_validate(figures)
        return figures
