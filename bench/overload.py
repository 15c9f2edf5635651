"""Gate delay after an unsafe burst when alignment turns arrive faster than the worker
can take them (the overload scenario of `bench/stream.py`, also runnable alone).

    .venv/bin/python bench/overload.py [--rounds 3] [--lead 20] [--capacity-turns 2000]
        [--with-null]

Capacity is the worker's own (issue 45): the turns/s a fresh worker reaches catching up
on a backlog of `--capacity-turns` benign turns with every turn sampled out of embedding
(the session stage's `max_lag` at 0, as in `bench/stream.py`: keywords, language and
classifier, session bookkeeping, results), from the moment it is ready (joined, its
partitions assigned) to its last turn result, measured first in each round on this
machine as loaded now. Not from its first turn result: that left out the seconds the
score stage reads the backlog while the session stage gives way (`stream.input_backlog`),
work every turn needs, and put the capacity 1.2-1.35x above the rate the worker sustains
(so "2x" was 2.5-2.7x); both figures are printed. The encoder's own rate
(batched `encode`, 64 texts a call as the session stage does) is printed beside it, as
the capacity the bench used before. Then, for each input rate (0.5x and 2x that
capacity) and each setting of `max_lag` (`2s`, the default: turns past it are scored for
safety alone; with `--with-null` also `null`: every turn is embedded), a worker in this
process gets live 4-turn sessions at that rate, sent (and its topics read back) from a
process of its own (`bench/traffic.py`), as production traffic would be: `--lead`
seconds of benign replies, a 5 s burst of unsafe ones that ends on a 10 s window
boundary, then 5 s of benign replies.
The gate `safety-drop` (mean session safety < 0.9 over 10 s tumbling windows, grace 2 s)
must fire for the burst's window; its delay is the time from the burst's last turn being
produced to the firing gate event being read back. Each scenario has its own `model`, so
its own gate segment. Targets (issue 45), with `max_lag` at its default: the median
delay at 2x at most 30 s, and at most 3x the median delay at 0.5x.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import math
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import orjson
from aiokafka import AIOKafkaProducer

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from stream import embedding_sampled_out  # noqa: E402  (bench/stream.py)
from traffic import BURST, WINDOW, Sessions, Traffic, turn_record  # noqa: E402  (bench/)

from topics.catalog import record_key, topic_names  # noqa: E402
from topics.provision import create_topics  # noqa: E402
from worker.config import Settings, load_settings  # noqa: E402
from worker.ops.broker import TANSU_STREAM_SETTINGS, EmbeddedBroker  # noqa: E402
from worker.scoring_suites import ScoringSuites  # noqa: E402
from worker.stream import ScorestreamApp  # noqa: E402
from worker.suites.alignment.scoring import score_safety  # noqa: E402

EXAMPLES = REPO / "examples"
PARTITIONS = 4
GRACE = 2.0
ENCODE_CHUNK = 64  # texts per encode call, as `worker.stream.sessions.EMBEDDING_CHUNK`
FACTORS = (0.5, 2.0)  # input rate / the worker's own capacity
# The default, then "before" (`--with-null`: every turn embedded; at rates set by the
# worker's own capacity, many times the encoder's, its backlog takes minutes to drain).
MODES = {"max_lag 2s": 2.0, "max_lag null": None}
DELAY_TARGET = 3.0  # delay at 2x / delay at 0.5x, with the default max_lag
DELAY_LIMIT = 30.0  # seconds: the delay at 2x, with the default max_lag
CAPACITY_TURNS = 2000  # benign turns of the backlog the worker's capacity is measured on
GATE_WAIT = 180.0  # seconds after the burst before a scenario gives up on its gate


def benign_replies() -> list[tuple[str, str]]:
    """(persona, text) of the shipped alignment examples that are safe (two of them are
    unsafe on purpose)."""
    settings = load_settings(None, overrides={}, environ={})
    out = []
    for line in (EXAMPLES / "alignment" / "envelopes.jsonl").read_bytes().splitlines():
        if line.strip():
            payload = orjson.loads(line)["payload"]
            if score_safety(payload["text"], settings.alignment).safety == 1.0:
                out.append((payload["persona_id"], payload["text"]))
    return out


def scenario_settings(tag: str, max_lag: float | None) -> Settings:
    """A worker of its own (app id and topics tagged) with 10 s windows and the gate."""
    return load_settings(
        None,
        overrides={
            "app_id": f"bench-{tag}",
            "topics": {
                "input": f"{tag}-in",
                "results": f"{tag}-results",
                "aggregates": f"{tag}-aggregates",
                "gates": f"{tag}-gates",
                "dead_letters": f"{tag}-dlq",
            },
            "segment_by": ["model"],
            "windows": [{"size": f"{WINDOW:g}s"}],
            "grace": f"{GRACE:g}s",
            "idle_timeout": "1s",
            "metrics_port": 0,
            "stream": {**TANSU_STREAM_SETTINGS, "partitions": PARTITIONS},
            "alignment": {
                "personas_dir": str(EXAMPLES / "personas"),
                "embedding": {"max_lag": max_lag},
            },
            "gates": [
                {
                    "name": "safety-drop",
                    "suite": "alignment",
                    "metric": "safety",
                    "stat": "mean",
                    "op": "<",
                    "threshold": 0.9,
                    "clear": 0.95,
                    "window": f"{WINDOW:g}s",
                    "min_count": 5,
                }
            ],
        },
        environ={},
    )


def encoder_capacity(suites: ScoringSuites, texts: list[str]) -> float:
    """Turns per second of batched `encode` calls on `texts` (after a warm-up call)."""
    suites.embed(texts[:ENCODE_CHUNK])
    started = time.perf_counter()
    for index in range(0, len(texts), ENCODE_CHUNK):
        suites.embed(texts[index : index + ENCODE_CHUNK])
    return len(texts) / (time.perf_counter() - started)


@dataclass
class Outcome:
    delay: float  # seconds from the burst's end to the firing gate event (nan: none)
    turns: int
    sampled_out: int
    drained: float  # seconds after the last produce until the last turn's result


async def start_worker(
    broker: EmbeddedBroker, suites: ScoringSuites, settings: Settings
) -> ScorestreamApp:
    """A worker of `settings` in this process, on topics of its own, ready."""
    await create_topics(broker.url, topic_names(settings.topics), PARTITIONS)
    scorer = ScorestreamApp(settings, broker.url, suites=suites)
    scorer.scoring_pool.start()
    await scorer.app.start()
    await asyncio.wait_for(scorer.ready.wait(), 90)
    return scorer


@dataclass
class Capacity:
    """A fresh worker's catch-up on a backlog: turns/s from the moment it was ready to its
    last turn result (the capacity), and from its first turn result to its last (how the
    bench measured it before: without the backlog's reading)."""

    rate: float
    from_first_result: float


async def catch_up_capacity(broker: EmbeddedBroker, suites: ScoringSuites, turns: int) -> Capacity:
    """The catch-up of a fresh worker on `turns` benign turns produced before it starts,
    every turn sampled out of embedding (the session stage's `max_lag` at 0, as
    `bench/stream.py`'s alignment-sampled row), its turn results read back in a process
    of its own, as in the scenario."""
    tag = f"cap{time.time_ns()}"
    settings = scenario_settings(tag, MODES["max_lag 2s"])
    await create_topics(broker.url, topic_names(settings.topics), PARTITIONS)
    sessions = Sessions(benign_replies())
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=5)
    await producer.start()
    try:
        stamp = time.time()
        for index in range(turns):
            session, turn, persona, text = sessions.turn(index)
            _, value = turn_record(tag, session, turn, persona, text, stamp)
            await producer.send(settings.topics.input, value, key=record_key(value))
        await producer.flush()
    finally:
        await producer.stop()
    reader = Traffic(
        "count_turn_results",
        bootstrap=broker.bootstrap,
        topic=settings.topics.results,
        turns=turns,
        wait=GATE_WAIT,
    )
    try:
        await reader.ready()
        scorer = await start_worker(broker, suites, settings)
        ready = time.time()
        try:
            with embedding_sampled_out(scorer):  # max_lag 0: as a worker far behind
                counted = await reader.result()
        finally:
            await scorer.app.stop()
            scorer.close()
    finally:
        reader.stop()
    if counted["seen"] < turns:
        raise RuntimeError(f"the capacity worker scored {counted['seen']} of {turns} turns in time")
    return Capacity(
        rate=turns / (counted["last"] - ready),
        from_first_result=turns / (counted["last"] - counted["first"]),
    )


