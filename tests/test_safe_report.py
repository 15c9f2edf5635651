"""The SAFE v0 batch report: JSON shape (interface.md, seed 5.1), console (seed 5.2), markdown."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from rich.console import Console

from schemas.envelope import SafePayload
from worker.config import Settings
from worker.suites.base import BatchItem, BatchOptions
from worker.suites.safe import SafeBatchReport, make_batch_scorer

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "safe"
FIXED_TIME = datetime(2025, 1, 15, 10, 30, tzinfo=UTC)


def load_items(path: Path, options: BatchOptions | None = None) -> list[BatchItem]:
    scorer = make_batch_scorer(Settings().safe, options or BatchOptions())
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    return [BatchItem(id=row["test_id"], payload=scorer.native_payload(row)) for row in rows]


def report_for(
    items: list[BatchItem], options: BatchOptions | None = None, settings: Settings | None = None
) -> SafeBatchReport:
    scorer = make_batch_scorer(
        (settings or Settings()).safe, options or BatchOptions(), clock=lambda: FIXED_TIME
    )
    return scorer.score(items)


@pytest.fixture
def i25() -> SafeBatchReport:
    return report_for(load_items(EXAMPLES / "I25_batch_1.jsonl"))


def item(
    test_id: str,
    signals: list[str],
    found: int,
    archetype: str = "A",
    violations: int = 0,
    concern: str = "I25",
) -> BatchItem:
    forbidden = ["blame", "fault", "careless", "negligent"]
    payload = SafePayload.model_validate(
        {
            "test_id": test_id,
            "concern_id": concern,
            "archetype": archetype,
            "expectations": {
                "signal_generation": {"must_find_signals": signals},
                "followup_questions": {"forbidden_terms": forbidden},
            },
            "output": {
                "signals": signals[:found],
                "followup_questions": [" ".join(forbidden[:violations])],
            },
        }
    )
    return BatchItem(id=test_id, payload=payload)


# ---------------------------------------------------------------- the seed's I25 batch

SEED_TABLE = {  # seed 004 section 5.2, per-case breakdown
    "I25-BATCH1-001": ("Process_Auditor", "1.00", "1.00", "1.00", "Pass"),
    "I25-BATCH1-002": ("Delay_Driver_Profiler", "0.67", "1.00", "0.50", "Review"),
    "I25-BATCH1-003": ("Process_Auditor", "1.00", "0.50", "1.00", "Review"),
    "I25-BATCH1-004": ("Documentation_Gap", "1.00", "1.00", "1.00", "Pass"),
    "I25-BATCH1-005": ("Safety_Signal", "1.00", "1.00", "0.50", "Review"),
}


def test_i25_example_reproduces_the_seed_table(i25: SafeBatchReport) -> None:
    results = i25.to_json()["results"]
    table = {
        r["test_id"]: (
            r["archetype"],
            *(f"{r['scores'][m]:.2f}" for m in ("CR", "AH", "AC")),
            r["label"],
        )
        for r in results
    }
    assert table == SEED_TABLE


def test_i25_batch_figures(i25: SafeBatchReport) -> None:
    data = i25.to_json()
    assert data["summary"] == {
        "total_cases": 5,
        "pass": 2,
        "review": 3,
        "fail": 0,
        "overall_pass_rate": 0.4,
    }
    assert data["mean_scores"] == pytest.approx(
        {
            "CR": (4 + 2 / 3) / 5,
            "AH": 0.9,
            "AC": 0.8,
            "composite": (1 + (2 / 3 + 1.5) / 3 + 2.5 / 3 + 1 + 2.5 / 3) / 5,
        }
    )
    assert data["pass_rates"] == pytest.approx({"CR": 0.8, "AH": 0.8, "AC": 0.6, "overall": 0.4})
    assert data["label_distribution"] == {"Pass": 2, "Review": 3, "Fail": 0}
    assert data["by_archetype"]["Process_Auditor"] == pytest.approx(
        {"count": 2, "mean_CR": 1.0, "mean_AH": 0.75, "mean_AC": 1.0, "pass_rate": 0.5}
    )
    assert set(data["by_archetype"]) == {
        "Process_Auditor",
        "Delay_Driver_Profiler",
        "Documentation_Gap",
        "Safety_Signal",
    }
    analysis = data["failure_analysis"]
    assert analysis["common_CR_misses"] == [
        {"signal": "taken to OR over 24 hours", "miss_count": 1}
    ]
    assert analysis["common_AH_violations"] == [
        {"term": "policy", "count": 1},
        {"term": "violated", "count": 1},
    ]
    assert analysis["common_AC_misses"] == [{"phrase": "NPO status violation", "miss_count": 2}]
    assert i25.exit_code() == 2


# ---------------------------------------------------------------- JSON shape


def test_json_report_shape_matches_the_interface(i25: SafeBatchReport) -> None:
    data = json.loads(json.dumps(i25.to_json()))  # JSON-serialisable as is
    assert data["report_type"] == "SAFE_v0"
    assert data["generated_at"] == "2025-01-15T10:30:00Z"
    assert data["batch_id"] == "I25_batch_1"
    assert data["concern_id"] == "I25"
    assert {
        "summary",
        "mean_scores",
        "pass_rates",
        "label_distribution",
        "by_archetype",
        "results",
        "failure_analysis",
    } <= data.keys()
    assert set(data["summary"]) == {"total_cases", "pass", "review", "fail", "overall_pass_rate"}
    assert set(data["mean_scores"]) == {"CR", "AH", "AC", "composite"}
    assert set(data["pass_rates"]) == {"CR", "AH", "AC", "overall"}
    assert set(data["label_distribution"]) == {"Pass", "Review", "Fail"}
    for group in data["by_archetype"].values():
        assert set(group) == {"count", "mean_CR", "mean_AH", "mean_AC", "pass_rate"}
    for result in data["results"]:
        assert {"test_id", "archetype", "scores", "details", "label"} <= result.keys()
        assert set(result["scores"]) == {"CR", "AH", "AC", "composite"}
        assert result["details"].keys() == {"CR", "AH", "AC"}
        assert set(result["details"]["CR"]) == {"found", "missing"}
        assert set(result["details"]["AH"]) == {"violations"}
        assert set(result["details"]["AC"]) == {"found", "missing"}
        assert result["label"] in ("Pass", "Review", "Fail")
    assert set(data["failure_analysis"]) == {
        "worst_performers",
        "common_CR_misses",
        "common_AH_violations",
        "common_AC_misses",
    }


def test_worst_performers_are_the_five_lowest_composites_ties_by_test_id() -> None:
    signals = ["s1", "s2", "s3", "s4"]
    items = [
        item("T-07", signals, 4),
        item("T-03", signals, 1),
        item("T-01", signals, 2),
        item("T-05", signals, 2),
        item("T-02", signals, 2),
        item("T-06", signals, 3),
        item("T-04", signals, 0),
    ]
    worst = report_for(items).to_json()["failure_analysis"]["worst_performers"]
    assert [w["test_id"] for w in worst] == ["T-04", "T-03", "T-01", "T-02", "T-05"]
    assert set(worst[0]) >= {"test_id", "archetype", "scores", "details", "label"}


def test_common_misses_count_desc_then_folded_term_with_first_spelling() -> None:
    items = [
        item("T-1", ["beta", "Alpha", "zeta"], 0),
        item("T-2", ["ALPHA", "Beta"], 0),
        item("T-3", ["gamma", "zeta"], 0),
        item("T-4", ["alpha"], 1),
    ]
    misses = report_for(items).to_json()["failure_analysis"]["common_CR_misses"]
    assert misses == [
        {"signal": "Alpha", "miss_count": 2},
        {"signal": "beta", "miss_count": 2},
        {"signal": "zeta", "miss_count": 2},
        {"signal": "gamma", "miss_count": 1},
    ]


def test_envelope_items_without_test_id_use_the_record_id_and_keep_the_model() -> None:
    payload = SafePayload.model_validate({"output": {"summary": "x"}})
    report = report_for([BatchItem(id="rec-1", payload=payload, model="m-a")])
    result = report.to_json()["results"][0]
    assert (result["test_id"], result["model"], result["archetype"]) == ("rec-1", "m-a", "unknown")


def test_report_is_named_after_the_concern(i25: SafeBatchReport) -> None:
    assert i25.report_stem() == "SAFE_v0_I25_20250115T103000Z"
    other = report_for([item("T-1", ["a"], 1)], BatchOptions(concern="J18"))
    assert other.to_json()["concern_id"] == "J18"
    assert other.report_stem().startswith("SAFE_v0_J18_")


def test_strict_option_changes_scores_and_is_recorded() -> None:
    items = load_items(EXAMPLES / "I25_batch_1.jsonl")
    strict = report_for(items, BatchOptions(strict_ah=True))
    data = strict.to_json()
    assert data["config"]["strict_ah"] is True
    assert data["summary"]["fail"] == 1
    assert strict.exit_code() == 1


def test_exit_codes_follow_the_labels() -> None:
    signals = ["s1", "s2"]
    assert report_for([item("T-1", signals, 2)]).exit_code() == 0
    assert report_for([item("T-1", signals, 2), item("T-2", signals, 1)]).exit_code() == 2
    assert report_for([item("T-1", signals, 1), item("T-2", signals, 0)]).exit_code() == 1


# ---------------------------------------------------------------- console


def render(report: SafeBatchReport, verbose: bool = False) -> str:
    console = Console(record=True, width=120, color_system=None)
    report.render_console(console, verbose=verbose)
    return console.export_text()


def test_console_scorecard_has_the_seed_layout(i25: SafeBatchReport) -> None:
    text = render(i25)
    lines = text.splitlines()
    box = lines[: lines.index("") if "" in lines else len(lines)]
    assert box[0].startswith("╔") and box[0].endswith("╗")
    assert box[-1].startswith("╚") and box[-1].endswith("╝")
    assert len({len(line) for line in box}) == 1  # a closed rectangle
    assert "SAFE v0 Scorecard - I25" in box[1]
    assert "║ Total Cases: 5    Pass: 2 (40%)    Review: 3 (60%)    Fail: 0 (0%)" in text
    assert "║ Metric │ Mean Score │ Pass Rate │ Status" in text
    assert "╠────────┼────────────┼───────────┼─────────────────────────────────────╣" in text
    assert "║   CR   │    0.93    │   80%     │ WARN (review threshold)" in text
    assert "║   AH   │    0.90    │   80%     │ WARN (2 violations across batch)" in text
    assert "║   AC   │    0.80    │   60%     │ WARN (review threshold)" in text
    assert "║ Composite: 0.88" in text
    assert "Per-Case Breakdown:" in text
    assert "│ Test ID         │ Archetype             │  CR  │  AH  │  AC  │ Label   │" in text
    assert "│ I25-BATCH1-002  │ Delay_Driver_Profiler │ 0.67 │ 1.00 │ 0.50 │ REVIEW  │" in text
    assert "┌─────────────────┬" in text and "└─────────────────┴" in text
    assert "Top Issues:" in text
    assert '  CR Misses: "taken to OR over 24 hours" (1 case)' in text
    assert '  AH Violations: "policy" (1 case)' in text
    assert '  AC Misses: "NPO status violation" (2 cases)' in text


def status_of(report: SafeBatchReport, metric: str) -> str:
    return next(s.status for s in report.metric_statuses() if s.metric == metric)


def test_status_column_rules() -> None:
    signals = ["s1", "s2", "s3", "s4"]
    all_pass = report_for([item("T-1", signals, 4), item("T-2", signals, 4)])
    assert status_of(all_pass, "CR") == "OK"
    assert status_of(all_pass, "AH") == "OK"
    borderline = report_for([item("T-1", signals, 4), item("T-2", signals, 2)])
    assert status_of(borderline, "CR") == "WARN (review threshold)"
    failing = report_for([item("T-1", signals, 2), item("T-2", signals, 1)])
    assert status_of(failing, "CR") == "FAIL"
    one_violation = report_for([item("T-1", signals, 4, violations=1)])
    assert status_of(one_violation, "AH") == "WARN (1 violation across batch)"
    strict = report_for([item("T-1", signals, 4, violations=1)], BatchOptions(strict_ah=True))
    assert status_of(strict, "AH") == "FAIL"
    assert "║   AH   │    0.00    │   0%      │ FAIL" in render(strict)


def test_console_shows_the_model_column_only_for_mixed_models() -> None:
    payload = SafePayload.model_validate({"test_id": "T-1", "output": {}})
    mixed = report_for(
        [BatchItem("a", payload, model="m-one"), BatchItem("b", payload, model="m-two")]
    )
    assert "Model" in render(mixed) and "m-two" in render(mixed)
    single = report_for([item("T-1", ["s"], 1)])
    assert "Model" not in render(single)


def test_verbose_console_lists_each_case_details(i25: SafeBatchReport) -> None:
    text = render(i25, verbose=True)
    assert "I25-BATCH1-003 [Review]" in text
    assert "AH violations: ['policy', 'violated']" in text


# ---------------------------------------------------------------- markdown


def test_markdown_report(i25: SafeBatchReport) -> None:
    text = i25.to_markdown()
    assert text.startswith("# SAFE v0 Scorecard - I25\n")
    assert "| 5 | 2 | 3 | 0 | 40% |" in text
    assert "| AH | 0.90 | 80% | WARN (2 violations across batch) |" in text
    assert "| I25-BATCH1-002 | Delay_Driver_Profiler | 0.67 | 1.00 | 0.50 | 0.72 | REVIEW |" in text
    assert "- NPO status violation: 2" in text
    assert "### Common AH violations" in text


def test_markdown_escapes_table_cells() -> None:
    report = report_for([item("T|1", ["a|b"], 0)])
    text = report.to_markdown()
    assert "T\\|1" in text and "| T|1 |" not in text
