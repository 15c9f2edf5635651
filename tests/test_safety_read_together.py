"""A chunk of alignment turns has its safety read together (the classifier's numpy steps
once per chunk): every turn gets exactly the verdict it gets alone, and a scorer whose
chunk-wide reading fails still scores each case on its own."""

from __future__ import annotations

import random
from collections.abc import Iterator
from functools import partial
from typing import Any

import pytest

from tests.streamkit import make_config, settings_of
from worker.scoring_pool import ScoringPool
from worker.suites.alignment.safety_classifier import (
    MAX_JUDGED_CHARS,
    distinct_sentences,
    held_out_files,
    load_replies,
    shipped_classifier,
)
from worker.suites.alignment.scoring import score_safety, score_safety_many
from worker.suites.alignment.settings import AlignmentSettings
from worker.suites.alignment.streaming import ALIGNMENT_TURN, alignment_turn_scorer


def held_out_sentences() -> list[str]:
    """Held-out replies of every language, harmful and benign."""
    found = []
    for path in held_out_files():
        for replies in load_replies(path).values():
            found += replies[:12]
    return found


def sample_replies(seed: int) -> list[str]:
    """Replies of one to five held-out sentences (possibly repeated), an empty one, one
    past the classifier's cost bound, and one in a language it does not cover."""
    rng = random.Random(seed)
    pool = held_out_sentences()
    replies = [" ".join(rng.choices(pool, k=rng.randint(1, 5))) for _ in range(60)]
    long_reply = " ".join(f"Report {i} is ready for review." for i in range(3000))
    assert len(long_reply) > MAX_JUDGED_CHARS
    return [*replies, "", long_reply, "Tämä on suomenkielinen vastaus, ei mitään vaarallista."]


@pytest.mark.parametrize("seed", [1, 2])
def test_replies_classified_together_get_the_verdicts_they_get_alone(seed: int) -> None:
    classifier = shipped_classifier()
    replies = [distinct_sentences(text) for text in sample_replies(seed)]
    together = classifier.classify_many(replies)
    assert together == [classifier.classify_sentences(reply) for reply in replies]
    assert any(verdict.is_flagged for verdict in together)  # the sample holds harm
    assert together[-2].unclassified_sentences > 0  # the reply past the bound


def test_turns_read_together_get_the_safety_they_get_alone() -> None:
    settings = AlignmentSettings()
    texts = sample_replies(3)
    together = score_safety_many(texts, settings)
    alone = [score_safety(text, settings) for text in texts]
    assert together == alone
    assert {safety.coverage for safety in together} == {"full", "keywords_only"}


class _Turns:
    """The alignment turn scorer of a child, counting the turns it read together."""

    def __init__(self, settings: Any, fail: bool = False) -> None:
        self.score = alignment_turn_scorer({}, {}, shipped_classifier(), settings.alignment)
        self.fail = fail

    def prepare(self, turns: list[Any]) -> None:
        if self.fail:
            raise RuntimeError("reading together failed")
        self.score.prepare(turns)

    def __call__(self, turn: Any) -> Any:
        was_prepared = turn[1] in self.score._prepared
        scored = self.score(turn)
        return (was_prepared, scored.safety, scored.coverage)


@pytest.fixture(params=[False, True], ids=["together", "prepare-fails"])
def turn_pool(request: pytest.FixtureRequest) -> Iterator[tuple[ScoringPool, bool]]:
    settings = settings_of(make_config())
    factory = partial(_Turns, fail=request.param)
    built = ScoringPool(settings, {ALIGNMENT_TURN: factory}, processes=1)
    yield built, request.param
    built.close()


def test_the_pool_reads_a_chunks_turns_together(turn_pool: tuple[ScoringPool, bool]) -> None:
    pool, fails = turn_pool
    replies = sample_replies(4)
    texts = replies[:30] + replies[:10]  # a chunk repeating replies reads each of them once
    persona = "northwind-analytics"
    outcomes = pool.score_blocking(
        [(ALIGNMENT_TURN, (persona, text, None), len(text)) for text in texts]
    )
    settings = AlignmentSettings()
    expected = [score_safety(text, settings) for text in texts]
    scored: list[Any] = [o.scored for o in outcomes]
    assert [(safety, coverage) for _, safety, coverage in scored] == [
        (safety.safety, safety.coverage) for safety in expected
    ]
    prepared = [was_prepared for was_prepared, _, _ in scored]
    assert not any(prepared) if fails else all(prepared)
    assert all(o.seconds > 0 for o in outcomes)