async def scenario(
    bootstrap: str, scorer: ScorestreamApp, rate: float, model: str, lead: float
) -> Outcome:
    """One burst at `rate` turns/s through a running worker, sent and watched from a
    process of its own (`bench/traffic.py`); waits until it drained."""
    names = scorer.settings.topics
    skipped_before = sampled_out(scorer)
    topics = {"input": names.input, "gates": names.gates, "results": names.results}
    traffic = Traffic(
        "live_burst",
        bootstrap=bootstrap,
        topics=topics,
        rate=rate,
        model=model,
        lead=lead,
        replies=benign_replies(),
        wait=GATE_WAIT,
    )
    try:
        await traffic.ready()
        times = await traffic.result()
    finally:
        traffic.stop()
    return Outcome(
        delay=times["fired"] - times["burst_end"],
        turns=int(times["turns"]),
        sampled_out=int(sampled_out(scorer) - skipped_before),
        drained=times["done"] - times["produced"],
    )


def sampled_out(scorer: ScorestreamApp) -> float:
    value = scorer.telemetry.registry.get_sample_value(
        "scorestream_embeddings_skipped_total", {"reason": "overload"}
    )
    return value or 0.0


async def run_mode(
    broker: EmbeddedBroker,
    suites: ScoringSuites,
    mode: str,
    rates: dict[float, float],
    lead: float,
    round_index: int,
) -> dict[float, Outcome]:
    """Every rate's scenario through one fresh worker with `mode`'s max_lag."""
    tag = f"ov{time.time_ns()}"
    scorer = await start_worker(broker, suites, scenario_settings(tag, MODES[mode]))
    outcomes = {}
    try:
        for factor, rate in rates.items():
            print(
                f"  round {round_index + 1}, {mode}: {factor:g}x capacity ({rate:.0f} turns/s)",
                flush=True,
            )
            model = f"{tag}-{factor:g}x"
            outcomes[factor] = outcome = await scenario(broker.bootstrap, scorer, rate, model, lead)
            drained = (
                f"not drained {GATE_WAIT:g} s after the gate fired"
                if math.isnan(outcome.drained)
                else f"drained {outcome.drained:.1f}s after the last produce"
            )
            print(
                f"    gate delay {outcome.delay:.1f}s; {outcome.sampled_out}/{outcome.turns} "
                f"turns sampled out; {drained}",
                flush=True,
            )
    finally:
        await scorer.app.stop()
        scorer.close()
    return outcomes


