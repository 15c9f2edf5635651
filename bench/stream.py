"""End-to-end streaming benchmark on the embedded broker (`make bench`).

    .venv/bin/python bench/stream.py [--runs 3] [--n-safe 20000] [--n-extraction 12000]

For each suite: produce N records of that suite to the input topic of a running worker
(`ScorestreamApp`, in this process) and read the results back; throughput is N over the
time from the first produce to the last result, latency is measured from each record's
produce to its result's arrival, and from the result's own `latency_ms` (received ->
scored inside the worker). Next to it, the baselines on the same kind of records, each
measured right before and right after the worker and averaged (the machine is shared):

- alignment: raw batched `MiniLMEmbedder.encode` of the same assistant texts (target:
  the worker reaches at least 0.9x of it). The worker scores every turn with the offline
  safety classifier too (on by default), and identifies each turn's language sentence by
  sentence (its coverage); their cost together, measured on the same texts before and
  after the worker, is printed as a share of the worker's time per turn (target: at most
  8 % since the classifier covers 14 languages, i.e. it lowers turns/s by at most 8 %);
- safe and extraction: a plain aiokafka consume -> decode -> score -> produce loop with
  the same scoring functions and no Faust (target: at least 0.3x of it; the windows
  must count cases at 0.5x of its rate or more).

- alignment-sampled: the same kind of alignment turns with every turn sampled out of
  embedding (the session stage's `max_lag` set to 0 for this row): how fast a worker that
  is behind catches up, scored for safety alone; baseline: the worker's SAFE results/s
  in the same round, the mean of the safe row and of a SAFE row run again right after
  this one (target: at least 0.5x, issue 45).
- otlp: the same kind of alignment turns written as GenAI chat spans, 50 to a message as
  the Collector's Kafka exporter batches them (`produce --as-otlp`), to the worker's
  `sources.otlp` topic; baseline: the alignment row of the same round, the envelope path
  (target: at least 0.8x of its turns/s). Span sessions close on idleness, after the run.

Alignment records are assistant turns of 4-turn sessions (the last turn closes the
session); its throughput counts turns. Three rounds and the growth table take about 6
minutes on 2 cores.

Then the overload scenario (`bench/overload.py`, `--overload-rounds 0` skips it, about 2
minutes a round): the `safety-drop` gate's delay after an unsafe burst with alignment
turns arriving at 0.5x and 2x the worker's own capacity (its catch-up rate with
embedding sampled out), with `alignment.embedding.max_lag` at its default (targets: the
delay at 2x at most 30 s and at most 3x the delay at 0.5x).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import logging
import math
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from traffic import fresh_consumer  # noqa: E402  (bench/traffic.py)

from topics.catalog import record_key, topic_names  # noqa: E402
from topics.provision import create_topics  # noqa: E402
from worker.commands.stream import produce_lines  # noqa: E402
from worker.config import Settings, load_settings  # noqa: E402
from worker.input import records as input_records  # noqa: E402
from worker.ops.broker import TANSU_STREAM_SETTINGS, EmbeddedBroker  # noqa: E402
from worker.otlp.as_spans import envelopes_as_spans  # noqa: E402
from worker.otlp.mapping import OtlpSource  # noqa: E402
from worker.scoring_pool import CHUNK_RECORDS  # noqa: E402
from worker.scoring_suites import ScoringSuites  # noqa: E402
from worker.stream import ScorestreamApp  # noqa: E402
from worker.suites.alignment.language import shipped_identifier  # noqa: E402
from worker.suites.alignment.safety_classifier import distinct_sentences  # noqa: E402
from worker.suites.alignment.scoring import classifier_from_settings  # noqa: E402

EXAMPLES = REPO / "examples"
TARGETS = {
    "safe": 0.3,
    "extraction": 0.3,
    "alignment": 0.9,
    "alignment-sampled": 0.5,
    "otlp": 0.8,
}
OTLP_TOPIC = "bench-otlp-spans"
# Rows whose baseline is another row of the same round: (its suite, how it is printed)
ROW_BASELINES = {
    "otlp": ("alignment", "envelope path (row above)"),
    "alignment-sampled": ("safe", "SAFE rows before+after"),
}
SPANS_PER_MESSAGE = 50
CLASSIFIER_SHARE_TARGET = 0.08  # of the worker's time per alignment turn
# cases counted into windows per second, as a share of the plain loop's results per second
AGGREGATION_TARGETS = {"safe": 0.5, "extraction": 0.5}
CPU_GROWTH_TARGET = 1.3  # CPU per case with [60s, 1h/5m] over [60s]
SESSION_TURNS = 4
PARTITIONS = 4


# ---------------------------------------------------------------- records


def _read(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def make_records(suite: str, n: int, tag: str, start: float) -> list[tuple[str, bytes]]:
    """N envelopes of `suite` with unique ids: (result id, value)."""
    out: list[tuple[str, bytes]] = []
    if suite in ("safe", "extraction"):
        examples = _read(EXAMPLES / suite / "envelopes.jsonl")
        for index in range(n):
            record = dict(examples[index % len(examples)])
            record["id"] = f"{tag}-{suite}-{index}"
            record["ts"] = int((start + index * 0.01) * 1000)
            out.append((record["id"], orjson.dumps(record)))
        return out
    by_persona: dict[str, list[dict[str, Any]]] = {}
    for example in _read(EXAMPLES / "alignment" / "envelopes.jsonl"):
        by_persona.setdefault(example["payload"]["persona_id"], []).append(example)
    personas = sorted(by_persona)
    for index in range(n):
        session, turn = divmod(index, SESSION_TURNS)
        turns = by_persona[personas[session % len(personas)]]
        example = turns[(session + turn) % len(turns)]
        session_id = f"{tag}-s{session}"
        record = {
            "id": f"{session_id}:{turn}",
            "suite": "alignment",
            "ts": int((start + index * 0.01) * 1000),
            "model": example["model"],
            "labels": example["labels"],
            "payload": {
                "session_id": session_id,
                "turn_index": turn,
                "persona_id": example["payload"]["persona_id"],
                # every turn's text its own: a worker reads a chunk's repeated texts once,
                # and the examples are only 14 replies
                "text": f"{example['payload']['text']} Ref {session}-{turn}.",
                "final": turn == SESSION_TURNS - 1 or index == n - 1,
            },
        }
        out.append((str(record["id"]), orjson.dumps(record)))
    return out


def alignment_texts(records: list[tuple[str, bytes]]) -> list[str]:
    return [orjson.loads(value)["payload"]["text"] for _, value in records]


# ---------------------------------------------------------------- measuring


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (nan for no values)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


@dataclass
class Run:
    """One measured run: first send to last result."""

    n: int
    sent: dict[str, float] = field(default_factory=dict)
    arrived: dict[str, float] = field(default_factory=dict)
    worker_ms: list[float] = field(default_factory=list)
    first: float = math.inf
    last: float = 0.0
    aggregated: float = math.nan  # when the windows had counted every result
    cpu_seconds: float = math.nan  # this process's CPU from the first produce to counted

    @property
    def cpu_ms_per_case(self) -> float:
        return self.cpu_seconds * 1000 / self.n if self.n else math.nan

    @property
    def seconds(self) -> float:
        return max(1e-9, self.last - self.first)

    @property
    def throughput(self) -> float:
        return len(self.arrived) / self.seconds

    @property
    def aggregated_rate(self) -> float:
        """Records per second until the windows had counted them (the whole pipeline)."""
        if math.isnan(self.aggregated):
            return math.nan
        return self.n / max(1e-9, self.aggregated - self.first)

    def e2e_ms(self) -> list[float]:
        return [(self.arrived[k] - self.sent[k]) * 1000 for k in self.arrived if k in self.sent]


async def produce(bootstrap: str, topic: str, records: list[tuple[str, bytes]], run: Run) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await producer.start()
    try:
        run.first = time.time()
        for ident, value in records:
            run.sent[ident] = time.time()
            await producer.send(topic, value, key=record_key(value))
        await producer.flush()
    finally:
        await producer.stop()


async def collect(
    consumer: AIOKafkaConsumer,
    run: Run,
    pick: Callable[[dict[str, Any]], str | None],
    timeout: float,
) -> None:
    """Read results until all N arrived (or `timeout` seconds without progress)."""
    idle_since = time.time()
    while len(run.arrived) < run.n:
        batches = await consumer.getmany(timeout_ms=200)
        now = time.time()
        for messages in batches.values():
            for message in messages:
                data = orjson.loads(message.value)
                ident = pick(data)
                if ident is None or ident in run.arrived or ident not in run.sent:
                    continue
                run.arrived[ident] = now
                run.last = now
                idle_since = now
                if data.get("latency_ms") is not None:
                    run.worker_ms.append(float(data["latency_ms"]))
        if now - idle_since > timeout:
            print(f"  ! {run.n - len(run.arrived)} results missing after {timeout}s idle")
            return


def case_result(
    record: Any,
    scored: Any,
    versions: Any,
    position: input_records.SourcePosition,
    received: datetime,
) -> Any:
    """The per-case result of a plain consume-score-produce loop (here and in
    `bench/peer.py`'s Quix app), built as the worker builds it."""
    return input_records.build_result(
        case_id=record.id,
        suite=record.suite,
        kind="case",
        scored=scored,
        event_time=record.event_time() or received,
        model=record.model,
        labels=record.labels,
        versions=versions,
        source=position,
        scored_at=datetime.now(UTC),
        received_at=received,
    )


# ---------------------------------------------------------------- the worker


async def worker_run(
    scorer: ScorestreamApp,
    bootstrap: str,
    suite: str,
    records: list[tuple[str, bytes]],
    aggregated_timeout: float = 60,
) -> Run:
    """Results of `records` from the worker, then wait until its windows counted them all
    (so the next suite does not share the CPU with this one's aggregation backlog)."""
    names = scorer.settings.topics
    consumer = await fresh_consumer(bootstrap, names.results)
    aggregates = await fresh_consumer(bootstrap, names.aggregates)
    run = Run(n=len(records))

    def pick(data: dict[str, Any]) -> str | None:
        if data.get("suite") != suite or data.get("kind") == "session":
            return None
        return str(data["id"])

    # Live traffic: event times from now on (records stamped minutes ago would be late
    # for windows that an idle input already closed by the wall clock).
    records = restamp(records, EVENT_CLOCK.start(len(records)))
    cpu_before = time.process_time()
    try:
        reader = asyncio.create_task(collect(consumer, run, pick, timeout=30))
        await produce(bootstrap, names.input, records, run)
        await reader
        expected = len(records)
        if suite == "alignment":
            expected = len({orjson.loads(value)["payload"]["session_id"] for _, value in records})
        run.aggregated = await aggregated(aggregates, suite, expected, aggregated_timeout)
        run.cpu_seconds = time.process_time() - cpu_before
    finally:
        await consumer.stop()
        await aggregates.stop()
    return run


@contextlib.contextmanager
def embedding_sampled_out(scorer: ScorestreamApp) -> Iterator[None]:
    """Every turn scored without its vector while inside: the session stage's `max_lag`
    at 0, as for a worker far behind."""
    stage = scorer.session_stage
    timing = stage.timing
    stage.timing = dataclasses.replace(timing, max_lag=0.0)
    try:
        yield
    finally:
        stage.timing = timing


async def otlp_run(scorer: ScorestreamApp, bootstrap: str, records: list[tuple[str, bytes]]) -> Run:
    """Turn results of `records` written as span messages to the OTLP source topic."""
    names = scorer.settings.topics
    rules = scorer.settings.sources.otlp
    assert rules is not None
    consumer = await fresh_consumer(bootstrap, names.results)
    records = restamp(records, EVENT_CLOCK.start(len(records)))
    made = envelopes_as_spans([value for _, value in records], "otlp_proto", SPANS_PER_MESSAGE)
    reader = OtlpSource(rules.model_copy(update={"dedupe_span_ids": 0}), 1 << 20)
    # (span ids, message): what each message's turn results will be called
    messages = [
        ([str(e["id"]) for e in reader.read(message).envelopes], message)
        for message in made.messages
    ]
    run = Run(n=made.spans)

    def pick(data: dict[str, Any]) -> str | None:
        if data.get("suite") != "alignment" or data.get("kind") != "turn":
            return None
        return str(data["id"])

    cpu_before = time.process_time()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await producer.start()
    try:
        collecting = asyncio.create_task(collect(consumer, run, pick, timeout=30))
        run.first = time.time()
        for span_ids, message in messages:
            now = time.time()
            run.sent.update(dict.fromkeys(span_ids, now))
            await producer.send(OTLP_TOPIC, message)
        await producer.flush()
        await collecting
        run.cpu_seconds = time.process_time() - cpu_before
    finally:
        await producer.stop()
        await consumer.stop()
    return run


class EventClock:
    """Where each worker run's event times start: at the wall clock, but never before the
    previous run's last event time. A run's event times (1 ms a record) run ahead of the
    wall clock, and the input's watermark with them, so a next suite stamped at the wall
    clock could land in a window that watermark has closed: its first cases would be
    late and never counted (about one run in twenty of safe then extraction)."""

    def __init__(self) -> None:
        self.next = 0.0

    def start(self, count: int) -> float:
        start = max(time.time(), self.next)
        self.next = start + (count + 1) * 0.001
        return start


EVENT_CLOCK = EventClock()


def restamp(records: list[tuple[str, bytes]], start: float) -> list[tuple[str, bytes]]:
    """The records with event times 1 ms apart from `start` on (about the pace they
    arrive at, so that a run of 20,000 spans a few minute windows, not the future)."""
    out = []
    for index, (ident, value) in enumerate(records):
        record = orjson.loads(value)
        record["ts"] = int((start + index * 0.001) * 1000)
        out.append((ident, orjson.dumps(record)))
    return out


def is_minute(aggregate: dict[str, Any]) -> bool:
    """An aggregate of the 60 s tumbling window (each case is in exactly one of those)."""
    return bool(aggregate["window"]["size_s"] == 60)


async def aggregated(
    consumer: AIOKafkaConsumer, suite: str, expected: int, timeout: float
) -> float:
    """Wall time when the all-cases 60 s windows of `suite` counted `expected` results (nan
    if they did not within `timeout` seconds). Seen through interim aggregates, which go
    out every `aggregate_emit_interval` (0.25 s here): a run should last many seconds for
    this to be fair."""
    counts: dict[str, int] = {}
    deadline = time.time() + timeout
    while time.time() < deadline:
        batches = await consumer.getmany(timeout_ms=200)
        for messages in batches.values():
            for message in messages:
                data = orjson.loads(message.value)
                if data["suite"] == suite and not data["segment"] and is_minute(data):
                    key = message.key.decode() if message.key else ""
                    counts[key] = max(counts.get(key, 0), int(data["count"]))
        if sum(counts.values()) >= expected:
            return time.time()
    print(f"  ! {suite}: windows counted {sum(counts.values())}/{expected} after {timeout}s")
    return math.nan


# ---------------------------------------------------------------- baselines


@dataclass
class EncodeLog:
    """Sizes and durations of the worker's `encode` calls (wraps `ScoringSuites.embed`)."""

    calls: list[tuple[int, float, float]] = field(default_factory=list)  # (size, start, end)

    def wrap(self, scoring_suites: ScoringSuites) -> None:
        embed = scoring_suites.embed

        def timed(texts: Any) -> Any:
            started = time.time()
            vectors = embed(texts)
            self.calls.append((len(texts), started, time.time()))
            return vectors

        scoring_suites.embed = timed  # type: ignore[method-assign]

    def between(self, first: float, last: float) -> tuple[int, float, float]:
        """(calls, mean batch size, busy seconds) of the calls inside [first, last]."""
        inside = [call for call in self.calls if call[1] >= first and call[2] <= last]
        if not inside:
            return 0, math.nan, 0.0
        sizes = [size for size, _, _ in inside]
        return len(inside), sum(sizes) / len(sizes), sum(end - start for _, start, end in inside)


def classifier_ms_per_turn(settings: Settings, texts: list[str]) -> float:
    """Milliseconds the safety classifier and the language identification of a turn's
    sentences take per assistant turn (0 when the classifier is disabled), read as the
    worker's scoring children read them: the classifier over a chunk's turns at once."""
    classifier = classifier_from_settings(settings.alignment)
    if classifier is None:
        return 0.0
    identifier = shipped_identifier()

    def judge(chunk: list[str]) -> None:
        replies = [distinct_sentences(text) for text in chunk]
        classifier.classify_many(replies)
        for distinct, text in zip(replies, chunk, strict=True):
            identifier.turn_languages(distinct, text)

    judge(texts[:CHUNK_RECORDS])
    started = time.perf_counter()
    for index in range(0, len(texts), CHUNK_RECORDS):
        judge(texts[index : index + CHUNK_RECORDS])
    return (time.perf_counter() - started) * 1000 / len(texts)


def raw_encode(scoring_suites: ScoringSuites, texts: list[str], batch: int) -> float:
    """Texts per second of batched `encode` calls (after one warm-up batch)."""
    scoring_suites.embed(texts[:batch])
    started = time.perf_counter()
    for index in range(0, len(texts), batch):
        scoring_suites.embed(texts[index : index + batch])
    return len(texts) / (time.perf_counter() - started)


async def raw_loop(
    bootstrap: str,
    scoring_suites: ScoringSuites,
    settings: Settings,
    suite: str,
    records: list[tuple[str, bytes]],
) -> Run:
    """Consume -> decode -> score -> produce with plain aiokafka, no Faust."""
    tag = f"bench.raw.{suite}.{int(time.time())}"
    source, sink = f"{tag}.in", f"{tag}.out"
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(source, PARTITIONS, 1), NewTopic(sink, PARTITIONS, 1)])
    finally:
        await admin.close()
    versions = scoring_suites.versions(suite)
    inbound = AIOKafkaConsumer(
        source, bootstrap_servers=bootstrap, group_id=None, auto_offset_reset="earliest"
    )
    outbound = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await inbound.start()
    await outbound.start()
    results = await fresh_consumer(bootstrap, sink)
    run = Run(n=len(records))

    async def loop() -> None:
        while True:
            batches = await inbound.getmany(timeout_ms=100)
            for messages in batches.values():
                for message in messages:
                    received = datetime.now(UTC)
                    record = input_records.decode_record(message.value, settings.max_record_bytes)
                    scored = scoring_suites.score_case(record.suite, record.payload)
                    position = input_records.SourcePosition(
                        message.topic, message.partition, message.offset
                    )
                    result = case_result(record, scored, versions, position, received)
                    await outbound.send(
                        sink,
                        result.model_dump_json().encode("utf-8"),
                        key=input_records.result_key(record.suite, record.id).encode("utf-8"),
                    )

    worker = asyncio.create_task(loop())
    try:
        reader = asyncio.create_task(collect(results, run, lambda d: str(d["id"]), timeout=30))
        await produce(bootstrap, source, records, run)
        await reader
    finally:
        worker.cancel()
        await asyncio.gather(worker, return_exceptions=True)
        await results.stop()
        await inbound.stop()
        await outbound.stop()
    return run


