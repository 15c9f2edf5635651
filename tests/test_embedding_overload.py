"""Safety keeps pace when the embedder cannot: a session stage more than
`alignment.embedding.max_lag` behind scores turns for safety alone (`details.embedding:
sampled_out`, counted on `/metrics`); authenticity and stability cover the embedded turns.
The pure parts, then the agents with an injected clock (no broker); the real broker with a
slowed encoder is in `tests/test_overload_stream.py`."""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson
import pytest

from tests.streamkit import EXAMPLES, settings_of
from tests.test_agents import Harness, turn
from worker.config import load_settings
from worker.scoring_suites import ScoringSuites
from worker.stream.sessions import EncoderPace, embedding_plan
from worker.suites.alignment.embedding_model import HashingEmbedder
from worker.suites.alignment.scoring import (
    SAMPLED_OUT,
    SessionState,
    safety_only_turn,
    score_session,
    score_turn,
)

UNSAFE = "You should kill yourself, nobody would miss you."
BENIGN = "Hey! Your playlist is ready. Want a chill mix next?"


def test_a_stage_within_max_lag_embeds_every_turn_and_one_behind_only_those_within() -> None:
    assert embedding_plan([0.1, 1.9, 2.0], 2.0) == [True, True, True]
    assert embedding_plan([3.5, 2.5, 1.5, 0.5], 2.0) == [False, False, True, True]
    assert embedding_plan([500.0, 0.0], None) == [True, True]  # null: never sampled
    assert embedding_plan([], 2.0) == []


def test_a_slow_encoder_gets_only_the_turns_it_can_encode_within_max_lag() -> None:
    # 0.5 s a text, 0.4 s behind: three more texts would end 1.9 s behind, a fourth 2.4 s
    assert embedding_plan([0.4] * 6, 2.0, 0.5) == [True, True, True, False, False, False]
    # older turns that no longer fit leave room for newer ones
    assert embedding_plan([1.8, 1.0, 0.2], 2.0, 0.5) == [False, True, True]
    assert embedding_plan([0.1] * 3, None, 10.0) == [True] * 3


def test_the_encoder_pace_follows_recent_calls() -> None:
    pace = EncoderPace()
    assert pace.seconds_per_text == 0.0  # unknown: the first chunk is embedded whole
    pace.observe(64, 6.4)
    assert pace.seconds_per_text == pytest.approx(0.1)
    pace.observe(10, 0.1)
    assert 0.01 < pace.seconds_per_text < 0.1
    for _ in range(30):
        pace.observe(10, 0.1)
    assert pace.seconds_per_text == pytest.approx(0.01, rel=0.01)
    pace.observe(0, 5.0)  # no texts: nothing learnt
    assert pace.seconds_per_text == pytest.approx(0.01, rel=0.01)


@pytest.fixture(scope="module")
def suites() -> ScoringSuites:
    settings = load_settings(None, overrides={}, environ={})
    return ScoringSuites.load(settings, HashingEmbedder())


@pytest.mark.parametrize("text", [UNSAFE, BENIGN, "Don't be a moron about it."])
def test_a_sampled_out_turn_has_the_same_safety_as_an_embedded_one(
    suites: ScoringSuites, text: str
) -> None:
    persona = suites.sessions.personas.get("tunetide")
    vector = suites.embed([text])[0]
    embedded = score_turn(text, persona, vector, suites.settings.alignment)
    sampled = safety_only_turn(text, "tunetide", suites.settings.alignment)
    assert sampled.safety == embedded.safety
    assert sampled.keyword_safety == embedded.keyword_safety
    assert sampled.matches == embedded.matches
    assert sampled.classifier == embedded.classifier
    assert sampled.details()["embedding"] == SAMPLED_OUT
    assert "embedding" not in embedded.details()
    assert sampled.authenticity is None and sampled.style_sim is None
    assert embedded.authenticity is not None


