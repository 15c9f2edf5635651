"""The safety judge against a real chat-completions server on 127.0.0.1."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from schemas.envelope import AlignmentTurnPayload
from worker.config import JudgeSettings, load_settings
from worker.suites.alignment import make_batch_scorer
from worker.suites.alignment.embedding_model import HashingEmbedder
from worker.suites.alignment.judge_client import JudgeAnswerError, SafetyJudge, parse_judge_answer
from worker.suites.alignment.scoring import SessionState, score_turn, session_transcript
from worker.suites.base import BatchItem, BatchOptions


class FakeCompletions:
    """A loopback OpenAI-style server; each request takes the next scripted behaviour."""

    def __init__(self) -> None:
        self.script: list[tuple[str, Any]] = []
        self.default: tuple[str, Any] = ("answer", '{"score": 9, "reason": "fine"}')
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with fake.lock:
                    fake.requests.append(body)
                    fake.headers.append(dict(self.headers))
                    kind, value = fake.script.pop(0) if fake.script else fake.default
                if self.path != "/v1/chat/completions":
                    kind, value = "status", 404
                if kind == "sleep":
                    time.sleep(value)
                    kind, value = "answer", '{"score": 1}'
                if kind == "status":
                    self.send_response(value)
                    self.end_headers()
                    return
                if kind == "answer":
                    payload = json.dumps(
                        {"choices": [{"message": {"role": "assistant", "content": value}}]}
                    ).encode()
                else:  # raw bytes, not a completion at all
                    payload = value.encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self.thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def server() -> Iterator[FakeCompletions]:
    fake = FakeCompletions()
    yield fake
    fake.close()


def settings_for(server: FakeCompletions, **changes: Any) -> JudgeSettings:
    values: dict[str, Any] = {
        "base_url": server.base_url,
        "model": "judge-1",
        "timeout": 2.0,
        "retries": 2,
        "backoff": 0.01,
    }
    values.update(changes)
    return JudgeSettings.model_validate(values)


async def test_a_score_is_parsed_and_the_prompt_carries_the_transcript(
    server: FakeCompletions,
) -> None:
    server.script = [("answer", '```json\n{"score": 3, "reason": "risky advice"}\n```')]
    async with SafetyJudge(settings_for(server), api_key="secret") as judge:
        verdict = await judge.judge("Take out a loan to invest.")
    assert verdict.score == 3.0 and verdict.reason == "risky advice"
    request = server.requests[0]
    assert request["model"] == "judge-1"
    assert "Take out a loan to invest." in request["messages"][-1]["content"]
    assert server.headers[0]["Authorization"] == "Bearer secret"


async def test_identical_texts_are_asked_once(server: FakeCompletions) -> None:
    async with SafetyJudge(settings_for(server), api_key="") as judge:
        verdicts = await judge.judge_many(["same", "same", "other", "same"])
        again = await judge.judge("same")
    assert [v.score for v in verdicts] == [9.0] * 4
    assert again.cached
    assert len(server.requests) == 2
    assert judge.stats.cache_hits == 3


async def test_the_cache_keeps_the_most_recently_used_verdicts_up_to_its_size(
    server: FakeCompletions,
) -> None:
    async with SafetyJudge(settings_for(server, cache_size=3), api_key="") as judge:
        for index in range(50):
            await judge.judge(f"session {index}")
        assert judge.cache_len == 3  # bounded however many sessions were judged
        await judge.judge("session 47")  # recently used: answered from the cache
        assert len(server.requests) == 50
        await judge.judge("session 48")  # touch 48: now 49 is the least recently used
        await judge.judge("session 1")  # long evicted: asked again, evicts 49
        assert len(server.requests) == 51
        await judge.judge("session 49")
        assert len(server.requests) == 52
        await judge.judge("session 48")
        assert len(server.requests) == 52


async def test_server_errors_are_retried_then_succeed(server: FakeCompletions) -> None:
    server.script = [("status", 500), ("status", 429), ("answer", '{"score": 6}')]
    async with SafetyJudge(settings_for(server), api_key="") as judge:
        verdict = await judge.judge("text")
    assert verdict.score == 6.0
    assert len(server.requests) == 3
    assert judge.stats.judge_errors == 0


async def test_persistent_failure_counts_one_judge_error(server: FakeCompletions) -> None:
    server.default = ("status", 503)
    async with SafetyJudge(settings_for(server, retries=1), api_key="") as judge:
        verdict = await judge.judge("text")
    assert verdict.score is None and verdict.error == "HTTP 503"
    assert len(server.requests) == 2
    assert judge.stats.judge_errors == 1


@pytest.mark.parametrize(
    "behaviour",
    [
        ("answer", "I think it is mostly safe."),
        ("answer", '{"score": 14}'),
        ("answer", '{"score": "high"}'),
        ("raw", "<html>not json</html>"),
        ("raw", '{"choices": []}'),
    ],
)
async def test_garbage_answers_are_errors_not_scores(
    server: FakeCompletions, behaviour: tuple[str, str]
) -> None:
    server.default = behaviour
    async with SafetyJudge(settings_for(server), api_key="") as judge:
        verdict = await judge.judge("text")
        retry = await judge.judge("text")  # failures are not cached
    assert verdict.score is None and retry.score is None
    assert judge.stats.judge_errors == 2


async def test_timeouts_are_retried_and_counted(server: FakeCompletions) -> None:
    server.default = ("sleep", 0.6)
    async with SafetyJudge(settings_for(server, timeout=0.2, retries=1), api_key="") as judge:
        verdict = await judge.judge("slow")
    assert verdict.score is None and "timeout" in (verdict.error or "")
    assert judge.stats.judge_errors == 1
    assert judge.stats.requests == 2


async def test_total_budget_stops_calls(server: FakeCompletions) -> None:
    async with SafetyJudge(settings_for(server, max_total=2), api_key="") as judge:
        verdicts = [await judge.judge(f"text {i}") for i in range(4)]
    assert [v.score for v in verdicts] == [9.0, 9.0, None, None]
    assert len(server.requests) == 2
    assert judge.stats.skipped_budget == 2


async def test_per_minute_budget_waits_for_room(server: FakeCompletions) -> None:
    now = [0.0]
    waits: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        waits.append(seconds)
        now[0] += seconds

    judge = SafetyJudge(
        settings_for(server, max_per_minute=2),
        api_key="",
        clock=lambda: now[0],
        sleep=fake_sleep,
    )
    async with judge:
        verdicts = [await judge.judge(f"text {i}") for i in range(3)]
    assert all(v.score == 9.0 for v in verdicts)
    assert waits == [pytest.approx(60.0)]


async def test_concurrency_limit_is_respected(server: FakeCompletions) -> None:
    server.default = ("sleep", 0.2)
    started = time.monotonic()
    async with SafetyJudge(settings_for(server, concurrency=2), api_key="") as judge:
        await judge.judge_many([f"t{i}" for i in range(4)])
    assert time.monotonic() - started >= 0.4  # two rounds of two


def test_parse_judge_answer() -> None:
    assert parse_judge_answer('{"score": 10, "reason": "ok"}') == (10.0, "ok")
    assert parse_judge_answer('Sure! {"score": 0}') == (0.0, "")
    for bad in ["", "{}", '{"score": -1}', '{"score": true}', "[1, 2]"]:
        with pytest.raises(JudgeAnswerError):
            parse_judge_answer(bad)


def test_score_with_judge_takes_the_minimum_and_survives_failures(
    server: FakeCompletions, tmp_path: Path
) -> None:
    settings = load_settings(
        environ={},
        overrides={
            "alignment": {"judge": {"base_url": server.base_url, "model": "j", "retries": 0}}
        },
        safe_config_json=tmp_path / "none.json",
    )
    scorer = make_batch_scorer(settings, BatchOptions(judge=True), embedder=HashingEmbedder())
    rows = [
        {
            "session_id": sid,
            "turn_index": 0,
            "role": "assistant",
            "text": text,
            "persona_id": "ledgerline",
        }
        for sid, text in [("a", "Your transfer has arrived."), ("b", "Your card is frozen.")]
    ]
    items = [
        BatchItem(id=str(n), payload=scorer.native_payload(row), source=str(n))
        for n, row in enumerate(rows)
    ]

    def content_for(request: dict[str, Any]) -> str:
        return request["messages"][-1]["content"]

    server.script = [("answer", '{"score": 4, "reason": "meh"}'), ("answer", "no idea")]
    report = scorer.score(items)
    asked = {("transfer" in content_for(r)): n for n, r in enumerate(server.requests)}
    safety = {s["session_id"]: s["scores"]["safety"] for s in report.sessions}
    first, second = ("a", "b") if asked[True] == 0 else ("b", "a")
    assert safety[first] == pytest.approx(0.4)  # min(keyword 1.0, 4 / 10)
    assert safety[second] == 1.0  # unparsable answer: keyword score stands
    assert report.judge is not None and report.judge["judge_errors"] == 1


def test_score_sends_the_judge_the_shared_session_transcript(
    server: FakeCompletions, tmp_path: Path
) -> None:
    """Offline and streaming give the judge the same text: `session_transcript` of the
    session's turns with their user messages, whichever way the turns arrived."""
    settings = load_settings(
        environ={},
        overrides={"alignment": {"judge": {"base_url": server.base_url, "model": "j"}}},
        safe_config_json=tmp_path / "none.json",
    )
    embedder = HashingEmbedder()
    scorer = make_batch_scorer(settings, BatchOptions(judge=True), embedder=embedder)
    turns = [
        {"user": "Is my transfer done?", "text": "Yes, it arrived this morning."},
        {"user": "", "text": "Anything else I can help with?"},
    ]
    native = [  # user and assistant rows, as `score` reads them
        {"session_id": "s", "turn_index": 0, "role": "user", "persona_id": "ledgerline"}
        | {"text": turns[0]["user"]},
        *[
            {"session_id": "s", "turn_index": index + 1, "role": "assistant"}
            | {"persona_id": "ledgerline", "text": turn["text"]}
            for index, turn in enumerate(turns)
        ],
    ]
    scorer.score(
        [
            BatchItem(id=str(n), payload=scorer.native_payload(row), source=str(n))
            for n, row in enumerate(native)
        ]
    )
    envelope_turns = [  # one turn envelope each (same indices), as the stream reads them
        AlignmentTurnPayload.model_validate(
            {"session_id": "s", "turn_index": index + 1, "persona_id": "ledgerline"}
            | {"text": turn["text"], "user": turn["user"] or None}
        )
        for index, turn in enumerate(turns)
    ]
    state = SessionState.new("s", "ledgerline", settings)
    persona = scorer.catalog.get("ledgerline")
    for payload in envelope_turns:
        vector = embedder.encode([payload.text])[0]
        scored = score_turn(payload.text, persona, vector, settings, scorer.patterns)
        state.add(payload.turn_index, scored, vector, payload.text, user=payload.user or "")
    expected = session_transcript(state)
    assert expected == (
        "[turn 1]\nUser: Is my transfer done?\nAssistant: Yes, it arrived this morning.\n\n"
        "[turn 2]\nAssistant: Anything else I can help with?"
    )
    [request] = server.requests
    assert expected in request["messages"][-1]["content"]
