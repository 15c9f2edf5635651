"""Drill-down end to end on Tansu: a real worker, a gate that fires with the window's worst
cases, and `scorestream results` (a subprocess) printing those cases from the results
topic, with the trace ids the envelopes carried."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from schemas.envelope import SafePayload
from tests.streamkit import (
    EXAMPLES,
    InProcessWorker,
    TopicReader,
    as_lines,
    envelopes,
    make_config,
    produce,
    provision,
    retime,
    settings_of,
    write_config,
)
from worker.config import SafeSettings
from worker.ops.broker import EmbeddedBroker
from worker.suites.safe import score_case

pytestmark = pytest.mark.integration

GATE = {
    "name": "safe-composite",
    "suite": "safe",
    "metric": "composite",
    "stat": "mean",
    "op": "<",
    "threshold": 0.9,
    "window": "1m",
    "min_count": 5,
}


RESULTS_COMMAND = (sys.executable, "-m", "worker", "results")


def trace_of(index: int) -> str:
    return f"{index + 1:032x}"


def results_command(broker: EmbeddedBroker, config: Path, *flags: str) -> Any:
    return subprocess.run(
        [*RESULTS_COMMAND, "--broker", broker.url, "--config", str(config), *flags],
        capture_output=True,
        check=False,
        timeout=120,
    )


async def test_a_gate_event_leads_to_its_worst_cases(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    config = make_config(gates=[GATE], segment_by=["model"])
    config_path = write_config(tmp_path / "config.yaml", config)
    settings = settings_of(config)
    topics = settings.topics
    cases = envelopes(EXAMPLES / "safe" / "envelopes.jsonl")
    records = []
    for index, case in enumerate(cases):
        records.append({**case, "model": "m1", "labels": {}, "trace_id": trace_of(index)})
    records = retime(records, window_s=60)  # one closed minute of history
    composite = {
        record["id"]: score_case(
            SafePayload.model_validate(record["payload"]), SafeSettings()
        ).scores["composite"]
        for record in records
    }
    expected = sorted(composite, key=lambda ident: (composite[ident], ident))[:5]
    assert len(set(composite.values())) > 2, "examples need a spread of composites"

    await provision(settings, broker.url)
    await produce(broker.bootstrap, topics.input, as_lines(records))
    async with (
        InProcessWorker(settings, broker.url),
        TopicReader(broker.bootstrap, topics.gates, topics.results, topics.aggregates) as reader,
    ):
        await reader.until(
            lambda r: (
                any(e["segment"] == {"model": "m1"} for e in r.values(topics.gates))
                and len(r.values(topics.results)) >= len(records)
                # the all-cases final is on another topic: it may be read after the gate
                and any(a["final"] and a["segment"] == {} for a in r.values(topics.aggregates))
            ),
            timeout=90,
            what="the gate to fire for model=m1, every result and the all-cases final",
        )
    firing = next(e for e in reader.values(topics.gates) if e["segment"] == {"model": "m1"})
    assert firing["state"] == "firing"
    assert firing["worst_metric"] == "composite"
    assert [case["id"] for case in firing["worst"]] == expected
    assert [case["value"] for case in firing["worst"]] == [composite[i] for i in expected]
    traces = {record["id"]: record["trace_id"] for record in records}
    assert [case["trace_id"] for case in firing["worst"]] == [traces[i] for i in expected]
    final = next(a for a in reader.values(topics.aggregates) if a["final"] and a["segment"] == {})
    assert [case["id"] for case in final["worst"]["composite"]] == expected

    event_path = tmp_path / "event.json"
    event_path.write_text(json.dumps(firing, indent=2), encoding="utf-8")
    done = results_command(broker, config_path, "--gate-event", str(event_path), "--format", "json")
    assert done.returncode == 0, done.stderr.decode()
    shown = json.loads(done.stdout)
    assert [result["id"] for result in shown["results"]] == expected
    assert [result["trace_id"] for result in shown["results"]] == [traces[i] for i in expected]
    assert [result["scores"]["composite"] for result in shown["results"]] == [
        composite[i] for i in expected
    ]

    # The console table, from the event on stdin, names every worst case.
    table = subprocess.run(
        [
            *RESULTS_COMMAND,
            "--broker",
            broker.url,
            "--config",
            str(config_path),
            "--gate-event",
            "-",
        ],
        input=json.dumps(firing).encode(),
        capture_output=True,
        check=False,
        timeout=120,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert table.returncode == 0, table.stderr.decode()
    text = table.stdout.decode()
    assert all(ident in text for ident in expected), text
    assert "5 case(s)" in text

    # From the gate's name, as the alert's drill-down runs it: the same cases, and the
    # firing it started from.
    by_name = results_command(
        broker, config_path, "--gate", "safe-composite", "--segment", "model=m1", "--format", "json"
    )
    assert by_name.returncode == 0, by_name.stderr.decode()
    named = json.loads(by_name.stdout)
    assert [result["id"] for result in named["results"]] == expected
    assert named["gate_event"]["ts"] == firing["ts"]
    assert named["gate_event"]["segment"] == {"model": "m1"}
    never = results_command(broker, config_path, "--gate", "no-such-gate")
    assert never.returncode == 1
    assert "gate no-such-gate has not fired" in never.stderr.decode()

    # `scorestream gates`: the latest state of every gate and segment, here both firing.
    gates = subprocess.run(
        [
            sys.executable,
            "-m",
            "worker",
            "gates",
            "--broker",
            broker.url,
            "--config",
            str(config_path),
            "--format",
            "json",
        ],
        capture_output=True,
        check=False,
        timeout=120,
    )
    assert gates.returncode == 0, gates.stderr.decode()
    states = json.loads(gates.stdout)
    assert {(e["gate"], json.dumps(e["segment"]), e["state"]) for e in states} == {
        ("safe-composite", "{}", "firing"),
        ("safe-composite", json.dumps({"model": "m1"}), "firing"),
    }
    table = subprocess.run(
        [
            sys.executable,
            "-m",
            "worker",
            "gates",
            "--broker",
            broker.url,
            "--config",
            str(config_path),
            "--since",
            "1h",
        ],
        capture_output=True,
        check=False,
        timeout=120,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert table.returncode == 0, table.stderr.decode()
    assert "model=m1" in table.stdout.decode() and "2 event(s), 2 firing" in table.stdout.decode()

    # The window and segment, without a gate event: every case, worst composite first.
    window_start = firing["window"]["start"]
    listing = results_command(
        broker,
        config_path,
        *("--suite", "safe", "--window-start", window_start, "--window", "1m"),
        *("--segment", "model=m1", "--metric", "composite", "--format", "json"),
    )
    assert listing.returncode == 0, listing.stderr.decode()
    ids = [result["id"] for result in json.loads(listing.stdout)["results"]]
    assert sorted(ids) == sorted(composite)
    assert ids[:5] == expected
    other = results_command(
        broker,
        config_path,
        *("--suite", "safe", "--window-start", window_start, "--window", "1m"),
        *("--segment", "model=m2", "--format", "json"),
    )
    assert json.loads(other.stdout)["results"] == []


async def test_a_gate_event_case_missing_from_the_topic_exits_1(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    config = make_config()
    config_path = write_config(tmp_path / "config.yaml", config)
    await provision(settings_of(config), broker.url)
    event = {
        "gate": "g",
        "state": "firing",
        "suite": "safe",
        "segment": {},
        "metric": "composite",
        "stat": "mean",
        "op": "<",
        "threshold": 0.9,
        "value": 0.1,
        "count": 5,
        "window": {"start": "2026-01-01T12:00:00Z", "end": "2026-01-01T12:01:00Z", "size_s": 60},
        "ts": "2026-01-01T12:01:11Z",
        "worst_metric": "composite",
        "worst": [
            {"id": "gone", "kind": "case", "ts": "2026-01-01T12:00:01Z", "value": 0.0},
        ],
    }
    path = tmp_path / "event.json"
    path.write_text(json.dumps(event), encoding="utf-8")
    done = results_command(broker, config_path, "--gate-event", str(path))
    assert done.returncode == 1
    assert "gone" in done.stderr.decode()