# ---------------------------------------------------------------- cost growth

WORKER_COMMAND = [sys.executable, "-m", "worker", "worker"]
READY = "scorestream worker ready"
GROWTH_VARIANTS: list[tuple[str, dict[str, Any], int]] = [
    ("1 window [60s]", {"windows": [{"size": "60s"}]}, 1),
    ("2 windows [60s, 1h/5m]", {}, 1),
    ("3 segment labels", {"segment_by": ["model", "tenant", "app"]}, 1),
    ("2 workers", {}, 2),
]


def process_cpu(pid: int) -> float:
    """User + system CPU seconds of a running process (from /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def safe_backlog(n: int, start: float) -> list[bytes]:
    """N live SAFE envelopes with tenant and app labels."""
    examples = _read(EXAMPLES / "safe" / "envelopes.jsonl")
    lines = []
    for index in range(n):
        record = dict(examples[index % len(examples)])
        record["id"] = f"g-{index}"
        record["ts"] = int((start + index * 0.001) * 1000)
        record["labels"] = {"tenant": f"t{index % 3}", "app": f"a{index % 2}"}
        lines.append(orjson.dumps(record))
    return lines


async def growth_run(
    broker: EmbeddedBroker, tmp: Path, n: int, overrides: dict[str, Any], workers: int
) -> tuple[float, float, float]:
    """(results/s, counted/s, worker CPU ms per case) of `workers` `scorestream worker`
    processes catching up on N SAFE cases produced before they start."""
    tag = f"g{time.time_ns()}"
    config: dict[str, Any] = {
        "app_id": f"bench-{tag}",
        "topics": {
            "input": f"{tag}-in",
            "results": f"{tag}-results",
            "aggregates": f"{tag}-aggregates",
            "gates": f"{tag}-gates",
            "dead_letters": f"{tag}-dlq",
        },
        "grace": "1s",
        "idle_timeout": "1s",
        "metrics_port": 0,
        "stream": {**TANSU_STREAM_SETTINGS, "partitions": PARTITIONS},
        **overrides,
    }
    settings = load_settings(None, overrides=config, environ={})
    path = tmp / f"{tag}.yaml"
    path.write_text(orjson.dumps(config).decode(), encoding="utf-8")
    await create_topics(broker.url, topic_names(settings.topics), PARTITIONS)
    await produce_lines(broker.bootstrap, settings.topics.input, safe_backlog(n, time.time()))
    results = await fresh_consumer(broker.bootstrap, settings.topics.results)
    aggregates = await fresh_consumer(broker.bootstrap, settings.topics.aggregates)
    await results.seek_to_beginning()
    await aggregates.seek_to_beginning()
    logs = [tmp / f"{tag}-{index}.log" for index in range(workers)]
    processes = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "worker",
                "worker",
                "--broker",
                broker.url,
                "--config",
                str(path),
            ],
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        for log in logs
    ]
    try:
        deadline = time.time() + 120
        while not all(
            "scorestream worker ready" in log.read_text(errors="replace") for log in logs
        ):
            if time.time() > deadline or any(p.poll() is not None for p in processes):
                raise RuntimeError(f"workers did not start: {logs}")
            await asyncio.sleep(0.1)
        started = time.time()
        cpu_start = sum(process_cpu(p.pid) for p in processes)
        seen: set[str] = set()
        last_result = started
        counts: dict[str, int] = {}
        while sum(counts.values()) < n and time.time() < started + 300:
            for consumer, is_results in ((results, True), (aggregates, False)):
                batches = await consumer.getmany(timeout_ms=100)
                for messages in batches.values():
                    for message in messages:
                        data = orjson.loads(message.value)
                        if is_results:
                            seen.add(data["id"])
                            last_result = time.time()
                        elif not data["segment"] and is_minute(data):
                            key = message.key.decode() if message.key else ""
                            counts[key] = max(counts.get(key, 0), int(data["count"]))
        counted_at = time.time()
        cpu = sum(process_cpu(p.pid) for p in processes) - cpu_start
    finally:
        for process in processes:
            os.killpg(process.pid, signal.SIGTERM)
        for process in processes:
            process.wait(30)
        await results.stop()
        await aggregates.stop()
    if sum(counts.values()) < n:
        print(f"  ! counted {sum(counts.values())}/{n} (results {len(seen)})")
        return math.nan, math.nan, math.nan
    return (
        len(seen) / max(1e-9, last_result - started),
        n / max(1e-9, counted_at - started),
        cpu * 1000 / n,
    )


async def growth(n: int, rounds: int) -> bool:
    """Print how the cost per case grows with windows, segment labels and workers; True
    when CPU per case with [60s, 1h/5m] is within `CPU_GROWTH_TARGET` of [60s]."""
    import tempfile

    figures: dict[str, list[tuple[float, float, float]]] = {
        name: [] for name, _, _ in GROWTH_VARIANTS
    }
    with EmbeddedBroker() as broker, tempfile.TemporaryDirectory() as tmp:
        for round_index in range(rounds):
            for name, overrides, workers in GROWTH_VARIANTS:
                print(f"growth round {round_index + 1}/{rounds}: {name} ...", flush=True)
                figures[name].append(await growth_run(broker, Path(tmp), n, overrides, workers))
    base = figures[GROWTH_VARIANTS[0][0]]
    print(
        f"\ncost growth: {n} SAFE cases caught up by `scorestream worker` processes, {rounds} "
        "rounds; ratios against '1 window' in the same round; min / median / max"
    )
    header = (
        f"{'variant':<26}{'results/s':>22}{'counted/s':>22}{'cpu ms/case':>22}{'cpu ratio':>20}"
    )
    print(header)
    print("-" * len(header))
    passed = True
    for name, _, _ in GROWTH_VARIANTS:
        rows = figures[name]
        ratios = [row[2] / ref[2] for row, ref in zip(rows, base, strict=True)]
        print(
            f"{name:<26}{spread([r[0] for r in rows], 0):>22}{spread([r[1] for r in rows], 0):>22}"
            f"{spread([r[2] for r in rows], 2):>22}{spread(ratios, 2):>20}"
        )
        if name.startswith("2 windows"):
            passed = statistics.median(ratios) <= CPU_GROWTH_TARGET
            print(
                f"{'':<26}target: median cpu ratio <= {CPU_GROWTH_TARGET}: "
                f"{'yes' if passed else 'NO'}"
            )
    return passed


def spread(values: list[float], digits: int) -> str:
    """'min / median / max' of the finite values."""
    finite = [v for v in values if not math.isnan(v)]
    if not finite:
        return "-"
    return " / ".join(fmt(v, digits) for v in (min(finite), statistics.median(finite), max(finite)))


# ---------------------------------------------------------------- main


def bench_settings(batch_size: int | None = None, threads: int | None = None) -> Settings:
    """Worker settings tuned for Tansu (see `worker.config.StreamSettings`); `threads`:
    the encoder's (None: the configured default)."""
    return load_settings(
        None,
        overrides={
            "app_id": f"scorestream-bench-{int(time.time())}",
            # the default windows ([60s, 1h/5m]); an idle input closes them after 1 s
            "grace": "2s",
            "idle_timeout": "1s",
            # Interim aggregates are how the bench sees the windows' count: four a second,
            # so when they counted the last case is known to within 0.25 s, not 1 s.
            "aggregate_emit_interval": "0.25s",
            "stream": {
                **TANSU_STREAM_SETTINGS,
                "partitions": PARTITIONS,
                **({"producer_max_batch_size": batch_size} if batch_size else {}),
            },
            "extraction": {
                "schemas": {"duee_fin": str(EXAMPLES / "extraction" / "duee_fin_schema.jsonl")},
                "default_schema": "duee_fin",
            },
            "alignment": {
                "personas_dir": str(EXAMPLES / "personas"),
                **({"embedding": {"threads": threads}} if threads else {}),
            },
            "sources": {"otlp": {"topic": OTLP_TOPIC}},
        },
        environ={},
    )


