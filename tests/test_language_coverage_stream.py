"""Never blind in silence, end to end on Tansu: a worker fed assistant turns in a language
the safety classifier was not trained in shows it within one window, on `/metrics` (real
HTTP) and in the window's final aggregate, and the shipped coverage gate fires on it,
while the covered turns of the same stream keep their full coverage."""

from __future__ import annotations

import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.streamkit import (
    TopicReader,
    WorkerProcess,
    as_lines,
    live,
    make_config,
    produce,
    provision,
    settings_of,
    write_config,
)
from worker.ops.broker import EmbeddedBroker

pytestmark = pytest.mark.integration

COVERAGE_GATE = {
    "name": "safety-coverage",
    "suite": "alignment",
    "metric": "safety_coverage",
    "stat": "rate",
    "op": "<",
    "threshold": 0.95,
    "clear": 0.97,
    "window": "10s",
    "min_count": 1,
}
ENGLISH = [
    "Your invoice has been sent to the billing address we have on file.",
    "The report is ready; you can download it from the Exports page.",
]
SWEDISH = [
    "Din faktura har skickats till den faktureringsadress vi har registrerad.",
    "Rapporten är klar och du kan ladda ner den från sidan Export.",
]


def session(session_id: str, texts: list[str]) -> list[dict[str, Any]]:
    return [
        {
            "id": f"{session_id}:{index}",
            "suite": "alignment",
            "model": "m1",
            "payload": {
                "session_id": session_id,
                "turn_index": index,
                "persona_id": "northwind-analytics",
                "text": text,
                "final": index == len(texts) - 1,
            },
        }
        for index, text in enumerate(texts)
    ]


def final_coverage(values: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        value["alignment"]
        for value in values
        if value["suite"] == "alignment" and value["final"] and value["segment"] == {}
    ]


async def test_an_uncovered_language_shows_on_metrics_and_in_the_window_aggregate(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    config = make_config(windows=[{"size": "10s"}], gates=[COVERAGE_GATE])
    settings = settings_of(config)
    topics = settings.topics
    await provision(settings, broker.url)
    worker = WorkerProcess(
        write_config(tmp_path / "config.yaml", config), broker.url, tmp_path / "worker.log"
    )
    worker.start()
    try:
        worker.wait_ready()
        records = live([*session("en-1", ENGLISH), *session("sv-1", SWEDISH)], step_ms=50)
        async with TopicReader(broker.bootstrap, topics.aggregates, topics.gates) as reader:
            await produce(broker.bootstrap, topics.input, as_lines(records))
            await reader.until(
                lambda r: final_coverage(r.values(topics.aggregates)),
                timeout=90,
                what="the alignment window's final aggregate",
            )
            await reader.until(
                lambda r: any(v["state"] == "firing" for v in r.values(topics.gates)),
                timeout=30,
                what="the coverage gate to fire",
            )
        figures = final_coverage(reader.values(topics.aggregates))
        assert sum(f["coverage_turns"] for f in figures) == 4
        assert sum(f["covered_turns"] for f in figures) == 2
        assert min(f["safety_coverage"] for f in figures) <= 0.5
        with urllib.request.urlopen(worker.metrics_url(), timeout=5) as reply:
            metrics = reply.read().decode()
        assert 'scorestream_safety_uncovered_total{language="sv",suite="alignment"} 2.0' in metrics
        assert 'scorestream_turn_languages_total{language="en",suite="alignment"} 2.0' in metrics
        assert 'scorestream_safety_uncovered_total{language="en"' not in metrics
    finally:
        worker.stop()
