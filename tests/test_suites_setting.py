"""`suites`: a worker that does not score a suite loads nothing of it, and dead-letters
its records with the reason."""

from __future__ import annotations

import re
import time
from pathlib import Path

import orjson
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
from worker.config import load_settings
from worker.input.rejections import UNKNOWN_SUITE, Rejected
from worker.input.scored_records import score_record
from worker.ops.broker import EmbeddedBroker
from worker.scoring_pool import case_scorer_factories
from worker.scoring_suites import ScoringSuites

SAFE_EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "safe" / "I25_batch_1.jsonl"
TURN = {
    "id": "t-1",
    "suite": "alignment",
    "ts": 1767225604000,
    "payload": {
        "session_id": "s-1",
        "turn_index": 0,
        "persona_id": "northwind-analytics",
        "text": "Signups fell by 6% last week.",
    },
}


def test_a_worker_without_alignment_loads_none_of_its_models() -> None:
    settings = load_settings(None, overrides={"suites": ["safe", "extraction"]}, environ={})
    suites = ScoringSuites.load(settings)
    suites.warm_up()
    assert set(suites.case_scorers) == {"safe", "extraction"}
    assert suites.pool_factories() == {}  # no turn scorer: no personas embedded
    assert set(case_scorer_factories(settings)) == {"safe", "extraction"}
    loaded = vars(suites.sessions)  # cached properties land in the instance's dict
    assert not {"embedder", "personas", "patterns"} & set(loaded)


def test_a_worker_with_alignment_reads_its_files_at_start(tmp_path: Path) -> None:
    bad = tmp_path / "patterns.yaml"
    bad.write_text("offensive: [unclosed\n")
    overrides = {"alignment": {"safety_patterns": str(bad)}}
    settings = load_settings(None, overrides=overrides, environ={})
    with pytest.raises(Exception, match="patterns"):
        ScoringSuites.load(settings)  # a bad file fails the start, not every record
    without = load_settings(
        None,
        overrides={"suites": ["safe"], "alignment": {"safety_patterns": str(bad)}},
        environ={},
    )
    ScoringSuites.load(without)  # not read: this worker does not score alignment


def test_a_record_of_a_suite_left_out_is_a_dead_letter_with_its_reason() -> None:
    settings = load_settings(None, overrides={"suites": ["safe"]}, environ={})
    task = (orjson.dumps(TURN), time.time(), ("in", 0, 0, None), 0.0)
    with pytest.raises(Rejected) as rejected:
        score_record(task, settings, {}, {})
    assert rejected.value.reason == UNKNOWN_SUITE
    assert "suites" in rejected.value.message


@pytest.mark.integration
async def test_a_worker_without_alignment_scores_safe_and_dead_letters_turns(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    """On Tansu: `suites: [safe]` scores a SAFE case, dead-letters an alignment turn with
    the reason, and says in its start-up line that it loaded no models."""
    config = make_config(suites=["safe"])
    settings = settings_of(config)
    topics = settings.topics
    await provision(settings, broker.url)
    worker = WorkerProcess(
        write_config(tmp_path / "config.yaml", config), broker.url, tmp_path / "worker.log"
    )
    worker.start()
    try:
        worker.wait_ready()
        safe_case = orjson.loads(SAFE_EXAMPLE.read_text(encoding="utf-8").splitlines()[0])
        records = live([{"id": "c-1", "suite": "safe", "payload": safe_case}, TURN])
        async with TopicReader(broker.bootstrap, topics.results, topics.dead_letters) as reader:
            await produce(broker.bootstrap, topics.input, as_lines(records))
            await reader.until(
                lambda r: r.values(topics.results) and r.values(topics.dead_letters),
                timeout=60,
                what="the SAFE result and the turn's dead letter",
            )
        assert [v["suite"] for v in reader.values(topics.results)] == ["safe"]
        (letter,) = reader.values(topics.dead_letters)
        assert letter["error"]["type"] == UNKNOWN_SUITE
        assert "suites" in letter["error"]["message"]
        startup = re.search(r"start-up .*", worker.log())
        assert startup is not None and "models 0.0 s" in startup.group(0)
        assert "embedding with all-MiniLM-L6-v2" not in worker.log()
    finally:
        worker.stop()
