"""A record whose scoring runs away (a backtracking regex: C code holding the GIL) in a
real `scorestream worker` on the embedded broker: it becomes a `scoring_timeout` dead
letter, the records around it get their results, `/healthz` answers within a second
throughout and the worker keeps its partitions. The `score` command applies the same
deadline and names the row.

The runaway scorer is SAFE's, wrapped by a `sitecustomize` hook on PYTHONPATH (loaded by
the worker and by its scoring processes alike): a case whose `test_id` is "SPIN" runs a
regex that backtracks for ever.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.streamkit import (
    EXAMPLES,
    TopicReader,
    WorkerProcess,
    as_lines,
    envelopes,
    live,
    make_config,
    produce,
    provision,
    settings_of,
    write_config,
)
from worker.commands.score import run_score
from worker.ops.broker import EmbeddedBroker

ROOT = Path(__file__).resolve().parents[1]
SAFE = envelopes(EXAMPLES / "safe" / "envelopes.jsonl")[0]

SPIN_HOOK = """
import re
from dataclasses import replace

from worker.suites import registry

_safe = registry.get("safe")


def spinning_case_scorer(section):
    score = _safe.case_scorer(section)

    def scored(payload):
        if payload.test_id == "SPIN":  # exponential backtracking, all of it in C
            re.match(r"(a|aa)+$", "a" * 64 + "b")
        return score(payload)

    return scored


registry._SPECS["safe"] = replace(_safe, case_scorer=spinning_case_scorer)
"""


@pytest.fixture
def spin_hook(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(SPIN_HOOK, encoding="utf-8")
    monkeypatch.setenv("PYTHONPATH", f"{hook}:{ROOT}")


def safe_case(case_id: str, test_id: str | None = None) -> dict[str, Any]:
    payload = {**SAFE["payload"], "test_id": test_id or case_id}
    return {**SAFE, "id": case_id, "payload": payload}


class HealthProbe:
    """Asks `/healthz` every 0.2 s on a thread, with a 1 s timeout, and keeps the
    slowest answer (a failed or late answer counts as infinitely slow)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.slowest = 0.0
        self.asked = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            started = time.monotonic()
            try:
                with urllib.request.urlopen(self.url, timeout=1.0) as reply:
                    ok = reply.status == 200
            except OSError:
                ok = False
            took = time.monotonic() - started if ok else float("inf")
            self.slowest = max(self.slowest, took)
            self.asked += 1

    def __enter__(self) -> HealthProbe:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)


@pytest.mark.integration
async def test_a_runaway_record_is_a_scoring_timeout_while_the_worker_stays_healthy(
    broker: EmbeddedBroker, tmp_path: Path, spin_hook: None
) -> None:
    config = make_config(stream={**make_config()["stream"], "partitions": 1})
    settings = settings_of(config)
    topics = settings.topics
    await provision(settings, broker.url)
    worker = WorkerProcess(write_config(tmp_path / "c.yaml", config), broker.url, tmp_path / "w")
    worker.start()
    try:
        await asyncio.to_thread(worker.wait_ready)
        base = (await asyncio.to_thread(worker.metrics_url)).removesuffix("/metrics")
        joins = worker.log().count("(Re-)joining group")
        records = [safe_case("before"), safe_case("spin", "SPIN"), safe_case("after")]
        async with TopicReader(broker.bootstrap, topics.results, topics.dead_letters) as reader:
            with HealthProbe(base + "/healthz") as probe:
                await produce(broker.bootstrap, topics.input, as_lines(live(records)))

                def done(r: TopicReader) -> bool:
                    ids = {value["id"] for value in r.values(topics.results)}
                    return {"before", "after"} <= ids and bool(r.values(topics.dead_letters))

                await reader.until(done, 120, "two results and the runaway's dead letter")
                await reader.poll(settings.stream.session_timeout)  # a lost member shows
            assert worker.process is not None and worker.process.poll() is None
            log = worker.log()
            with urllib.request.urlopen(base + "/metrics", timeout=5) as reply:
                metrics = reply.read().decode()
    finally:
        worker.stop()
    (letter,) = reader.values(topics.dead_letters)
    assert letter["error"]["type"] == "scoring_timeout"
    assert "limits.scoring_deadline (2 s)" in letter["error"]["message"]
    assert orjson.loads(letter["raw"])["id"] == "spin"
    assert sorted(value["id"] for value in reader.values(topics.results)) == ["after", "before"]
    assert 'scorestream_dead_letters_total{reason="scoring_timeout"} 1.0' in metrics
    assert probe.asked > 10
    assert probe.slowest < 1.0, f"/healthz took {probe.slowest:.2f} s"
    assert joins >= 1
    assert log.count("(Re-)joining group") == joins, "the worker lost its group:\n" + log[-3000:]


