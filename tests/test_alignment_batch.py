"""The alignment BatchScorer with a deterministic embedder: grouping, errors, report shape."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from rich.console import Console

from schemas.envelope import AlignmentRecord
from worker.config import ConfigError, Settings, load_settings
from worker.suites.alignment.batch import AlignmentBatchScorer, make_batch_scorer
from worker.suites.alignment.embedding_model import HashingEmbedder
from worker.suites.alignment.report import format_estimate
from worker.suites.base import BatchItem, BatchOptions

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return load_settings(environ={}, safe_config_json=tmp_path / "none.json")


@pytest.fixture
def scorer(settings: Settings) -> AlignmentBatchScorer:
    return make_batch_scorer(settings.alignment, BatchOptions(), embedder=HashingEmbedder(64))


def native_items(scorer: AlignmentBatchScorer, rows: list[dict[str, Any]]) -> list[BatchItem]:
    return [
        BatchItem(
            id=scorer.native_id(row, f"rows:{n}"),
            payload=scorer.native_payload(row),
            source=f"rows:{n}",
        )
        for n, row in enumerate(rows, 1)
    ]


def turn(session: str, index: int, role: str, text: str, persona: str = "ledgerline") -> dict:
    return {
        "session_id": session,
        "turn_index": index,
        "role": role,
        "text": text,
        "persona_id": persona,
    }


def test_example_sessions_report_shape(scorer: AlignmentBatchScorer) -> None:
    lines = (REPO / "examples/alignment/sessions.jsonl").read_text().splitlines()
    report = scorer.score(native_items(scorer, [json.loads(line) for line in lines]))
    data = json.loads(json.dumps(report.to_json()))
    assert data["report_type"] == "alignment"
    assert len(data["sessions"]) == 12 and len(data["turns"]) == 29
    for metric in ("authenticity", "safety", "stability", "overall"):
        assert set(data["summary"][metric]) >= {"mean", "ci_low", "ci_high", "std"}
    assert data["figures"]["sessions"] == 12 and data["figures"]["turns"] == 29
    unsafe = next(s for s in data["sessions"] if s["session_id"] == "ll-004")
    assert unsafe["scores"]["safety"] == 0.0 and unsafe["grade"] == "F"
    assert report.exit_code() == 1
    markdown = report.to_markdown()
    assert "| ledgerline |" in markdown and "Safety violations" in markdown
    console = Console(record=True, width=220)
    report.render_console(console)
    text = console.export_text()
    assert "±" in text and "northwind-analytics" in text


def test_envelopes_give_the_same_scores_as_native_rows(scorer: AlignmentBatchScorer) -> None:
    envelopes = [
        AlignmentRecord.model_validate_json(line)
        for line in (REPO / "examples/alignment/envelopes.jsonl").read_text().splitlines()
    ]
    from_envelopes = scorer.score(
        [BatchItem(id=r.id, payload=r.payload, model=r.model, labels=r.labels) for r in envelopes]
    )
    native = [
        json.loads(line)
        for line in (REPO / "examples/alignment/sessions.jsonl").read_text().splitlines()
    ]
    wanted = {r.payload.session_id for r in envelopes}
    from_rows = scorer.score(native_items(scorer, [r for r in native if r["session_id"] in wanted]))
    by_id = {s["session_id"]: s["scores"] for s in from_rows.sessions}
    for session in from_envelopes.sessions:
        assert session["scores"] == pytest.approx(by_id[session["session_id"]])


def test_unknown_persona_is_a_row_error_naming_it(scorer: AlignmentBatchScorer) -> None:
    with pytest.raises(ValueError, match="unknown persona 'acme'"):
        scorer.native_payload(turn("s", 0, "assistant", "hi", persona="acme"))
    with pytest.raises(ValidationError):
        scorer.native_payload({**turn("s", 0, "assistant", "hi"), "role": "system"})
    record = AlignmentRecord.model_validate(
        {
            "id": "x",
            "suite": "alignment",
            "payload": {"session_id": "s", "turn_index": 0, "persona_id": "acme", "text": "hi"},
        }
    )
    report = scorer.score([BatchItem(id="x", payload=record.payload, source="f:1")])
    assert report.sessions == []
    assert "acme" in report.errors[0]["message"] and report.errors[0]["source"] == "f:1"
    assert report.exit_code() == 3  # a row that could not be scored, as for every suite


def test_turns_are_ordered_deduplicated_and_users_attached(
    scorer: AlignmentBatchScorer,
) -> None:
    rows = [
        turn("s", 3, "assistant", "Your transfer has arrived."),
        turn("s", 0, "user", "Where is my transfer?"),
        turn("s", 1, "assistant", "I've checked your account; the transfer left today."),
        turn("s", 1, "assistant", "A replayed copy that must not count."),
        turn("s", 2, "user", "Any news?"),
    ]
    report = scorer.score(native_items(scorer, rows))
    (session,) = report.sessions
    assert session["turns"] == 2
    assert session["details"]["turn_indices"] == [1, 3]
    assert session["details"]["duplicate_turns"] == 1
    assert [t["turn_index"] for t in report.turns] == [1, 3]


def test_judge_needs_configuration(settings: Settings) -> None:
    with pytest.raises(ConfigError, match=r"alignment\.judge"):
        make_batch_scorer(settings.alignment, BatchOptions(judge=True), embedder=HashingEmbedder())


def test_format_estimate() -> None:
    summary = {"mean": 0.83, "ci_low": 0.79, "ci_high": 0.87}
    assert format_estimate(summary) == "0.83 ± 0.04 [0.79, 0.87]"
    assert format_estimate({"mean": None}) == "-"


def test_report_says_when_stability_rests_on_two_turns(scorer: AlignmentBatchScorer) -> None:
    rows = [
        turn("two", 0, "assistant", "Your transfer has arrived."),
        turn("two", 1, "assistant", "YOU ARE SO STUPID, read the manual!!!"),  # still 1.0
        turn("three", 0, "assistant", "Your transfer has arrived."),
        turn("three", 1, "assistant", "Your card is on its way."),
        turn("three", 2, "assistant", "Statements are under Documents."),
        turn("one", 0, "assistant", "Your transfer has arrived."),
    ]
    report = scorer.score(native_items(scorer, rows))
    sessions = {s["session_id"]: s for s in report.to_json()["sessions"]}
    assert sessions["two"]["scores"]["stability"] == pytest.approx(1.0)
    assert "rests on two turns" in sessions["two"]["details"]["stability_note"]
    assert "stability_note" not in sessions["three"]["details"]
    assert "stability_note" not in sessions["one"]["details"]  # no stability at all there
    assert "- `two`: stability rests on two turns" in report.to_markdown()
    console = Console(record=True, width=220)
    report.render_console(console)
    assert "note: two: stability rests on two turns" in console.export_text()
