"""Payload fields no scorer reads are reported, not silently scored as missing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from schemas.envelope import ExtractionPayload, SafePayload
from worker.input.files import parse_envelope
from worker.input.unknown_fields import NATIVE_ROW_KEYS, unknown_fields, with_unknown_fields
from worker.suites.base import Scored

ROOT = Path(__file__).resolve().parent.parent
EXTRACTION = ROOT / "examples" / "extraction"
SAFE_CASES = ROOT / "examples" / "safe" / "I25_batch_1.jsonl"


def test_misspelt_fields_are_listed_with_their_path() -> None:
    payload = SafePayload.model_validate(
        {
            "test_id": "t",
            "ouptut": {"summary": "lost"},
            "output": {"sumary": "typo", "signals": ["s"]},
            "expectations": {"signal_generation": {"must_find": ["x"]}},
        }
    )
    assert unknown_fields(payload) == [
        "ouptut",
        "expectations.signal_generation.must_find",
        "output.sumary",
    ]
    assert payload.output.summary == ""  # still scored as missing, but now it says so


def test_list_items_aliases_and_ignored_keys() -> None:
    payload = ExtractionPayload.model_validate(
        {
            "id": "row-1",
            "text": "t",
            "respones": "[]",
            "schema": "duee",
            "gold": [{"event_type": "A", "argumnets": []}],
        }
    )
    assert unknown_fields(payload) == ["id", "respones", "gold.0.argumnets"]
    assert unknown_fields(payload, ignore=NATIVE_ROW_KEYS) == ["respones", "gold.0.argumnets"]
    clean = ExtractionPayload.model_validate({"text": "t", "response": "[]", "schema": "duee"})
    assert unknown_fields(clean) == []


def test_envelope_payload_keeps_its_unknown_fields() -> None:
    record = parse_envelope(
        {
            "id": "a1",
            "suite": "alignment",
            "payload": {
                "session_id": "s",
                "turn_index": 0,
                "persona_id": "p",
                "text": "hi",
                "usr": "?",
            },
        }
    )
    assert unknown_fields(record.payload) == ["usr"]


def test_details_get_the_list_only_when_there_is_one() -> None:
    scored = Scored(scores={"x": 1.0}, details={"a": 1})
    assert with_unknown_fields(scored, []) is scored
    assert with_unknown_fields(scored, ["respones"]).details == {
        "a": 1,
        "unknown_fields": ["respones"],
    }


def _score(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SCORESTREAM_", "SAFE_V0_"))}
    return subprocess.run(
        [sys.executable, "-m", "worker", "score", *map(str, args)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.system
def test_score_reports_unknown_fields_in_the_result_details(tmp_path: Path) -> None:
    first, second = EXTRACTION.joinpath("cases.jsonl").read_text(encoding="utf-8").splitlines()[:2]
    misspelt = json.loads(second)
    misspelt["respones"] = misspelt.pop("response")
    cases = tmp_path / "cases.jsonl"
    cases.write_text(f"{first}\n{json.dumps(misspelt, ensure_ascii=False)}\n", encoding="utf-8")
    done = _score(
        cases,
        "--suite",
        "extraction",
        "--config",
        EXTRACTION / "config.yaml",
        "--format",
        "json",
        cwd=ROOT,
    )
    results = {r["id"]: r["details"] for r in json.loads(done.stdout)["results"]}
    assert "unknown_fields" not in results[json.loads(first)["id"]]  # `id` is a native row key
    assert results[misspelt["id"]]["unknown_fields"] == ["respones"]

    case = json.loads(SAFE_CASES.read_text(encoding="utf-8").splitlines()[0])
    case["output"]["signal"] = case["output"].pop("signals")
    envelope = tmp_path / "envelope.jsonl"
    envelope.write_text(
        json.dumps({"id": "e1", "suite": "safe", "payload": case}) + "\n", encoding="utf-8"
    )
    safe = _score(envelope, "--format", "json", cwd=tmp_path)
    [result] = json.loads(safe.stdout)["results"]
    assert result["details"]["unknown_fields"] == ["output.signal"]


def _with_a_stray_key_everywhere(value: object, path: str, planted: list[str]) -> object:
    """`value` with a key `zz_stray` added to every object in it (paths in `planted`)."""
    if isinstance(value, dict):
        out = {k: _with_a_stray_key_everywhere(v, f"{path}{k}.", planted) for k, v in value.items()}
        out["zz_stray"] = 1
        planted.append(f"{path}zz_stray")
        return out
    if isinstance(value, list):
        return [
            _with_a_stray_key_everywhere(item, f"{path}{index}.", planted)
            for index, item in enumerate(value)
        ]
    return value


def test_an_unknown_key_is_found_at_every_depth_of_every_example_payload() -> None:
    """The walk skips fields whose type cannot hold a model; it must still find a stray
    key in every object the payload models read (free-form JSON fields excepted)."""
    from worker.input.records import decode_record

    checked = 0
    for suite in ("safe", "extraction", "alignment"):
        path = ROOT / "examples" / suite / "envelopes.jsonl"
        for line in path.read_text().splitlines():
            envelope = json.loads(line)
            planted: list[str] = []
            envelope["payload"] = _with_a_stray_key_everywhere(envelope["payload"], "", planted)
            record = decode_record(json.dumps(envelope).encode(), 10_000_000)
            found = unknown_fields(record.payload)
            assert sorted(found) == sorted(planted), (suite, envelope["id"])
            checked += len(planted)
    assert checked > 100
