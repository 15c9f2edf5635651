"""`scorestream compare`: paired/unpaired bootstrap of differences, verdicts, exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from argparse import Namespace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from worker.commands.compare import compare_metric, compare_reports, run_compare

REPO = Path(__file__).resolve().parents[1]


def alignment_report(overall: list[float], prefix: str = "s") -> dict[str, Any]:
    return {
        "report_type": "alignment",
        "sessions": [
            {
                "session_id": f"{prefix}{i}",
                "persona_id": "p",
                "scores": {"overall": value, "safety": 1.0, "stability": None},
                "grade": "B",
            }
            for i, value in enumerate(overall)
        ],
    }


def write(tmp_path: Path, name: str, report: dict[str, Any]) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(report))
    return str(path)


def args(baseline: str, candidate: str, **extra: Any) -> Namespace:
    return Namespace(baseline=baseline, candidate=candidate, tolerance=0.0, format="json", **extra)


RNG = np.random.default_rng(7)
BASE = list(np.clip(RNG.normal(0.8, 0.05, 40), 0, 1))


def test_identical_reports_exit_zero(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "a.json", alignment_report(BASE))
    assert run_compare(args(path, path)) == 0
    result = json.loads(capsys.readouterr().out)
    overall = next(m for m in result["metrics"] if m["metric"] == "overall")
    assert overall["paired"] and overall["diff"] == 0.0
    assert overall["verdict"] == "no significant change"


def test_planted_regression_exits_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    worse = [value - 0.1 for value in BASE]
    base = write(tmp_path, "a.json", alignment_report(BASE))
    cand = write(tmp_path, "b.json", alignment_report(worse))
    assert run_compare(args(base, cand)) == 1
    result = json.loads(capsys.readouterr().out)
    assert result["regressions"] == ["overall"]
    overall = next(m for m in result["metrics"] if m["metric"] == "overall")
    assert overall["diff"] == pytest.approx(-0.1)
    assert overall["ci_high"] < 0
    # A tolerance wider than the drop accepts it; an improvement is never a regression.
    assert run_compare(Namespace(**{**vars(args(base, cand)), "tolerance": 0.2})) == 0
    assert run_compare(args(cand, base)) == 0


def test_unpaired_when_ids_differ() -> None:
    base = alignment_report(BASE, prefix="a")
    cand = alignment_report([v - 0.1 for v in BASE], prefix="b")
    result = compare_reports(base, cand)
    overall = next(m for m in result["metrics"] if m["metric"] == "overall")
    assert overall["paired"] is False
    assert overall["verdict"] == "regression"


def test_lower_is_better_metrics_regress_upwards() -> None:
    metric = compare_metric(
        "hallucination_rate", {"a": 0.0, "b": 0.0, "c": 0.1}, {"a": 0.5, "b": 0.6, "c": 0.7}, 0.0
    )
    assert metric["higher_is_better"] is False
    assert metric["verdict"] == "regression"


def test_safe_and_extraction_reports_are_keyed_by_their_ids() -> None:
    safe = {
        "report_type": "SAFE_v0",
        "results": [
            {"test_id": "t1", "scores": {"CR": 1.0, "AH": 1.0, "AC": 1.0, "composite": 1.0}},
            {"test_id": "t2", "scores": {"CR": 0.5, "AH": 1.0, "AC": 0.8, "composite": 0.77}},
        ],
    }
    result = compare_reports(safe, safe)
    assert {m["metric"] for m in result["metrics"]} == {"CR", "AH", "AC", "composite"}
    assert all(m["paired"] and m["n"] == 2 for m in result["metrics"])
    extraction = {"report_type": "extraction", "results": [{"id": "x", "scores": {"f1": 0.5}}]}
    assert compare_reports(extraction, extraction)["suite"] == "extraction"


@pytest.mark.parametrize(
    "problem",
    ["missing", "not-json", "different-suites", "unknown-type"],
)
def test_bad_input_exits_three(tmp_path: Path, problem: str) -> None:
    good = write(tmp_path, "good.json", alignment_report(BASE))
    other = {
        "missing": str(tmp_path / "nope.json"),
        "different-suites": write(tmp_path, "safe.json", {"report_type": "SAFE_v0", "results": []}),
        "unknown-type": write(tmp_path, "x.json", {"report_type": "mystery"}),
    }.get(problem)
    if problem == "not-json":
        (tmp_path / "bad.json").write_text("{not json")
        other = str(tmp_path / "bad.json")
    assert other is not None
    assert run_compare(args(good, other)) == 3


def test_cli_console_output(tmp_path: Path) -> None:
    base = write(tmp_path, "a.json", alignment_report(BASE))
    cand = write(tmp_path, "b.json", alignment_report([v - 0.1 for v in BASE]))
    result = subprocess.run(
        [sys.executable, "-m", "worker", "compare", base, cand],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1, result.stderr
    assert "regression" in result.stdout and "overall" in result.stdout
