"""The gate field catalog names exactly what the scorers and aggregators emit."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from schemas.envelope import ExtractionPayload, SafePayload
from worker.config import ExtractionSettings, SafeSettings, load_settings
from worker.gates.fields import RATE_METRICS, SCORE_METRICS, gate_metrics, stat_problem
from worker.suites.alignment.personas import Persona
from worker.suites.alignment.safety import parse_patterns
from worker.suites.alignment.scoring import SessionState, score_session, score_turn
from worker.suites.extraction import ExtractionAggregator, ExtractionContext
from worker.suites.extraction import score_case as score_extraction
from worker.suites.safe import SafeAggregator
from worker.suites.safe import score_case as score_safe

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_safe_names_match_the_scorer_and_its_figures() -> None:
    line = (EXAMPLES / "safe" / "I25_batch_1.jsonl").read_text(encoding="utf-8").splitlines()[0]
    scored = score_safe(SafePayload.model_validate(json.loads(line)), SafeSettings())
    assert set(scored.scores) == set(SCORE_METRICS["safe"])
    aggregator = SafeAggregator()
    figures = aggregator.figures(aggregator.update(aggregator.initialise(), scored))
    assert set(figures["pass_rates"]) | {"pass_rate"} == set(RATE_METRICS["safe"])


def test_extraction_names_match_the_scorer_and_its_figures() -> None:
    payload = ExtractionPayload.model_validate({"text": "t", "gold": [], "response": "[]"})
    scored = score_extraction(payload, ExtractionContext(ExtractionSettings()))
    assert set(scored.scores) == set(SCORE_METRICS["extraction"])
    aggregator = ExtractionAggregator()
    figures = aggregator.figures(aggregator.update(aggregator.initialise(), scored))
    assert set(RATE_METRICS["extraction"]) <= set(figures["metrics"])


def test_alignment_names_match_turn_and_session_scores(tmp_path: Path) -> None:
    settings = load_settings(environ={}, safe_config_json=tmp_path / "none.json")
    persona = Persona(
        id="p",
        display_name="P",
        examples=("a",),
        traits={},
        lexicon=None,
        example_vectors=np.array([[1.0, 0.0]], dtype=np.float32),
    )
    vector = np.array([1.0, 0.0], dtype=np.float32)
    patterns = parse_patterns({"x": [{"pattern": "never ever", "severity": "low"}]}, "inline")
    turn = score_turn("hello", persona, vector, settings.alignment, patterns)
    state = SessionState.new("s", "p", settings.alignment)
    state.add(0, turn, vector, text="hello")
    session = score_session(state, settings.alignment)
    assert set(turn.scores()) | set(session.scores) == set(SCORE_METRICS["alignment"])


@pytest.mark.parametrize("suite", ["safe", "extraction", "alignment"])
def test_every_summary_metric_takes_every_summary_stat(suite: str) -> None:
    for stat in ("mean", "min", "max", "std", "ci_low", "ci_high"):
        assert gate_metrics(suite, stat) == SCORE_METRICS[suite]
    assert stat_problem(suite, SCORE_METRICS[suite][0], "count") is None
