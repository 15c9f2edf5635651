"""A record of the suite that keeps sessions is read once, by its scoring process: it
says the record's session, event time and what the early gates count, and the score
stage forwards the record's own bytes in the session stage's message, so the loop
neither decodes nor writes the record again (issue 45, item 3)."""

from __future__ import annotations

import time
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from schemas.envelope import AlignmentRecord
from worker.config import load_settings
from worker.gates.early import EarlyTurns
from worker.input.rejections import UNKNOWN_PERSONA, Rejected
from worker.input.scored_records import (
    NOT_A_CASE,
    SessionRecord,
    bundled_messages,
    judge_samples,
    score_record,
    session_bundle,
    session_message,
    session_messages,
)
from worker.suites.alignment.streaming import (
    ALIGNMENT_EARLY,
    ALIGNMENT_FORWARD,
    AlignmentForwarder,
)

PERSONAS = ["ledgerline", "northwind-analytics", "tunetide"]
TS = 1767225604000
TURN: dict[str, Any] = {
    "id": "t-1",
    "suite": "alignment",
    "ts": TS,
    "model": "m1",
    "labels": {"team": "search"},
    "trace_id": "0af7651916cd43dd8448eb211c80319c",
    "payload": {
        "session_id": "s-1",
        "turn_index": 0,
        "persona_id": "northwind-analytics",
        "text": "Signups fell by 6% last week.",
    },
}


class SampleEverything:
    """An early judge that samples every turn and judges each safe."""

    def __call__(self, record: Any, share: float) -> EarlyTurns:
        return EarlyTurns(1, None, [(record.payload.persona_id, record.payload.text, None)])

    def judge(self, items: list[Any]) -> list[dict[str, float | None]]:
        return [{"safety": 1.0} for _ in items]


def task(record: dict[str, Any], received: float) -> tuple[bytes, float, Any, float]:
    return (orjson.dumps(record), received, ("in", 2, 41, None), 0.0)


def test_the_scoring_process_reads_what_the_stage_forwards() -> None:
    settings = load_settings(None, overrides={}, environ={})
    received = time.time()
    scorers = {ALIGNMENT_FORWARD: AlignmentForwarder(PERSONAS)}
    read = score_record(task(TURN, received), settings, scorers, {})
    assert isinstance(read, SessionRecord)
    assert read.session_id == "s-1"
    assert read.event_time == TS / 1000
    assert (read.model, read.labels) == ("m1", {"team": "search"})
    assert read.case == ("t-1", "turn", "m1", TURN["trace_id"])
    assert read.early is None  # no gate judges a sample


def test_the_message_carries_the_record_as_it_came() -> None:
    """What the session stage reads back: the same record, with the fields the input had
    and the model does not know (reported on the turn's result), where it was read and
    when."""
    record = {
        **TURN,
        "extra_top": [1, 2],
        "payload": {**TURN["payload"], "tone": "warm", "text": "Ça baisse — 6 %\n\tnet."},
    }
    raw = b"  " + orjson.dumps(record, option=orjson.OPT_INDENT_2) + b"\n"
    data = orjson.loads(session_message(raw, ("in", 2, 41), TS / 1000, 12.5))
    assert data["record"] == record
    where = (data["source"], data["event_time"], data["received"])
    assert where == (["in", 2, 41], TS / 1000, 12.5)
    validated = AlignmentRecord.model_validate(data["record"], strict=False)
    assert validated == AlignmentRecord.model_validate(record)
    assert validated.payload.model_extra == {"tone": "warm"}


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)


@given(st.dictionaries(st.text(max_size=8), JSON_VALUES, max_size=6), st.booleans())
def test_any_json_object_comes_back_unchanged(record: dict[str, Any], indented: bool) -> None:
    raw = orjson.dumps(record, option=orjson.OPT_INDENT_2 if indented else None)
    data = orjson.loads(session_message(raw, ("t", 0, 7), 1.0, 2.0))
    assert data == {"source": ["t", 0, 7], "event_time": 1.0, "received": 2.0, "record": record}


def test_an_unknown_persona_is_rejected_in_the_scoring_process() -> None:
    settings = load_settings(None, overrides={}, environ={})
    stranger = {**TURN, "payload": {**TURN["payload"], "persona_id": "nobody"}}
    scorers = {ALIGNMENT_FORWARD: AlignmentForwarder(PERSONAS)}
    with pytest.raises(Rejected) as rejected:
        score_record(task(stranger, time.time()), settings, scorers, {})
    assert rejected.value.reason == UNKNOWN_PERSONA
    assert "'nobody'" in rejected.value.message and "northwind-analytics" in rejected.value.message


def test_the_early_sample_is_judged_with_the_record() -> None:
    gate = {"name": "drop", "suite": "alignment", "metric": "safety", "stat": "mean"}
    gates = [{**gate, "op": "<", "threshold": 0.9}]
    overrides = {"gates": gates, "early_gates": {"sample": 1.0}}
    settings = load_settings(None, overrides=overrides, environ={})
    scorers: dict[str, Any] = {
        ALIGNMENT_FORWARD: AlignmentForwarder(PERSONAS),
        ALIGNMENT_EARLY: SampleEverything(),
    }
    read = score_record(task(TURN, time.time()), settings, scorers, {})
    assert isinstance(read, SessionRecord) and read.early is not None
    assert read.early.pending and read.early.scores is None
    (judged,) = judge_samples([read], scorers)
    assert isinstance(judged, SessionRecord)
    assert judged.early == EarlyTurns(1, [{"safety": 1.0}])
    assert judged._replace(early=None) == read._replace(early=None)


def test_without_a_forwarder_the_stage_decodes_the_record_itself() -> None:
    settings = load_settings(None, overrides={"early_gates": {"sample": 0.0}}, environ={})
    assert score_record(task(TURN, time.time()), settings, {}, {}) == NOT_A_CASE


_MESSAGES = st.lists(
    st.dictionaries(
        st.text(max_size=5), st.integers(-(2**40), 2**40) | st.text(max_size=8), max_size=3
    ),
    min_size=1,
    max_size=40,
)


@given(_MESSAGES)
def test_a_bundle_reads_back_as_its_messages_in_order(messages: list[dict[str, Any]]) -> None:
    key, value = session_bundle([orjson.dumps(message) for message in messages])
    assert bundled_messages(key) == len(messages)
    assert session_messages(orjson.loads(value)) == messages


def test_a_record_that_is_not_a_bundle_is_one_message() -> None:
    for key in (b"session-7", None, b"bundle:", b"bundle:x", b"bundle:0"):
        assert bundled_messages(key) == 1
    marker = {"markers": [[0, 1.5]]}
    assert session_messages(marker) == [marker]
    assert session_messages([1, 2]) == [[1, 2]]  # not a worker's: the stage reports it
