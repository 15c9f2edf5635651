"""Soak benchmark: does one worker's memory level off under a long stream?

    .venv/bin/python bench/soak.py [--cases 200000] [--turns 20000] [--step 10000]

Starts the embedded broker and one `scorestream worker` subprocess, then streams
`--cases` SAFE cases and `--turns` alignment turns to it in steps of `--step` SAFE cases
(each step also carries its share of the turns: 4-turn sessions that end with a `final`
turn, and every fifth session never finishes, so it stays open until its idle timeout).
After each step has all its results, the worker's resident set size (RSS, from
/proc/PID/status) is printed. The target: RSS growth over the second half of the run
(from the middle row to the last) stays under 10 %.

Event times are the wall clock at production, so windows and idle sessions close as
they would in production.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
import yaml
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from topics.catalog import topic_names  # noqa: E402
from topics.provision import create_topics  # noqa: E402
from worker.config import load_settings  # noqa: E402
from worker.ops.broker import TANSU_STREAM_SETTINGS, EmbeddedBroker  # noqa: E402

EXAMPLES = REPO / "examples"
SESSION_TURNS = 4
UNFINISHED_EVERY = 5  # every fifth session never sends its final turn
TARGET_GROWTH = 0.10


def _read(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def config_for(tag: str) -> dict[str, Any]:
    return {
        "app_id": f"soak-{tag}",
        "topics": {
            "input": f"in-{tag}",
            "results": f"results-{tag}",
            "aggregates": f"aggregates-{tag}",
            "gates": f"gates-{tag}",
            "dead_letters": f"dlq-{tag}",
        },
        "segment_by": ["model"],
        "windows": [{"size": "1m"}],
        "grace": "2s",
        "idle_timeout": "2s",
        "metrics_port": 0,
        # Multi-record produce batches: Tansu's end offsets after them break table
        # recovery, which a soak without restarts never does; one-record batches would
        # make the run latency-bound (hours).
        "stream": {**TANSU_STREAM_SETTINGS, "producer_max_batch_size": 16384},
        "alignment": {"personas_dir": str(EXAMPLES / "personas"), "session_idle_timeout": "30s"},
    }


class Records:
    """Endless SAFE cases and alignment turns with unique ids, stamped at production."""

    def __init__(self, tag: str) -> None:
        self.tag = tag
        self.safe = _read(EXAMPLES / "safe" / "envelopes.jsonl")
        self.turns = _read(EXAMPLES / "alignment" / "envelopes.jsonl")
        self.safe_index = 0
        self.turn_index = 0

    def safe_case(self) -> bytes:
        record = dict(self.safe[self.safe_index % len(self.safe)])
        record["id"] = f"{self.tag}-safe-{self.safe_index}"
        record["ts"] = int(time.time() * 1000)
        self.safe_index += 1
        return orjson.dumps(record)

    def turn(self) -> tuple[bytes, bytes]:
        session, turn = divmod(self.turn_index, SESSION_TURNS)
        example = self.turns[self.turn_index % len(self.turns)]
        session_id = f"{self.tag}-s{session}"
        payload = dict(example["payload"])
        payload.update(
            session_id=session_id,
            turn_index=turn,
            persona_id=self.turns[session % len(self.turns)]["payload"]["persona_id"],
            final=turn == SESSION_TURNS - 1 and session % UNFINISHED_EVERY != 0,
        )
        record = {
            "id": f"{session_id}:{turn}",
            "suite": "alignment",
            "ts": int(time.time() * 1000),
            "model": example["model"],
            "labels": example["labels"],
            "payload": payload,
        }
        self.turn_index += 1
        return session_id.encode(), orjson.dumps(record)


def rss_mb(pid: int) -> float:
    """Resident set size of a process, in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


async def count_results(consumer: AIOKafkaConsumer, counts: dict[str, int]) -> None:
    batch = await consumer.getmany(timeout_ms=500, max_records=5000)
    for messages in batch.values():
        for message in messages:
            kind = orjson.loads(message.value).get("kind", "dead")
            counts[kind] = counts.get(kind, 0) + 1