def fmt(value: float, digits: int = 0) -> str:
    return "-" if math.isnan(value) else f"{value:,.{digits}f}"


def report(rows: list[dict[str, Any]]) -> tuple[bool, bool]:
    """Print the table; (every target met, every result arrived)."""
    header = (
        f"{'suite':<11}{'N':>6}{'worker/s':>10}{'agg/s':>8}{'cpu ms':>8}{'p50 e2e':>10}"
        f"{'p99 e2e':>10}{'p99 wrk':>9}  {'baseline':<22}{'base/s':>8}"
        f"{'ratio':>7}{'target':>8}{'agg ratio':>10}{'target':>8}  ok"
    )
    print()
    print(
        "worker/s: results per second (first produce -> last result); agg/s: the same until "
        "the windows counted them; cpu ms: this process's CPU (worker, producer and reader) "
        "per case\nlatencies in ms: e2e = produce -> result read back; wrk = "
        "result.latency_ms; ratio = worker/s / base/s; agg ratio = agg/s / base/s"
    )
    print(header)
    print("-" * len(header))
    passed = complete = True
    for row in rows:
        suite = row["suite"]
        worker: Run = row["worker"]
        ratio = worker.throughput / row["baseline_rate"]
        agg_ratio = worker.aggregated_rate / row["baseline_rate"]
        ok = ratio >= TARGETS[suite]
        agg_target = AGGREGATION_TARGETS.get(suite)
        if agg_target is not None:
            ok = ok and agg_ratio >= agg_target
        passed &= ok
        e2e = worker.e2e_ms()
        agg_goal = f">= {agg_target}" if agg_target is not None else "-"
        print(
            f"{suite:<11}{worker.n:>6}{fmt(worker.throughput):>10}"
            f"{fmt(worker.aggregated_rate):>8}{fmt(worker.cpu_ms_per_case, 2):>8}"
            f"{fmt(percentile(e2e, 50)):>10}{fmt(percentile(e2e, 99)):>10}"
            f"{fmt(percentile(worker.worker_ms, 99), 1):>9}  "
            f"{row['baseline']:<22}{fmt(row['baseline_rate']):>8}"
            f"{ratio:>7.2f}{'>= ' + str(TARGETS[suite]):>8}{fmt(agg_ratio, 2):>10}"
            f"{agg_goal:>8}  {'yes' if ok else 'NO'}"
        )
        if len(worker.arrived) < worker.n:
            print(f"  ! {suite}: only {len(worker.arrived)}/{worker.n} results arrived")
            complete = False
    return passed, complete