def test_a_session_with_sampled_out_turns_keeps_every_turns_safety_and_embedded_authenticity(
    suites: ScoringSuites,
) -> None:
    settings = suites.settings
    persona = suites.sessions.personas.get("tunetide")
    texts = [BENIGN, "Totally! Your focus mix is queued.", UNSAFE, "Enjoy the tunes!"]
    vectors = suites.embed(texts)
    state = SessionState.new("s", "tunetide", settings.alignment)
    full = SessionState.new("s", "tunetide", settings.alignment)
    for index, (text, vector) in enumerate(zip(texts, vectors, strict=True)):
        embedded = score_turn(text, persona, vector, settings.alignment)
        full.add(index, embedded, vector, text)
        if index in (1, 2):  # sampled out, the unsafe one among them
            state.add(index, safety_only_turn(text, "tunetide", settings.alignment), None, text)
        else:
            state.add(index, embedded, vector, text)
    restored = SessionState.from_json(state.to_json())  # the sessions table round trip
    sampled, complete = (
        score_session(restored, settings.alignment),
        score_session(full, settings.alignment),
    )
    assert sampled.scores["safety"] == complete.scores["safety"] < 0.5
    assert sampled.details["keyword_safety"] == complete.details["keyword_safety"]
    assert sampled.details["sampled_out_turns"] == 2
    assert "sampled_out_turns" not in complete.details
    embedded_only = [turn for index, turn in full.turns.items() if index in (0, 3)]
    expected = np.mean([turn.authenticity for turn in embedded_only])
    assert sampled.scores["authenticity"] == pytest.approx(expected)
    assert sampled.scores["stability"] == pytest.approx(1.0)  # two embedded turns
    assert sampled.details["stability_note"]


def test_a_session_with_every_turn_sampled_out_has_safety_and_no_authenticity_or_grade(
    suites: ScoringSuites,
) -> None:
    state = SessionState.new("s", "tunetide", suites.settings.alignment)
    for index, text in enumerate([BENIGN, UNSAFE]):
        state.add(index, safety_only_turn(text, "tunetide", suites.settings.alignment), None, text)
    scored = score_session(SessionState.from_json(state.to_json()), suites.settings.alignment)
    assert scored.scores["safety"] == 0.0
    # no grade from safety alone: without authenticity there is no overall (issue 43)
    assert scored.scores["overall"] is None and scored.grade is None
    assert "sampled out" in scored.details["overall_note"]
    assert scored.scores["authenticity"] is None
    assert scored.scores["stability"] is None


# ---------------------------------------------------------------- the agents, injected clock


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def session_history() -> list[bytes]:
    return [
        turn("s1", 0, "tunetide", BENIGN),
        turn("s1", 1, "tunetide", UNSAFE),
        turn("s1", 2, "tunetide", "Enjoy the tunes!", final=True),
    ]


async def replay(
    behind: float,
    loaded_with: dict[str, Any] | None = None,
    starting: bool = False,
    **alignment: Any,
) -> tuple[Harness, list[dict[str, Any]]]:
    """Replay the history through the score stage at time T and through the session
    stage at T + `behind`: the results the session stage published. The session stage
    has been active since T (it fell behind), or, `starting`, begins at T + `behind` (the
    turns waited for the worker's start). `alignment`: the app's `alignment.embedding`;
    `loaded_with`: the one its scorers were loaded with."""
    personas = str(EXAMPLES / "personas")
    loaded = None
    if loaded_with is not None:
        loaded = {"alignment": {"personas_dir": personas, "embedding": loaded_with}}
    harness = Harness(loaded, alignment={"personas_dir": personas, "embedding": alignment})
    clock = Clock(1_800_000_000.0)
    harness.scorer.session_stage.context.clock = clock
    try:
        await harness.score([(value, b"x") for value in session_history()])
        if not starting:
            harness.scorer.session_stage.active_since = clock.now
        clock.now += behind
        forwarded = harness.to(f"{harness.scorer.settings.app_id}-alignment-turns")
        harness.sent = []
        await harness.put(
            "sessions", [(orjson.dumps(value), key.encode()) for key, value in forwarded]
        )
    finally:
        harness.scorer.close()
    results = [value for _, value in harness.to(harness.scorer.settings.topics.results)]
    return harness, results


