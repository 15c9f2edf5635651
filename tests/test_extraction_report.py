"""The extraction batch report: names, shapes, renderings and exit codes."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from worker.config import ConfigError, Settings, load_settings
from worker.suites.base import BatchItem, BatchOptions
from worker.suites.extraction import make_batch_scorer

ROOT = Path(__file__).parent.parent
EXAMPLES = ROOT / "examples/extraction"

# Copied from metrics-extraction.md, "Names in reports".
SPEC_METRIC_NAMES = [
    "strict_precision",
    "strict_recall",
    "strict_f1",
    "relaxed_precision",
    "relaxed_recall",
    "relaxed_f1",
    "type_precision",
    "type_recall",
    "type_f1",
    "total_samples",
    "parse_raw_success",
    "parse_repair_success",
    "parse_errors",
    "parse_extraction_failures",
    "parse_raw_success_rate",
    "parse_repair_success_rate",
    "parse_error_rate",
    "parse_extraction_failure_rate",
    "schema_compliance_rate",
    "hallucination_rate",
    "hallucination_entity_rate",
    "cot_type_consistency",
    "cot_argument_consistency",
    "cot_faithfulness",
    "cot_checked",
    "cot_skipped",
    "cot_parse_fail",
    "cot_coverage_rate",
]
SPEC_COUNT_NAMES = [
    "strict_tp",
    "strict_pred_total",
    "strict_gold_total",
    "relaxed_tp",
    "relaxed_pred_total",
    "relaxed_gold_total",
    "type_tp",
    "type_pred_total",
    "type_gold_total",
    "schema_compliant",
    "hallucination_samples",
    "hallucinated_entities",
    "total_entities",
]


def example_settings() -> Settings:
    return load_settings(EXAMPLES / "config.yaml", environ={})


def native_items(path: Path, settings: Settings) -> list[BatchItem]:
    scorer = make_batch_scorer(settings.extraction, BatchOptions())
    items = []
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            row = json.loads(line)
            items.append(
                BatchItem(
                    id=scorer.native_id(row, f"{path.name}:{number}"),
                    payload=scorer.native_payload(row),
                    source=f"{path.name}:{number}",
                )
            )
    return items


@pytest.fixture(scope="module")
def report_json() -> dict[str, Any]:
    settings = example_settings()
    report = make_batch_scorer(settings.extraction, BatchOptions()).score(
        native_items(EXAMPLES / "cases.jsonl", settings)
    )
    assert report.exit_code() == 0
    return report.to_json()


def test_report_has_every_exact_metric_and_count_name(report_json: dict[str, Any]) -> None:
    assert report_json["report_type"] == "extraction"
    assert report_json["protocol_version"] == "1.0"
    assert report_json["metrics_version"] == "2.0"
    assert set(report_json["metrics"]) == set(SPEC_METRIC_NAMES)
    assert set(SPEC_COUNT_NAMES) <= set(report_json["counts"])
    json.dumps(report_json, ensure_ascii=False)


def test_report_results_and_figures_of_the_examples(report_json: dict[str, Any]) -> None:
    results = {result["id"]: result for result in report_json["results"]}
    assert len(results) == 18 and report_json["counts"]["total_samples"] == 18
    assert set(results["fin-001"]) >= {"id", "scores", "counts", "details"}
    assert results["fin-001"]["scores"]["strict_f1"] == 1.0
    assert results["fin-003"]["counts"]["repair_steps"] == [
        "normalize_punctuation",
        "fix_trailing_comma",
    ]
    assert results["fin-005"]["counts"]["parse_method"] == "no_json_found"
    assert results["fin-010"]["details"]["schema"]["violation"] == "invalid_role:质押|质押人"
    assert results["fin-007"]["counts"]["cot_faithful"] == 1
    assert results["fin-008"]["counts"]["cot_checked"] == 1
    assert results["fin-008"]["counts"]["cot_faithful"] == 0
    assert report_json["hallucination_breakdown"]["质押|事件时间"] == 1
    metrics, counts = report_json["metrics"], report_json["counts"]
    assert metrics["strict_precision"] == counts["strict_tp"] / counts["strict_pred_total"]
    assert metrics["cot_coverage_rate"] == counts["cot_checked"] / 18


def test_envelopes_score_like_native_rows() -> None:
    settings = example_settings()
    scorer = make_batch_scorer(settings.extraction, BatchOptions())
    from schemas.envelope import ExtractionRecord

    items = []
    with (EXAMPLES / "envelopes.jsonl").open(encoding="utf-8") as handle:
        for line in handle:
            record = ExtractionRecord.model_validate_json(line)
            items.append(BatchItem(id=record.id, payload=record.payload, model=record.model))
    from_envelopes = scorer.score(items).to_json()
    from_native = scorer.score(native_items(EXAMPLES / "cases.jsonl", settings)).to_json()
    assert from_envelopes["metrics"] == from_native["metrics"]


def test_console_and_markdown_renderings() -> None:
    settings = example_settings()
    report = make_batch_scorer(settings.extraction, BatchOptions()).score(
        native_items(EXAMPLES / "cases.jsonl", settings)
    )
    buffer = io.StringIO()
    report.render_console(Console(file=buffer, width=160, force_terminal=False), verbose=True)
    text = buffer.getvalue()
    for expected in (
        "Strict",
        "Relaxed",
        "Type",
        "schema compliant",
        "hallucinated arguments",
        "Diagnostics",
        "cot_coverage_rate",
        "fin-018",
    ):
        assert expected in text
    markdown = report.to_markdown()
    assert "| Strict |" in markdown and "cot_coverage_rate" in markdown
    assert markdown.index("cot_faithfulness") > markdown.index("schema_compliance_rate")


def test_a_case_naming_an_unknown_schema_fails_alone_and_exit_code_is_3() -> None:
    settings = example_settings()
    scorer = make_batch_scorer(settings.extraction, BatchOptions())
    good = scorer.native_payload({"text": "A", "gold": [], "response": "[]"})
    bad = scorer.native_payload({"text": "A", "gold": [], "response": "[]", "schema": "nope"})
    report = scorer.score(
        [BatchItem(id="a", payload=good), BatchItem(id="b", payload=bad, source="f:2")]
    )
    data = report.to_json()
    assert [r["id"] for r in data["results"]] == ["a"]
    assert data["errors"][0]["id"] == "b" and "'nope'" in data["errors"][0]["error"]
    assert report.exit_code() == 3


def test_native_id_and_payload() -> None:
    scorer = make_batch_scorer(Settings().extraction, BatchOptions())
    assert scorer.native_id({"id": 7}, "f:1") == "7"
    assert scorer.native_id({}, "f:1") == "f:1"
    with pytest.raises(ValueError, match="gold"):
        scorer.native_payload({"text": "", "gold": "nope", "response": ""})


def test_unreadable_schema_file_fails_the_scorer_with_a_config_error(tmp_path: Path) -> None:
    settings = Settings.model_validate(
        {"extraction": {"schemas": {"x": str(tmp_path / "gone.jsonl")}}}
    )
    with pytest.raises(ConfigError, match=r"gone\.jsonl"):
        make_batch_scorer(settings.extraction, BatchOptions())