async def soak(cases: int, turns: int, step: int) -> int:
    tag = uuid.uuid4().hex[:8]
    config = config_for(tag)
    settings = load_settings(None, overrides=config, environ={})
    records = Records(tag)
    with tempfile.TemporaryDirectory() as tmp, EmbeddedBroker() as broker:
        config_path = Path(tmp) / "config.yaml"
        config_path.write_text(yaml.safe_dump(config), encoding="utf-8")
        await create_topics(broker.url, topic_names(settings.topics), settings.stream.partitions)
        log_path = Path(tmp) / "worker.log"
        with log_path.open("wb") as log:
            worker = subprocess.Popen(
                [sys.executable, "-m", "worker", "worker", "--broker", broker.url,
                 "--config", str(config_path)],
                stdout=log, stderr=subprocess.STDOUT, cwd=REPO, start_new_session=True,
                env={**os.environ, "PYTHONPATH": str(REPO)},
            )  # fmt: skip
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=5)
        results = AIOKafkaConsumer(
            settings.topics.results,
            settings.topics.dead_letters,
            bootstrap_servers=broker.bootstrap,
            auto_offset_reset="earliest",
        )
        await producer.start()
        await results.start()
        counts: dict[str, int] = {}
        rows: list[tuple[int, int, float, float]] = []
        started = time.monotonic()
        try:
            while "scorestream worker ready" not in log_path.read_text(errors="replace"):
                if worker.poll() is not None:
                    raise RuntimeError(log_path.read_text(errors="replace")[-3000:])
                await asyncio.sleep(0.5)
            print(f"worker ready, RSS {rss_mb(worker.pid):.1f} MiB", flush=True)
            print(f"{'cases':>8} {'turns':>7} {'RSS MiB':>9} {'elapsed s':>10}", flush=True)
            sent_cases = sent_turns = 0
            turns_per_step = max(1, turns * step // cases)
            while sent_cases < cases:
                for index in range(step):
                    await producer.send(settings.topics.input, records.safe_case())
                    if index % max(1, step // turns_per_step) == 0 and sent_turns < turns:
                        key, value = records.turn()
                        await producer.send(settings.topics.input, value, key=key)
                        sent_turns += 1
                sent_cases += step
                await producer.flush()
                while counts.get("case", 0) + counts.get("turn", 0) < sent_cases + sent_turns:
                    if worker.poll() is not None:
                        raise RuntimeError("the worker stopped:\n" + log_path.read_text()[-3000:])
                    await count_results(results, counts)
                rss = rss_mb(worker.pid)
                rows.append((sent_cases, sent_turns, rss, time.monotonic() - started))
                print(
                    f"{sent_cases:>8} {sent_turns:>7} {rss:>9.1f} {rows[-1][3]:>10.0f}", flush=True
                )
        finally:
            await producer.stop()
            await results.stop()
            os.killpg(worker.pid, signal.SIGTERM)
            try:
                worker.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(worker.pid, signal.SIGKILL)
                worker.wait(10)
    middle = rows[len(rows) // 2 - 1] if len(rows) >= 2 else rows[0]
    growth = (rows[-1][2] - middle[2]) / middle[2]
    print(f"results: {counts}")
    print(
        f"RSS over the second half: {middle[2]:.1f} -> {rows[-1][2]:.1f} MiB "
        f"({growth:+.1%}, target < {TARGET_GROWTH:.0%}): "
        + ("levels off" if growth < TARGET_GROWTH else "STILL GROWING")
    )
    return 0 if growth < TARGET_GROWTH else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=200_000)
    parser.add_argument("--turns", type=int, default=20_000)
    parser.add_argument("--step", type=int, default=10_000)
    args = parser.parse_args()
    return asyncio.run(soak(args.cases, args.turns, args.step))


if __name__ == "__main__":
    sys.exit(main())
