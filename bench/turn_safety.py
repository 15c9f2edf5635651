"""What scoring an ordinary assistant turn for safety costs a scoring child, step by step.

    .venv/bin/python bench/turn_safety.py [--turns 2048] [--rounds 5]

The turns are `bench/overload.py`'s benign 4-turn sessions (the shipped alignment
examples' safe replies, each with its own reference; about 220 characters), the turns the
alignment rows of `bench/stream.py` and the overload scenario send. Per turn, min / median
/ max microseconds over the rounds (the garbage collector runs before each):

- keyword patterns: `SafetyPatterns.find` through the literal prefilter; beside it, in
  the same rounds, the prefilter's step before it found which literals a reply holds
  first: every literal's places grouped, then the patterns they wake checked (ratio:
  now / before; most replies wake no pattern, so only the first step is left);
- the offline classifier (`classify_many`, 64 replies a call as the session stage sends
  them), language identification, and the whole `score_safety_many` per chunk of 64.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from overload import benign_replies
from traffic import Sessions

from worker.config import load_settings
from worker.suites.alignment.scoring import (
    classifier_from_settings,
    distinct_sentences,
    patterns_from_settings,
    score_safety_many,
    shipped_identifier,
)
from worker.suites.literal_prefilter import code_points, fold

CHUNK = 64  # replies per scoring call, as the session stage's chunks


def turns(count: int) -> list[str]:
    """`count` benign turns, as `bench/traffic.py` writes them."""
    sessions = Sessions(benign_replies())
    found = []
    for index in range(count):
        session, turn, _, text = sessions.turn(index)
        found.append(f"{text} Ref {session}-{turn}.")
    return found


def per_turn(step: Callable[[], object], count: int, rounds: int) -> list[float]:
    """Microseconds per turn of `step` (which reads `count` turns), once per round."""
    times = []
    for _ in range(rounds):
        gc.collect()
        started = time.perf_counter()
        step()
        times.append((time.perf_counter() - started) / count * 1e6)
    return times


def spread(times: list[float]) -> str:
    return f"{min(times):7.1f} {statistics.median(times):7.1f} {max(times):7.1f}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=2048)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)

    settings = load_settings(None, overrides={}, environ={}).alignment
    patterns = patterns_from_settings(settings).prepare()
    classifier = classifier_from_settings(settings)
    if classifier is None:
        raise SystemExit("the offline safety classifier is off in the default settings")
    identifier = shipped_identifier()
    texts = turns(args.turns)
    chunks = [texts[index : index + CHUNK] for index in range(0, len(texts), CHUNK)]
    replies = [distinct_sentences(text) for text in texts]
    prefilter = patterns._prefilter
    n, rounds = len(texts), args.rounds
    print(f"{n} turns, {sum(map(len, texts)) / n:.0f} characters on average; us per turn")

    def keywords() -> None:
        for text in texts:
            patterns.find(text)

    def keywords_before() -> None:  # every literal's places first, as before
        for text in texts:
            folded = fold(text)
            assert folded is not None
            codes = code_points(folded)
            starts = prefilter._literal_starts(folded, codes)
            if prefilter._tried(starts.keys()):
                patterns.find(text)

    now, before = [], []
    for _ in range(rounds):  # alternated, so that load from elsewhere weighs on both
        now += per_turn(keywords, n, 1)
        before += per_turn(keywords_before, n, 1)
    ratios = [a / b for a, b in zip(now, before, strict=True)]
    print(f"{'step':34s} {'min':>7s} {'median':>7s} {'max':>7s}")
    print(f"{'keyword patterns':34s} {spread(now)}")
    print(f"{'keyword patterns, places first':34s} {spread(before)}")
    low, mid, high = min(ratios), statistics.median(ratios), max(ratios)
    print(f"{'  ratio now / before':34s} {low:7.2f} {mid:7.2f} {high:7.2f}")
    steps: list[tuple[str, Callable[[], object]]] = [
        (  # with splitting the replies into sentences, as `score_safety_many` does
            "classifier (64 a call)",
            lambda: [classifier.classify_many(c) for c in chunks_of(chunks)],
        ),
        (
            "language identification",
            lambda: [identifier.turn_languages(r, t) for r, t in zip(replies, texts, strict=True)],
        ),
        (
            "score_safety_many (64 a call)",
            lambda: [
                score_safety_many(chunk, settings, patterns, classifier, identifier)
                for chunk in chunks
            ],
        ),
    ]
    for name, step in steps:
        print(f"{name:34s} {spread(per_turn(step, n, rounds))}")


def chunks_of(chunks: list[list[str]]) -> list[list[list[str]]]:
    """Each chunk's replies as their distinct sentences (what `classify_many` reads)."""
    return [[distinct_sentences(text) for text in chunk] for chunk in chunks]


if __name__ == "__main__":
    main()
