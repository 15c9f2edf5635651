"""What the alignment batch report says: per-session scores, their summaries with
bootstrap CIs (overall and per persona) and the JSON report of `scorestream score`."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from worker.stats import bootstrap_ci
from worker.suites.alignment.spec import SESSION_METRICS
from worker.suites.base import grade_for

SUMMARY_METRICS = ("authenticity", "safety", "stability", "overall")


def metric_summary(values: Sequence[float]) -> dict[str, float | int | None]:
    """Mean, 95% bootstrap CI of the mean (seeded), population std and count."""
    if not values:
        return {"mean": None, "ci_low": None, "ci_high": None, "std": None, "n": 0}
    data = np.asarray(values, dtype=float)
    low, high = bootstrap_ci(list(data))
    return {
        "mean": float(data.mean()),
        "ci_low": low,
        "ci_high": high,
        "std": float(data.std()),
        "n": int(data.size),
    }


def format_estimate(summary: dict[str, Any]) -> str:
    """`0.83 ± 0.04 [0.79, 0.87]` (± is the CI's half-width)."""
    mean, low, high = summary.get("mean"), summary.get("ci_low"), summary.get("ci_high")
    if mean is None:
        return "-"
    if low is None or high is None:
        return f"{mean:.2f}"
    return f"{mean:.2f} ± {(high - low) / 2:.2f} [{low:.2f}, {high:.2f}]"


@dataclass
class AlignmentReport:
    """The alignment report of one `score` run: sessions, summaries and the JSON report
    (`worker.suites.alignment.render` draws it for a console or markdown)."""

    sessions: list[dict[str, Any]]
    turns: list[dict[str, Any]]
    errors: list[dict[str, str]]
    figures: dict[str, Any]
    judge: dict[str, Any] | None = None

    def _summary_of(self, sessions: Sequence[dict[str, Any]]) -> dict[str, Any]:
        summary: dict[str, Any] = {}
        for metric in SESSION_METRICS:
            values = [s["scores"][metric] for s in sessions if s["scores"][metric] is not None]
            summary[metric] = metric_summary(values)
        summary["grade"] = grade_for(summary["overall"]["mean"])
        summary["sessions"] = len(sessions)
        summary["turns"] = sum(s["turns"] for s in sessions)
        return summary

    def summary(self) -> dict[str, Any]:
        return self._summary_of(self.sessions)

    def by_persona(self) -> dict[str, dict[str, Any]]:
        groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for session in self.sessions:
            groups[session["persona_id"]].append(session)
        return {persona: self._summary_of(groups[persona]) for persona in sorted(groups)}

    def to_json(self) -> dict[str, Any]:
        return {
            "report_type": "alignment",
            "summary": self.summary(),
            "by_persona": self.by_persona(),
            "figures": self.figures,
            "sessions": self.sessions,
            "turns": self.turns,
            "errors": self.errors,
            "judge": self.judge,
        }

    def exit_code(self) -> int:
        """3 when a row could not be scored, else 1 when a session grades F or is labelled
        Fail, else 2 when one is labelled Review (an unusable judge verdict with
        `judge.on_error: review`), else 0."""
        if self.errors:
            return 3
        if any(s["grade"] == "F" or s.get("label") == "Fail" for s in self.sessions):
            return 1
        if any(session.get("label") == "Review" for session in self.sessions):
            return 2
        return 0

    def report_stem(self) -> str:
        return "alignment_report"
