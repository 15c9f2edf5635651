"""Result and window-final latency at a fixed SAFE rate (issue 25, item 3).

    .venv/bin/python bench/latency.py [--rates 300,1500] [--seconds 70] [--rounds 3]
        [--grace 1] [--baseline-seconds S] [--timeline] [--worker-code DIR]

Each rate of each round runs on its own embedded Tansu broker, started fresh: one
`scorestream worker` process (its default windows, 60 s tumbling and 1 h / 5 min hopping
per model and for all cases; `--grace` and a 1 s `idle_timeout`; Tansu's stream
settings; 4 partitions) is sent SAFE envelopes at the rate for `--seconds` seconds, paced
evenly, each stamped `ts` = the moment it is sent (the bench's producer lingers 5 ms, as
librdkafka's and the Java client's defaults do), and results and aggregates are read back
as they arrive (the readers ask the broker to answer within 20 ms).

Why a fresh broker each time: Tansu's memory engine lists every batch a partition ever
stored on each fetch that returns records (`tansu-storage/src/dynostore.rs`, `fetch`),
so its CPU grows with the run's history (at 300/s from about 35 % to 90 % of a core over
70 s) and every client on it slows, the baseline loop's too. Kafka finds an offset by
its index. On one broker for the whole run, later rates measured the broker's history.

Figures per rate and round:
- result latency p50 / p99: produce -> result read back, in ms (`--timeline`: the p99 of
  each 5 s of sending too, '|' where a window's final fell due);
- behind: the last result read back - the last case sent, in s (more than a fraction of
  a second: the worker did not keep up with the rate, and both latencies measure its
  backlog);
- final delay: for each final 60 s all-cases window whose end + grace passed while the
  rate was being sent, how long after end + grace its final arrived (the watermark can
  only pass end + grace once a case stamped after it was read, so this includes that
  case's own trip), min / median / max in s; in brackets, how long after its cases the
  final arrived: after the first result stamped at or past end + grace was read back on
  every input partition (what the watermark's own path adds, without the cases' trip);
- the broker's CPU (share of a core) and the machine's idle cores in each 10 s of
  sending, for the worker and the baseline loop: at 0 idle the machine is saturated,
  and every process on it (the broker, the worker, the bench's producer and readers)
  queues for a core.

Baseline (`--baseline-seconds`, as long as the worker's phase by default, 0 for none):
after the worker at each rate, with the worker stopped, a plain aiokafka consume ->
produce loop in its own process (`--echo-loop`: the worker's fetch wait and linger, its
own input and result topics of the same partitions on the same broker, read back by the
same readers) echoes each envelope at the same rate; its p50 / p99 are what the broker,
the clients and the machine alone cost, printed beside the worker's, and its own p99
ratio between the rates is printed beside the worker's.

The summary gives, over rounds (min / median / max), the p99 of each rate and whether
the worker kept it (every round's last result at most 1 s after the last case sent), the
ratio p99(rate) / p99(lowest rate) of each round for every higher rate (and over 300/s),
and the final delays. Targets (issue 25): the ratio at most 3 for 300/s -> 1,500/s, every
final during traffic at most 1 s after end + grace. Where 1,500/s is not sent or not
kept (a 2-core machine shared with other work keeps about 600/s), the summary says so
and the ratios at the rates that ran stand in for it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import peer  # noqa: E402  (bench/peer.py: the worker's config and command, final windows)
import stream as stream_bench  # noqa: E402  (bench/stream.py: records, consumers, figures)

from topics.catalog import record_key, topic_names  # noqa: E402
from topics.provision import create_topics  # noqa: E402
from worker.config import load_settings  # noqa: E402
from worker.ops.broker import EmbeddedBroker  # noqa: E402

PARTITIONS = stream_bench.PARTITIONS
READ_WAIT_MS = 20  # the readers' fetch wait (Tansu answers late in the wait)
# The bench's producer batches as librdkafka's and (since Kafka 4.0) the Java client's
# default `linger.ms` does: a record waits at most 5 ms for others to the same partition.
PRODUCER_LINGER_MS = 5
STARTUP_S = 180.0
DRAIN_S = 120.0  # the longest to wait for the last results of a rate
RATIO_TARGET = 3.0  # p99(1,500/s) / p99(300/s)
TARGET_RATES = (300.0, 1500.0)
KEPT_BEHIND_S = 1.0  # a rate is kept when its last result came at most this long after
FINAL_DELAY_TARGET = 1.0  # seconds after window end + grace


@dataclass
class Phase:
    """One rate in one round."""

    rate: float
    start: float = math.nan
    end: float = math.nan
    sent: dict[str, float] = field(default_factory=dict)
    latencies_ms: list[float] = field(default_factory=list)
    stamped: dict[str, float] = field(default_factory=dict)  # id -> ts, in s
    final_delays: list[float] = field(default_factory=list)  # s after end + grace
    after_cases: list[float] = field(default_factory=list)  # s after the passing cases
    worker_cpu: float = math.nan  # seconds of the worker's process tree
    behind: float = math.nan  # the last result read back - the last case sent, in s
    echo: Phase | None = None  # the baseline loop at the same rate
    by_send: list[tuple[float, float]] = field(default_factory=list)  # (s after start, ms)
    closes: list[float] = field(default_factory=list)  # s after start a window's end + grace passed
    broker_cpu: list[float] = field(default_factory=list)  # share of a core, each 10 s sent
    idle_cpu: list[float] = field(default_factory=list)  # the machine's idle cores, each 10 s

    def timeline(self, slice_s: float = 5.0) -> str:
        """The p99 in ms of the cases sent in each `slice_s` of the phase, '|' before
        the slice in which a window's end + grace passed (its final was due)."""
        slices: dict[int, list[float]] = {}
        for offset, latency in self.by_send:
            slices.setdefault(int(offset // slice_s), []).append(latency)
        due = {int(offset // slice_s) for offset in self.closes}
        return " ".join(
            ("|" if index in due else "") + f"{stream_bench.percentile(slices[index], 99):,.0f}"
            for index in sorted(slices)
        )

    @property
    def p50(self) -> float:
        return stream_bench.percentile(self.latencies_ms, 50)

    @property
    def p99(self) -> float:
        return stream_bench.percentile(self.latencies_ms, 99)


@dataclass
class Readers:
    """What the worker published, with the wall time it was read."""

    results: dict[str, float] = field(default_factory=dict)  # id -> read at
    partition: dict[str, int] = field(default_factory=dict)  # id -> input partition
    finals: dict[int, float] = field(default_factory=dict)  # 60 s window start (ms) -> read at


async def read_results(consumer: AIOKafkaConsumer, readers: Readers) -> None:
    while True:
        batches = await consumer.getmany(timeout_ms=100)
        now = time.time()
        for messages in batches.values():
            for message in messages:
                result = orjson.loads(message.value)
                ident = str(result["id"])
                readers.results.setdefault(ident, now)
                readers.partition[ident] = int(result["source"]["partition"])


async def read_finals(consumer: AIOKafkaConsumer, readers: Readers) -> None:
    while True:
        batches = await consumer.getmany(timeout_ms=100)
        now = time.time()
        for messages in batches.values():
            for message in messages:
                final = peer.final_minute_count(message.value)
                if final is not None:
                    readers.finals.setdefault(final[0], now)


class Envelopes:
    """SAFE envelopes cycled from `examples/safe` with unique ids, stamped when made."""

    def __init__(self, tag: str) -> None:
        self.examples = [
            orjson.loads(value) for _, value in stream_bench.make_records("safe", 64, tag, 0.0)
        ]
        self.tag = tag
        self.made = 0

    def next(self) -> tuple[str, bytes, float]:
        """(id, value, ts in s)"""
        record = dict(self.examples[self.made % len(self.examples)])
        record["id"] = f"{self.tag}-{self.made}"
        record["ts"] = int(time.time() * 1000)
        self.made += 1
        return record["id"], orjson.dumps(record), record["ts"] / 1000


async def send_at_rate(
    producer: AIOKafkaProducer, topic: str, envelopes: Envelopes, phase: Phase, seconds: float
) -> None:
    """Send `phase.rate` envelopes a second for `seconds`, each as soon as it is due."""
    phase.start = time.time()
    count = 0
    while True:
        elapsed = time.time() - phase.start
        if elapsed >= seconds:
            break
        due = int(elapsed * phase.rate) + 1
        while count < due:
            ident, value, ts = envelopes.next()
            phase.sent[ident] = time.time()
            phase.stamped[ident] = ts
            await producer.send(topic, value, key=record_key(value))
            count += 1
        await asyncio.sleep(max(0.0, (count / phase.rate) - (time.time() - phase.start)))
    await producer.flush()
    phase.end = time.time()


async def echo_loop(bootstrap: str, source: str, sink: str, fetch_wait_ms: int) -> None:
    """The baseline: each envelope of `source` to `sink` as it is read (its id and input
    partition added where the worker's result has them), with plain aiokafka."""
    inbound = AIOKafkaConsumer(
        source, bootstrap_servers=bootstrap, group_id=None, fetch_max_wait_ms=fetch_wait_ms
    )
    outbound = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=0)
    await inbound.start()
    await outbound.start()
    try:
        while not inbound.assignment():
            await asyncio.sleep(0.05)
        await inbound.seek_to_end()
        print("echo ready", flush=True)
        while True:
            batches = await inbound.getmany(timeout_ms=100)
            for messages in batches.values():
                for message in messages:
                    envelope = orjson.loads(message.value)
                    envelope["source"] = {"partition": message.partition}
                    await outbound.send(sink, orjson.dumps(envelope), key=message.key)
    finally:
        await inbound.stop()
        await outbound.stop()


async def run_phase(
    producer: AIOKafkaProducer,
    topic: str,
    envelopes: Envelopes,
    readers: Readers,
    worker: subprocess.Popen[bytes],
    rate: float,
    seconds: float,
    grace: float,
    finals: bool = True,
    broker_pid: int | None = None,
) -> Phase:
    phase = Phase(rate)
    cpu_before = peer.tree_cpu(worker.pid)
    sampling = asyncio.create_task(sample_cpu(broker_pid, phase.broker_cpu, phase.idle_cpu))
    try:
        await send_at_rate(producer, topic, envelopes, phase, seconds)
    finally:
        sampling.cancel()
    deadline = time.time() + DRAIN_S
    while time.time() < deadline and not all(ident in readers.results for ident in phase.sent):
        await asyncio.sleep(0.2)
    phase.worker_cpu = peer.tree_cpu(worker.pid) - cpu_before
    if finals:
        await asyncio.sleep(grace + 2.0)  # a final that is due now has time to arrive
    missing = 0
    last_read = phase.end
    for ident, sent in phase.sent.items():
        read = readers.results.get(ident)
        if read is None:
            missing += 1
        else:
            phase.latencies_ms.append((read - sent) * 1000)
            phase.by_send.append((sent - phase.start, (read - sent) * 1000))
            last_read = max(last_read, read)
    phase.behind = last_read - phase.end
    if missing:
        print(f"  ! {missing} of {len(phase.sent)} results missing after {DRAIN_S:.0f}s")
    if not finals:
        return phase
    for start_ms in range(int(phase.start // 60 - 1) * 60_000, int(phase.end * 1000), 60_000):
        closes = start_ms / 1000 + 60 + grace
        if not phase.start < closes < phase.end:
            continue
        phase.closes.append(closes - phase.start)
        read = readers.finals.get(start_ms)
        phase.final_delays.append(math.inf if read is None else read - closes)
        counted = passing_cases_read(phase, readers, closes)
        phase.after_cases.append(math.inf if read is None else read - counted)
    return phase


async def sample_cpu(
    pid: int | None, shares: list[float], idle: list[float], every: float = 10.0
) -> None:
    """Append, for each `every` seconds until cancelled, the share of a core `pid` used
    (None: none) and how many of the machine's cores sat idle."""
    before = None if pid is None else stream_bench.process_cpu(pid)
    idle_before = machine_idle_seconds()
    while True:
        await asyncio.sleep(every)
        idle_now = machine_idle_seconds()
        idle.append((idle_now - idle_before) / every)
        idle_before = idle_now
        if pid is not None and before is not None:
            now = stream_bench.process_cpu(pid)
            shares.append((now - before) / every)
            before = now


def machine_idle_seconds() -> float:
    """Seconds all the machine's cores have spent idle (or waiting on I/O) since boot,
    from /proc/stat: a run whose idle share falls to 0 measured a saturated machine."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    return (int(fields[4]) + int(fields[5])) / os.sysconf("SC_CLK_TCK")


def cpu_line(phase: Phase) -> str:
    """The broker's share of a core and the machine's idle cores, each 10 s of sending."""
    parts = []
    if phase.broker_cpu:
        broker = " ".join(f"{share:.0%}" for share in phase.broker_cpu)
        parts.append(f"the broker's CPU (share of a core) {broker}")
    idle = " ".join(f"{cores:.2f}" for cores in phase.idle_cpu)
    parts.append(f"idle cores (of {os.cpu_count()}) {idle}")
    return "by 10 s of sending: " + "; ".join(parts)


def passing_cases_read(phase: Phase, readers: Readers, closes: float) -> float:
    """When the watermark could first pass `closes`: once every input partition had a case
    stamped at or after it scored (the latest, over partitions, of the first such result
    read back on each)."""
    first: dict[int, float] = {}
    for ident, ts in phase.stamped.items():
        read = readers.results.get(ident)
        if ts < closes or read is None:
            continue
        partition = readers.partition[ident]
        first[partition] = min(read, first.get(partition, math.inf))
    return max(first.values()) if len(first) == PARTITIONS else math.nan


def rate_pairs(rates: list[float]) -> list[tuple[float, float]]:
    """(lower, higher) rate pairs to compare p99s of: the issue's pair when both ran,
    every other rate against the lowest, and the highest against 300/s."""
    ordered = sorted(rates)
    pairs = [(ordered[0], rate) for rate in ordered[1:]]
    low = TARGET_RATES[0]
    if low in ordered and low != ordered[0]:
        pairs += [(low, rate) for rate in ordered if rate > low]
    return list(dict.fromkeys(pairs))


def spread(values: list[float], digits: int) -> str:
    """'min / median / max' (inf: a final that never arrived)."""
    if not values:
        return "-"
    picks = (min(values), statistics.median(values), max(values))
    return " / ".join("never" if math.isinf(v) else f"{v:,.{digits}f}" for v in picks)


def report(rounds: list[list[Phase]], rates: list[float]) -> bool:
    print(
        "\nlatency in ms: produce -> result read back; final delay in s: final 60 s "
        "all-cases window read back - (window end + grace), windows closing during traffic;"
        "\nworker cpu: the worker process tree's CPU seconds per 1,000 cases; behind: the "
        "last result read back - the last case sent, in s (large: the worker fell behind)"
    )
    print(
        "echo p50 / p99: the same in ms for the baseline (plain aiokafka consume -> produce "
        "at the same rate, same broker and readers)"
    )
    header = (
        f"{'round':>5}{'rate/s':>8}{'cases':>8}{'p50 ms':>9}{'p99 ms':>9}"
        f"{'cpu/1k':>8}{'behind':>8}{'echo p50':>10}{'echo p99':>10}"
        "  final delay s (after its cases s), each window"
    )
    print(header)
    print("-" * len(header))
    for index, phases in enumerate(rounds):
        for phase in sorted(phases, key=lambda p: p.rate):
            each_window = ", ".join(
                "never" if math.isinf(d) else f"{d:.2f} ({after:.2f})"
                for d, after in zip(phase.final_delays, phase.after_cases, strict=True)
            )
            cpu = phase.worker_cpu * 1000 / max(1, len(phase.sent))
            echo = phase.echo
            echoed = f"{echo.p50:>10,.0f}{echo.p99:>10,.0f}" if echo is not None else f"{'-':>20}"
            print(
                f"{index + 1:>5}{phase.rate:>8,.0f}{len(phase.sent):>8}{phase.p50:>9,.0f}"
                f"{phase.p99:>9,.0f}{cpu:>8.2f}{phase.behind:>8.1f}{echoed}  {each_window or '-'}"
            )
    print(f"\nover {len(rounds)} rounds (min / median / max):")
    kept = []
    for rate in sorted(rates):
        phases = [phase for phases in rounds for phase in phases if phase.rate == rate]
        behind = [p.behind for p in phases]
        if max(behind) <= KEPT_BEHIND_S:
            kept.append(rate)
        print(
            f"  p99 at {rate:,.0f}/s: {spread([p.p99 for p in phases], 0)} ms; behind "
            f"{spread(behind, 1)} s ({'kept' if rate in kept else 'NOT kept'})"
        )
        echoes = [p.echo for p in phases if p.echo is not None]
        if echoes:
            print(
                f"    baseline loop at {rate:,.0f}/s: p50 {spread([e.p50 for e in echoes], 0)} "
                f"ms, p99 {spread([e.p99 for e in echoes], 0)} ms; worker p99 / baseline "
                f"p99 {spread([p.p99 / p.echo.p99 for p in phases if p.echo is not None], 1)}"
            )
    ratio_ok = False  # until the pair is measured and within the target
    for low, high in rate_pairs(rates):
        ratios = []
        for phases in rounds:
            by_rate = {phase.rate: phase for phase in phases}
            ratios.append(by_rate[high].p99 / by_rate[low].p99)
        target = (low, high) == TARGET_RATES
        verdict = ""
        if target:
            ratio_ok = statistics.median(ratios) <= RATIO_TARGET
            verdict = f" (target <= {RATIO_TARGET:g}: {'met' if ratio_ok else 'NOT met'})"
        print(
            f"  p99 ratio {high:,.0f}/s over {low:,.0f}/s ({high / low:g}x the rate"
            f"{'' if high in kept else ', not kept'}): {spread(ratios, 2)}{verdict}"
        )
        echo_ratios = []
        for phases in rounds:
            echo_of = {phase.rate: phase.echo for phase in phases}
            low_echo, high_echo = echo_of[low], echo_of[high]
            if low_echo is not None and high_echo is not None:
                echo_ratios.append(high_echo.p99 / low_echo.p99)
        if echo_ratios:
            print(f"    the baseline loop's own p99 ratio: {spread(echo_ratios, 2)}")
    if TARGET_RATES[1] not in kept:
        print(
            f"  the issue's ratio ({TARGET_RATES[0]:,.0f} -> {TARGET_RATES[1]:,.0f}/s) was not "
            "measured: this run did not send or the worker did not keep "
            f"{TARGET_RATES[1]:,.0f}/s; the ratios above are at the rates it ran"
        )
    delays = [d for phases in rounds for phase in phases for d in phase.final_delays]
    delays_ok = bool(delays) and max(delays) <= FINAL_DELAY_TARGET
    for rate in sorted(rates):
        per_rate = [
            delay for phases in rounds for p in phases if p.rate == rate for delay in p.final_delays
        ]
        print(f"  final delay at {rate:,.0f}/s: {spread(per_rate, 2)} s ({len(per_rate)} windows)")
        after = [
            delay for phases in rounds for p in phases if p.rate == rate for delay in p.after_cases
        ]
        print(f"    of which after its cases were scored: {spread(after, 2)} s")
    print(
        f"  every final during traffic <= {FINAL_DELAY_TARGET:g} s after end + grace: "
        f"{'met' if delays_ok else 'NOT met'}"
    )
    return ratio_ok and delays_ok


async def wait_ready(
    producer: AIOKafkaProducer,
    topic: str,
    envelopes: Envelopes,
    readers: Readers,
    worker: subprocess.Popen[bytes],
) -> bool:
    """Send an envelope every half second until the worker answers one."""
    deadline = time.time() + STARTUP_S
    sent: list[str] = []
    while time.time() < deadline and worker.poll() is None:
        ident, value, _ = envelopes.next()
        sent.append(ident)
        await producer.send_and_wait(topic, value, key=record_key(value))
        await asyncio.sleep(0.5)
        if any(ident in readers.results for ident in sent):
            return True
    return False


async def main(args: argparse.Namespace) -> int:
    rates = [float(rate) for rate in args.rates.split(",")]
    print(
        f"SAFE at {', '.join(f'{r:,.0f}' for r in rates)}/s for {args.seconds:g}s each, "
        f"{args.rounds} rounds, grace {args.grace:g}s; each rate on a fresh broker and worker",
        flush=True,
    )
    started = time.time()
    rounds: list[list[Phase]] = []
    for index in range(args.rounds):
        order = rates if index % 2 == 0 else list(reversed(rates))
        phases = []
        for rate in order:
            print(f"round {index + 1}/{args.rounds}: {rate:,.0f}/s ...", flush=True)
            phase = await measure_rate(args, rate)
            if phase is None:
                return 1
            phases.append(phase)
        rounds.append(phases)
    passed = report(rounds, rates)
    print(f"\ntotal {time.time() - started:.0f}s; targets {'met' if passed else 'NOT met'}")
    return 0 if passed or not args.strict else 1


async def measure_rate(args: argparse.Namespace, rate: float) -> Phase | None:
    """One rate on its own embedded broker: the worker (started first, then sent the
    rate), then, with the worker stopped, the baseline loop at the same rate. A fresh
    broker each time, because Tansu's memory engine lists every batch a partition has
    stored on each fetch that returns records (tansu-storage `dynostore.rs`, `fetch`):
    on a broker that already carried earlier rates, every client, the baseline's too,
    is slower, and a later rate would measure the broker's history rather than the rate.
    None when the worker or the loop did not start."""
    with EmbeddedBroker() as broker, tempfile.TemporaryDirectory() as tmp:
        tag = f"lat{time.time_ns()}"
        config: dict[str, Any] = peer.system_config(tag, args.grace)
        settings = load_settings(None, overrides=config, environ={})
        path = Path(tmp) / "config.json"
        path.write_bytes(orjson.dumps(config))
        await create_topics(broker.url, topic_names(settings.topics), PARTITIONS)
        names = settings.topics
        options = {"fetch_max_wait_ms": READ_WAIT_MS}
        results = await stream_bench.fresh_consumer(broker.bootstrap, names.results, **options)
        aggregates = await stream_bench.fresh_consumer(
            broker.bootstrap, names.aggregates, **options
        )
        producer = AIOKafkaProducer(
            bootstrap_servers=broker.bootstrap, linger_ms=PRODUCER_LINGER_MS
        )
        await producer.start()
        readers = Readers()
        tasks = [
            asyncio.create_task(read_results(results, readers)),
            asyncio.create_task(read_finals(aggregates, readers)),
        ]
        echo_in, echo_out = f"{tag}-echo-in", f"{tag}-echo-out"
        admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
        await admin.start()
        try:
            await admin.create_topics(
                [NewTopic(echo_in, PARTITIONS, 1), NewTopic(echo_out, PARTITIONS, 1)]
            )
        finally:
            await admin.close()
        echo_results = await stream_bench.fresh_consumer(broker.bootstrap, echo_out, **options)
        echo_readers = Readers()
        tasks.append(asyncio.create_task(read_results(echo_results, echo_readers)))
        wait = settings.stream.fetch_max_wait or 1.5  # the worker's (None: Faust's 1.5 s)
        command = [sys.executable, __file__, "--echo-loop", broker.bootstrap, echo_in, echo_out]
        echo = subprocess.Popen(
            [*command, str(round(wait * 1000))],
            stdout=subprocess.DEVNULL,
            start_new_session=True,
        )
        log_path = Path(args.worker_log or Path(tmp) / "worker.log")
        with log_path.open("wb") as out:
            worker = subprocess.Popen(
                peer.command("scorestream", broker, path),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=args.worker_code,
            )
        envelopes = Envelopes(tag)
        try:
            if not await wait_ready(producer, names.input, envelopes, readers, worker):
                print("the worker did not answer; its log ends:")
                print("\n".join(log_path.read_text(errors="replace").splitlines()[-15:]))
                return None
            if not await wait_ready(producer, echo_in, envelopes, echo_readers, echo):
                print("the baseline loop did not answer")
                return None
            await asyncio.sleep(2.0)
            phase = await run_phase(
                producer,
                names.input,
                envelopes,
                readers,
                worker,
                rate,
                args.seconds,
                args.grace,
                broker_pid=broker.process.pid if broker.process else None,
            )
            print(
                f"  p50 {phase.p50:,.0f} ms, p99 {phase.p99:,.0f} ms, behind "
                f"{phase.behind:.1f} s, final delays "
                f"{[round(d, 2) for d in phase.final_delays]}",
                flush=True,
            )
            if args.timeline:
                print(f"  p99 ms by 5 s of sending: {phase.timeline()}", flush=True)
            print(f"  {cpu_line(phase)}", flush=True)
            stop_process(worker, 30)
            baseline_seconds = (
                args.seconds if args.baseline_seconds is None else args.baseline_seconds
            )
            if baseline_seconds > 0:
                phase.echo = await run_phase(
                    producer,
                    echo_in,
                    envelopes,
                    echo_readers,
                    echo,
                    rate,
                    baseline_seconds,
                    args.grace,
                    finals=False,
                    broker_pid=broker.process.pid if broker.process else None,
                )
                print(
                    f"  baseline loop: p50 {phase.echo.p50:,.0f} ms, p99 "
                    f"{phase.echo.p99:,.0f} ms, behind {phase.echo.behind:.1f} s",
                    flush=True,
                )
                print(f"  baseline loop {cpu_line(phase.echo)}", flush=True)
                if args.timeline:
                    print(f"  its p99 ms by 5 s: {phase.echo.timeline()}", flush=True)
            return phase
        finally:
            for task in tasks:
                task.cancel()
            stop_process(echo, 10, signal.SIGKILL)
            await echo_results.stop()
            stop_process(worker, 30)
            await producer.stop()
            await results.stop()
            await aggregates.stop()


def stop_process(
    process: subprocess.Popen[bytes], timeout: float, first: int = signal.SIGTERM
) -> None:
    """Stop a process group started here (`first`, then SIGKILL after `timeout` s)."""
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, first)
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", default="300,1500", help="SAFE envelopes per second")
    parser.add_argument(
        "--seconds",
        type=float,
        default=70.0,
        help="seconds each rate is sent (over 60 + grace: a 60 s window closes during it)",
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--grace", type=float, default=1.0, help="window grace in seconds")
    parser.add_argument("--worker-log", type=Path, help="keep the worker's log here")
    parser.add_argument(
        "--worker-code",
        type=Path,
        help="run the worker from this checkout (e.g. main's, for figures before a change)",
    )
    parser.add_argument(
        "--timeline",
        action="store_true",
        help="print each phase's p99 per 5 s of sending ('|': a window's final fell due)",
    )
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    parser.add_argument(
        "--baseline-seconds",
        type=float,
        help="seconds the baseline loop is sent each rate after the worker (default: as "
        "long as the worker; 0: none)",
    )
    parser.add_argument(
        "--echo-loop",
        nargs=4,
        metavar=("BOOTSTRAP", "SOURCE", "SINK", "FETCH_WAIT_MS"),
        help=argparse.SUPPRESS,  # the baseline's own process
    )
    return parser.parse_args(argv)


if __name__ == "__main__":
    arguments = parse_args()
    if arguments.echo_loop:
        bootstrap, source, sink, wait_ms = arguments.echo_loop
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(echo_loop(bootstrap, source, sink, int(wait_ms)))
        sys.exit(0)
    sys.exit(asyncio.run(main(arguments)))
