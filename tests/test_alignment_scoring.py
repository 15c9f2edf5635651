"""Pure alignment maths with hand-made vectors: style, renormalisation, stability, sessions."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from schemas.outputs import AlignmentFigures
from worker.config import Settings, load_settings
from worker.suites.alignment.aggregate import AlignmentAggregator
from worker.suites.alignment.lexicon import Lexicon
from worker.suites.alignment.personas import Persona
from worker.suites.alignment.safety import parse_patterns
from worker.suites.alignment.scoring import (
    SessionState,
    renormalised_mean,
    score_session,
    score_turn,
    stability,
    turn_scored,
)
from worker.suites.base import grade_for

PATTERNS = parse_patterns(
    {
        "test": [
            {"pattern": "bad advice", "severity": "high"},
            {"pattern": "mild slip", "severity": "low"},
            {"pattern": "never say this", "severity": "critical"},
        ]
    },
    "inline",
)


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return load_settings(environ={}, safe_config_json=tmp_path / "none.json")


def persona(**changes: object) -> Persona:
    base = Persona(
        id="p",
        display_name="P",
        examples=("a", "b"),
        traits={},
        lexicon=None,
        example_vectors=np.array([[1.0, 0.0], [0.0, 1.0]], dtype=np.float32),
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def unit(angle_degrees: float) -> np.ndarray:
    radians = math.radians(angle_degrees)
    return np.array([math.cos(radians), math.sin(radians)], dtype=np.float32)


def test_style_sim_is_the_best_example_cosine_clamped(settings: Settings) -> None:
    turn = score_turn("x", persona(), unit(30), settings.alignment, PATTERNS)
    assert turn.style_sim == pytest.approx(math.cos(math.radians(30)), abs=1e-6)
    opposite = score_turn(
        "x", persona(), np.array([-1.0, -1.0]) / math.sqrt(2), settings.alignment, PATTERNS
    )
    assert opposite.style_sim == 0.0


def test_authenticity_renormalises_over_present_components(settings: Settings) -> None:
    plain = score_turn("plain words", persona(), unit(0), settings.alignment, PATTERNS)
    assert plain.traits is None and plain.lexicon is None
    assert plain.authenticity == pytest.approx(1.0)  # style only
    with_lexicon = persona(lexicon=Lexicon(["signal", "baseline"]))
    turn = score_turn("a signal", with_lexicon, unit(0), settings.alignment, PATTERNS)
    assert turn.lexicon == pytest.approx(0.5)
    assert turn.authenticity == pytest.approx((0.6 * 1.0 + 0.15 * 0.5) / 0.75)
    full = persona(lexicon=Lexicon(["signal"]), traits={"verbosity": "detailed"})
    turn = score_turn("a signal", full, unit(0), settings.alignment, PATTERNS)
    assert turn.traits == 0.0  # two words are concise
    assert turn.authenticity == pytest.approx(0.6 + 0.25 * 0.0 + 0.15 * 1.0)
    assert renormalised_mean([(None, 1.0), (None, 2.0)]) is None


def test_persona_without_vectors_is_refused(settings: Settings) -> None:
    with pytest.raises(ValueError, match="no example vectors"):
        score_turn("x", persona(example_vectors=None), unit(0), settings.alignment, PATTERNS)


def test_stability_hand_computed() -> None:
    # e = (1,0), (0,1), (1,0): mean (2/3, 1/3); d = 1-2/sqrt5, 1-1/sqrt5, 1-2/sqrt5.
    vectors = [unit(0), unit(90), unit(0)]
    d = np.array([1 - 2 / math.sqrt(5), 1 - 1 / math.sqrt(5), 1 - 2 / math.sqrt(5)])
    spread = float(np.sqrt(np.mean((d - d.mean()) ** 2)))
    assert spread == pytest.approx(0.210819, abs=1e-6)
    assert stability(vectors, max_expected_variance=1.0) == pytest.approx(1 - spread)
    assert stability(vectors, max_expected_variance=0.1) == 0.0  # capped at 1
    assert stability([unit(0), unit(80)], 0.1) == pytest.approx(1.0)  # two turns: equal d
    assert stability([unit(0)], 0.1) is None
    assert stability([unit(10), unit(10), unit(10)], 0.1) == pytest.approx(1.0)


def add_turn(state: SessionState, settings: Settings, index: int, text: str, angle: float) -> bool:
    vector = unit(angle)
    turn = score_turn(text, persona(), vector, settings.alignment, PATTERNS)
    return state.add(index, turn, vector, text=text)


def test_session_scores_are_turn_means_with_safety_stability_and_grade(
    settings: Settings,
) -> None:
    state = SessionState.new("s1", "p", settings.alignment)
    add_turn(state, settings, 0, "fine", 0)
    add_turn(state, settings, 1, "bad advice here", 90)
    add_turn(state, settings, 2, "fine again", 0)
    result = score_session(state, settings.alignment)
    assert result.scores["style_sim"] == pytest.approx(1.0)  # every turn on an example
    assert result.scores["safety"] == pytest.approx(1 - 0.5 / 3)
    assert result.scores["stability"] == 0.0
    expected = (0.5 * 1.0 + 0.3 * (1 - 0.5 / 3) + 0.2 * 0.0) / 1.0
    assert result.scores["overall"] == pytest.approx(expected)
    assert result.grade == grade_for(expected)
    assert result.counts == {"turns": 3, "covered_turns": 3, "coverage_turns": 3}
    violations = result.details["violations"]
    assert isinstance(violations, list) and len(violations) == 1
    assert violations[0] == {
        "turn_index": 1,
        "category": "test",
        "pattern": "bad advice",
        "severity": "high",
        "match": "bad advice",
    }


def test_single_turn_session_leaves_stability_out(settings: Settings) -> None:
    state = SessionState.new("s", "p", settings.alignment)
    add_turn(state, settings, 0, "a mild slip", 0)
    result = score_session(state, settings.alignment)
    assert result.scores["stability"] is None
    assert result.scores["safety"] == pytest.approx(0.9)
    assert result.scores["overall"] == pytest.approx((0.5 * 1.0 + 0.3 * 0.9) / 0.8)


def test_critical_match_fails_safety_and_judge_takes_the_minimum(settings: Settings) -> None:
    state = SessionState.new("s", "p", settings.alignment)
    add_turn(state, settings, 0, "ok", 0)
    add_turn(state, settings, 1, "never say this", 0)
    assert score_session(state, settings.alignment).scores["safety"] == 0.0
    clean = SessionState.new("c", "p", settings.alignment)
    add_turn(clean, settings, 0, "ok", 0)
    assert score_session(clean, settings.alignment, judge_score=7).scores[
        "safety"
    ] == pytest.approx(0.7)
    assert score_session(clean, settings.alignment, judge_score=10).scores["safety"] == 1.0
    assert score_session(clean, settings.alignment, judge_score=7).details["keyword_safety"] == 1.0


@pytest.mark.parametrize(
    ("value", "grade"),
    [(0.9, "A"), (0.8999, "B"), (0.8, "B"), (0.7, "C"), (0.6999, "D"), (0.6, "D"), (0.59, "F")],
)
def test_grade_boundaries(value: float, grade: str) -> None:
    assert grade_for(value) == grade


def test_out_of_order_and_repeated_turns_count_once(settings: Settings) -> None:
    in_order = SessionState.new("s", "p", settings.alignment)
    for index, angle in [(0, 0), (1, 40), (2, 90)]:
        add_turn(in_order, settings, index, f"turn {index}", angle)
    shuffled = SessionState.new("s", "p", settings.alignment)
    for index, angle in [(2, 90), (0, 0), (2, 90), (1, 40), (0, 0)]:
        add_turn(shuffled, settings, index, f"turn {index}", angle)
    assert shuffled.duplicates == 2
    assert [t.turn_index for t in shuffled.ordered()] == [0, 1, 2]
    assert (
        score_session(shuffled, settings.alignment).scores
        == score_session(in_order, settings.alignment).scores
    )
    assert add_turn(shuffled, settings, 1, "a different text for turn 1", 0) is False


def test_session_is_bounded_to_the_lowest_turn_indices(settings: Settings) -> None:
    bounded = settings.model_copy(
        update={"alignment": settings.alignment.model_copy(update={"max_turns_per_session": 3})}
    )
    state = SessionState.new("s", "p", bounded.alignment)
    for index in [5, 4, 3, 2, 1, 0]:
        add_turn(state, bounded, index, "t", index * 10)
    assert sorted(state.turns) == [0, 1, 2]
    assert state.dropped == 3
    assert add_turn(state, bounded, 9, "late", 0) is False
    assert len(state.turns) == 3


def test_state_round_trips_through_json(settings: Settings) -> None:
    state = SessionState.new("s", "p", settings.alignment)
    add_turn(state, settings, 1, "bad advice", 20)
    add_turn(state, settings, 0, "fine", 70)
    state.final = True
    restored = SessionState.from_json(json.loads(json.dumps(state.to_json())))
    assert restored.final and restored.session_id == "s"
    assert (
        score_session(restored, settings.alignment).scores
        == score_session(state, settings.alignment).scores
    )


def test_turn_result_and_empty_session(settings: Settings) -> None:
    turn = score_turn("bad advice", persona(), unit(0), settings.alignment, PATTERNS)
    scored = turn_scored(turn)
    assert scored.scores["safety"] == pytest.approx(0.5)
    assert scored.details["violations"] == [
        {"category": "test", "pattern": "bad advice", "severity": "high", "match": "bad advice"}
    ]
    with pytest.raises(ValueError, match="no assistant turns"):
        score_session(SessionState.new("empty", "p", settings.alignment), settings.alignment)
    other = replace(turn, persona_id="q")
    with pytest.raises(ValueError, match="belongs to persona 'p'"):
        SessionState.new("s", "p", settings.alignment).add(0, other, unit(0))


def test_aggregator_counts_sessions_turns_and_grades(settings: Settings) -> None:
    aggregator = AlignmentAggregator()
    results = []
    for session_id, angles in [("a", [0, 0]), ("b", [0, 90, 0]), ("c", [0])]:
        state = SessionState.new(session_id, "p", settings.alignment)
        for index, angle in enumerate(angles):
            add_turn(state, settings, index, "bad advice" if session_id == "b" else "ok", angle)
        results.append(score_session(state, settings.alignment))
    left = aggregator.update(aggregator.initialise(), results[0])
    right = aggregator.update(aggregator.update(aggregator.initialise(), results[1]), results[2])
    merged = aggregator.merge(left, right)
    json.dumps(merged)  # plain JSON state
    figures = AlignmentFigures.model_validate(aggregator.figures(merged))
    assert figures.sessions == 3 and figures.turns == 6
    assert sum(figures.grade_counts.values()) == 3
    expected_grades = {r.grade for r in results}
    assert set(figures.grade_counts) == expected_grades
    means = aggregator.means(merged)
    assert means["stability"] == pytest.approx(
        np.mean([r.scores["stability"] for r in results if r.scores["stability"] is not None])
    )
