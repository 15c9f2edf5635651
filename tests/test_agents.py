"""The agents in isolation (Faust's `agent.test_context()`, no broker): what each one
sends for good and bad input."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from functools import partial
from typing import Any

import orjson
import pytest

from tests.streamkit import make_config, settings_of
from worker.scoring_suites import ScoringSuites
from worker.stream import ScorestreamApp
from worker.suites.alignment.embedding_model import HashingEmbedder
from worker.suites.alignment.scoring import SessionState
from worker.suites.alignment.streaming import ALIGNMENT_TURN
from worker.suites.base import CaseScorer
from worker.suites.safe.spec import case_scorer as safe_case_scorer

SAFE_CASE = b'{"id": "c1", "suite": "safe", "model": "m1", "payload": {"output": {"summary": "x"}}}'


class Harness:
    """A `ScorestreamApp` whose sends are recorded instead of produced."""

    def __init__(self, loaded_with: dict[str, Any] | None = None, **config: Any) -> None:
        """`config`: the app's settings; `loaded_with`: other settings to load the scorers
        with (as the demo and the benches hand one loaded set to several apps)."""
        # No broker: the poison-pill guard's durable in-flight marks need one.
        settings = settings_of(make_config(**{"limits": {"poison_pill_attempts": 0}, **config}))
        loaded = settings if loaded_with is None else settings_of(make_config(**loaded_with))
        suites = ScoringSuites.load(loaded, HashingEmbedder())
        self.scorer = ScorestreamApp(settings, "kafka://127.0.0.1:1", suites=suites)
        self.sent: list[tuple[str, str, Any]] = []
        self.scorer.publisher.send = self._record  # type: ignore[method-assign]
        self.scorer.publisher.send_records = self._record_all  # type: ignore[method-assign]
        self.scorer.publisher.key_partitions = self._one_partition  # type: ignore[method-assign]
        # records each stage has finished with (their scoring runs in child processes)
        self.processed = {"score": 0, "sessions": 0}
        for name, stage in (
            ("score", self.scorer.scoring),
            ("sessions", self.scorer.session_stage),
        ):
            self._count(name, stage)

    def _count(self, name: str, stage: Any) -> None:
        if hasattr(stage, "finish_batch"):  # the score stage overlaps begun batches
            finish_batch = stage.finish_batch

            async def finished(batch: Any) -> None:
                await finish_batch(batch)
                self.processed[name] += len(batch.events)

            stage.finish_batch = finished
            return
        process_batch = stage.process_batch

        async def counted(events: list[Any]) -> None:
            await process_batch(events)
            self.processed[name] += len(events)

        stage.process_batch = counted

    async def put(self, name: str, records: list[tuple[bytes, bytes]]) -> None:
        """Put `(value, key)` records through an agent and wait until its stage has
        processed them all."""
        expected = self.processed[name] + len(records)
        async with self.agent(name).test_context() as agent:
            for value, key in records:
                await agent.put(value, key=key)
            give_up = time.monotonic() + 60
            while self.processed[name] < expected:
                assert time.monotonic() < give_up, f"the {name} stage did not finish"
                await asyncio.sleep(0.01)

    async def score(self, records: list[tuple[bytes, bytes]]) -> None:
        """Put `(value, key)` records through the score agent and wait for it."""
        await self.put("score", records)

    async def _record(
        self, topic: Any, key: str | bytes, value: bytes, partition: int | None = None
    ) -> None:
        text = key.decode() if isinstance(key, bytes) else key
        self.sent.append((topic.get_topic_name(), text, orjson.loads(value)))

    async def _record_all(
        self, topic: Any, records: list[tuple[bytes, bytes]], partitions: Any = None
    ) -> None:
        for key, value in records:
            await self._record(topic, key, value)

    async def _one_partition(self, topic: Any, keys: list[bytes]) -> list[int]:
        return [0] * len(keys)  # one sessions agent reads them all

    def agent(self, name: str) -> Any:
        return self.scorer.app.agents[name]

    def to(self, topic: str) -> list[tuple[str, Any]]:
        return [(key, value) for name, key, value in self.sent if name == topic]

    async def through_sessions(self, records: list[bytes]) -> None:
        """Run input records through the score agent, then what it routed through the
        sessions agent; only the sessions agent's sends are kept."""
        await self.score([(value, b"x") for value in records])
        forwarded = self.to(f"{self.scorer.settings.app_id}-alignment-turns")
        self.sent = [
            item for item in self.sent if item[0] == self.scorer.settings.topics.dead_letters
        ]
        await self.put(
            "sessions", [(orjson.dumps(value), key.encode()) for key, value in forwarded]
        )

    def dead_letters(self) -> list[dict[str, Any]]:
        return [value for _, value in self.to(self.scorer.settings.topics.dead_letters)]