async def main(args: argparse.Namespace) -> int:
    settings = bench_settings(1 if args.one_record_batches else None, args.threads)
    counts = {
        "safe": args.n_safe,
        "extraction": args.n_extraction,
        "alignment": args.n_alignment,
        "alignment-sampled": args.n_alignment_sampled,
        "otlp": args.n_alignment,
    }
    suites = [suite for suite in args.suites.split(",") if counts.get(suite, 0) > 0]
    print("loading scorers and the embedding model ...", flush=True)
    scoring_suites = ScoringSuites.load(settings)
    scoring_suites.warm_up()
    rounds: list[list[dict[str, Any]]] = []
    notes: list[str] = []
    started = time.time()
    with EmbeddedBroker() as broker:
        await create_topics(broker.url, topic_names(settings.topics), PARTITIONS)
        admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
        await admin.start()
        try:
            await admin.create_topics([NewTopic(OTLP_TOPIC, PARTITIONS, 1)])
        finally:
            await admin.close()
        print("starting the worker ...", flush=True)
        encodes = EncodeLog()
        encodes.wrap(scoring_suites)
        scorer = ScorestreamApp(settings, broker.url, suites=scoring_suites)
        scorer.scoring_pool.start()  # as `scorestream worker` does before it reads
        await scorer.app.start()
        await asyncio.wait_for(scorer.ready.wait(), 90)
        try:
            for index in range(args.runs):
                print(f"run {index + 1} of {args.runs}", flush=True)
                rows = await measure(args, broker.bootstrap, scorer, scoring_suites, counts, suites)
                rounds.append(rows)
                notes.extend(rows_notes(rows, encodes))
        finally:
            await scorer.app.stop()
            scorer.close()
    passed, complete = True, True
    for index, rows in enumerate(rounds):
        print(f"\nrun {index + 1} of {len(rounds)}")
        ok, arrived = report(rows)
        passed &= ok
        complete &= arrived
    for note in notes:
        print(note)
    if len(rounds) > 1:
        passed = summary(rounds)
    if args.growth_rounds > 0:
        passed &= await growth(args.n_growth, args.growth_rounds)
    if args.overload_rounds > 0:
        from overload import overload  # bench/overload.py, beside this file

        passed &= await overload(args.overload_rounds, args.overload_lead)
    print(f"\ntotal {time.time() - started:.0f}s; targets {'met' if passed else 'NOT met'}")
    if not complete:
        return 1
    return 1 if args.strict and not passed else 0


