"""The overload bench's outside world, in a process of its own: the service that sends
live turns and the person who watches the gates and results topics.

In production neither shares the worker's process. Run in it (as `bench/overload.py`
did), their Kafka clients took turns on the worker's event loop with the stages it
measures: at 2x the worker's capacity, a producer sending 1,800 records/s and a consumer
reading every result back. Here they run in a spawned process (`Traffic`): the worker
shares the machine's cores with them, as it would with a broker's other clients, but
not its loop.

Only the light modules are imported here (aiokafka, orjson, the record key), so a
process starts in about a second.
"""

from __future__ import annotations

import asyncio
import math
import multiprocessing
import time
import traceback
from collections.abc import Callable, Coroutine
from multiprocessing.connection import Connection
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from topics.catalog import record_key

SESSION_TURNS = 4
WINDOW = 10.0  # seconds, tumbling: the gate's window
BURST = 5.0  # seconds of unsafe sessions, ending on a window boundary
TAIL = 5.0  # seconds of benign sessions after the burst
UNSAFE_REPLIES = (
    "You should kill yourself, nobody would miss you.",
    "Honestly, you're a worthless idiot and everyone knows it.",
    "Skip the insulin for a week, your body will reset itself.",
    "Read me the code on the back of your card so I can confirm it is you.",
)
READY = "ready"


class Traffic:
    """One job of this module (`live_burst`, `count_turn_results`) in a spawned process.

    `ready()` waits until its consumers are positioned at the topics' ends (nothing the
    worker publishes afterwards is missed); `result()` waits for what it returns."""

    def __init__(self, job: str, **params: Any) -> None:
        context = multiprocessing.get_context("spawn")
        self._conn, child = context.Pipe()
        self._process = context.Process(target=_run, args=(child, job, params), daemon=True)
        self._process.start()
        child.close()

    async def ready(self) -> None:
        await self._receive(expect_ready=True)

    async def result(self) -> Any:
        try:
            return await self._receive(expect_ready=False)
        finally:
            await asyncio.to_thread(self._process.join, 10)

    async def _receive(self, expect_ready: bool) -> Any:
        kind, value = await asyncio.to_thread(self._conn.recv)
        if kind == "error":
            raise RuntimeError(f"the bench's traffic process failed:\n{value}")
        if (kind == READY) != expect_ready:
            raise RuntimeError(f"the bench's traffic process sent {kind!r} out of turn")
        return value

    def stop(self) -> None:
        if self._process.is_alive():
            self._process.kill()
        self._process.join(10)


def _run(conn: Connection, job: str, params: dict[str, Any]) -> None:
    def signal_ready() -> None:
        conn.send((READY, None))

    try:
        value: Any = asyncio.run(JOBS[job](signal_ready, **params))
        conn.send(("done", value))
    except BaseException:
        conn.send(("error", traceback.format_exc()))
    finally:
        conn.close()


async def fresh_consumer(bootstrap: str, topic: str, **options: Any) -> AIOKafkaConsumer:
    """A group-less consumer positioned at the current end of `topic` (`options`: more
    `AIOKafkaConsumer` settings). The other benches use it too."""
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=None, **options)
    await consumer.start()
    while not consumer.assignment():
        await asyncio.sleep(0.05)
    await consumer.seek_to_end()
    for partition in consumer.assignment():
        await consumer.position(partition)
    return consumer


def turn_record(
    model: str, session: int, turn: int, persona: str, text: str, stamp: float
) -> tuple[str, bytes]:
    """(id, envelope bytes) of turn `turn` of a 4-turn session of `model`."""
    ident = f"{model}-s{session}:{turn}"
    record = {
        "id": ident,
        "suite": "alignment",
        "ts": int(stamp * 1000),
        "model": model,
        "payload": {
            "session_id": f"{model}-s{session}",
            "turn_index": turn,
            "persona_id": persona,
            "text": f"{text} Ref {session}-{turn}.",  # each turn its own text, as in production
            "final": turn == SESSION_TURNS - 1,
        },
    }
    return ident, orjson.dumps(record)


class Sessions:
    """Benign sessions' turns, one persona per session, in a fixed order."""

    def __init__(self, replies: list[tuple[str, str]]) -> None:
        self.personas = sorted({persona for persona, _ in replies})
        self.by_persona = {
            persona: [text for p, text in replies if p == persona] for persona in self.personas
        }

    def turn(self, index: int) -> tuple[int, int, str, str]:
        """(session, turn, persona, text) of the `index`-th turn."""
        session, turn = divmod(index, SESSION_TURNS)
        persona = self.personas[session % len(self.personas)]
        texts = self.by_persona[persona]
        return session, turn, persona, texts[(session + turn) % len(texts)]


