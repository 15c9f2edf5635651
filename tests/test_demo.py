"""`scorestream demo`: the bundled stream, its helpers, the scorecard, and a real run."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType

import orjson
import pytest

from schemas.outputs import (
    Aggregate,
    CaseResult,
    DeadLetter,
    DeadLetterError,
    DeadLetterSource,
    GateEvent,
    MetricSummary,
    RecordSource,
    Versions,
    WindowSpan,
)
from worker.config import TopicNames, WindowConfig
from worker.demo.example_stream import STREAM, event_seconds, phases, retime
from worker.demo.scorecard import Scorecard
from worker.demo.settings import DEFAULT_CONFIG, demo_settings
from worker.ops.broker import port_in_use

REPO = Path(__file__).resolve().parents[1]
T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC).timestamp()


def load_builder() -> ModuleType:
    spec = importlib.util.spec_from_file_location("build_stream", STREAM.parent / "build_stream.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------- the bundled stream


def test_committed_stream_is_what_the_script_builds() -> None:
    lines = STREAM.read_text("utf-8").splitlines()
    assert lines == load_builder().build()


def test_stream_spans_three_minutes_and_ends_before_a_boundary() -> None:
    records = [line for line in STREAM.read_bytes().splitlines() if line.strip()]
    times = []
    for line in records:
        try:
            data = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if (seconds := event_seconds(data.get("ts"))) is not None:
            times.append(seconds)
    assert min(times) >= T0
    assert T0 + 170 < max(times) < T0 + 180
    assert [len(group) for group in phases(records, 60.0)] == [26, 33, 30]


def test_stream_has_every_suite_and_the_bad_records() -> None:
    suites: dict[str, int] = {}
    not_json = 0
    for line in STREAM.read_text("utf-8").splitlines():
        try:
            data = json.loads(line)
        except json.JSONDecodeError:
            not_json += 1
            continue
        suites[data.get("suite")] = suites.get(data.get("suite"), 0) + 1
    assert not_json == 1
    assert suites == {"safe": 21, "extraction": 20, "alignment": 46, "poetry": 1}


# ---------------------------------------------------------------- helpers


def test_event_seconds_reads_rfc3339_and_epoch_millis() -> None:
    assert event_seconds("2026-01-01T12:00:00Z") == T0
    assert event_seconds("2026-01-01T12:00:00.500+00:00") == T0 + 0.5
    assert event_seconds(int(T0 * 1000)) == T0
    assert event_seconds("yesterday") is None
    assert event_seconds(True) is None


def test_retime_shifts_by_whole_windows_up_to_now() -> None:
    lines = [
        b'{"id": "a", "ts": "2026-01-01T12:00:10Z"}',
        b"not json",
        b'{"id": "b", "ts": "2026-01-01T12:02:50Z"}',
        b'{"id": "c"}',
    ]
    now = T0 + 3600 + 200.0  # 13:03:20
    out, shift = retime(lines, 60.0, now)
    assert shift == 3600.0
    assert orjson.loads(out[0])["ts"] == "2026-01-01T13:00:10.000Z"
    assert out[1] == b"not json"
    assert orjson.loads(out[2])["ts"] == "2026-01-01T13:02:50.000Z"
    assert out[3] == lines[3]


def test_retime_never_moves_records_past_now() -> None:
    lines = [b'{"id": "a", "ts": "2026-01-01T12:02:59Z"}']
    out, shift = retime(lines, 60.0, T0 + 3600 + 150.0)  # 13:02:30
    assert shift == 3540.0
    assert orjson.loads(out[0])["ts"] == "2026-01-01T13:01:59.000Z"


def test_phases_group_by_window_and_keep_untimed_records_in_place() -> None:
    lines = [
        b'{"ts": "2026-01-01T12:00:01Z"}',
        b"oops",
        b'{"ts": "2026-01-01T12:00:59Z"}',
        b'{"ts": "2026-01-01T12:01:00Z"}',
        b'{"id": "untimed"}',
        b'{"ts": "2026-01-01T12:03:00Z"}',
    ]
    assert phases(lines, 60.0) == [lines[0:3], lines[3:5], lines[5:6]]
    assert phases([b"x", b'{"ts": "2026-01-01T12:00:01Z"}'], 60.0) == [
        [b"x", b'{"ts": "2026-01-01T12:00:01Z"}']
    ]


def test_demo_settings_resolve_paths_and_tune_for_tansu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # paths resolve from the config, not the working directory
    settings = demo_settings(None)
    assert settings.extraction.schemas["duee_fin"].is_file()
    assert settings.alignment.personas_dir is not None
    assert (settings.alignment.personas_dir / "ledgerline.yaml").is_file()
    assert settings.stream.exact_changelog_ends
    assert settings.stream.session_timeout == 6
    assert {gate.name for gate in settings.gates} == {"safe-ci-gate", "safety-drop"}

    config = tmp_path / "mine.yaml"
    config.write_text(
        f"stream: {{session_timeout: 9, exact_changelog_ends: false}}\n"
        f"extraction: {{schemas: {{x: {REPO}/examples/extraction/duee_fin_schema.jsonl}}}}\n"
    )
    mine = demo_settings(str(config))
    assert mine.stream.session_timeout == 9  # the file's choice is kept
    assert mine.stream.heartbeat_interval == 1
    assert mine.stream.exact_changelog_ends  # always: Tansu's ListOffsets is short


def test_demo_settings_bad_config_is_a_usage_error(tmp_path: Path) -> None:
    from worker.commands.cli import UsageError

    config = tmp_path / "bad.yaml"
    config.write_text("windows: [{size: never}]\n")
    with pytest.raises(UsageError, match="windows"):
        demo_settings(str(config))


# ---------------------------------------------------------------- scorecard folding

TOPICS = TopicNames()
VERSIONS = Versions(scorer="t", metrics="t")


def card() -> Scorecard:
    return Scorecard(topics=TOPICS, windows=[WindowConfig(size=60.0)], segment_by=["model"])


def result(
    suite: str, kind: str, ident: str, position: tuple[int, int] | None, ts: float, **extra: object
) -> bytes:
    source = None
    if position is not None:
        source = RecordSource(topic=TOPICS.input, partition=position[0], offset=position[1])
    value = CaseResult(
        id=ident,
        suite=suite,  # type: ignore[arg-type]
        kind=kind,  # type: ignore[arg-type]
        ts=datetime.fromtimestamp(ts, UTC),
        model="m1",
        scores={"safety": 1.0},
        versions=VERSIONS,
        source=source,
        scored_at=datetime.fromtimestamp(ts, UTC),
        **extra,  # type: ignore[arg-type]
    )
    return value.model_dump_json().encode()


def aggregate(suite: str, segment: dict[str, str], count: int, final: bool) -> bytes:
    value = Aggregate(
        suite=suite,  # type: ignore[arg-type]
        segment=segment,
        window=WindowSpan(
            start=datetime.fromtimestamp(T0, UTC),
            end=datetime.fromtimestamp(T0 + 60, UTC),
            size_s=60,
        ),
        final=final,
        count=count,
        metrics={"safety": MetricSummary(mean=0.5, min=0.0, max=1.0, std=0.5)},
        emitted_at=datetime.fromtimestamp(T0 + 70, UTC),
    )
    return value.model_dump_json().encode()


def key(suite: str, segment: str) -> bytes:
    return f"{suite}|{segment}|1m|2026-01-01T12:00:00Z".encode()


def dead_letter(reason: str, position: tuple[int, int]) -> bytes:
    return (
        DeadLetter(
            error=DeadLetterError(type=reason, message="bad"),
            raw="x",
            raw_size=1,
            source=DeadLetterSource(topic=TOPICS.input, partition=position[0], offset=position[1]),
            failed_at=datetime.fromtimestamp(T0, UTC),
        )
        .model_dump_json()
        .encode()
    )


def test_scorecard_accounts_results_sessions_dead_letters_and_finals() -> None:
    sc = card()
    sc.produce((0, 0), b'{"id": "c1", "suite": "safe", "model": "m1", "payload": {}}')
    sc.produce(
        (1, 0),
        b'{"id": "s:0", "suite": "alignment", "payload": {"session_id": "s", "final": true}}',
    )
    sc.produce((2, 0), b"not json")
    assert sc.pending == 3 and not sc.done

    failed = result("safe", "case", "c1", (0, 0), T0 + 5, label="Fail")
    sc.observe(TOPICS.results, b"safe:c1", failed)
    sc.observe(TOPICS.results, b"a", result("alignment", "turn", "s:0", (1, 0), T0 + 6))
    assert sc.open_sessions == {"s"}
    sc.observe(TOPICS.results, b"a", result("alignment", "session", "session:s", None, T0 + 6))
    sc.observe(TOPICS.dead_letters, None, dead_letter("invalid_json", (2, 0)))
    assert sc.pending == 0 and sc.open_sessions == set()
    # four windows expected: safe and alignment, each for {} and {model: m1}
    assert len(sc.missing_finals) == 4
    assert not sc.settled([(0, 0), (1, 0), (2, 0)])

    for suite in ("safe", "alignment"):
        sc.observe(TOPICS.aggregates, key(suite, "all"), aggregate(suite, {}, 1, False))
        sc.observe(
            TOPICS.aggregates, key(suite, "model=m1"), aggregate(suite, {"model": "m1"}, 1, False)
        )
    assert sc.settled([(0, 0), (1, 0), (2, 0)])
    assert not sc.done
    for suite in ("safe", "alignment"):
        sc.observe(TOPICS.aggregates, key(suite, "all"), aggregate(suite, {}, 1, True))
        sc.observe(
            TOPICS.aggregates, key(suite, "model=m1"), aggregate(suite, {"model": "m1"}, 1, True)
        )
    assert sc.done
    # a late interim aggregate never replaces a final one
    sc.observe(TOPICS.aggregates, key("safe", "all"), aggregate("safe", {}, 1, False))
    assert sc.aggregates[key("safe", "all").decode()].final

    assert sc.outcomes[("safe", "Fail")] == 1
    assert sc.dead_letters["invalid_json"] == 1
    assert sc.summary() == (
        "records 3, accounted 3 | safe: cases 1 | extraction: none | "
        "alignment: turns 1, sessions 1 | dead letters 1 | gates fired: none"
    )


def test_scorecard_counts_redelivered_results_once_and_skips_garbage() -> None:
    sc = card()
    sc.produce((0, 0), b'{"id": "c1", "suite": "safe"}')
    value = result("safe", "case", "c1", (0, 0), T0 + 1)
    sc.observe(TOPICS.results, b"k", value)
    sc.observe(TOPICS.results, b"k", value)
    sc.observe(TOPICS.results, b"k", b"{broken")
    assert sc.results[("safe", "case")] == 1
    assert sc.unreadable == 1
    assert len(sc.expected[key("safe", "all").decode()]) == 1


def test_scorecard_tracks_gate_states_and_renders() -> None:
    from rich.console import Console

    sc = card()
    span = WindowSpan(
        start=datetime.fromtimestamp(T0, UTC),
        end=datetime.fromtimestamp(T0 + 60, UTC),
        size_s=60,
    )
    for state, value in (("firing", 0.3), ("resolved", 1.0)):
        event = GateEvent(
            gate="safety-drop",
            state=state,  # type: ignore[arg-type]
            suite="alignment",
            segment={},
            metric="safety",
            stat="mean",
            op="<",
            threshold=0.9,
            value=value,
            count=6,
            window=span,
            ts=datetime.fromtimestamp(T0 + 70, UTC),
        )
        sc.observe(TOPICS.gates, b"safety-drop|all", event.model_dump_json().encode())
    assert sc.gates["safety-drop|all"].state == "resolved"
    assert sc.fired == ["safety-drop|all"]
    sc.observe(TOPICS.aggregates, key("alignment", "all"), aggregate("alignment", {}, 6, True))
    console = Console(width=140, no_color=True, record=True)
    console.print(sc.render("title", "status", ascii_only=True))
    text = console.export_text()
    assert "resolved (fired 1x)" in text
    assert "safety 0.50" in text
    assert "gates fired: safety-drop|all" in text


# ---------------------------------------------------------------- a real run


@pytest.mark.integration
def test_demo_command_runs_to_the_final_scorecard() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCORESTREAM_")}
    env["SCORESTREAM_METRICS_PORT"] = "0"  # never fight over 9108 with another run
    completed = subprocess.run(
        [sys.executable, "-m", "worker", "demo", "--config", str(DEFAULT_CONFIG)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    out, err = completed.stdout, completed.stderr
    assert completed.returncode == 0, err + out
    assert "Traceback" not in err + out
    assert "done: every record accounted for" in err
    card, steps = out.split("Next steps:", 1)
    summary = card.strip().splitlines()
    text = " ".join(line.strip() for line in summary[-3:])
    assert "records 89, accounted 89" in text
    assert "safe: cases 20" in text
    assert "extraction: cases 18" in text
    assert "alignment: turns 46, sessions 16" in text
    assert "dead letters 6" in text
    assert re.search(r"gates fired: .*safety-drop\|all", text)
    assert re.search(r"safety-drop\s*\|\s*all\s*\|\s*resolved \(fired 1x\)", out)
    assert re.search(r"safe-ci-gate\s*\|\s*all\s*\|\s*FIRING", out)
    assert "late 0" in out
    # Every alignment window has authenticity and stability (every turn embedded), and
    # every session a grade.
    windows = [line for line in out.splitlines() if re.match(r"\|\s*alignment\s*\|.*final", line)]
    assert len(windows) == 3, out
    for line in windows:
        assert re.search(r"authenticity \d\.\d\d", line) and re.search(r"stability \d", line), line
    grades = re.search(r"\|\s*alignment\s*\|.*\|\s*((?:[A-F] \d+\s*)+)\|", out)
    assert grades is not None, out
    assert sum(int(n) for n in re.findall(r"[A-F] (\d+)", grades.group(1))) == 16, grades.group(1)
    for command in ("scorestream demo --follow", "/metrics", "scorestream gates", "results --gate"):
        assert command in steps, command


@pytest.mark.integration
def test_demo_follow_names_its_addresses_and_a_hang_up_stops_the_broker_too() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCORESTREAM_")}
    env.update(SCORESTREAM_METRICS_PORT="0", PYTHONUNBUFFERED="1")
    demo = subprocess.Popen(
        [sys.executable, "-m", "worker", "demo", "--follow", "--config", str(DEFAULT_CONFIG)],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert demo.stderr is not None
        said = ""
        while "Next steps" not in said or "latest firing" not in said:
            line = demo.stderr.readline()
            assert line, f"the demo ended early:\n{said}"
            said += line
        broker = re.findall(r"scorestream gates --broker kafka://127\.0\.0\.1:(\d+)", said)
        metrics = re.findall(r"curl -s (http://127\.0\.0\.1:\d+/metrics)", said)
        assert broker and metrics, said
        assert port_in_use("127.0.0.1", int(broker[0]))
        assert b"scorestream_cases_total" in urllib.request.urlopen(metrics[0], timeout=5).read()
        os.killpg(demo.pid, signal.SIGHUP)  # the terminal was closed
        demo.wait(60)
    finally:
        if demo.poll() is None:
            os.killpg(demo.pid, signal.SIGKILL)
            demo.wait(10)
    assert demo.returncode == 0  # a --follow run ends when stopped
    assert not port_in_use("127.0.0.1", int(broker[0])), "the embedded broker outlived the demo"
