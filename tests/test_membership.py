"""Membership changes on a real broker, each member a real `scorestream worker` process:
a SIGTERM handover (a rolling deploy), scaling up 1 -> 3 and down 3 -> 1, a rolling
restart of three workers and a SIGKILL during a handover, all while SAFE cases stream in
live. In each, for every segment: every 10 s window that received cases gets a final
aggregate (a final published again repeats the same count), the finals count every case
exactly once, no case is late, and every case has a result."""

from __future__ import annotations

import asyncio
import contextlib
import time
import urllib.request
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from schemas.envelope import parse_event_time
from tests.streamkit import (
    EXAMPLES,
    TopicReader,
    WorkerProcess,
    as_lines,
    envelopes,
    live,
    make_config,
    produce,
    provision,
    settings_of,
    write_config,
)
from worker.ops.broker import EmbeddedBroker

pytestmark = pytest.mark.integration

WINDOW_S = 10
GRACE_S = 5
RATE = 50  # cases a second
CHUNK_S = 0.2
MODELS = ("clinical-llm-a", "clinical-llm-b")


def scraped(url: str, name: str) -> dict[str, float]:
    """A metric's samples on a /metrics page, by their label text."""
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    samples: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            labels, value = line.rsplit(" ", 1)
            samples[labels[len(name) :]] = float(value)
    return samples


class Group:
    """The workers of one scenario, with their metrics read before each stop."""

    def __init__(self, tmp_path: Path, broker: EmbeddedBroker, config: dict[str, Any], n: int):
        path = write_config(tmp_path / "config.yaml", config)
        self.workers = [
            WorkerProcess(path, broker.url, tmp_path / f"worker-{i}.log") for i in range(n)
        ]
        self.starts = [0] * n
        self.late: list[float] = []  # late records, per worker run
        self.metrics: list[dict[str, dict[str, float]]] = []  # per worker run

    def _read(self, index: int) -> None:
        url = self.workers[index].metrics_url()
        self.late.append(sum(scraped(url, "scorestream_late_records_total").values()))
        self.metrics.append(
            {
                name: scraped(url, name)
                for name in ("scorestream_windows_opened_total", "scorestream_window_finals_total")
            }
        )

    async def start(self, index: int, wait: bool = True) -> None:
        self.workers[index].start()
        self.starts[index] += 1
        if wait:
            await self.ready(index)

    async def ready(self, index: int) -> None:
        await asyncio.to_thread(self.workers[index].wait_ready, 120.0, self.starts[index])

    async def stop(self, index: int) -> None:
        """SIGTERM, and wait for the worker to exit."""
        self._read(index)
        await asyncio.to_thread(self.workers[index].stop)

    async def kill(self, index: int) -> None:
        self._read(index)
        await asyncio.to_thread(self.workers[index].kill)

    async def restart(self, index: int) -> None:
        await self.stop(index)
        await self.start(index)

    def running(self) -> list[int]:
        return [
            i
            for i, worker in enumerate(self.workers)
            if worker.process is not None and worker.process.poll() is None
        ]

    def finish(self) -> None:
        try:
            for index in self.running():
                self._read(index)
        finally:
            for worker in self.workers:
                worker.stop()

    def counter_total(self, name: str) -> float:
        return sum(sum(run[name].values()) for run in self.metrics)


@dataclass(frozen=True)
class Scenario:
    name: str
    members: int  # worker processes in the pool
    initial: int  # started (and ready) before the stream
    changes: Callable[[Group], Awaitable[None]]  # runs while the stream flows
    killed: bool = False  # a worker dies without a word: its counters are not all read


async def close_edge(lead: float = 0.3) -> None:
    """Sleep until `lead` seconds before the next moment a window closes on the wall
    clock (a boundary plus grace): a stop then falls on the close."""
    now = time.time()
    edge = (now - GRACE_S) // WINDOW_S * WINDOW_S + WINDOW_S + GRACE_S
    while edge - lead <= now + 0.5:
        edge += WINDOW_S
    await asyncio.sleep(edge - lead - now)


async def sigterm_handover(group: Group) -> None:
    await asyncio.sleep(3)
    await group.start(1)  # B joins
    await close_edge()
    await group.stop(0)  # A leaves, as a rolling deploy stops it, as a window closes