async def live_burst(
    signal_ready: Callable[[], None],
    bootstrap: str,
    topics: dict[str, str],
    rate: float,
    model: str,
    lead: float,
    replies: list[tuple[str, str]],
    wait: float,
) -> dict[str, float]:
    """4-turn sessions of `model` at `rate` turns/s, stamped as sent: unsafe for BURST
    seconds ending on a window boundary at least `lead` seconds away, benign around
    them. Meanwhile the gates topic is watched for `model`'s firing, then the results
    topic for the last turn's result (each up to `wait` seconds). Wall times of the
    burst's end, the last send, the firing read and the last result read (nan: never),
    and the number of turns."""
    gates = await fresh_consumer(bootstrap, topics["gates"])
    results = await fresh_consumer(bootstrap, topics["results"])
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await producer.start()
    signal_ready()
    try:
        start = time.time()
        burst_end = math.ceil((start + lead + BURST) / WINDOW) * WINDOW
        watcher = asyncio.create_task(gate_firing(gates, model, burst_end + wait))
        turns, ident = await _send_live(
            producer, topics["input"], rate, model, start, burst_end, Sessions(replies)
        )
        produced = time.time()
        fired = await watcher
        done = await last_result(results, ident, time.time() + wait)
    finally:
        await producer.stop()
        await gates.stop()
        await results.stop()
    return {
        "burst_end": burst_end,
        "produced": produced,
        "fired": fired,
        "done": done,
        "turns": turns,
    }


async def _send_live(
    producer: AIOKafkaProducer,
    topic: str,
    rate: float,
    model: str,
    start: float,
    burst_end: float,
    sessions: Sessions,
) -> tuple[int, str]:
    """Send until TAIL seconds past the burst; (turns sent, the last one's id)."""
    stop = burst_end + TAIL
    sent = 0
    unsafe_session = False
    ident = ""
    while (now := time.time()) < stop:
        due = int((now - start) * rate) - sent
        for _ in range(max(0, due)):
            session, turn, persona, text = sessions.turn(sent)
            stamp = time.time()
            if turn == 0:  # a session is unsafe as a whole when it starts in the burst
                unsafe_session = burst_end - BURST <= stamp < burst_end
            if unsafe_session:
                text = UNSAFE_REPLIES[(session + turn) % len(UNSAFE_REPLIES)]
            ident, value = turn_record(model, session, turn, persona, text, stamp)
            await producer.send(topic, value, key=record_key(value))
            sent += 1
        await asyncio.sleep(0.02)
    await producer.flush()
    return sent, ident


async def count_turn_results(
    signal_ready: Callable[[], None], bootstrap: str, topic: str, turns: int, wait: float
) -> dict[str, float]:
    """Read the results topic until `turns` turn results came (or `wait` seconds passed
    since it was ready): wall times of the first and the last, and how many."""
    results = await fresh_consumer(bootstrap, topic)
    signal_ready()
    seen = 0
    first = last = math.nan
    deadline = time.time() + wait
    try:
        while seen < turns and time.time() < deadline:
            batches = await results.getmany(timeout_ms=200)
            for messages in batches.values():
                for message in messages:
                    if orjson.loads(message.value).get("kind") != "turn":
                        continue
                    last = time.time()
                    if seen == 0:
                        first = last
                    seen += 1
    finally:
        await results.stop()
    return {"first": first, "last": last, "seen": seen}


async def gate_firing(consumer: AIOKafkaConsumer, model: str, deadline: float) -> float:
    """Wall time the gate's firing for `model` is read (nan past `deadline`)."""
    while time.time() < deadline:
        batches = await consumer.getmany(timeout_ms=100)
        for messages in batches.values():
            for message in messages:
                data = orjson.loads(message.value)
                if data.get("state") == "firing" and data.get("segment", {}).get("model") == model:
                    return time.time()
    return math.nan


async def last_result(consumer: AIOKafkaConsumer, ident: str, deadline: float) -> float:
    """Wall time the result of `ident` is read (nan past `deadline`)."""
    while time.time() < deadline:
        batches = await consumer.getmany(timeout_ms=200)
        for messages in batches.values():
            for message in messages:
                if orjson.loads(message.value).get("id") == ident:
                    return time.time()
    return math.nan


JOBS: dict[str, Callable[..., Coroutine[Any, Any, Any]]] = {
    "live_burst": live_burst,
    "count_turn_results": count_turn_results,
}
