"""`scorestream compare BASELINE CANDIDATE`: regression report of two `score` JSON reports.

Per metric: the difference of means (candidate - baseline) with a 95% bootstrap CI of the
difference, paired by case id where both reports have it (`safe`: `test_id`, `extraction`:
`id`, `alignment`: `session_id`), unpaired otherwise. A regression is a CI entirely beyond
`-tolerance` in the bad direction (below it for higher-is-better metrics). A metric's
direction and bounds come from its suite's metric metadata (`worker.suites.registry`); a
value outside its metric's bounds is bad input. Exit codes: 0 no significant regression,
1 a significant regression, 3 bad input.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from worker.exit_codes import EXIT_ERROR as EXIT_BAD_INPUT
from worker.exit_codes import EXIT_OK, EXIT_REGRESSION
from worker.stats import bootstrap_diff_ci
from worker.suites import registry


class CompareInputError(Exception):
    """A report that cannot be compared (missing, not JSON, unknown shape)."""


def load_report(path: str) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise CompareInputError(f"{path}: no such file") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise CompareInputError(f"{path}: cannot read: {exc}") from exc
    except json.JSONDecodeError as exc:
        raise CompareInputError(f"{path}: not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise CompareInputError(f"{path}: a report is a JSON object")
    return data


def report_suite(report: Mapping[str, Any], path: str) -> str:
    kind = report.get("report_type")
    spec = registry.by_report_type(kind)
    if spec is not None:
        return spec.name
    raise CompareInputError(f"{path}: unknown report_type {kind!r}")


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def case_scores(report: Mapping[str, Any], suite: str, path: str) -> dict[str, dict[str, float]]:
    """metric -> case id -> value, from the report's per-case (or per-session) scores."""
    rows_key, id_key = registry.get(suite).report_rows
    rows = report.get(rows_key)
    if not isinstance(rows, list):
        raise CompareInputError(f"{path}: {rows_key} must be a list")
    table: dict[str, dict[str, float]] = {}
    seen: dict[str, int] = {}
    for position, row in enumerate(rows):
        if not isinstance(row, dict) or not isinstance(row.get("scores"), dict):
            raise CompareInputError(f"{path}: {rows_key}[{position}].scores missing")
        case_id = str(row.get(id_key, f"#{position}"))
        seen[case_id] = seen.get(case_id, 0) + 1
        if seen[case_id] > 1:  # a repeated id is kept apart, never merged
            case_id = f"{case_id}#{seen[case_id]}"
        for metric, value in row["scores"].items():
            number = _number(value)
            info = registry.find_metric(str(metric), suite)
            if number is not None and info is not None and not info.within_bounds(number):
                raise CompareInputError(
                    f"{path}: {rows_key}[{position}].scores.{metric}: {number} is outside "
                    f"[{info.low}, {info.high}]"
                )
            if number is not None:
                table.setdefault(str(metric), {})[case_id] = number
    return table


def higher_is_better(metric: str, suite: str | None = None) -> bool:
    """The metric's direction from its suite's metadata (any suite's when `suite` is None);
    a metric no suite describes counts as higher-is-better."""
    info = registry.find_metric(metric, suite)
    return True if info is None else info.higher_is_better