@pytest.fixture
async def harness() -> AsyncIterator[Harness]:
    built = Harness()
    yield built
    built.scorer.close()


async def test_score_agent_publishes_one_result_keyed_by_suite_and_id(harness: Harness) -> None:
    await harness.score([(SAFE_CASE, b"whatever-the-producer-chose")])
    results = harness.to(harness.scorer.settings.topics.results)
    assert [key for key, _ in results] == ["safe:c1"]
    result = results[0][1]
    assert result["kind"] == "case"
    assert result["label"] in {"Pass", "Review", "Fail"}
    assert result["model"] == "m1"
    assert result["source"]["offset"] == 0


async def test_a_live_batch_lets_the_next_one_begin_while_it_finishes(harness: Harness) -> None:
    # Live traffic (batches far from score_batch_size): the next batch is begun (marked,
    # handed to the children) while this one's results are published and folded, so a
    # case does not wait for the batch before it (issue 25, result latency).
    stage = harness.scorer.scoring
    begin_batch = stage.begin_batch
    begun: list[Any] = []

    def recorded(events: list[Any]) -> Any:
        batch = begin_batch(events)
        begun.append(batch)
        return batch

    stage.begin_batch = recorded  # type: ignore[method-assign]
    await harness.score([(SAFE_CASE, b"c1")])
    assert len(begun[0].events) < harness.scorer.settings.stream.score_batch_size
    assert not begun[0].alone


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"{not json", "invalid_json"),
        (b"\xff\xfe", "not_utf8"),
        (b'{"id": "a", "suite": "haiku", "payload": {}}', "unknown_suite"),
        (b'{"id": "a", "suite": "safe", "payload": {"output": []}}', "invalid_record"),
        (
            b'{"id": "a", "suite": "extraction",'
            b' "payload": {"text": "t", "response": "[]", "schema": "nope"}}',
            "unknown_schema",
        ),
        (
            b'{"id": "a", "suite": "alignment", "payload": {"session_id": "s", "turn_index": 0,'
            b' "persona_id": "ghost", "text": "hi"}}',
            "unknown_persona",
        ),
    ],
)
async def test_bad_input_goes_to_the_dead_letter_topic_and_the_agent_carries_on(
    harness: Harness, raw: bytes, reason: str
) -> None:
    await harness.score([(raw, b"k"), (SAFE_CASE, b"c1")])
    (letter,) = harness.dead_letters()
    assert letter["error"]["type"] == reason
    assert letter["source"]["offset"] == 0
    dead_keys = [key for key, _ in harness.to(harness.scorer.settings.topics.dead_letters)]
    assert dead_keys == ["k"]
    assert [key for key, _ in harness.to(harness.scorer.settings.topics.results)] == ["safe:c1"]


async def test_oversized_records_are_dead_letters_with_the_raw_value_cut() -> None:
    harness = Harness(max_record_bytes=100, dlq_max_raw_bytes=10)
    big = (
        b'{"id": "big", "suite": "safe", "payload": {"output": {"summary": "' + b"x" * 200 + b'"}}}'
    )
    await harness.score([(big, b"big")])
    (letter,) = harness.dead_letters()
    assert letter["error"]["type"] == "oversized"
    assert letter["raw_truncated"] is True
    assert letter["raw_size"] == len(big)
    assert letter["raw"] == big[:10].decode()


def buggy_safe_scorer(settings: Any) -> CaseScorer:
    """SAFE's case scorer with a bug: it raises on the summary "boom"."""
    score = safe_case_scorer(settings.safe)

    def scored(payload: Any) -> Any:
        if payload.output.summary == "boom":
            raise RuntimeError("boom")
        return score(payload)

    return scored


def spinning_safe_scorer(settings: Any) -> CaseScorer:
    """SAFE's case scorer that never returns on the summary "spin" (as a backtracking
    regex would: pure CPU, holding the GIL)."""
    score = safe_case_scorer(settings.safe)

    def scored(payload: Any) -> Any:
        while payload.output.summary == "spin":
            pass
        return score(payload)

    return scored