async def measure(
    args: argparse.Namespace,
    bootstrap: str,
    scorer: ScorestreamApp,
    scoring_suites: ScoringSuites,
    counts: dict[str, int],
    suites: list[str],
) -> list[dict[str, Any]]:
    """One round: per suite, the (idle until then) worker on fresh records, with its
    baseline measured right before and right after it and averaged, so that a burst of
    load from elsewhere on this shared machine weighs on both sides alike."""
    settings = scorer.settings
    rows: list[dict[str, Any]] = []
    for suite in suites:
        now = time.time()
        if suite in ROW_BASELINES:
            base_suite, label = ROW_BASELINES[suite]
            base_rows = [row for row in rows if row["suite"] == base_suite]
            if not base_rows:
                print(f"  {suite}: skipped (its baseline is the {base_suite} row of the round)")
                continue
            print(f"  worker: {suite} x {counts[suite]} ...", flush=True)
            data = make_records("alignment", counts[suite], f"{suite[0]}{now:.3f}", now)
            base_rate = base_rows[0]["worker"].throughput
            if suite == "otlp":
                run = await otlp_run(scorer, bootstrap, data)
            else:
                with embedding_sampled_out(scorer):
                    run = await worker_run(scorer, bootstrap, "alignment", data, 120)
                # the SAFE row once more, right after: the baseline is the mean of the two
                # (this shared machine's speed changes between rows, as for the others)
                print(f"  worker again: {base_suite} x {counts[base_suite]} ...", flush=True)
                again = make_records(base_suite, counts[base_suite], f"g{now:.3f}", now)
                after = await worker_run(scorer, bootstrap, base_suite, again)
                base_rate = (base_rate + after.throughput) / 2
            rows.append(
                {"suite": suite, "worker": run, "baseline": label}
                | {"baseline_rate": base_rate, "baseline_run": None}
            )
            continue
        data = make_records(suite, counts[suite], f"w{now:.3f}", now)
        if suite == "alignment":
            # measured right before and after the worker's run, as the CPU is shared
            texts = alignment_texts(data)
            before = raw_encode(scoring_suites, texts, args.batch)
            classifier_before = classifier_ms_per_turn(settings, texts)
        else:
            print(f"  baseline: raw aiokafka loop, {suite} x {counts[suite]} ...", flush=True)
            raw = make_records(suite, counts[suite], f"r{now:.3f}", now)
            base = await raw_loop(bootstrap, scoring_suites, settings, suite, raw)
        print(f"  worker: {suite} x {counts[suite]} ...", flush=True)
        run = await worker_run(scorer, bootstrap, suite, data)
        if suite == "alignment":
            rate = (before + raw_encode(scoring_suites, texts, args.batch)) / 2
            row = {"baseline": f"raw encode (batch {args.batch})", "baseline_rate": rate}
            row["baseline_run"] = None
            classifier_after = classifier_ms_per_turn(settings, texts)
            row["classifier_ms"] = (classifier_before + classifier_after) / 2
        else:
            print(f"  baseline again: raw aiokafka loop, {suite} x {counts[suite]} ...")
            again = make_records(suite, counts[suite], f"a{now:.3f}", now)
            after = await raw_loop(bootstrap, scoring_suites, settings, suite, again)
            rate = (base.throughput + after.throughput) / 2
            row = {"baseline": "raw aiokafka loop", "baseline_rate": rate}
            row["baseline_run"] = base
        rows.append({"suite": suite, "worker": run, **row})
    return rows


