"""Event time on a real broker with real `scorestream worker` processes: a worker that is
behind (start-up backlog, SIGKILL and downtime, a second worker joining) turns no in-order
case late, a really old case is late but still scored, a far-future `ts` is a dead letter."""

from __future__ import annotations

import asyncio
import time
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest

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

WINDOWS = [{"size": "10s"}]


def config_10s() -> dict[str, Any]:
    return make_config(windows=WINDOWS, segment_by=[])


def safe_cases(count: int, prefix: str = "case") -> list[dict[str, Any]]:
    base = envelopes(EXAMPLES / "safe" / "envelopes.jsonl")
    return [{**base[index % len(base)], "id": f"{prefix}-{index:05d}"} for index in range(count)]


def scraped(url: str, name: str) -> float:
    """Sum of a metric's samples on a /metrics page."""
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(name + "{") or line.startswith(name + " ")
    )


def finals(reader: TopicReader, topic: str) -> dict[str, dict[str, Any]]:
    """Final aggregates of the all-cases segment by key; fails on a second final."""
    found: dict[str, dict[str, Any]] = {}
    for key, value in reader.keyed(topic):
        if value["final"] and value["segment"] == {}:
            assert key not in found, f"two finals for {key}"
            found[key] = value
    return found


def counted(reader: TopicReader, topic: str) -> int:
    return sum(value["count"] for value in finals(reader, topic).values())


def result_ids(reader: TopicReader, topic: str) -> set[str]:
    return {value["id"] for value in reader.values(topic)}


def start_workers(
    tmp_path: Path, broker: EmbeddedBroker, config: dict[str, Any], count: int
) -> list[WorkerProcess]:
    path = write_config(tmp_path / "config.yaml", config)
    return [
        WorkerProcess(path, broker.url, tmp_path / f"worker-{index}.log") for index in range(count)
    ]


async def wait_counted(reader: TopicReader, topics: Any, cases: int, timeout: float) -> None:
    await reader.until(
        lambda r: result_ids(r, topics.results) >= {f"case-{i:05d}" for i in range(cases)},
        timeout=timeout,
        what="every result",
    )
    await reader.until(
        lambda r: counted(r, topics.aggregates) >= cases,
        timeout=timeout,
        what=f"final windows counting {cases} cases",
    )
    await reader.poll(2.0)


async def test_backlog_at_start_is_counted_in_full(broker: EmbeddedBroker, tmp_path: Path) -> None:
    """(a) 300 cases produced before the worker starts."""
    config = config_10s()
    settings = settings_of(config)
    topics = settings.topics
    await provision(settings, broker.url)
    await produce(broker.bootstrap, topics.input, as_lines(live(safe_cases(300), step_ms=20)))
    (worker,) = start_workers(tmp_path, broker, config, 1)
    async with TopicReader(broker.bootstrap, topics.results, topics.aggregates) as reader:
        try:
            worker.start().wait_ready()
            await wait_counted(reader, topics, 300, timeout=120)
            late = scraped(worker.metrics_url(), "scorestream_late_records_total")
        finally:
            worker.stop()
    assert counted(reader, topics.aggregates) == 300
    assert late == 0
    print(
        f"\n(a) produced 300, counted in final windows {counted(reader, topics.aggregates)}, "
        f"late {late:.0f}"
    )