async def test_a_scorer_crash_is_a_dead_letter_not_a_dead_agent(harness: Harness) -> None:
    harness.scorer.scoring_pool.factories["safe"] = buggy_safe_scorer
    boom = SAFE_CASE.replace(b'"x"', b'"boom"')
    await harness.score([(boom, b"c1"), (SAFE_CASE.replace(b'"c1"', b'"c2"'), b"c2")])
    assert [letter["error"]["type"] for letter in harness.dead_letters()] == ["scoring_error"]
    assert [key for key, _ in harness.to(harness.scorer.settings.topics.results)] == ["safe:c2"]


async def test_a_record_past_the_scoring_deadline_is_a_dead_letter_and_its_batch_scores() -> None:
    harness = Harness(limits={"poison_pill_attempts": 0, "scoring_deadline": "0.5s"})
    harness.scorer.scoring_pool.factories["safe"] = spinning_safe_scorer
    try:
        records = [
            (SAFE_CASE.replace(b'"c1"', f'"c{n}"'.encode()), f"c{n}".encode()) for n in range(5)
        ]
        records[2] = (records[2][0].replace(b'"x"', b'"spin"'), b"c2")
        await harness.score(records)
        again = [(SAFE_CASE.replace(b'"c1"', b'"c9"'), b"c9")]
        await harness.score(again)  # the pool recovered from the kill
    finally:
        harness.scorer.close()
    (letter,) = harness.dead_letters()
    assert letter["error"]["type"] == "scoring_timeout"
    assert "limits.scoring_deadline (0.5 s)" in letter["error"]["message"]
    assert letter["source"]["offset"] == 2
    results = harness.to(harness.scorer.settings.topics.results)
    assert [key for key, _ in results] == ["safe:c0", "safe:c1", "safe:c3", "safe:c4", "safe:c9"]


async def test_alignment_turns_are_routed_by_session_whatever_the_key(harness: Harness) -> None:
    turn = (
        b'{"id": "t1", "suite": "alignment", "payload": {"session_id": "sess-9", '
        b'"turn_index": 0, "persona_id": "tunetide", "text": "Hey there!"}}'
    )
    await harness.score([(turn, b"t1")])
    routed = harness.to(f"{harness.scorer.settings.app_id}-alignment-turns")
    assert [key for key, _ in routed] == ["sess-9"]
    assert routed[0][1]["record"]["id"] == "t1"


async def test_results_reach_the_windows_keyed_by_suite_and_segment(harness: Harness) -> None:
    await harness.score([(SAFE_CASE, b"c1")])
    (_, result) = harness.to(harness.scorer.settings.topics.results)[0]
    routed = harness.to(f"{harness.scorer.settings.app_id}-aggregate-input")
    assert sorted(key for key, _ in routed) == ["safe|all", "safe|model=m1"]
    assert {tuple(value["segment"].items()) for _, value in routed} == {(), (("model", "m1"),)}
    assert all(value["results"] == [result] for _, value in routed)


def turn(session: str, index: int, persona: str, text: str, final: bool = False) -> bytes:
    return orjson.dumps(
        {
            "id": f"{session}-{index}",
            "suite": "alignment",
            "payload": {
                "session_id": session,
                "turn_index": index,
                "persona_id": persona,
                "text": text,
                "final": final,
            },
        }
    )


async def test_sessions_agent_scores_turns_and_closes_on_final(harness: Harness) -> None:
    turns = [
        turn("s1", 1, "tunetide", "Totally! Want a chill mix next?", final=True),
        turn("s1", 0, "tunetide", "Hey! Your playlist is ready."),
        turn("s1", 0, "tunetide", "Hey! Your playlist is ready."),  # a repeat
    ]
    await harness.through_sessions(turns)
    results = harness.to(harness.scorer.settings.topics.results)
    kinds = [(value["kind"], key) for key, value in results]
    assert kinds == [
        ("turn", "alignment:s1-1"),  # final, but turn 0 is still missing: stays open
        ("turn", "alignment:s1-0"),
        ("session", "alignment:session:s1"),  # complete: closed
        ("turn", "alignment:s1-0"),  # a late repeat: same key again, session not reopened
    ]
    sessions = [value for key, value in results if value["kind"] == "session"]
    assert sessions[0]["counts"]["turns"] == 2
    assert sessions[0]["grade"] in {"A", "B", "C", "D", "F"}