async def scale_up(group: Group) -> None:
    await asyncio.sleep(3)
    await group.start(1)
    await asyncio.sleep(3)
    await group.start(2)
    await asyncio.sleep(3)


async def scale_down(group: Group) -> None:
    await asyncio.sleep(4)
    await group.stop(2)
    await asyncio.sleep(4)
    await group.stop(1)
    await asyncio.sleep(2)


async def rolling_restart(group: Group) -> None:
    for index in range(3):
        await close_edge()
        await group.restart(index)


async def sigkill_during_handover(group: Group) -> None:
    await asyncio.sleep(4)
    await group.start(2, wait=False)  # a rebalance starts ...
    await asyncio.sleep(1.5)
    await group.kill(0)  # ... and a member dies in it
    await group.ready(2)
    await asyncio.sleep(3)


SCENARIOS = [
    Scenario("sigterm-handover", 2, 1, sigterm_handover),
    Scenario("scale-up-1-3", 3, 1, scale_up),
    Scenario("scale-down-3-1", 3, 3, scale_down),
    Scenario("rolling-restart-3", 3, 3, rolling_restart),
    Scenario("sigkill-during-handover", 3, 2, sigkill_during_handover, killed=True),
]


def safe_case(index: int) -> dict[str, Any]:
    base = envelopes(EXAMPLES / "safe" / "envelopes.jsonl")
    model = MODELS[index % len(MODELS)]
    labels = {**base[index % len(base)].get("labels", {}), "model_version": model}
    return {**base[index % len(base)], "id": f"case-{index:05d}", "model": model, "labels": labels}


def segment_name(segment: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(segment.items())) or "{}"


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
async def test_membership_change_loses_and_double_counts_nothing(
    scenario: Scenario, broker: EmbeddedBroker, tmp_path: Path
) -> None:
    config = make_config(
        windows=[{"size": f"{WINDOW_S}s"}],
        grace=f"{GRACE_S}s",
        segment_by=["model"],
        idle_timeout="1s",
    )
    settings = settings_of(config)
    topics = settings.topics
    await provision(settings, broker.url)
    group = Group(tmp_path, broker, config, scenario.members)
    produced: list[dict[str, Any]] = []
    changed = asyncio.Event()

    async def stream() -> None:
        """Live SAFE cases at RATE a second until the changes are done, plus 2 s."""
        done_at: float | None = None
        while done_at is None or time.monotonic() < done_at:
            chunk = [safe_case(len(produced) + i) for i in range(int(RATE * CHUNK_S))]
            chunk = live(chunk, step_ms=int(1000 / RATE))
            await produce(broker.bootstrap, topics.input, as_lines(chunk))
            produced.extend(chunk)
            await asyncio.sleep(CHUNK_S)
            if done_at is None and changed.is_set():
                done_at = time.monotonic() + 2

    async with TopicReader(
        broker.bootstrap, topics.input, topics.results, topics.aggregates
    ) as reader:
        try:
            await asyncio.gather(*(group.start(i) for i in range(scenario.initial)))
            streaming = asyncio.create_task(stream())
            await scenario.changes(group)
            changed.set()
            await streaming
            # What the input topic holds: the test's producer retries without idempotence
            # (Tansu has none), so a retried request can leave a case twice; each record
            # is a case the windows must count.
            await reader.until(
                lambda r: len(r.values(topics.input)) >= len(produced),
                timeout=60,
                what="every produced case on the input topic",
            )
            inputs = reader.values(topics.input)
            expected = expected_counts(inputs)
            await reader.until(
                lambda r: (
                    {v["id"] for v in r.values(topics.results)} >= {case["id"] for case in produced}
                ),
                timeout=180,
                what="a result for every case",
            )
            with contextlib.suppress(AssertionError):  # the report below says what is missing
                await reader.until(
                    lambda r: (
                        counted_by_segment(finals_of(r, topics.aggregates)) == totals(expected)
                    ),
                    timeout=120,
                    what="final windows counting every case",
                )
            await reader.poll(2.0)  # a final published twice would show by now
        finally:
            group.finish()

    finals = finals_of(reader, topics.aggregates)
    report = summary(scenario.name, inputs, expected, finals)
    print(report)
    wanted = {(segment, start): {n} for segment, ws in expected.items() for start, n in ws.items()}
    if {key: set(counts) for key, counts in finals.items()} != wanted:
        report += handover_log(group)  # what a rare miscount in CI leaves to read
    for segment, windows in expected.items():
        got = {start: counts for (seg, start), counts in finals.items() if seg == segment}
        assert set(got) == set(windows), f"{segment}: windows without a final\n{report}"
        for start, counts in got.items():
            assert set(counts) == {windows[start]}, f"{segment} {start}: {counts}\n{report}"
    assert group.late and all(late == 0 for late in group.late), group.late
    if not scenario.killed and scenario.name == "scale-up-1-3":
        # Nothing silent: over the group, every window opened got one final, and the
        # counter of finals agrees with the topic.
        opened = group.counter_total("scorestream_windows_opened_total")
        published = group.counter_total("scorestream_window_finals_total")
        distinct = sum(len(windows) for windows in expected.values())
        on_topic = sum(len(counts) for counts in finals.values())
        assert opened == distinct == published == on_topic, (opened, distinct, published)


