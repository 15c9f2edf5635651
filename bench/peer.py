"""scorestream against Quix Streams on the same SAFE stream (issue 25, item 1).

    pip install -e .[bench]        # Quix Streams, only for this benchmark
    .venv/bin/python bench/peer.py [--n 20000] [--rounds 3] [--grace 1]
        [--scenario current|long-backlog|both] [--quix-fold lean|scorestream] [--profile DIR]

Quix Streams 3.28 wants pydantic < 2.14, older than the worker's; when it cannot be
installed beside the worker, give it a virtualenv of its own that sees the worker's
packages and point `PEER_QUIX_PYTHON` at its interpreter:

    python3.11 -m venv /tmp/quix && echo "$PWD/.venv/lib/python3.11/site-packages" \
        > /tmp/quix/lib/python3.11/site-packages/worker-venv.pth
    /tmp/quix/bin/pip install "quixstreams>=3.28.1,<3.29"
    PEER_QUIX_PYTHON=/tmp/quix/bin/python .venv/bin/python bench/peer.py

Each round gives both systems the same backlog on the embedded Tansu broker, in each
scenario (`--scenario`, both by default): N SAFE envelopes keyed by id over 4 partitions,
their event times from a minute some hours ago on,

- `current`: 10 ms apart (20,000 span four 60 s windows: 4 tumbling and 15 hopping
  windows per series);
- `long-backlog`: 360 ms apart (20,000 span two hours: 120 tumbling and 35 hopping
  windows per series, about 465 finals in all), what a worker catching up after
  downtime reads;

then on every partition one sentinel envelope per model more than an hour and six minutes
after the last case, so that every window of the backlog can close by event time alone
(the sentinels too are in the past). Each system catches up from the start of its own copy of
the topics as one process (and its children):

- scorestream: `scorestream worker` with its default windows (60 s tumbling, 1 h / 5 min
  hopping) per model and for all cases, a 1 s grace, on Tansu's settings;
- Quix Streams (librdkafka): one `Application` (at-least-once, no idempotent producer:
  Tansu has neither idempotence nor transactions) that scores each envelope with the same
  SAFE case scorer and result builder, publishes the result, and re-keys the results by
  model and to one all-cases key (`group_by`), each into a 60 s tumbling and a 1 h / 5 min
  hopping window with the same grace (`.reduce(...).final()`, the timestamp taken from the
  envelope's `ts`). Its windows fold (`--quix-fold`) either what a Quix user would keep,
  count, label counts and score sums (`lean`, the default: Quix at its cheapest), or
  scorestream's own window fold and aggregate message (`scorestream`: the same figures,
  without the bootstrap reservoir and worst-case lists; Quix stores the whole window value
  on each of its 26 window updates per case, so this costs it more than twice the CPU).

Figures per round, from the first result read back (startup excluded): results/s (N over
first to last result), windowed/s (N over first result to the last final 60 s all-cases
window), CPU ms per case of the system's process tree over the same span, and the cases
lost from the final 60 s all-cases windows (the input's count per window minus the final
window's count; a window that never closed loses all its cases). Quix closes a window on
the largest timestamp seen for its key, so cases that arrive out of order across
partitions by more than the grace are dropped (and cost it no window work);
scorestream's watermark is the minimum over partitions. Ratios are scorestream / Quix in
the same round; targets (issue 25) are judged on the medians. `--profile DIR` writes a
py-spy profile (raw collapsed stacks) of each run from its first result on.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import stream as stream_bench  # noqa: E402  (bench/stream.py: backlog, consumers, CPU)

from schemas.outputs import CaseResult, RecordSource  # noqa: E402
from topics.catalog import topic_names  # noqa: E402
from topics.provision import create_topics  # noqa: E402
from worker.aggregation import message as aggregate_message  # noqa: E402
from worker.aggregation import state as window_state  # noqa: E402
from worker.commands.stream import produce_lines  # noqa: E402
from worker.config import load_settings  # noqa: E402
from worker.ops.broker import TANSU_STREAM_SETTINGS, EmbeddedBroker  # noqa: E402
from worker.suites import registry  # noqa: E402
from worker.suites.base import State  # noqa: E402
from worker.windowing.windows import WindowKey  # noqa: E402

PARTITIONS = stream_bench.PARTITIONS
GRACE_S = 1  # the default; --grace sets both systems' (at most MAX_GRACE_S)
MAX_GRACE_S = 60
MINUTE_MS = 60_000
HOUR_MS = 3_600_000
STEP_MS = 300_000
# Sentinels come this long after the last case: past the end + grace of every window
# (60 s and 1 h / 5 min) that holds a case.
SENTINEL_GAP_MS = HOUR_MS + STEP_MS + MAX_GRACE_S * 1000 + 1000
SCENARIOS = {"current": 0.01, "long-backlog": 0.36}  # seconds of event time between cases
BUSY_SHARE = 0.2  # of a core: a system using more is still at work
STARTUP_S = 180.0  # the longest a system may take to its first result
QUIX_RESERVOIR = 2  # bootstrap samples per metric in Quix's windows (scorestream: 128)
# scorestream / Quix, medians: (figure, at least (1) or at most (-1), goal)
TARGETS = {
    "current": [("windowed/s", 1, 1.3), ("results/s", 1, 1.0)],  # issue 25
    "long-backlog": [("results/s", 1, 1.0), ("windowed/s", 1, 1.5), ("cpu ms/case", -1, 0.8)],
}
SYSTEMS = ("scorestream", "quix")


# ---------------------------------------------------------------- input


@dataclass
class PeerInput:
    """The backlog both systems catch up on."""

    cases: list[bytes]  # keyed by id (the producer's partitioner spreads them)
    sentinels: list[tuple[int, bytes]]  # (partition, value): close every window
    per_minute: Counter[int]  # cases per 60 s window start (ms)

    @property
    def n(self) -> int:
        return len(self.cases)

    @property
    def results(self) -> int:
        """Results each system publishes: one per case and per sentinel."""
        return len(self.cases) + len(self.sentinels)


def history_start(n: int, step_s: float, now: float) -> float:
    """Where a backlog of N cases `step_s` apart starts, on a minute, so that its
    sentinels too are at least a minute in the past at `now`."""
    span_s = n * step_s + SENTINEL_GAP_MS / 1000 + 60
    return (now - span_s) // 60 * 60


def peer_input(
    n: int, start: float, step_s: float = SCENARIOS["current"], partitions: int = PARTITIONS
) -> PeerInput:
    """N SAFE envelopes from `start` (seconds) on, `step_s` apart (`bench/stream.py`'s
    records), and per partition one sentinel per model, `SENTINEL_GAP_MS` after the last."""
    records = [orjson.loads(value) for _, value in stream_bench.make_records("safe", n, "peer", 0)]
    for index, record in enumerate(records):
        record["ts"] = int((start + index * step_s) * 1000)
    cases = [orjson.dumps(record) for record in records]
    last_ts = max(int(record["ts"]) for record in records)
    sentinels = []
    for model in sorted({str(record["model"]) for record in records}):
        template = next(record for record in records if record["model"] == model)
        for partition in range(partitions):
            sentinel = {
                **template,
                "id": f"sentinel-{partition}-{model}",
                "ts": last_ts + SENTINEL_GAP_MS,
            }
            sentinels.append((partition, orjson.dumps(sentinel)))
    per_minute = Counter(int(record["ts"]) // MINUTE_MS * MINUTE_MS for record in records)
    return PeerInput(cases=cases, sentinels=sentinels, per_minute=per_minute)


def final_minute_count(value: bytes, suite: str = "safe") -> tuple[int, int] | None:
    """(window start in ms, count) of a final all-cases 60 s aggregate of `suite` (both
    systems emit scorestream's aggregate message); None for any other message."""
    data = orjson.loads(value)
    if data.get("suite") != suite or data.get("segment") or not data.get("final"):
        return None
    window = data["window"]
    if float(window["size_s"]) != 60:
        return None
    started = datetime.fromisoformat(window["start"].replace("Z", "+00:00"))
    return round(started.timestamp() * 1000), int(data["count"])


def lost_cases(per_minute: Mapping[int, int], finals: Mapping[int, int]) -> tuple[int, int]:
    """(cases lost, cases counted twice) over the input's 60 s windows: each window's input
    count against its final count (a window without a final lost all its cases)."""
    lost = extra = 0
    for start, expected in per_minute.items():
        counted = finals.get(start, 0)
        lost += max(0, expected - counted)
        extra += max(0, counted - expected)
    return lost, extra


async def produce_input(bootstrap: str, topic: str, data: PeerInput) -> None:
    """The cases (keyed as `scorestream produce` keys them), then the sentinels, each on
    its own partition."""
    await produce_lines(bootstrap, topic, data.cases)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for partition, value in data.sentinels:
            await producer.send(topic, value, partition=partition)
        await producer.flush()
    finally:
        await producer.stop()


# ---------------------------------------------------------------- measuring


def tree_pids(pid: int) -> list[int]:
    """`pid` and all its descendants (from /proc)."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        with contextlib.suppress(OSError):
            for task in Path(f"/proc/{current}/task").iterdir():
                with contextlib.suppress(OSError):
                    todo.extend(int(child) for child in (task / "children").read_text().split())
    return found


def tree_cpu(pid: int) -> float:
    """User + system CPU seconds of `pid` and its living descendants (the scoring pool's
    children too)."""
    total = 0.0
    for member in tree_pids(pid):
        with contextlib.suppress(OSError, ValueError):
            total += stream_bench.process_cpu(member)
    return total


@dataclass
class Outcome:
    """One system's catch-up on one backlog."""

    system: str
    n: int
    first: float = math.nan  # the first result read back
    results_done: float = math.nan  # the last result read back
    windows_done: float = math.nan  # the last final 60 s all-cases window read back
    cpu_seconds: float = math.nan  # the process tree's, first result -> the last of both
    results: int = 0
    lost: int = 0
    doubled: int = 0
    finals: dict[int, int] = field(default_factory=dict)
    arrivals: list[float] = field(default_factory=list)  # when each new result was read

    def timeline(self) -> str:
        """Seconds from the first result until 10/25/50/75/90/100 % of them arrived."""
        if not self.arrivals:
            return "-"
        times = sorted(self.arrivals)
        marks = (0.1, 0.25, 0.5, 0.75, 0.9, 1.0)
        picks = [times[max(0, math.ceil(share * len(times)) - 1)] - times[0] for share in marks]
        return " ".join(
            f"{int(share * 100)}%:{pick:.1f}" for share, pick in zip(marks, picks, strict=True)
        )

    @property
    def results_rate(self) -> float:
        return self._rate(self.results_done)

    @property
    def windowed_rate(self) -> float:
        return self._rate(self.windows_done)

    def _rate(self, done: float) -> float:
        """N over the span from the first result to `done` (nan when either is missing)."""
        span = done - self.first
        return self.n / max(1e-9, span) if not math.isnan(span) else math.nan

    @property
    def cpu_ms_per_case(self) -> float:
        return self.cpu_seconds * 1000 / self.n


async def observe(
    process: subprocess.Popen[bytes],
    results: AIOKafkaConsumer,
    aggregates: AIOKafkaConsumer,
    data: PeerInput,
    outcome: Outcome,
    settle: float,
    profile: Path | None = None,
) -> None:
    """Read results and aggregates until every result arrived and every input minute has
    its final window, or for `settle` seconds nothing arrived and the system was idle; with
    `profile`, py-spy samples the system from the first result on."""
    seen: set[str] = set()
    cpu_first = math.nan
    last_arrival = cpu_sampled_at = time.time()
    cpu_before = tree_cpu(process.pid)
    profiler: subprocess.Popen[bytes] | None = None
    try:
        while True:
            arrived = False
            for consumer, is_results in ((results, True), (aggregates, False)):
                batches = await consumer.getmany(timeout_ms=50)
                now = time.time()
                for messages in batches.values():
                    for message in messages:
                        if is_results:
                            case_id = orjson.loads(message.value)["id"]
                            if case_id not in seen:
                                seen.add(case_id)
                                outcome.arrivals.append(now)
                            if math.isnan(outcome.first):
                                outcome.first, cpu_first = now, tree_cpu(process.pid)
                                if profile is not None:
                                    profiler = start_profiler(process.pid, profile)
                            outcome.results_done = now
                            arrived = True
                            continue
                        final = final_minute_count(message.value)
                        if final is not None and final[0] in data.per_minute:
                            outcome.finals[final[0]] = final[1]
                            outcome.windows_done = now
                            arrived = True
            cpu_now, sampled_at = tree_cpu(process.pid), time.time()
            busy = cpu_now - cpu_before > BUSY_SHARE * (sampled_at - cpu_sampled_at)
            cpu_before, cpu_sampled_at = cpu_now, sampled_at
            if arrived:
                outcome.cpu_seconds = cpu_now - cpu_first
            if arrived or busy:  # window work may still be under way without output
                last_arrival = sampled_at
            complete = len(seen) >= data.results and set(outcome.finals) >= set(data.per_minute)
            quiet = time.time() - last_arrival
            if complete or quiet > (STARTUP_S if math.isnan(outcome.first) else settle):
                break
            if process.poll() is not None:
                print(f"  ! {outcome.system} exited with {process.returncode}")
                break
    finally:
        if profiler is not None:
            profiler.send_signal(signal.SIGINT)  # py-spy writes its profile and exits
            profiler.wait(60)
    outcome.results = len(seen)
    outcome.lost, outcome.doubled = lost_cases(data.per_minute, outcome.finals)


def system_config(tag: str, grace: float = GRACE_S) -> dict[str, Any]:
    """The worker config of one run (Quix reads its topics and grace from it too)."""
    return {
        "app_id": f"peer-{tag}",
        "topics": {
            "input": f"{tag}-in",
            "results": f"{tag}-results",
            "aggregates": f"{tag}-aggregates",
            "gates": f"{tag}-gates",
            "dead_letters": f"{tag}-dlq",
        },
        "grace": f"{grace}s",
        "idle_timeout": "1s",
        "metrics_port": 0,
        "stream": {**TANSU_STREAM_SETTINGS, "partitions": PARTITIONS},
    }


def command(system: str, broker: EmbeddedBroker, config_path: Path) -> list[str]:
    if system == "scorestream":
        return [*stream_bench.WORKER_COMMAND, "--broker", broker.url, "--config", str(config_path)]
    python = os.environ.get("PEER_QUIX_PYTHON") or sys.executable
    return [python, str(Path(__file__).resolve()), "--quix-worker", str(config_path)]


# Leaf frames of threads that wait (py-spy counts some of them as active)
IDLE_FRAMES = ("Condition.wait", "Event.wait", "Queue.get", "select (", "unix_poll", "sleep")
# Frames every busy sample passes through (entry points, event loop, threads): not listed
GENERIC_FILES = ("<frozen", "threading.py", "asyncio/", "runpy", "mode/", "multiprocessing/")


def profile_summary(path: Path, top: int = 25) -> list[tuple[str, float]]:
    """The functions with the largest inclusive share of a py-spy raw profile's busy
    samples (waiting threads left out), with their share, largest first."""
    busy = 0
    inclusive: Counter[str] = Counter()
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = stack.split(";")
        if any(idle in frames[-1] for idle in IDLE_FRAMES):
            continue
        busy += int(count)
        names = set()
        for frame in frames:
            name, _, where = frame.partition(" (")
            source = where.split(":")[0].rstrip(")")
            if where and name != "<module>" and not source.startswith(GENERIC_FILES):
                names.add(f"{name} ({source})")
        for name in names:
            inclusive[name] += int(count)
    return [(name, count / busy) for name, count in inclusive.most_common(top)] if busy else []


def start_profiler(pid: int, output: Path) -> subprocess.Popen[bytes]:
    """`py-spy record` attached to `pid` and its child processes (raw collapsed stacks
    into `output`) until it gets SIGINT."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    return subprocess.Popen(
        [
            spy,
            "record",
            "--pid",
            str(pid),
            "--subprocesses",
            "-r",
            "100",
            "-f",
            "raw",
            "-o",
            str(output),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


async def run_system(
    system: str,
    broker: EmbeddedBroker,
    tmp: Path,
    data: PeerInput,
    settle: float,
    profile: Path | None = None,
    grace: float = GRACE_S,
    quix_fold: str = "lean",
) -> Outcome:
    """One system catching up on its own copy of `data` (under py-spy into `profile`)."""
    tag = f"{system[:4]}{time.time_ns()}"
    config = system_config(tag, grace)
    settings = load_settings(None, overrides=config, environ={})
    path = tmp / f"{tag}.json"
    if system == "quix":
        quix = {
            "settings": config,
            "bootstrap": broker.bootstrap,
            "state_dir": str(tmp / tag),
            "fold": quix_fold,
        }
        path.write_bytes(orjson.dumps(quix))
    else:
        path.write_bytes(orjson.dumps(config))
    await create_topics(broker.url, topic_names(settings.topics), PARTITIONS)
    await produce_input(broker.bootstrap, settings.topics.input, data)
    results = await stream_bench.fresh_consumer(broker.bootstrap, settings.topics.results)
    aggregates = await stream_bench.fresh_consumer(broker.bootstrap, settings.topics.aggregates)
    await results.seek_to_beginning()
    await aggregates.seek_to_beginning()
    log = tmp / f"{tag}.log"
    outcome = Outcome(system=system, n=data.n)
    with log.open("wb") as out:
        process = subprocess.Popen(
            command(system, broker, path),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        await observe(process, results, aggregates, data, outcome, settle, profile)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)
        await results.stop()
        await aggregates.stop()
    if outcome.results < data.results:
        tail = log.read_text(errors="replace").splitlines()[-15:]
        print(f"  ! {system}: {outcome.results}/{data.results} results; its log ends:")
        print("\n".join(f"    {line}" for line in tail))
    return outcome


# ---------------------------------------------------------------- Quix Streams


def as_result(value: Mapping[str, Any]) -> CaseResult:
    """A result read back as JSON from a repartition topic (validated when it was built)."""
    source = value.get("source")
    return CaseResult.model_construct(
        **{
            **value,
            "ts": datetime.fromisoformat(value["ts"]),
            "source": source and RecordSource.model_construct(**source),
        }
    )


class WindowFold:
    """Quix's reducer, initialiser and final step for one window definition: scorestream's
    own window fold and aggregate message, without the bootstrap reservoir (2 samples) and
    worst-case lists (Quix stores the whole value on every update)."""

    def __init__(
        self,
        suite: str,
        segment: Callable[[Mapping[str, Any]], dict[str, str]],
        size_s: float,
        step: float | None,
    ) -> None:
        self.suite, self.segment, self.size_s, self.step = suite, segment, size_s, step
        self.aggregator = registry.get(suite).aggregator()

    def initialise(self, value: Mapping[str, Any]) -> State:
        placeholder = WindowKey(self.size_s, self.step, 0.0)  # the start is set by `close`
        state = window_state.initialise(
            self.suite, self.segment(value), placeholder, QUIX_RESERVOIR, worst_k=0
        )
        return self.reduce(state, value)

    def reduce(self, state: State, value: Mapping[str, Any]) -> State:
        return window_state.update(state, as_result(value), self.aggregator)[0]

    def close(self, window: Mapping[str, Any]) -> bytes:
        """The final aggregate message of a closed Quix window (`start`, `end`, `value`)."""
        state = window["value"]
        state["window"] = WindowKey(self.size_s, self.step, window["start"] / 1000).to_json()
        message = aggregate_message.to_message(
            state, True, datetime.now(UTC), self.aggregator, confidence_intervals=False
        )
        return message.model_dump_json().encode("utf-8")


class LeanFold(WindowFold):
    """The least a Quix user would keep per window: count, label counts and score sums
    (what `.agg(Count(), Mean(...))` gives); its final message has the fields
    `final_minute_count` reads and those figures."""

    def initialise(self, value: Mapping[str, Any]) -> State:
        state = {"segment": self.segment(value), "count": 0, "labels": {}, "sums": {}}
        return self.reduce(state, value)

    def reduce(self, state: State, value: Mapping[str, Any]) -> State:
        state["count"] += 1
        label = value.get("label")
        if label is not None:
            state["labels"][label] = state["labels"].get(label, 0) + 1
        sums = state["sums"]
        for metric, score in value["scores"].items():
            if score is not None:
                sums[metric] = sums.get(metric, 0.0) + score
        return state

    def close(self, window: Mapping[str, Any]) -> bytes:
        state = window["value"]
        span = WindowKey(self.size_s, self.step, window["start"] / 1000).span()
        return orjson.dumps(
            {
                "suite": self.suite,
                "segment": state["segment"],
                "window": span.model_dump(mode="json"),
                "final": True,
                "count": state["count"],
                "label_counts": state["labels"],
                "means": {m: total / state["count"] for m, total in state["sums"].items()},
            }
        )


FOLDS: dict[str, type[WindowFold]] = {"scorestream": WindowFold, "lean": LeanFold}


def quix_worker(config_path: Path) -> None:
    """The Quix Streams application of the comparison (run in its own process)."""
    from quixstreams import Application, message_context
    from quixstreams.models.serializers import Serializer

    from worker.input import records as input_records

    config = orjson.loads(config_path.read_bytes())
    settings = load_settings(None, overrides=config["settings"], environ={})
    spec = registry.get("safe")
    score_case = spec.case_scorer(spec.section(settings))  # type: ignore[misc]
    versions = spec.versions(spec.section(settings))
    limits = settings.limits
    grace_ms = round(settings.grace * 1000)

    def score(envelope: dict[str, Any]) -> dict[str, Any]:
        """The per-case result, as `bench/stream.py`'s plain loop and the worker build it."""
        received = datetime.now(UTC)
        context = message_context()
        input_records.check_limits(envelope, limits)
        record = input_records.validate_record(envelope)
        scored = score_case(record.payload)
        position = input_records.SourcePosition(
            settings.topics.input, context.partition, context.offset
        )
        result = stream_bench.case_result(record, scored, versions, position, received)
        return dict(result.model_dump(mode="json"))

    class RawBytes(Serializer):
        def __call__(self, value: Any, ctx: Any) -> bytes:
            return bytes(value)

    app = Application(
        broker_address=config["bootstrap"],
        consumer_group=settings.app_id,
        auto_offset_reset="earliest",
        processing_guarantee="at-least-once",
        state_dir=config["state_dir"],
        loglevel="WARNING",
        # Tansu has no idempotent producer; a fetch that waits is answered late (as
        # scorestream's `fetch_max_wait` on Tansu).
        producer_extra_config={"enable.idempotence": False},
        # scorestream's group timeouts on Tansu (`TANSU_STREAM_SETTINGS`)
        consumer_extra_config={
            "fetch.wait.max.ms": 100,
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 1000,
        },
    )
    names = settings.topics
    source = app.topic(
        names.input,
        value_deserializer="json",
        timestamp_extractor=lambda value, headers, ts, kind: int(value["ts"]),
    )
    results = app.topic(names.results, value_serializer="json")
    aggregates = app.topic(names.aggregates, value_serializer=RawBytes())

    scored = app.dataframe(source).apply(score)
    scored.to_topic(results, key=lambda result: f"safe:{result['id']}".encode())
    by_segment: dict[str, Callable[[Mapping[str, Any]], dict[str, str]]] = {
        "model": lambda value: {"model": str(value["model"])},
        "all": lambda value: {},
    }
    for name, segment in by_segment.items():
        grouped = scored.group_by(
            (lambda value: value["model"]) if name == "model" else (lambda value: "all"),
            name=f"by-{name}",
        )
        for size_s, step in ((60.0, None), (3600.0, 300.0)):
            fold = FOLDS[config["fold"]]("safe", segment, size_s, step)
            window: Any
            if step is None:
                window = grouped.tumbling_window(int(size_s * 1000), grace_ms=grace_ms)
            else:
                window = grouped.hopping_window(
                    int(size_s * 1000), int(step * 1000), grace_ms=grace_ms
                )
            window.reduce(fold.reduce, fold.initialise).final().apply(fold.close).to_topic(
                aggregates
            )
    print("quix worker ready", flush=True)
    app.run()


# ---------------------------------------------------------------- report


def ratio(mine: float, theirs: float) -> float:
    return mine / theirs if theirs and not math.isnan(theirs) else math.nan


def report(scenario: str, rounds: list[dict[str, Outcome]]) -> bool:
    """Print each round of one scenario and its summary; True when its targets are met."""
    fmt, spread = stream_bench.fmt, stream_bench.spread
    header = (
        f"{'round':<7}{'system':<13}{'results/s':>11}{'windowed/s':>12}{'cpu ms/case':>13}"
        f"{'lost':>8}{'doubled':>9}{'results':>9}"
    )
    print(f"\n== scenario {scenario}: {SCENARIOS[scenario] * 1000:g} ms of event time apart")
    print(
        "results/s: N / (first -> last result); windowed/s: N / (first result -> last final "
        "60 s all-cases window); cpu: the system's process tree over that span; lost: cases "
        "missing from the final 60 s all-cases windows"
    )
    print(header)
    print("-" * len(header))
    figures: dict[str, list[float]] = {}
    for index, outcomes in enumerate(rounds, 1):
        for system in SYSTEMS:
            run = outcomes[system]
            print(
                f"{index:<7}{system:<13}{fmt(run.results_rate):>11}{fmt(run.windowed_rate):>12}"
                f"{fmt(run.cpu_ms_per_case, 3):>13}{run.lost:>8}{run.doubled:>9}"
                f"{run.results:>9}"
            )
            for name, value in (
                ("results/s", run.results_rate),
                ("windowed/s", run.windowed_rate),
                ("cpu ms/case", run.cpu_ms_per_case),
                ("lost", float(run.lost)),
                ("lost %", 100 * run.lost / run.n),
            ):
                figures.setdefault(f"{system} {name}", []).append(value)
        for system in SYSTEMS:
            print(f"{'':<7}{system + ' results at (s)':<28}{outcomes[system].timeline()}")
        ours, theirs = outcomes["scorestream"], outcomes["quix"]
        ratios = {
            "results/s": ratio(ours.results_rate, theirs.results_rate),
            "windowed/s": ratio(ours.windowed_rate, theirs.windowed_rate),
            "cpu ms/case": ratio(ours.cpu_ms_per_case, theirs.cpu_ms_per_case),
        }
        print(
            f"{'':<7}{'ratio':<13}{fmt(ratios['results/s'], 2):>11}"
            f"{fmt(ratios['windowed/s'], 2):>12}{fmt(ratios['cpu ms/case'], 2):>13}"
        )
        for name, value in ratios.items():
            figures.setdefault(f"ratio {name}", []).append(value)
    print(
        f"\n{scenario}, over {len(rounds)} rounds: min / median / max (ratios: scorestream / Quix)"
    )
    for name, values in figures.items():
        digits = 0 if "/s" in name and not name.startswith("ratio") else 2
        if name.endswith("lost"):
            digits = 0
        print(f"  {name:<28}{spread(values, digits):>28}")
    passed = True
    ours_lost = max(figures["scorestream lost"])
    for name, direction, goal in TARGETS[scenario]:
        values = [v for v in figures[f"ratio {name}"] if not math.isnan(v)]
        median = statistics.median(values) if values else math.nan
        met = (median >= goal if direction > 0 else median <= goal) and (
            name != "windowed/s" or ours_lost == 0
        )
        passed &= met
        extra = f" with 0 lost (lost: {ours_lost:.0f})" if name == "windowed/s" else ""
        print(
            f"target ({scenario}): {name} {'>=' if direction > 0 else '<='} {goal}x Quix{extra}: "
            f"median {fmt(median, 2)} -> {'met' if met else 'NOT met'}"
        )
    return passed


# ---------------------------------------------------------------- main


def quix_version() -> str | None:
    """The Quix Streams version the Quix runs use (`PEER_QUIX_PYTHON`'s), None if absent."""
    probe = "import warnings; warnings.simplefilter('ignore'); import quixstreams; " + (
        "print(quixstreams.__version__)"
    )
    python = os.environ.get("PEER_QUIX_PYTHON") or sys.executable
    found = subprocess.run([python, "-c", probe], capture_output=True, text=True, check=False)
    return found.stdout.strip() if found.returncode == 0 else None


async def main(args: argparse.Namespace) -> int:
    version = quix_version()
    if version is None:
        print(
            "Quix Streams is not installed: pip install -e .[bench], or see this file's "
            "docstring for PEER_QUIX_PYTHON"
        )
        return 2
    if not 0 <= args.grace <= MAX_GRACE_S:
        print(f"--grace must be between 0 and {MAX_GRACE_S} seconds")
        return 2
    scenarios = list(SCENARIOS) if args.scenario == "both" else [args.scenario]
    print(
        f"quixstreams {version}; {args.n} SAFE cases, {args.rounds} rounds, scenarios "
        f"{', '.join(scenarios)}, grace {args.grace:g}s, Quix fold {args.quix_fold}"
    )
    rounds: dict[str, list[dict[str, Outcome]]] = {scenario: [] for scenario in scenarios}
    started = time.time()
    with EmbeddedBroker() as broker, tempfile.TemporaryDirectory() as tmp:
        for index in range(args.rounds):
            for scenario in scenarios:
                step_s = SCENARIOS[scenario]
                data = peer_input(args.n, history_start(args.n, step_s, time.time()), step_s)
                order = SYSTEMS if index % 2 == 0 else tuple(reversed(SYSTEMS))
                outcomes = {}
                for system in order:
                    print(f"round {index + 1}/{args.rounds}, {scenario}: {system} ...", flush=True)
                    profile = None
                    if args.profile is not None:
                        args.profile.mkdir(parents=True, exist_ok=True)
                        profile = args.profile / f"{scenario}-{system}-{index + 1}.txt"
                    outcomes[system] = await run_system(
                        system,
                        broker,
                        Path(tmp),
                        data,
                        args.settle,
                        profile,
                        args.grace,
                        args.quix_fold,
                    )
                rounds[scenario].append(outcomes)
                if args.profile is not None:
                    for system in SYSTEMS:
                        path = args.profile / f"{scenario}-{system}-{index + 1}.txt"
                        if path.exists():
                            print(f"  {system}: busiest functions (inclusive share of samples)")
                            for name, share in profile_summary(path):
                                print(f"    {share:6.1%}  {name}")
    passed = all([report(scenario, rounds[scenario]) for scenario in scenarios])
    print(f"\ntotal {time.time() - started:.0f}s; targets {'met' if passed else 'NOT met'}")
    return 0


def parse_args(argv: Iterable[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=20000, help="SAFE cases per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--scenario",
        choices=[*SCENARIOS, "both"],
        default="both",
        help="current (10 ms of event time apart: a few windows) or long-backlog (360 ms "
        "apart: hundreds of windows, a worker catching up after downtime); default both",
    )
    parser.add_argument(
        "--grace",
        type=float,
        default=GRACE_S,
        help=f"both systems' window grace in seconds (at most {MAX_GRACE_S})",
    )
    parser.add_argument(
        "--quix-fold",
        choices=sorted(FOLDS),
        default="lean",
        help="Quix's window fold: lean (count, label counts and score sums: what a Quix user "
        "would keep, Quix at its cheapest; default) or scorestream (scorestream's own fold "
        "and aggregate message, the same figures)",
    )
    parser.add_argument(
        "--settle",
        type=float,
        default=15.0,
        help="seconds without output and CPU use after which a run is over (windows that "
        "never close)",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        help="directory for py-spy profiles (raw collapsed stacks) of each run from its first "
        "result on (`pip install py-spy`; sampling slows the systems, so the figures of a "
        "profiled run are not for comparison)",
    )
    parser.add_argument("--quix-worker", type=Path, help=argparse.SUPPRESS)
    return parser.parse_args(None if argv is None else list(argv))


if __name__ == "__main__":
    arguments = parse_args()
    if arguments.quix_worker is not None:
        quix_worker(arguments.quix_worker)
        sys.exit(0)
    sys.exit(asyncio.run(main(arguments)))
