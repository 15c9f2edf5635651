"""The scoring pool: cases scored in child processes, each under the deadline."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from tests.streamkit import make_config, settings_of
from worker.scoring_pool import Case, ScoringPool
from worker.suites.base import CaseScorer, Scored


def echo_scorer(settings: Any) -> CaseScorer:
    """A test suite's scorer: spins on "spin", dies on "die", fails on "bug"."""

    def score(payload: str) -> Scored:
        if payload == "die":
            os._exit(9)
        if payload == "bug":
            raise ValueError("a scorer bug")
        while payload == "spin":
            pass
        return Scored(scores={"length": float(len(payload))})

    return score


@pytest.fixture
def pool() -> Iterator[ScoringPool]:
    settings = settings_of(make_config(limits={"scoring_deadline": "0.5s"}))
    built = ScoringPool(settings, {"echo": echo_scorer}, processes=2)
    yield built
    built.close()


def cases(*payloads: str) -> list[Case]:
    return [("echo", payload, len(payload)) for payload in payloads]


def test_a_task_past_the_deadline_is_stopped_and_the_rest_of_its_batch_is_scored(
    pool: ScoringPool,
) -> None:
    outcomes = pool.score_blocking(cases("a", "bb", "spin", "dddd"))
    assert [o.scored.scores["length"] if o.scored else o.reason for o in outcomes] == [
        1.0,
        2.0,
        "scoring_timeout",
        4.0,
    ]
    assert "limits.scoring_deadline (0.5 s)" in outcomes[2].message
    # the pool recovered: its killed process was replaced
    (again,) = pool.score_blocking(cases("eeeee"))
    assert again.scored is not None and again.scored.scores["length"] == 5.0


def test_a_case_that_kills_its_process_or_raises_is_a_scoring_error(pool: ScoringPool) -> None:
    outcomes = pool.score_blocking(cases("a", "die", "bug", "spin", "b"))
    assert [o.reason for o in outcomes] == [
        None,
        "scoring_error",
        "scoring_error",
        "scoring_timeout",
        None,
    ]
    assert "died" in outcomes[1].message
    assert "a scorer bug" in outcomes[2].message


def test_an_unknown_suite_is_rejected_in_the_child(pool: ScoringPool) -> None:
    (outcome,) = pool.score_blocking([("nope", "x", 1)])
    assert outcome.reason == "unknown_suite"


def test_many_cases_go_in_chunks_and_keep_their_order(pool: ScoringPool) -> None:
    payloads = ["x" * (n % 7) for n in range(500)]
    outcomes = pool.score_blocking(cases(*payloads))
    assert [o.scored.scores["length"] for o in outcomes if o.scored] == [
        float(len(p)) for p in payloads
    ]