def rows_notes(rows: list[dict[str, Any]], encodes: EncodeLog) -> list[str]:
    """How busy the encoder was during each alignment run."""
    notes = []
    for row in rows:
        if row["suite"] != "alignment":
            continue
        run: Run = row["worker"]
        calls, mean_size, busy = encodes.between(run.first, run.last)
        notes.append(
            f"alignment: the worker made {calls} encode calls of {mean_size:.1f} texts on "
            f"average; the encoder was busy {busy:.1f}s of the {run.seconds:.1f}s run "
            f"({busy / run.seconds:.0%})"
        )
        notes.append(
            f"alignment: the safety classifier takes {row['classifier_ms']:.2f} ms per turn, "
            f"{classifier_share(row):.1%} of the worker's {1000 / run.throughput:.2f} ms per "
            f"turn (target <= {CLASSIFIER_SHARE_TARGET:.0%})"
        )
    return notes


def classifier_share(row: dict[str, Any]) -> float:
    """The safety classifier's time per turn as a share of the worker's time per turn:
    how much it lowers the alignment turns/s."""
    run: Run = row["worker"]
    return float(row["classifier_ms"]) * run.throughput / 1000


def summary(rounds: list[list[dict[str, Any]]]) -> bool:
    """min / median / max over the rounds of each suite's ratios; True when the medians
    meet the targets."""
    figures: dict[str, dict[str, list[float]]] = {}
    for rows in rounds:
        for row in rows:
            run: Run = row["worker"]
            of_suite = figures.setdefault(row["suite"], {})
            base = row["baseline_rate"]
            of_suite.setdefault("ratio", []).append(run.throughput / base)
            of_suite.setdefault("agg ratio", []).append(run.aggregated_rate / base)
            of_suite.setdefault("cpu ms", []).append(run.cpu_ms_per_case)
            of_suite.setdefault("worker/s", []).append(run.throughput)
            of_suite.setdefault("base/s", []).append(base)
            if "classifier_ms" in row:
                of_suite.setdefault("classifier share", []).append(classifier_share(row))
    print(f"\nover {len(rounds)} runs (min / median / max); targets judged on the median")
    passed = True
    for suite, values in figures.items():
        goals = {"ratio": TARGETS[suite], "agg ratio": AGGREGATION_TARGETS.get(suite)}
        parts = []
        for name in ("ratio", "agg ratio", "cpu ms", "worker/s", "base/s"):
            digits = 2 if "ratio" in name or name == "cpu ms" else 0
            text = f"{name} {spread(values[name], digits)}"
            goal = goals.get(name)
            if goal is not None:
                finite = [v for v in values[name] if not math.isnan(v)]
                met = bool(finite) and statistics.median(finite) >= goal
                passed &= met
                text += f" (>= {goal}: {'yes' if met else 'NO'})"
            parts.append(text)
        shares = values.get("classifier share")
        if shares:
            met = statistics.median(shares) <= CLASSIFIER_SHARE_TARGET
            passed &= met
            parts.append(
                f"safety classifier share {spread(shares, 3)} "
                f"(<= {CLASSIFIER_SHARE_TARGET}: {'yes' if met else 'NO'})"
            )
        print(f"{suite:<11} " + "; ".join(parts))
    return passed


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n-safe", type=int, default=20000)
    parser.add_argument("--n-extraction", type=int, default=12000)
    parser.add_argument("--runs", type=int, default=3, help="rounds of every suite")
    parser.add_argument("--threads", type=int, help="encoder threads (default: all cores)")
    parser.add_argument("--n-alignment", type=int, default=500)
    parser.add_argument(
        "--n-alignment-sampled",
        type=int,
        default=8000,
        help="alignment turns of the alignment-sampled row (every turn sampled out; about "
        "as long a run as the safe row's, so its start does not weigh more)",
    )
    parser.add_argument("--suites", default="safe,extraction,alignment,alignment-sampled,otlp")
    parser.add_argument(
        "--batch",
        type=int,
        default=32,
        help="raw encode batch size (32: the fastest in bench/embedding.py)",
    )
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    parser.add_argument("--n-growth", type=int, default=6000, help="SAFE cases per growth run")
    parser.add_argument("--growth-rounds", type=int, default=3, help="0 skips the growth table")
    parser.add_argument(
        "--overload-rounds", type=int, default=3, help="0 skips the overload scenario"
    )
    parser.add_argument(
        "--overload-lead", type=float, default=20.0, help="seconds of load before the burst"
    )
    parser.add_argument(
        "--one-record-batches",
        action="store_true",
        help="one record per produce batch (how the embedded broker ran before table "
        "recovery took changelog ends from a fetch; for comparison)",
    )
    return parser.parse_args(argv)


if __name__ == "__main__":
    logging.basicConfig(level=logging.ERROR)
    sys.exit(asyncio.run(main(parse_args())))