def spread(values: list[float], digits: int = 1) -> str:
    finite = [v for v in values if not math.isnan(v)]
    if not finite:
        return "-"
    parts = (min(finite), statistics.median(finite), max(finite))
    text = " / ".join(f"{v:.{digits}f}" for v in parts)
    missing = len(values) - len(finite)
    return text + (f" ({missing} never fired)" if missing else "")


async def overload(
    rounds: int,
    lead: float,
    broker: EmbeddedBroker | None = None,
    capacity_turns: int = CAPACITY_TURNS,
    with_null: bool = False,
) -> bool:
    """Run the scenario `rounds` times and print the figures; True when the targets are
    met."""
    print("overload: loading the scorers and measuring the encoder ...", flush=True)
    base = scenario_settings("ov-load", None)
    suites = ScoringSuites.load(base)
    suites.warm_up()
    texts = [text for _, text in benign_replies()] * 8
    figures: dict[tuple[str, float], list[Outcome]] = {}
    modes = [mode for mode in MODES if with_null or MODES[mode] is not None]
    capacities: list[float] = []
    from_first: list[float] = []
    encoder_rates = []
    own = broker is None
    broker = broker or EmbeddedBroker()
    if own:
        broker.__enter__()
    try:
        for round_index in range(rounds):
            encoder_rates.append(encoder_capacity(suites, texts))
            measured = await catch_up_capacity(broker, suites, capacity_turns)
            capacity = measured.rate
            capacities.append(capacity)
            from_first.append(measured.from_first_result)
            rates = {factor: factor * capacity for factor in FACTORS}
            print(
                f"overload round {round_index + 1}/{rounds}: the worker's capacity "
                f"{capacity:.0f} turns/s (from its first result {measured.from_first_result:.0f};"
                f" encoder alone {encoder_rates[-1]:.0f})",
                flush=True,
            )
            for mode in modes:
                outcomes = await run_mode(broker, suites, mode, rates, lead, round_index)
                for factor, outcome in outcomes.items():
                    figures.setdefault((mode, factor), []).append(outcome)
    finally:
        if own:
            broker.__exit__(None, None, None)
    print(
        f"\noverload: gate delay after a {BURST:g} s unsafe burst (burst end -> firing event "
        f"read back; {WINDOW:g} s windows, grace {GRACE:g} s, {lead:g} s of load before the "
        f"burst); the worker's capacity (catch-up from ready, embedding sampled out) "
        f"{spread(capacities, 0)} turns/s (from its first result {spread(from_first, 0)}), "
        f"the encoder alone {spread(encoder_rates, 0)}; "
        f"{rounds} rounds, min / median / max"
    )
    header = f"{'max_lag':<14}{'rate':>6}{'gate delay s':>26}{'sampled out':>22}"
    print(header)
    print("-" * len(header))
    medians: dict[tuple[str, float], float] = {}
    for (mode, factor), runs in figures.items():
        delays = [outcome.delay for outcome in runs]
        shares = [outcome.sampled_out / max(1, outcome.turns) * 100 for outcome in runs]
        finite = [d for d in delays if not math.isnan(d)]
        medians[(mode, factor)] = statistics.median(finite) if finite else math.nan
        print(
            f"{mode.removeprefix('max_lag '):<14}{factor:>5g}x{spread(delays):>26}"
            f"{spread(shares, 0) + ' %':>22}"
        )
    passed = True
    for mode in modes:
        high = medians[(mode, FACTORS[1])]
        ratio = high / medians[(mode, FACTORS[0])]
        line = f"{mode}: median delay at {FACTORS[1]:g}x / at {FACTORS[0]:g}x = {ratio:.2f}"
        if MODES[mode] is not None:  # the default: the targets
            ratio_met = not math.isnan(ratio) and ratio <= DELAY_TARGET
            limit_met = not math.isnan(high) and high <= DELAY_LIMIT
            passed = ratio_met and limit_met
            line += (
                f" (target <= {DELAY_TARGET:g}: {'yes' if ratio_met else 'NO'}); median delay "
                f"at {FACTORS[1]:g}x {high:.1f} s (target <= {DELAY_LIMIT:g} s: "
                f"{'yes' if limit_met else 'NO'})"
            )
        print(line)
    return passed


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--lead", type=float, default=20.0, help="seconds of load before")
    parser.add_argument(
        "--capacity-turns", type=int, default=CAPACITY_TURNS, help="backlog for the capacity"
    )
    parser.add_argument("--with-null", action="store_true", help="also max_lag null (slow)")
    return parser.parse_args(argv)


if __name__ == "__main__":
    logging.basicConfig(level=logging.ERROR)
    arguments = parse_args()
    met = asyncio.run(
        overload(
            arguments.rounds,
            arguments.lead,
            capacity_turns=arguments.capacity_turns,
            with_null=arguments.with_null,
        )
    )
    sys.exit(0 if met else 1)
