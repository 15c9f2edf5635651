"""The pause in results while a worker joins a running group and while one leaves (issue
43, item 7).

    .venv/bin/python bench/membership.py [--rounds 3] [--rate 300] [--settle 4] [--after 6]

On the embedded Tansu broker, SAFE envelopes (examples/safe, unique ids, `ts` = now) go
to the input topic at a steady `--rate` a second for the whole run, while one
`scorestream worker` process (default configuration, Tansu's stream settings, its own
topics) scores them. Then, each round:

1. join: a new worker is launched; it loads its scorers, joins the group (a rebalance)
   and takes partitions; `--settle` seconds after its first result,
2. leave: the older of the two gets SIGTERM, stops gracefully and leaves the group (a
   rebalance); the remaining worker runs alone for `--after` seconds after the exit, then
   `--steady` seconds more before the next round's join. SIGTERM goes to the worker
   process alone, as Kubernetes sends it; `--group-signal` sends it to the process group
   (the scoring children too), as systemd's default KillMode=control-group does (the
   children ignore a terminal's Ctrl-C, SIGINT, but not SIGTERM).

Printed per round: each new worker's time from launch to its Faust worker's start (its
scorers loaded: it connects and joins next), to ready (its log line) and to its first
result (its `scorestream_cases_total` > 0 on /metrics, polled every 0.2 s); the stopped
worker's time from SIGTERM to exit; and the longest gap between two results read back
(arrival time at a group-less reader of the results topic, which fetches with a 20 ms
wait) in three windows: steady (the `--steady` s before the launch, one worker), join
(launch -> SIGTERM) and leave (SIGTERM -> `--after` s after the exit). A pause that
overlaps the join or the leave window counts whole (from the last result before it to
the first after it; the next round waits for that); the steady window counts only its
own stretch. The same gaps on the results of each input partition (`source.partition`),
the longest of them: a worker that stops holds its partitions until it leaves, so their
results pause for its whole stop while the others' go on, and a partition's new owner
first repeats the results since its last commit (counted: a repeat is no new result).
Processes of a stopped worker's group still alive 3 s after it exited (its scoring
children) are listed, then killed.

At the end: min / median / max over the rounds, next to the group's session and
rebalance timeouts (target: every longest gap, of all results and of one partition's,
<= 2x the larger of them), and the cases that got no result within 30 s of the last
send. The machine is shared: run it when it is quiet, and read single rounds as noisy.
A default run takes about 3 minutes when a worker starts in 30 s (each round starts one).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import math
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from topics.catalog import record_key, topic_names
from topics.provision import create_topics
from worker.config import load_settings
from worker.ops.broker import TANSU_STREAM_SETTINGS, EmbeddedBroker

REPO = Path(__file__).resolve().parent.parent
PARTITIONS = 4
STARTUP_S = 180.0  # the longest a worker may take to its first result
STOP_S = 90.0  # the longest a SIGTERM stop may take before SIGKILL
DRAIN_S = 30.0  # after the last send, how long to wait for the last results
READ_WAIT_MS = 20


@dataclass
class Member:
    """One worker process."""

    name: str
    process: subprocess.Popen[bytes]
    log_path: Path
    launched: float
    ready: float = math.nan
    first_result: float = math.nan
    signalled: float = math.nan
    exited: float = math.nan

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def consuming_since(self) -> float:
        """When its Faust worker started (scorers loaded; it connects and joins next),
        from its log's first line of that start (local time); nan before."""
        found = re.search(
            r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3})\] \[\d+\] \[INFO\] "
            r"\[\^_Worker\]: Starting",
            self.log(),
            flags=re.MULTILINE,
        )
        if found is None:
            return math.nan
        stamp = datetime.strptime(found.group(1), "%Y-%m-%d %H:%M:%S")
        return stamp.timestamp() + int(found.group(2)) / 1000

    def metrics_url(self) -> str | None:
        found = re.findall(r"metrics on (http://\S+/metrics)", self.log())
        return str(found[-1]) if found else None


@dataclass
class Round:
    """The figures of one join and one leave."""

    steady_gap: float = math.nan
    join_gap: float = math.nan
    leave_gap: float = math.nan
    # the same on the results of one input partition (the longest of the partitions)
    steady_partition_gap: float = math.nan
    join_partition_gap: float = math.nan
    leave_partition_gap: float = math.nan
    to_ready: float = math.nan
    to_loaded: float = math.nan  # launch -> its Faust worker starts (it joins next)
    to_first_result: float = math.nan
    stop_took: float = math.nan


