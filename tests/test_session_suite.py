"""The suite that keeps sessions, as the session stage sees it through the registry."""

from __future__ import annotations

from pathlib import Path

from schemas.envelope import AlignmentSessionPayload, AlignmentTurnPayload
from worker.config import load_settings
from worker.scoring_suites import ScoringSuites
from worker.suites.alignment.embedding_model import HashingEmbedder
from worker.suites.alignment.streaming import AlignmentSessions

PERSONAS = Path(__file__).resolve().parent.parent / "examples" / "personas"


def load(**limits: int) -> AlignmentSessions:
    settings = load_settings(
        environ={}, overrides={"alignment": {"personas_dir": str(PERSONAS)}, "limits": limits}
    )
    sessions = ScoringSuites.load(settings, HashingEmbedder()).sessions
    assert isinstance(sessions, AlignmentSessions)
    return sessions


def test_the_session_text_limit_reaches_the_suite_from_limits() -> None:
    turn = AlignmentTurnPayload(session_id="s", turn_index=0, persona_id="tunetide", text="hi")
    assert load(session_text_bytes=1000).open(turn).text_budget == 1000
    assert load().open(turn).text_budget == 128 * 1024  # the limit's default


def test_turns_of_a_record_and_when_its_session_is_complete() -> None:
    sessions = load()
    whole = AlignmentSessionPayload.model_validate(
        {
            "session_id": "s",
            "persona_id": "tunetide",
            "turns": [{"user": "q", "assistant": "a"}, {"assistant": "b"}],
        }
    )
    turns, is_whole = sessions.turns(whole)
    assert is_whole and [(t.index, t.text, t.user) for t in turns] == [(0, "a", "q"), (1, "b", "")]
    last = AlignmentTurnPayload(
        session_id="s", turn_index=1, persona_id="tunetide", text="b", final=True
    )
    (turn,), is_whole = sessions.turns(last)
    assert not is_whole and (turn.index, turn.final) == (1, True)
    state = sessions.open(last)
    vector = sessions.embed(["b"])[0]
    sessions.add(state, turn, sessions.score_turn(last, vector), vector, now=0.0)
    assert not sessions.is_complete(state, 1)  # turn 0 has not arrived
    restored = sessions.restore(sessions.dump(state))
    assert sessions.turn_count(restored) == 1 and sessions.state_session_id(restored) == "s"
