"""`scorestream score` end to end, through a real subprocess (exit codes, reports, errors)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from worker.commands.score import run_score, worst_exit_code
from worker.input.files import read_rows

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples" / "safe"
I25 = EXAMPLES / "I25_batch_1.jsonl"
GOLDEN = EXAMPLES / "golden_set.json"
ENVELOPES = EXAMPLES / "envelopes.jsonl"


def clean_env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SCORESTREAM_", "SAFE_V0_")) and k != "COLUMNS"
    }
    env.update(extra)
    return env


def score(
    *args: str | Path, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "worker", "score", *map(str, args)],
        cwd=cwd,
        env=env or clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


# ---------------------------------------------------------------- exit codes


@pytest.mark.system
def test_all_pass_exits_0(tmp_path: Path) -> None:
    done = score(GOLDEN, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "SAFE v0 Scorecard - I25" in done.stdout
    assert "Total Cases: 6" in done.stdout


@pytest.mark.system
def test_review_without_fail_exits_2(tmp_path: Path) -> None:
    done = score(I25, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "│ I25-BATCH1-003  │ Process_Auditor       │ 1.00 │ 0.50 │ 1.00 │ REVIEW  │" in (
        done.stdout
    )


@pytest.mark.system
def test_any_fail_exits_1(tmp_path: Path) -> None:
    assert score(ENVELOPES, cwd=tmp_path).returncode == 1


@pytest.mark.system
def test_strict_ah_flag_turns_a_violation_into_a_fail(tmp_path: Path) -> None:
    done = score(I25, "--strict-ah", "--format", "json", cwd=tmp_path)
    assert done.returncode == 1
    assert json.loads(done.stdout)["summary"]["fail"] == 1


@pytest.mark.system
def test_seed_environment_variable_sets_strict_ah(tmp_path: Path) -> None:
    done = score(I25, cwd=tmp_path, env=clean_env(SAFE_V0_AH_STRICT="true"))
    assert done.returncode == 1


@pytest.mark.system
def test_config_file_thresholds_apply(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(
        "safe:\n  thresholds:\n    CR: {pass: 0.6, review: 0.5}\n"
        "    AH: {pass: 0.5, review: 0.5}\n    AC: {pass: 0.5, review: 0.5}\n",
        encoding="utf-8",
    )
    assert score(I25, "--config", config, cwd=tmp_path).returncode == 0


# ---------------------------------------------------------------- errors: exit 3


@pytest.mark.system
def test_missing_file_exits_3(tmp_path: Path) -> None:
    done = score(I25, tmp_path / "nope.jsonl", cwd=tmp_path)
    assert done.returncode == 3
    assert "nope.jsonl: no such file" in done.stderr


@pytest.mark.system
def test_unknown_flag_exits_3_not_2(tmp_path: Path) -> None:
    done = score(I25, "--no-such-flag", cwd=tmp_path)
    assert done.returncode == 3
    assert "unrecognized arguments" in done.stderr


@pytest.mark.system
def test_bad_config_exits_3_naming_the_key(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("safe:\n  weights: {CR: -1}\n", encoding="utf-8")
    done = score(I25, "--config", config, cwd=tmp_path)
    assert done.returncode == 3
    assert "safe.weights.CR" in done.stderr


@pytest.mark.system
def test_nothing_scorable_exits_3(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"test_id": "x", "output": {"signals": [1]}}\nnot json\n', encoding="utf-8")
    done = score(bad, cwd=tmp_path)
    assert done.returncode == 3
    assert f"{bad}:1: output.signals.0:" in done.stderr
    assert f"{bad}:2: (json): not valid JSON" in done.stderr


@pytest.mark.system
def test_unknown_concern_exits_3(tmp_path: Path) -> None:
    done = score(I25, "--concern", "Z99", cwd=tmp_path)
    assert done.returncode == 3
    assert "Z99" in done.stderr


# ---------------------------------------------------------------- malformed rows


@pytest.mark.system
def test_malformed_line_is_reported_and_the_rest_is_scored(tmp_path: Path) -> None:
    lines = I25.read_text(encoding="utf-8").splitlines()
    broken = json.loads(lines[1])
    broken["output"]["followup_questions"] = "not a list"
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text(
        "\n".join([lines[0], json.dumps(broken), "{oops", *lines[2:]]) + "\n", encoding="utf-8"
    )
    done = score(mixed, "--format", "json", cwd=tmp_path)
    assert f"{mixed}:2: output.followup_questions: Input should be a valid list" in done.stderr
    assert f"{mixed}:3: (json):" in done.stderr
    assert "2 rows could not be scored" in done.stderr
    report = json.loads(done.stdout)
    assert report["summary"]["total_cases"] == 4
    assert "I25-BATCH1-002" not in {r["test_id"] for r in report["results"]}
    assert done.returncode == 3  # the report is written, but not every row was scored


@pytest.mark.system
def test_malformed_envelope_names_the_payload_field(tmp_path: Path) -> None:
    good = ENVELOPES.read_text(encoding="utf-8").splitlines()[0]
    bad = json.loads(good)
    bad["payload"]["expectations"]["signal_generation"]["must_find_signals"] = [3]
    unknown = {"id": "u1", "suite": "nonsense", "payload": {}}
    path = tmp_path / "env.jsonl"
    path.write_text(
        "\n".join([good, json.dumps(bad), json.dumps(unknown)]) + "\n", encoding="utf-8"
    )
    done = score(path, cwd=tmp_path)
    assert f"{path}:2: payload.expectations.signal_generation.must_find_signals.0:" in done.stderr
    assert f"{path}:3: suite:" in done.stderr
    assert done.returncode == 3  # the one good row passes, two rows could not be scored


def _without_output(case: dict[str, object]) -> dict[str, object]:
    return {key: value for key, value in case.items() if key != "output"}


@pytest.mark.system
def test_case_without_output_is_scored_as_empty_output_in_both_paths(tmp_path: Path) -> None:
    case = _without_output(json.loads(I25.read_text(encoding="utf-8").splitlines()[0]))
    native = tmp_path / "native.jsonl"
    native.write_text(json.dumps(case) + "\n", encoding="utf-8")
    envelope = tmp_path / "envelope.jsonl"
    envelope.write_text(
        json.dumps({"id": "e1", "suite": "safe", "payload": case}) + "\n", encoding="utf-8"
    )
    for path, extra in ((native, ["--suite", "safe"]), (native, []), (envelope, [])):
        done = score(path, *extra, "--format", "json", cwd=tmp_path)
        assert done.returncode == 1, (path, extra, done.stderr)  # CR 0 is a Fail, not a skip
        assert "could not be scored" not in done.stderr
        [result] = json.loads(done.stdout)["results"]
        assert result["test_id"] == "I25-BATCH1-001"
        assert result["scores"] == {"CR": 0.0, "AH": 1.0, "AC": 0.0, "composite": 1 / 3}
        assert result["label"] == "Fail"


@pytest.mark.system
def test_another_suites_rows_are_errors_not_empty_cases(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    done = score(I25, "--suite", "extraction", "--format", "json", "--output", report, cwd=tmp_path)
    assert done.returncode == 3
    assert f"{I25}:1: (row): has the shape of a safe row, not extraction" in done.stderr
    assert "5 rows could not be scored" in done.stderr
    envelopes = score(ENVELOPES, "--suite", "extraction", cwd=tmp_path)
    assert envelopes.returncode == 3
    assert f"{ENVELOPES}:1: suite: a safe envelope, not extraction (--suite)" in envelopes.stderr


@pytest.mark.system
def test_report_is_written_before_exit_3_for_unscorable_rows(tmp_path: Path) -> None:
    lines = I25.read_text(encoding="utf-8").splitlines()
    path = tmp_path / "some_bad.jsonl"
    path.write_text("\n".join([*lines, "[1, 2]"]) + "\n", encoding="utf-8")
    report = tmp_path / "out" / "report.json"
    done = score(path, "--format", "json", "--output", report, cwd=tmp_path)
    assert done.returncode == 3
    assert f"{path}:6: (row): must be a JSON object, not list" in done.stderr
    assert json.loads(report.read_text(encoding="utf-8"))["summary"]["total_cases"] == 5


# ---------------------------------------------------------------- formats and options


@pytest.mark.system
def test_json_to_stdout_is_the_safe_report(tmp_path: Path) -> None:
    done = score(I25, "--format", "json", cwd=tmp_path)
    report = json.loads(done.stdout)
    assert report["report_type"] == "SAFE_v0"
    assert report["concern_id"] == "I25"
    assert report["summary"]["review"] == 3


@pytest.mark.system
def test_json_report_to_a_file(tmp_path: Path) -> None:
    target = tmp_path / "out" / "golden.json"
    done = score(GOLDEN, "--format", "json", "--output", target, cwd=tmp_path)
    assert done.returncode == 0
    assert done.stdout == ""
    report = json.loads(target.read_text(encoding="utf-8"))
    assert report["batch_id"] == "golden_set"
    assert len(report["results"]) == 6


@pytest.mark.system
def test_markdown_goes_to_the_report_dir_named_after_the_concern(tmp_path: Path) -> None:
    reports = tmp_path / "rep"
    env = clean_env(SAFE_V0_REPORT_DIR=str(reports))
    done = score(I25, "--format", "markdown", cwd=tmp_path, env=env)
    assert done.returncode == 2
    written = list(reports.glob("SAFE_v0_I25_*.md"))
    assert len(written) == 1
    assert written[0].read_text(encoding="utf-8").startswith("# SAFE v0 Scorecard - I25")


@pytest.mark.system
def test_format_all_writes_json_and_markdown_and_prints_the_scorecard(tmp_path: Path) -> None:
    out = tmp_path / "all"
    done = score(I25, "--format", "all", "--output", out, cwd=tmp_path)
    assert "Per-Case Breakdown:" in done.stdout
    assert len(list(out.glob("SAFE_v0_I25_*.json"))) == 1
    assert len(list(out.glob("SAFE_v0_I25_*.md"))) == 1


@pytest.mark.system
def test_concern_filters_cases_and_names_the_report(tmp_path: Path) -> None:
    done = score(ENVELOPES, "--concern", "J18", "--format", "json", cwd=tmp_path)
    report = json.loads(done.stdout)
    assert report["concern_id"] == "J18"
    assert report["summary"]["total_cases"] == 10
    assert {r["test_id"][:3] for r in report["results"]} == {"J18"}


@pytest.mark.system
def test_several_files_and_forms_are_scored_together(tmp_path: Path) -> None:
    done = score(I25, GOLDEN, ENVELOPES, "--suite", "safe", "--format", "json", cwd=tmp_path)
    assert done.returncode == 1
    assert json.loads(done.stdout)["summary"]["total_cases"] == 5 + 6 + 20


@pytest.mark.system
def test_verbose_console_lists_case_details(tmp_path: Path) -> None:
    done = score(I25, "--verbose", cwd=tmp_path)
    assert "AH violations: ['policy', 'violated']" in done.stdout


# ---------------------------------------------------------------- in-process pieces


def test_unavailable_suite_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = argparse.Namespace(
        files=[str(I25)],
        suite="no_such_suite",
        config=None,
        format="console",
        output=None,
        strict_ah=False,
        concern=None,
        judge=False,
        verbose=False,
    )
    assert run_score(args) == 3
    assert "suite 'no_such_suite' is not available" in capsys.readouterr().err


def test_exit_codes_combine_worst_first() -> None:
    assert worst_exit_code([0, 2]) == 2
    assert worst_exit_code([2, 1, 0]) == 1
    assert worst_exit_code([1, 3]) == 3
    assert worst_exit_code([0, 0]) == 0
    assert worst_exit_code([]) == 0


def test_input_files_json_document_and_jsonl(tmp_path: Path) -> None:
    golden = read_rows(GOLDEN)
    assert len(golden) == 6
    assert golden[0].source == f"{GOLDEN}:test_cases[0]"
    listing = tmp_path / "list.json"
    listing.write_text('[{"a": 1}, 5]', encoding="utf-8")
    rows = read_rows(listing)
    assert rows[0].data == {"a": 1}
    assert rows[1].error is not None and "must be a JSON object" in rows[1].error
    jsonl = tmp_path / "x.jsonl"
    jsonl.write_bytes(b'{"a": 1}\n\n{"b": 2}\n\xff\xfe\n')
    rows = read_rows(jsonl)
    assert [r.source for r in rows] == [f"{jsonl}:1", f"{jsonl}:3", f"{jsonl}:4"]
    assert rows[2].error == "(row): not valid UTF-8"