@dataclass
class Stream:
    """What was sent and what came back, with wall times."""

    sent: dict[str, float] = field(default_factory=dict)
    results: set[str] = field(default_factory=set)
    repeated: int = 0  # results of a case already read (replays after a partition moved)
    arrivals: list[float] = field(default_factory=list)  # each batch of new results
    by_partition: dict[int, list[float]] = field(default_factory=dict)  # of the input

    def gaps(self, start: float, end: float, whole: bool = True) -> tuple[float, float]:
        """The longest gap of the whole stream and of any one input partition."""
        partitions = [
            longest_gap(arrivals, start, end, whole) for arrivals in self.by_partition.values()
        ]
        return longest_gap(self.arrivals, start, end, whole), max(partitions, default=math.nan)


def envelopes() -> list[dict[str, Any]]:
    """The SAFE example envelopes."""
    lines = (REPO / "examples" / "safe" / "envelopes.jsonl").read_bytes().splitlines()
    return [orjson.loads(line) for line in lines if line.strip()]


async def send_steadily(
    producer: AIOKafkaProducer, topic: str, tag: str, rate: float, stream: Stream
) -> None:
    """`rate` SAFE envelopes a second, each when due, until cancelled."""
    examples = envelopes()
    started = time.time()
    count = 0
    while True:
        due = int((time.time() - started) * rate) + 1
        while count < due:
            record = dict(examples[count % len(examples)])
            record["id"] = f"{tag}-{count}"
            record["ts"] = int(time.time() * 1000)
            value = orjson.dumps(record)
            stream.sent[record["id"]] = time.time()
            await producer.send(topic, value, key=record_key(value))
            count += 1
        await asyncio.sleep(max(0.0, count / rate - (time.time() - started)))


async def read_results(consumer: AIOKafkaConsumer, stream: Stream) -> None:
    """Record the arrival time of every batch that brings a new result."""
    while True:
        batches = await consumer.getmany(timeout_ms=100)
        now = time.time()
        new: set[int] = set()
        for messages in batches.values():
            for message in messages:
                result = orjson.loads(message.value)
                ident = str(result["id"])
                if ident in stream.results:
                    stream.repeated += 1
                else:
                    stream.results.add(ident)
                    new.add(int(result["source"]["partition"]))
        if new:
            stream.arrivals.append(now)
        for partition in new:
            stream.by_partition.setdefault(partition, []).append(now)


def longest_gap(arrivals: list[float], start: float, end: float, whole: bool = True) -> float:
    """The longest stretch without a new result that overlaps [start, end]; `whole`: a
    stretch that began before `start` or ended after `end` counts whole (from the last
    arrival before, to the first after, or to now), else only its part in the window."""
    before = [t for t in arrivals if t < start]
    after = [t for t in arrivals if t > end]
    points = [before[-1] if before and whole else start]
    points += [t for t in arrivals if start <= t <= end]
    points.append((after[0] if after else max(end, time.time())) if whole else end)
    return max(b - a for a, b in itertools.pairwise(points))


def launch(name: str, broker: EmbeddedBroker, config: Path, logs: Path) -> Member:
    """`python -m worker worker` in its own session, as an operator runs it."""
    log_path = logs / f"{name}.log"
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-m", "worker", "worker", "--broker", broker.url]
    with log_path.open("wb") as out:
        process = subprocess.Popen(
            [*command, "--config", str(config)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=REPO,
            start_new_session=True,
        )
    return Member(name, process, log_path, time.time())


def cases_scored(url: str) -> float:
    text = urllib.request.urlopen(url, timeout=2).read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("scorestream_cases_total{")
    )


async def wait_first_result(member: Member) -> bool:
    """Poll the member's log and /metrics until it has scored a case."""
    deadline = member.launched + STARTUP_S
    while time.time() < deadline and member.process.poll() is None:
        if math.isnan(member.ready) and "scorestream worker ready" in member.log():
            member.ready = time.time()
        url = member.metrics_url()
        if url is not None:
            with contextlib.suppress(OSError, ValueError):
                if await asyncio.to_thread(cases_scored, url) > 0:
                    member.first_result = time.time()
                    if math.isnan(member.ready) and "scorestream worker ready" in member.log():
                        member.ready = member.first_result
                    return True
        await asyncio.sleep(0.2)
    print(
        f"{member.name} scored nothing; its log ends:\n" + "\n".join(member.log().split("\n")[-15:])
    )
    return False