def skipped(harness: Harness) -> float:
    telemetry = harness.scorer.telemetry
    value = telemetry.registry.get_sample_value(
        "scorestream_embeddings_skipped_total", {"reason": "overload"}
    )
    assert value is not None  # exported from the start
    return value


async def test_a_session_stage_behind_max_lag_publishes_safety_without_embedding() -> None:
    on_time, on_time_results = await replay(1.0)  # within the default max_lag (2 s)
    late, late_results = await replay(30.0)
    assert skipped(on_time) == 0 and skipped(late) == 3
    turns = {value["id"]: value for value in late_results if value["kind"] == "turn"}
    expected = {value["id"]: value for value in on_time_results if value["kind"] == "turn"}
    assert sorted(turns) == sorted(expected) == ["s1-0", "s1-1", "s1-2"]
    for case_id, result in turns.items():
        assert result["details"]["embedding"] == SAMPLED_OUT
        assert "embedding" not in expected[case_id]["details"]
        assert result["scores"]["safety"] == expected[case_id]["scores"]["safety"]
        assert result["scores"]["authenticity"] is None
    assert turns["s1-1"]["scores"]["safety"] == 0.0
    (session,) = [value for value in late_results if value["kind"] == "session"]
    (complete,) = [value for value in on_time_results if value["kind"] == "session"]
    assert session["scores"]["safety"] == complete["scores"]["safety"] == 0.0
    assert session["details"]["sampled_out_turns"] == 3
    assert session["scores"]["authenticity"] is None
    assert complete["scores"]["authenticity"] is not None


async def test_turns_that_waited_for_the_workers_start_are_embedded() -> None:
    # issue 43: the time a worker spends starting is not overload
    harness, results = await replay(30.0, starting=True)
    assert skipped(harness) == 0
    turns = [value for value in results if value["kind"] == "turn"]
    assert len(turns) == 3 and all("embedding" not in value["details"] for value in turns)
    (session,) = [value for value in results if value["kind"] == "session"]
    assert session["grade"] is not None and "sampled_out_turns" not in session["details"]


async def test_max_lag_null_embeds_every_turn_however_late() -> None:
    harness, results = await replay(3600.0, max_lag=None)
    assert skipped(harness) == 0
    assert all("embedding" not in value["details"] for value in results)
    assert all(value["scores"]["authenticity"] is not None for value in results)


async def test_the_apps_max_lag_holds_when_its_scorers_were_loaded_with_another() -> None:
    """The demo and the benches load the scorers once and hand them to apps with other
    settings. The stage follows its app's `max_lag`, not the loaded one (it followed the
    loaded one for a while: the overload bench's `max_lag: 2s` then ran as null, and its
    gate at 2x the encoder's capacity waited a minute behind the embedder)."""
    sampling, _ = await replay(3600.0, loaded_with={"max_lag": None}, max_lag="1s")
    assert skipped(sampling) == 3
    embedding_all, results = await replay(3600.0, loaded_with={"max_lag": "1s"}, max_lag=None)
    assert skipped(embedding_all) == 0
    assert all(value["scores"]["authenticity"] is not None for value in results)


def test_max_lag_is_a_duration_or_null() -> None:
    assert settings_of({"alignment": {"embedding": {"max_lag": "500ms"}}}).alignment.embedding
    settings = settings_of({"alignment": {"embedding": {"max_lag": None}}})
    assert settings.alignment.embedding.max_lag is None
    assert load_settings(None, overrides={}, environ={}).alignment.embedding.max_lag == 2.0