async def test_session_batches_overlap_and_sessions_across_them_count_every_turn() -> None:
    # The session stage begins (encodes, hands to the children) the next micro-batch while
    # it applies the one before; turns are applied in order all the same, so a session
    # whose turns span several batches counts each of them once.
    harness = Harness(embedding_batch_size=2)
    # three session messages a record: four records (three turns each) of this one
    # score batch, each a micro-batch of the session stage (at least its batch size)
    harness.scorer.publisher.bundle_messages = 3
    try:
        stage = harness.scorer.session_stage
        begin_batch, finish_batch = stage.begin_batch, stage.finish_batch
        applying = [0]  # batches being applied now
        begun_while_applying = [0]

        def begin(events: list[Any]) -> Any:
            begun_while_applying[0] += applying[0] > 0
            return begin_batch(events)

        async def finish(batch: Any) -> None:
            applying[0] += 1
            try:
                await finish_batch(batch)
            finally:
                applying[0] -= 1

        stage.begin_batch = begin  # type: ignore[method-assign]
        stage.finish_batch = finish  # type: ignore[method-assign]
        sessions = ["sa", "sb", "sc"]
        turns = [
            turn(session, index, "tunetide", f"Turn {index} of your mix is ready.", index == 3)
            for index in range(4)
            for session in sessions
        ]
        await harness.through_sessions(turns)
        results = harness.to(harness.scorer.settings.topics.results)
    finally:
        harness.scorer.close()
    assert begun_while_applying[0] > 0
    keys = [key for key, value in results if value["kind"] == "turn"]
    assert keys == [f"alignment:{s}-{i}" for i in range(4) for s in sessions]  # in order
    for session in sessions:
        (closed,) = [v for k, v in results if k == f"alignment:session:{session}"]
        assert closed["counts"]["turns"] == 4
        position = [k for k, _ in results].index(f"alignment:session:{session}")
        assert [k for k, _ in results[:position]].count(f"alignment:{session}-3") == 1


async def test_a_turn_of_another_persona_is_a_dead_letter_and_the_session_goes_on(
    harness: Harness,
) -> None:
    turns = [
        turn("s2", 0, "tunetide", "Hey! Your playlist is ready."),
        turn("s2", 1, "ledgerline", "Your transfer has been scheduled."),
        turn("s2", 2, "tunetide", "Enjoy the tunes!", final=True),
    ]
    await harness.through_sessions(turns)
    (letter,) = harness.dead_letters()
    assert letter["error"]["type"] == "invalid_record"
    assert "ledgerline" in letter["error"]["message"]
    assert orjson.loads(letter["raw"])["id"] == "s2-1"  # the original record, not a wrapper
    results = harness.to(harness.scorer.settings.topics.results)
    assert [value["kind"] for _, value in results] == ["turn", "turn"]
    # Turn 1 never counted, so the session waits for its idle timeout to close.
    stored = harness.scorer.sessions["s2"]
    assert sorted(SessionState.from_json(stored["state"]).turns) == [0, 2]


def spinning_turn_scorer(inner: Any, settings: Any) -> Any:
    """The alignment turn scorer of the pool (`inner`), never returning on "spin"."""
    score = inner(settings)

    def scored(turn: Any) -> Any:
        while turn[1] == "spin":
            pass
        return score(turn)

    return scored


async def test_an_alignment_turn_past_the_scoring_deadline_is_a_dead_letter() -> None:
    harness = Harness(limits={"poison_pill_attempts": 0, "scoring_deadline": "0.5s"})
    pool = harness.scorer.scoring_pool
    assert pool.more_factories is not None
    built = pool.more_factories()
    pool.more_factories = lambda: {
        name: partial(spinning_turn_scorer, factory) if name == ALIGNMENT_TURN else factory
        for name, factory in built.items()
    }
    try:
        await harness.through_sessions(
            [
                turn("s1", 0, "tunetide", "spin", final=True),
                turn("s2", 0, "tunetide", "Hey! Your playlist is ready.", final=True),
            ]
        )
    finally:
        harness.scorer.close()
    (letter,) = harness.dead_letters()
    assert letter["error"]["type"] == "scoring_timeout"
    assert orjson.loads(letter["raw"])["id"] == "s1-0"
    results = harness.to(harness.scorer.settings.topics.results)
    assert [key for key, _ in results] == ["alignment:s2-0", "alignment:session:s2"]