async def test_sigkill_and_downtime_past_the_window_lose_nothing(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    """(b) SIGKILL mid-stream, down 30 s (more than window + grace), restart."""
    config = config_10s()
    settings = settings_of(config)
    topics = settings.topics
    await provision(settings, broker.url)
    (worker,) = start_workers(tmp_path, broker, config, 1)
    cases = safe_cases(400)
    async with TopicReader(broker.bootstrap, topics.results, topics.aggregates) as reader:
        try:
            worker.start().wait_ready()

            async def stream() -> None:  # 40 cases every half second, live
                for start in range(0, len(cases), 40):
                    chunk = as_lines(live(cases[start : start + 40], step_ms=10))
                    await produce(broker.bootstrap, topics.input, chunk)
                    await asyncio.sleep(0.5)

            producing = asyncio.create_task(stream())
            await reader.until(
                lambda r: len(r.records[topics.results]) >= 50, timeout=60, what="50 results"
            )
            worker.kill()
            killed_at = len(reader.records[topics.results])
            await producing  # the rest arrives while the worker is down
            await asyncio.sleep(30)
            worker.start()
            worker.wait_ready(occurrence=2)
            await wait_counted(reader, topics, len(cases), timeout=120)
            late = scraped(worker.metrics_url(), "scorestream_late_records_total")
        finally:
            worker.stop()
    assert killed_at < len(cases), "the kill came too late to test anything"
    assert counted(reader, topics.aggregates) == len(cases)
    assert late == 0
    print(
        f"\n(b) produced {len(cases)}, results before the kill {killed_at}, counted in final "
        f"windows {counted(reader, topics.aggregates)}, late after restart {late:.0f}"
    )


async def test_a_second_worker_joining_mid_stream_turns_nothing_late(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    """(c) a second worker joins while a paced stream is flowing."""
    config = config_10s()
    settings = settings_of(config)
    topics = settings.topics
    await provision(settings, broker.url)
    first, second = start_workers(tmp_path, broker, config, 2)
    cases = safe_cases(240)
    async with TopicReader(broker.bootstrap, topics.results, topics.aggregates) as reader:
        try:
            first.start().wait_ready()
            for index, start in enumerate(range(0, len(cases), 20)):
                if index == 4:  # a third of the stream in: the second worker joins
                    second.start()
                    await asyncio.to_thread(second.wait_ready)
                chunk = cases[start : start + 20]
                await produce(broker.bootstrap, topics.input, as_lines(live(chunk)))
                await asyncio.sleep(1.0)
            await wait_counted(reader, topics, len(cases), timeout=120)
            late = [
                scraped(w.metrics_url(), "scorestream_late_records_total") for w in (first, second)
            ]
            shares = [scraped(w.metrics_url(), "scorestream_cases_total") for w in (first, second)]
        finally:
            first.stop()
            second.stop()
    assert counted(reader, topics.aggregates) == len(cases)
    assert late == [0, 0]
    assert all(share > 0 for share in shares), f"one worker did all the work: {shares}"
    print(
        f"\n(c) produced {len(cases)}, counted in final windows "
        f"{counted(reader, topics.aggregates)}, late {sum(late):.0f}, shares {shares}"
    )


async def test_old_cases_are_late_but_scored_and_future_ones_dead_letters(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    """(d) a case 10 minutes old is late and still gets its result; (e) a far-future `ts`
    is an `invalid_timestamp` dead letter and closes no window."""
    config = config_10s()
    settings = settings_of(config)
    topics = settings.topics
    await provision(settings, broker.url)
    (worker,) = start_workers(tmp_path, broker, config, 1)
    now = datetime.now(UTC)
    stamp = lambda moment: moment.isoformat().replace("+00:00", "Z")  # noqa: E731
    base = safe_cases(3)
    old = {**base[0], "id": "old", "ts": stamp(now - timedelta(minutes=10))}
    future = {**base[1], "id": "future", "ts": stamp(now + timedelta(days=365 * 7000))}
    year_zero = {**base[1], "id": "year-zero", "ts": "0000-01-01T00:00:00Z"}
    async with TopicReader(
        broker.bootstrap, topics.results, topics.aggregates, topics.dead_letters
    ) as reader:
        try:
            worker.start().wait_ready()
            await produce(broker.bootstrap, topics.input, as_lines(live(safe_cases(20))))
            await reader.until(
                lambda r: counted(r, topics.aggregates) >= 20, timeout=90, what="first windows"
            )
            await produce(
                broker.bootstrap,
                topics.input,
                [orjson.dumps(old), orjson.dumps(future), orjson.dumps(year_zero)],
            )
            await reader.until(
                lambda r: (
                    "old" in result_ids(r, topics.results)
                    and len(r.records[topics.dead_letters]) >= 2
                ),
                timeout=60,
                what="the old case's result and two dead letters",
            )
            deadline = time.monotonic() + 20
            late = 0.0
            while time.monotonic() < deadline and late < 1:
                late = scraped(worker.metrics_url(), "scorestream_late_records_total")
                await asyncio.sleep(0.5)
            await produce(broker.bootstrap, topics.input, as_lines(live(safe_cases(5, "more"))))
            await reader.until(
                lambda r: counted(r, topics.aggregates) >= 25, timeout=60, what="later windows"
            )
        finally:
            worker.stop()
    assert late == 1
    assert counted(reader, topics.aggregates) == 25  # the old case changed no aggregate
    letters = {
        orjson.loads(letter["raw"])["id"]: letter for letter in reader.values(topics.dead_letters)
    }
    assert {ident: letter["error"]["type"] for ident, letter in letters.items()} == {
        "future": "invalid_timestamp",
        "year-zero": "invalid_timestamp",
    }
    assert "ahead of the wall clock" in letters["future"]["error"]["message"]
    assert "future" not in result_ids(reader, topics.results)
