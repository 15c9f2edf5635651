"""Start-up: how long a newcomer, a deploy or a scale-up waits for a worker (issue 43).

    .venv/bin/python bench/startup.py [--rounds 3] [--skip-score] [--skip-worker]

Rows, each timed in a fresh process, `--rounds` times (min / median / max, seconds):
- baseline: `python -m worker --help`, the interpreter and the command line alone;
- `scorestream score` of one SAFE case and of one two-turn alignment session (the
  README's offline command), wall time;
- `scorestream worker` from launch to `/readyz` 200 and to the first result of a case
  waiting on its input topic, on an embedded Tansu broker: the default configuration
  (every suite: the encoder, personas, safety patterns, classifier and language
  identifier load before it is ready) and `suites: [safe, extraction]` (none of them);
  with the worker's own line saying where the time went (`start-up 3.9 s: ...`).
  The worker runs with the embedded broker's stream settings (`make demo`'s: 6 s group
  timeouts). Joining the group is the broker's to decide: Tansu answers every JoinGroup
  of a rebalance after half the session timeout (3 s here), Apache Kafka a new group's
  first after `group.initial.rebalance.delay.ms` (3 s by default), so that row is
  printed on its own. The default worker is also launched again into the group it just
  left (SIGTERM, a clean leave), as a restart does: `default, restarted`.

Each row also prints its ratio to the baseline of the same round (the machine is shared:
the ratio moves less than the seconds). Targets (issue 43): worker ready <= 5 s with the
default configuration and <= 2 s without alignment, one alignment session scored by
`scorestream score` in <= 3 s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from worker.ops.broker import TANSU_STREAM_SETTINGS, EmbeddedBroker, free_port  # noqa: E402

PYTHON = sys.executable
SAFE_CASE = ROOT / "examples" / "safe" / "I25_batch_1.jsonl"
ALIGNMENT_SESSION = ROOT / "examples" / "alignment" / "sessions.jsonl"
READY_TIMEOUT_S = 120.0
STARTUP_LINE = re.compile(r"start-up [0-9.]+ s: [^\n\"]*")
JOIN = re.compile(r"joining the group ([0-9.]+) s")
TARGETS = {"worker ready, default": 5.0, "worker ready, no alignment": 2.0}
TARGETS["score one alignment session"] = 3.0


def timed(command: list[str], cwd: Path = ROOT) -> float:
    """Wall seconds of `command`, which must succeed."""
    started = time.perf_counter()
    subprocess.run(command, cwd=cwd, check=True, capture_output=True)
    return time.perf_counter() - started


def first_lines(path: Path, count: int, into: Path) -> Path:
    into.write_text("".join(path.read_text(encoding="utf-8").splitlines(True)[:count]))
    return into


def envelope(ident: str, suite: str, payload: dict[str, Any]) -> bytes:
    return json.dumps(
        {"id": ident, "suite": suite, "ts": int(time.time() * 1000), "payload": payload}
    ).encode()


def waiting_cases(tag: str) -> list[bytes]:
    """One SAFE case and one alignment turn, produced before the worker starts."""
    safe = json.loads(SAFE_CASE.read_text(encoding="utf-8").splitlines()[0])
    turn = {
        "session_id": f"{tag}-s",
        "turn_index": 0,
        "persona_id": "northwind-analytics",
        "user": "Why did signups drop?",
        "text": "Signups declined by 6.1% against the four-week baseline, mostly in paid search.",
        "final": True,
    }
    return [envelope(f"{tag}-safe", "safe", safe), envelope(f"{tag}-turn", "alignment", turn)]


async def produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for value in values:
            await producer.send_and_wait(topic, value, key=b"startup")
    finally:
        await producer.stop()


def ready_at(port: int, worker: subprocess.Popen[bytes], deadline: float) -> float:
    """When `/readyz` first answered 200 (perf_counter), polling every 20 ms."""
    while time.perf_counter() < deadline:
        if worker.poll() is not None:
            raise RuntimeError(f"the worker exited with {worker.returncode} before it was ready")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as answer:
                if answer.status == 200:
                    return time.perf_counter()
        except OSError:
            pass
        time.sleep(0.02)
    raise RuntimeError("the worker was not ready in time")


async def first_result_at(bootstrap: str, topic: str, deadline: float, prefix: str) -> float:
    """When the first result of a case whose id starts with `prefix` was read."""
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", fetch_max_wait_ms=20
    )
    await consumer.start()
    try:
        while time.perf_counter() < deadline:
            batch = await consumer.getmany(timeout_ms=100)
            for records in batch.values():
                if any(json.loads(record.value)["id"].startswith(prefix) for record in records):
                    return time.perf_counter()
        raise RuntimeError("no result arrived in time")
    finally:
        await consumer.stop()


def launch_worker(
    broker: EmbeddedBroker, tag: str, overrides: dict[str, Any], cases: str | None = None
) -> dict[str, Any]:
    """Launch -> ready and launch -> first result of one worker (app id and topics `tag`,
    waiting cases named `cases`, else `tag`: a worker launched again with the same `tag`
    restarts into its group), and its start-up line."""
    cases = cases or tag
    port = free_port()
    topics = {name: f"{tag}-{name}" for name in ("input", "results", "aggregates", "gates")}
    topics["dead_letters"] = f"{tag}-dlq"
    config = {
        "app_id": tag,
        "topics": topics,
        "metrics_port": port,
        "stream": TANSU_STREAM_SETTINGS,  # as `make demo` runs it (6 s group timeouts)
        **overrides,
    }
    asyncio.run(produce(broker.bootstrap, topics["input"], waiting_cases(cases)))
    with tempfile.TemporaryDirectory() as scratch:
        config_path = Path(scratch) / "config.json"
        config_path.write_text(json.dumps(config))
        log_path = Path(scratch) / "worker.log"
        with log_path.open("wb") as log:
            launched = time.perf_counter()
            worker = subprocess.Popen(
                [PYTHON, "-m", "worker", "worker", "--broker", broker.url, "--config",
                 str(config_path)],
                cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
            try:
                deadline = launched + READY_TIMEOUT_S
                ready = ready_at(port, worker, deadline)
                result = asyncio.run(
                    first_result_at(broker.bootstrap, topics["results"], deadline, cases)
                )
            finally:
                worker.terminate()
                try:
                    worker.wait(30)
                except subprocess.TimeoutExpired:
                    worker.kill()
                    worker.wait()
        found = STARTUP_LINE.search(log_path.read_text(errors="replace"))
    line = found.group(0) if found else "(no start-up line)"
    joining = JOIN.search(line)
    return {
        "ready": ready - launched,
        "joining": float(joining.group(1)) if joining else float("nan"),
        "result": result - launched,
        "line": line,
    }


def spread(values: list[float]) -> str:
    return f"{min(values):6.2f} {statistics.median(values):6.2f} {max(values):6.2f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--skip-score", action="store_true", help="no `scorestream score` rows")
    parser.add_argument("--skip-worker", action="store_true", help="no worker rows (no broker)")
    args = parser.parse_args()

    rows: dict[str, list[float]] = {}
    ratios: dict[str, list[float]] = {}
    lines: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as scratch, EmbeddedBroker() as broker:
        safe_file = first_lines(SAFE_CASE, 1, Path(scratch) / "safe.jsonl")
        session_file = first_lines(ALIGNMENT_SESSION, 4, Path(scratch) / "session.jsonl")
        for index in range(args.rounds):
            print(f"round {index + 1}/{args.rounds} ...", flush=True)
            measured: dict[str, float] = {}
            measured["baseline (python -m worker --help)"] = timed(
                [PYTHON, "-m", "worker", "--help"]
            )
            if not args.skip_score:
                score = [PYTHON, "-m", "worker", "score", "--format", "json"]
                measured["score one SAFE case"] = timed([*score, "--suite", "safe", str(safe_file)])
                measured["score one alignment session"] = timed(
                    [*score, "--suite", "alignment", str(session_file)]
                )
            if not args.skip_worker:
                without_alignment = {"suites": ["safe", "extraction"]}
                for name, overrides, tag, cases in (
                    ("default", {}, f"startup-{index}-de", f"startup-{index}-de-a"),
                    # the same group again, just left by the worker before: a restart
                    ("default, restarted", {}, f"startup-{index}-de", f"startup-{index}-de-b"),
                    ("no alignment", without_alignment, f"startup-{index}-no", None),
                ):
                    launched = launch_worker(broker, tag, overrides, cases)
                    measured[f"worker ready, {name}"] = launched["ready"]
                    measured[f"  of which joining the group, {name}"] = launched["joining"]
                    measured[f"worker first result, {name}"] = launched["result"]
                    lines[name] = launched["line"]
            baseline = measured["baseline (python -m worker --help)"]
            for row, seconds in measured.items():
                rows.setdefault(row, []).append(seconds)
                ratios.setdefault(row, []).append(seconds / baseline)

    print(f"\n{'seconds over ' + str(args.rounds) + ' rounds':44} {'min':>6} {'median':>6} "
          f"{'max':>6}   x baseline (median)   target")  # fmt: skip
    met = True
    for row, values in rows.items():
        target = TARGETS.get(row)
        verdict = ""
        if target is not None:
            ok = statistics.median(values) <= target
            met &= ok
            verdict = f"<= {target:g} s {'met' if ok else 'NOT met'}"
        print(f"{row:44} {spread(values)}   {statistics.median(ratios[row]):8.1f}x   {verdict}")
    for name, line in lines.items():
        print(f"worker ({name}), last round: {line}")
    print(f"targets {'met' if met else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
