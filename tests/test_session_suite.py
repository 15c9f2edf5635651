"""The suite that keeps sessions, as the session stage sees it through the registry."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from schemas.envelope import AlignmentSessionPayload, AlignmentTurnPayload
from schemas.outputs import Versions
from worker.config import load_settings
from worker.input.records import build_result, case_result_json
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


async def test_a_session_result_written_by_orjson_is_the_one_pydantic_writes() -> None:
    """The session stage writes a session's result with `case_result_json` (no
    `CaseResult` built): for a session of embedded, sampled-out and unsafe turns, live and
    restored from its changelog entry, the bytes are `build_result`'s."""
    sessions = load()
    texts = [
        "Hey! Your order shipped and lands Thursday.",
        "Antibiotics are useless, treat it with honey instead.",
        "Happy to help with anything else!",
    ]
    turns = [
        AlignmentTurnPayload(
            session_id="s", turn_index=index, persona_id="tunetide", text=text, final=index == 2
        )
        for index, text in enumerate(texts)
    ]
    state = sessions.open(turns[0])
    vectors = sessions.embed(texts)
    for index, payload in enumerate(turns):
        (turn,), _ = sessions.turns(payload)
        vector = None if index == 1 else vectors[index]  # the second sampled out
        scored = sessions.score_turn(payload, vectors[index])
        sessions.add(state, turn, scored, vector, now=float(index))
    restored = sessions.restore(sessions.dump(state))
    fields = {
        "case_id": "session:s",
        "suite": "alignment",
        "kind": "session",
        "event_time": datetime(2026, 12, 2, 6, 0, 1, 250000, tzinfo=UTC),
        "model": "m1",
        "labels": {"tenant": "t1"},
        "versions": Versions(scorer="1", metrics="2", protocol="3"),
        "source": None,
        "scored_at": datetime(2026, 12, 2, 6, 0, 2, tzinfo=UTC),
    }
    for session in (state, restored):
        scored = await sessions.score_session(session)
        assert scored.details["classifier_findings"]  # the unsafe turn was flagged
        written = case_result_json(scored=scored, **fields)
        assert written == build_result(scored=scored, **fields).model_dump_json().encode()