HANDOVER_LINES = ("folding from", "Joined group", "Revoking", "WARNING", "ERROR")


def handover_log(group: Group, per_worker: int = 60) -> str:
    """The lines of each worker's log that say how partitions moved and where each new
    owner started folding (the last `per_worker` of them)."""
    parts = []
    for index, worker in enumerate(group.workers):
        try:
            lines = worker.log_path.read_text(errors="replace").splitlines()
        except OSError:
            continue
        kept = [line for line in lines if any(mark in line for mark in HANDOVER_LINES)]
        parts.append(f"\n--- worker {index}\n" + "\n".join(kept[-per_worker:]))
    return "".join(parts)


def expected_counts(cases: list[dict[str, Any]]) -> dict[str, dict[float, int]]:
    """Cases per segment and window start."""
    expected: dict[str, Counter[float]] = defaultdict(Counter)
    for case in cases:
        ts = epoch(case["ts"])
        start = float(ts // WINDOW_S * WINDOW_S)
        expected["{}"][start] += 1
        expected[segment_name({"model": case["model"]})][start] += 1
    return {segment: dict(windows) for segment, windows in expected.items()}


def epoch(stamp: Any) -> float:
    moment = parse_event_time(stamp)
    assert moment is not None
    return moment.timestamp()


def totals(expected: dict[str, dict[float, int]]) -> dict[str, int]:
    return {segment: sum(windows.values()) for segment, windows in expected.items()}


def finals_of(reader: TopicReader, topic: str) -> dict[tuple[str, float], list[int]]:
    """The counts of every final published, by segment and window start."""
    found: dict[tuple[str, float], list[int]] = defaultdict(list)
    for value in reader.values(topic):
        if value["final"] and value["suite"] == "safe":
            start = epoch(value["window"]["start"])
            found[(segment_name(value["segment"]), start)].append(value["count"])
    return found


def counted_by_segment(finals: dict[tuple[str, float], list[int]]) -> dict[str, int]:
    """Cases counted per segment, each window once (its first final)."""
    counted: Counter[str] = Counter()
    for (segment, _start), counts in finals.items():
        counted[segment] += counts[0]
    return dict(counted)


def summary(
    name: str,
    cases: list[dict[str, Any]],
    expected: dict[str, dict[float, int]],
    finals: dict[tuple[str, float], list[int]],
) -> str:
    repeated = len(cases) - len({case["id"] for case in cases})
    lines = [f"\n{name}: {len(cases)} cases on the input topic ({repeated} written twice)"]
    for segment, windows in sorted(expected.items()):
        got = {start: counts for (seg, start), counts in finals.items() if seg == segment}
        counted = sum(counts[0] for counts in got.values())
        lost = sum(
            max(0, n - (got[start][0] if start in got else 0)) for start, n in windows.items()
        )
        double = sum(max(0, counts[0] - windows.get(start, 0)) for start, counts in got.items())
        repeats = sum(len(counts) - 1 for counts in got.values())
        lines.append(
            f"  {segment}: produced {sum(windows.values())}, counted {counted}, "
            f"lost {lost}, double-counted {double}, "
            f"windows {len(windows)}, finals {sum(len(c) for c in got.values())} "
            f"(repeated {repeats})"
        )
    return "\n".join(lines)
