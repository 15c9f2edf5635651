"""The event loop's own cost per SAFE result in the score stage (issue 25), without Kafka.

    .venv/bin/python bench/loop_cost.py [--n 2000] [--rounds 7]

Scores N SAFE envelopes (`bench/stream.py`'s records) once with `score_record`, as a
scoring child does, then times per result, over several rounds, what the worker's loop
does with each child's outcome, one micro-batch of N results at a time:

- reading the result from its bytes: `result_facts` (orjson, what the stage reads now)
  against `result_from_json` (pydantic's validation of the whole `CaseResult`, before);
- `Publisher.result` into the micro-batch (key, size checks, segments);
- folding the batch per pane (`Contributions.items`: dedupe, moments, samples, worst
  cases, the SAFE aggregator);
- the telemetry (`observe_all`).

The same steps run on the facts (now) and on the validated results (before) in each
round, alternately; the ratio now / before of their sums is the loop's saving per result.
Also timed: the ways a child could hand the loop a result besides its bytes (what
`pickle.loads` costs the loop for a `CaseResult`, or for its `ResultFacts`, and
`pickle.dumps` of the facts in the child). Prints min / median / max microseconds per
result; the garbage collector runs before each step, so each pays for its own objects.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import pickle
import statistics
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import stream as stream_bench

from tests.streamkit import make_config, settings_of
from worker.input.records import result_from_json
from worker.input.result_facts import ResultView, result_facts
from worker.input.scored_records import ScoredRecord, score_record
from worker.ops.telemetry import Telemetry
from worker.scoring_pool import case_scorer_factories
from worker.stream.publish import Contributions, Folding, Publisher
from worker.stream.scoring import observe_all
from worker.suites.registry import AGGREGATORS


def scored_values(n: int) -> list[bytes]:
    """The results' bytes of N SAFE envelopes, built as a scoring child builds them."""
    settings = settings_of(make_config())
    scorers = {name: factory(settings) for name, factory in case_scorer_factories().items()}
    values = []
    for offset, (_, raw) in enumerate(stream_bench.make_records("safe", n, "loop", time.time())):
        scored = score_record(
            (raw, time.time(), ("in", 0, offset, None), 0.0), settings, scorers, {}
        )
        assert isinstance(scored, ScoredRecord)
        values.append(scored.value)
    return values


def per_result(step: Callable[[], Any], n: int) -> float:
    """Microseconds per result of one call of `step` over all N results."""
    gc.collect()
    start = time.perf_counter()
    step()
    return (time.perf_counter() - start) / n * 1e6


def loop_steps(values: list[bytes], read: Callable[[bytes], ResultView]) -> dict[str, float]:
    """Microseconds per result of each of the loop's steps, the results read with `read`."""
    n = len(values)
    settings = settings_of(make_config())
    topic = SimpleNamespace(get_topic_name=lambda: "topic")
    topics: Any = SimpleNamespace(results=topic, aggregate_input=topic)  # no Kafka here
    telemetry = Telemetry(settings.segment_by)
    publisher = Publisher(topics, settings, telemetry)
    batch = Contributions(Folding(60.0, AGGREGATORS, settings.reservoir_size), {0: 0})
    results: list[ResultView] = []

    async def publish() -> None:
        for result, value in zip(results, values, strict=True):
            await publisher.result(result, batch=batch, value=value)

    context: Any = SimpleNamespace(telemetry=telemetry)
    return {
        "read": per_result(lambda: results.extend(map(read, values)), n),
        "Publisher.result": per_result(lambda: asyncio.run(publish()), n),
        "fold (Contributions.items)": per_result(batch.items, n),
        "telemetry (observe_all)": per_result(
            lambda: observe_all(context, [(result, 0.001) for result in results]), n
        ),
    }


def one_round(values: list[bytes]) -> dict[str, float]:
    """Microseconds per result of each step, now and before, and of the alternatives."""
    n = len(values)
    figures: dict[str, float] = {}
    for tag, read in (("now", result_facts), ("before", result_from_json)):
        steps = loop_steps(values, read)
        for name, value in steps.items():
            figures[f"{tag}: {name}"] = value
        figures[f"{tag}: sum of the loop's steps"] = sum(steps.values())
    results = [result_from_json(value) for value in values]
    facts = [result_facts(value) for value in values]
    pickled_results = [pickle.dumps(result, pickle.HIGHEST_PROTOCOL) for result in results]
    pickled_facts = [pickle.dumps(fact, pickle.HIGHEST_PROTOCOL) for fact in facts]
    figures["loop: pickle.loads(CaseResult)"] = per_result(
        lambda: list(map(pickle.loads, pickled_results)), n
    )
    figures["loop: pickle.loads(ResultFacts)"] = per_result(
        lambda: list(map(pickle.loads, pickled_facts)), n
    )
    figures["child: pickle.dumps(ResultFacts)"] = per_result(
        lambda: [pickle.dumps(fact, pickle.HIGHEST_PROTOCOL) for fact in facts], n
    )
    figures["ratio now / before (sums)"] = (
        figures["now: sum of the loop's steps"] / figures["before: sum of the loop's steps"]
    )
    return figures


def report(rounds: list[dict[str, float]]) -> None:
    print(f"{'us per result':36s} {'min':>8s} {'median':>8s} {'max':>8s}")
    for name in rounds[0]:
        column = [figures[name] for figures in rounds]
        low, mid, high = min(column), statistics.median(column), max(column)
        print(f"{name:36s} {low:8.2f} {mid:8.2f} {high:8.2f}")


def parse_args(argv: Iterable[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=2000, help="SAFE results per round")
    parser.add_argument("--rounds", type=int, default=7)
    return parser.parse_args(None if argv is None else list(argv))


def main(args: argparse.Namespace) -> int:
    values = scored_values(args.n)
    report([one_round(values) for _ in range(args.rounds)])
    return 0


if __name__ == "__main__":
    sys.exit(main(parse_args()))