async def stop(member: Member, group: bool = False, timeout: float = STOP_S) -> None:
    """SIGTERM to the worker process, as Kubernetes sends it to a container's first
    process (`group`: to its process group, its scoring children too, as systemd's
    default KillMode does); SIGKILL after `timeout` s. Children left when the worker has
    exited are reported and killed."""
    member.signalled = time.time()
    pid = member.process.pid
    if member.process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            if group:
                os.killpg(pid, signal.SIGTERM)
            else:
                os.kill(pid, signal.SIGTERM)
        try:
            await asyncio.to_thread(member.process.wait, timeout)
        except subprocess.TimeoutExpired:
            print(f"{member.name} did not stop within {timeout:g}s: SIGKILL")
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
            await asyncio.to_thread(member.process.wait, 10)
    member.exited = time.time()
    left = group_members(pid)
    for _ in range(30):  # its forkserver and resource tracker exit once they see it gone
        if not left:
            break
        await asyncio.sleep(0.1)
        left = group_members(pid)
    if left:
        print(f"{member.name} exited and left {'; '.join(left)} behind: SIGKILL to them")
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)


def group_members(pgid: int) -> list[str]:
    """The command lines of the living processes of a process group."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError):
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) == pgid and fields[0] != "Z":
                command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                found.append(f"{entry.name} ({command.strip()[:80]})")
    return found


def spread(values: list[float]) -> str:
    """min / median / max."""
    found = [v for v in values if not math.isnan(v)]
    if not found:
        return "-"
    return f"{min(found):5.2f} / {statistics.median(found):5.2f} / {max(found):5.2f}"


async def run(args: argparse.Namespace) -> int:
    tag = f"mb{time.time_ns() % 10**10}"
    config: dict[str, Any] = {
        "app_id": f"membership-{tag}",
        "topics": {
            "input": f"{tag}-in",
            "results": f"{tag}-results",
            "aggregates": f"{tag}-aggregates",
            "gates": f"{tag}-gates",
            "dead_letters": f"{tag}-dlq",
        },
        "idle_timeout": "1s",
        "metrics_port": 0,
        "stream": {**TANSU_STREAM_SETTINGS, "partitions": PARTITIONS},
    }
    settings = load_settings(None, overrides=config, environ={})
    timeout = max(settings.stream.session_timeout, settings.stream.rebalance_timeout)
    print(
        f"SAFE at {args.rate:g}/s throughout, {args.rounds} rounds of join + leave; "
        f"group session_timeout {settings.stream.session_timeout:g}s, rebalance_timeout "
        f"{settings.stream.rebalance_timeout:g}s (Tansu's settings; target: longest gap "
        f"<= {2 * timeout:g}s)",
        flush=True,
    )
    started = time.time()
    stream = Stream()
    rounds: list[Round] = []
    logs = Path(args.logs or tempfile.mkdtemp(prefix="scorestream-membership-"))
    logs.mkdir(parents=True, exist_ok=True)
    with EmbeddedBroker() as broker:
        path = logs / "config.json"
        path.write_bytes(orjson.dumps(config))
        await create_topics(broker.url, topic_names(settings.topics), PARTITIONS)
        reader = AIOKafkaConsumer(
            settings.topics.results,
            bootstrap_servers=broker.bootstrap,
            group_id=None,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=READ_WAIT_MS,
        )
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=5)
        await reader.start()
        await producer.start()
        members: list[Member] = []
        tasks = [
            asyncio.create_task(read_results(reader, stream)),
            asyncio.create_task(
                send_steadily(producer, settings.topics.input, tag, args.rate, stream)
            ),
        ]
        try:
            first = launch("worker-1", broker, path, logs)
            members.append(first)
            if not await wait_first_result(first):
                return 1
            print(
                f"worker-1 (alone): ready {first.ready - first.launched:.1f}s, first result "
                f"{first.first_result - first.launched:.1f}s after launch",
                flush=True,
            )
            await asyncio.sleep(args.steady)
            for index in range(args.rounds):
                figures = Round()
                joining = launch(f"worker-{len(members) + 1}", broker, path, logs)
                members.append(joining)
                figures.steady_gap, figures.steady_partition_gap = stream.gaps(
                    joining.launched - args.steady, joining.launched, False
                )
                if not await wait_first_result(joining):
                    return 1
                figures.to_ready = joining.ready - joining.launched
                figures.to_loaded = joining.consuming_since() - joining.launched
                figures.to_first_result = joining.first_result - joining.launched
                await asyncio.sleep(args.settle)
                leaving = next(m for m in members if m.process.poll() is None)
                await stop(leaving, args.group_signal)
                figures.stop_took = leaving.exited - leaving.signalled
                figures.join_gap, figures.join_partition_gap = stream.gaps(
                    joining.launched, leaving.signalled
                )
                await asyncio.sleep(max(0.0, leaving.exited + args.after - time.time()))
                resumed_by = time.time() + STARTUP_S
                while min(a[-1] for a in stream.by_partition.values()) < (
                    leaving.exited + args.after - 1
                ):
                    if time.time() > resumed_by:
                        print("no result since the leave")
                        return 1
                    await asyncio.sleep(0.1)  # still paused: the gap ends with a result
                figures.leave_gap, figures.leave_partition_gap = stream.gaps(
                    leaving.signalled, leaving.exited + args.after
                )
                rounds.append(figures)
                print(
                    f"round {index + 1}: {joining.name} joined: loaded "
                    f"{figures.to_loaded:.1f}s, ready {figures.to_ready:.1f}s, "
                    f"first result {figures.to_first_result:.1f}s after launch; "
                    f"{leaving.name} left: stop took {figures.stop_took:.1f}s; longest gap "
                    f"(all results | one partition's): steady {figures.steady_gap:.2f} | "
                    f"{figures.steady_partition_gap:.2f}s, join {figures.join_gap:.2f} | "
                    f"{figures.join_partition_gap:.2f}s, leave {figures.leave_gap:.2f} | "
                    f"{figures.leave_partition_gap:.2f}s",
                    flush=True,
                )
                if index + 1 < args.rounds:
                    await asyncio.sleep(args.steady)
            tasks[1].cancel()
            last_send = time.time()
            while time.time() < last_send + DRAIN_S and not stream.sent.keys() <= stream.results:
                await asyncio.sleep(0.2)
        finally:
            for task in tasks:
                task.cancel()
            for member in members:
                await stop(member, timeout=30)
            await producer.stop()
            await reader.stop()
    missing = len(stream.sent.keys() - stream.results)
    print(
        f"\n{len(rounds)} rounds, min / median / max (s):\n"
        f"  new worker: launch -> Faust starts   {spread([r.to_loaded for r in rounds])}\n"
        f"  new worker: launch -> ready          {spread([r.to_ready for r in rounds])}\n"
        f"  new worker: launch -> first result   {spread([r.to_first_result for r in rounds])}\n"
        f"  SIGTERM -> the worker exited         {spread([r.stop_took for r in rounds])}\n"
        f"  longest gap, steady (one worker)     {spread([r.steady_gap for r in rounds])}\n"
        f"  longest gap, join                    {spread([r.join_gap for r in rounds])}\n"
        f"  longest gap, leave                   {spread([r.leave_gap for r in rounds])}\n"
        f"  one partition's longest gap, steady  "
        f"{spread([r.steady_partition_gap for r in rounds])}\n"
        f"  one partition's longest gap, join    {spread([r.join_partition_gap for r in rounds])}\n"
        f"  one partition's longest gap, leave   "
        f"{spread([r.leave_partition_gap for r in rounds])}\n"
        f"  session_timeout {settings.stream.session_timeout:g}s, rebalance_timeout "
        f"{settings.stream.rebalance_timeout:g}s: target longest gap <= {2 * timeout:g}s"
    )
    worst = max(
        [g for r in rounds for g in (r.join_gap, r.leave_gap, r.join_partition_gap)]
        + [r.leave_partition_gap for r in rounds],
        default=math.nan,
    )
    met = worst <= 2 * timeout
    print(
        f"{len(stream.sent)} cases sent, {missing} without a result {DRAIN_S:g}s after the "
        f"last send, {stream.repeated} results repeated; worst gap {worst:.2f}s: "
        f"target {'met' if met else 'NOT met'}; "
        f"total {time.time() - started:.0f}s; worker logs in {logs}"
    )
    return 0 if (met and not missing) or not args.strict else 1


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rate", type=float, default=300.0, help="SAFE envelopes a second")
    parser.add_argument(
        "--settle", type=float, default=4.0, help="s after the new worker's first result"
    )
    parser.add_argument(
        "--after", type=float, default=6.0, help="s after the stopped worker exited"
    )
    parser.add_argument("--steady", type=float, default=4.0, help="s of one worker per round")
    parser.add_argument("--logs", type=Path, help="keep the worker logs here")
    parser.add_argument(
        "--group-signal",
        action="store_true",
        help="SIGTERM the leaving worker's whole process group (its scoring children too)",
    )
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(asyncio.run(run(parse_args())))