def compare_metric(
    metric: str,
    baseline: Mapping[str, float],
    candidate: Mapping[str, float],
    tolerance: float,
    suite: str | None = None,
) -> dict[str, Any]:
    """Difference of means, its bootstrap CI and the verdict for one metric of `suite`."""
    common = sorted(set(baseline) & set(candidate))
    paired = bool(common)
    if paired:
        base = [baseline[key] for key in common]
        cand = [candidate[key] for key in common]
    else:
        base, cand = list(baseline.values()), list(candidate.values())
    low, high = bootstrap_diff_ci(base, cand, paired=paired)
    base_mean = float(np.mean(base)) if base else None
    cand_mean = float(np.mean(cand)) if cand else None
    diff = cand_mean - base_mean if base_mean is not None and cand_mean is not None else None
    better_high = higher_is_better(metric, suite)
    verdict = "insufficient data"
    if low is not None and high is not None:
        worse = high < -tolerance if better_high else low > tolerance
        better = low > tolerance if better_high else high < -tolerance
        verdict = "regression" if worse else "improvement" if better else "no significant change"
    return {
        "metric": metric,
        "higher_is_better": better_high,
        "paired": paired,
        "n": len(common) if paired else None,
        "n_baseline": len(baseline),
        "n_candidate": len(candidate),
        "baseline_mean": base_mean,
        "candidate_mean": cand_mean,
        "diff": diff,
        "ci_low": low,
        "ci_high": high,
        "verdict": verdict,
    }


def compare_reports(
    baseline: Mapping[str, Any],
    candidate: Mapping[str, Any],
    tolerance: float = 0.0,
    names: tuple[str, str] = ("baseline", "candidate"),
) -> dict[str, Any]:
    """The comparison of two reports of the same suite (raises CompareInputError)."""
    suite = report_suite(baseline, names[0])
    other = report_suite(candidate, names[1])
    if suite != other:
        raise CompareInputError(f"cannot compare a {suite} report with a {other} report")
    base_scores = case_scores(baseline, suite, names[0])
    cand_scores = case_scores(candidate, suite, names[1])
    metrics = [
        compare_metric(name, base_scores.get(name, {}), cand_scores.get(name, {}), tolerance, suite)
        for name in sorted(set(base_scores) | set(cand_scores))
    ]
    regressions = [m["metric"] for m in metrics if m["verdict"] == "regression"]
    return {
        "report_type": "comparison",
        "suite": suite,
        "baseline": names[0],
        "candidate": names[1],
        "tolerance": tolerance,
        "metrics": metrics,
        "regressions": regressions,
        "regression": bool(regressions),
    }


def _fmt(value: float | None, signed: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value:+.3f}" if signed else f"{value:.3f}"


def render(result: Mapping[str, Any], console: Console) -> None:
    table = Table(
        title=f"{result['suite']}: {result['candidate']} vs {result['baseline']} "
        f"(tolerance {result['tolerance']})"
    )
    for column in ("metric", "baseline", "candidate", "diff", "95% CI of diff", "n", "verdict"):
        table.add_column(column)
    colours = {"regression": "red", "improvement": "green"}
    for m in result["metrics"]:
        ci = "-" if m["ci_low"] is None else f"[{m['ci_low']:+.3f}, {m['ci_high']:+.3f}]"
        n = f"{m['n']} paired" if m["paired"] else f"{m['n_baseline']}/{m['n_candidate']}"
        colour = colours.get(m["verdict"])
        verdict = f"[{colour}]{m['verdict']}[/{colour}]" if colour else m["verdict"]
        table.add_row(
            m["metric"],
            _fmt(m["baseline_mean"]),
            _fmt(m["candidate_mean"]),
            _fmt(m["diff"], signed=True),
            ci,
            n,
            verdict,
        )
    console.print(table)
    if result["regressions"]:
        console.print(f"[red]significant regression in: {', '.join(result['regressions'])}[/red]")
    else:
        console.print("no significant regression")


def run_compare(args: argparse.Namespace) -> int:
    """Entry point of `scorestream compare`."""
    tolerance = float(getattr(args, "tolerance", 0.0) or 0.0)
    try:
        if tolerance < 0:
            raise CompareInputError("--tolerance must not be negative")
        baseline = load_report(args.baseline)
        candidate = load_report(args.candidate)
        result = compare_reports(
            baseline, candidate, tolerance, names=(args.baseline, args.candidate)
        )
    except CompareInputError as exc:
        print(f"scorestream compare: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if getattr(args, "format", "console") == "json":
        print(json.dumps(result, indent=2))
    else:
        render(result, Console())
    return EXIT_REGRESSION if result["regression"] else EXIT_OK