@pytest.mark.system
def test_score_names_a_row_past_the_deadline_and_exits_3(
    tmp_path: Path, spin_hook: None, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = tmp_path / "cases.jsonl"
    lines = [safe_case("before"), safe_case("spin", "SPIN"), safe_case("after")]
    rows.write_bytes(b"\n".join(orjson.dumps(line) for line in lines) + b"\n")
    config = write_config_file(tmp_path, {"limits": {"scoring_deadline": "1s"}})
    code, out, err = run_scorestream(["score", str(rows), "--format", "json", "--config", config])
    assert code == 3
    assert f"{rows}:2: payload: scoring took longer than limits.scoring_deadline (1 s)" in err
    report = orjson.loads(out)
    assert sorted(case["test_id"] for case in report["results"]) == ["after", "before"]


def write_config_file(tmp_path: Path, config: dict[str, Any]) -> str:
    path = tmp_path / "score.yaml"
    return str(write_config(path, config))


def run_scorestream(args: list[str]) -> tuple[int, str, str]:
    """`scorestream ARGS` in a subprocess (the hook on PYTHONPATH loads there too)."""
    done = subprocess.run(
        [sys.executable, "-m", "worker", *args], capture_output=True, text=True, timeout=300
    )
    return done.returncode, done.stdout, done.stderr


def test_score_applies_the_stream_intake_limits_to_each_row(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    long_summary = {**SAFE["payload"]["output"], "summary": "word " * 40}
    envelope = {**safe_case("long"), "payload": {**SAFE["payload"], "output": long_summary}}
    native = {**SAFE["payload"], "test_id": "native-long", "output": long_summary}
    rows = tmp_path / "cases.jsonl"
    lines = [safe_case("fine"), envelope, native]
    rows.write_bytes(b"\n".join(orjson.dumps(line) for line in lines) + b"\n")
    config = write_config_file(tmp_path, {"limits": {"text_bytes": 100}})
    args = argparse.Namespace(
        files=[str(rows)],
        suite="safe",
        config=config,
        format="json",
        output=str(tmp_path / "report.json"),
        strict_ah=False,
        concern=None,
        judge=False,
        verbose=False,
    )
    assert run_score(args) == 3
    err = capsys.readouterr().err
    limit = "200 bytes is over the limit of 100 bytes (limits.text_bytes)"
    assert f"{rows}:2: payload.output.summary: {limit}" in err
    assert f"{rows}:3: output.summary: {limit}" in err
    report = orjson.loads((tmp_path / "report.json").read_bytes())
    assert [case["test_id"] for case in report["results"]] == ["fine"]


TURN_SPIN_HOOK = """
import re

import worker.suites.alignment.streaming as streaming

_turn_scorer = streaming.alignment_turn_scorer


def spinning_turn_scorer(*args, **kwargs):
    score = _turn_scorer(*args, **kwargs)

    def scored(turn):
        if "SPIN" in turn[1]:  # exponential backtracking, all of it in C
            re.match(r"(a|aa)+$", "a" * 64 + "b")
        return score(turn)

    return scored


streaming.alignment_turn_scorer = spinning_turn_scorer
"""


@pytest.mark.system
def test_score_scores_alignment_turns_under_the_deadline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(TURN_SPIN_HOOK, encoding="utf-8")
    monkeypatch.setenv("PYTHONPATH", f"{hook}:{ROOT}")
    lines = (EXAMPLES / "alignment" / "sessions.jsonl").read_text(encoding="utf-8").splitlines()
    rows = [orjson.loads(line) for line in lines[:4]]
    assert [row["role"] for row in rows] == ["user", "assistant", "user", "assistant"]
    rows[3]["text"] = "SPIN " + rows[3]["text"]
    path = tmp_path / "turns.jsonl"
    path.write_bytes(b"\n".join(orjson.dumps(row) for row in rows) + b"\n")
    config = write_config_file(tmp_path, {"limits": {"scoring_deadline": "1s"}})
    code, out, err = run_scorestream(
        ["score", str(path), "--suite", "alignment", "--format", "json", "--config", config]
    )
    assert code == 3, err
    assert f"{path}:4: text: scoring took longer than limits.scoring_deadline (1 s)" in err
    report = orjson.loads(out)
    (session,) = report["sessions"]
    assert session["turns"] == 1  # the other assistant turn is scored, the session too
    assert [turn["turn_index"] for turn in report["turns"]] == [1]
