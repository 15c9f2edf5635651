"""The scoring pool: cases scored in child processes, each under the deadline."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest

from tests.streamkit import make_config, settings_of
from worker.scoring_pool import Case, ScoringPool
from worker.suites.base import CaseScorer, Scored


def echo_scorer(settings: Any) -> CaseScorer:
    """A test suite's scorer: spins on "spin", dies on "die", fails on "bug", tells its
    process on "pid"."""

    def score(payload: str) -> Scored:
        if payload == "pid":
            return Scored(scores={"pid": float(os.getpid())})
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


GROUP_SIGTERM_SCRIPT = """
import os, signal, time
from tests.streamkit import make_config, settings_of
from tests.test_scoring_pool import echo_scorer
from worker.scoring_pool import ScoringPool

pool = ScoringPool(settings_of(make_config()), {"echo": echo_scorer}, processes=1)
pool.start()
(before,) = pool.score_blocking([("echo", "pid", 3)])
stops = []
signal.signal(signal.SIGTERM, lambda *_: stops.append(1))  # the worker's own handling
os.killpg(os.getpgrp(), signal.SIGTERM)  # e.g. a supervisor stopping the whole group
time.sleep(0.5)
(after,) = pool.score_blocking([("echo", "pid", 3)])
print(len(stops), after.reason, before.scored.scores["pid"] == after.scored.scores["pid"])
pool.close()
"""


def test_a_sigterm_to_the_workers_process_group_leaves_its_children_scoring() -> None:
    """The worker handles SIGTERM (it finishes its batches in hand with its children); a
    signal sent to its whole process group must not kill the children under them: the
    same child scores before and after it."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, "-c", GROUP_SIGTERM_SCRIPT],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
        timeout=120,
        start_new_session=True,  # its own group: the signal stays inside it
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["1", "None", "True"]


async def test_a_case_that_arrives_while_the_pool_is_prepared_waits_then_is_scored(
    pool: ScoringPool,
) -> None:
    # the worker starts its scoring processes in another thread while it joins its group:
    # a case that arrives first waits for them (no second pool), then is scored
    with ThreadPoolExecutor(1) as thread:
        release = threading.Event()

        def prepare() -> None:
            release.wait(10)
            pool.start()

        preparing = thread.submit(prepare)
        pool.prepared_by(preparing)
        scoring = asyncio.ensure_future(pool.score(cases("abc")))
        await asyncio.sleep(0.3)
        assert not scoring.done() and pool._pool is None  # waiting, and no pool started
        release.set()
        (outcome,) = await asyncio.wait_for(scoring, 30)
        assert outcome.scored is not None and outcome.scored.scores["length"] == 3.0


async def test_a_case_never_scores_when_the_preparation_failed(pool: ScoringPool) -> None:
    # the worker is stopping (it logs why): its records are neither scored nor
    # dead-lettered, so the next worker scores them
    failed: Future[None] = Future()
    failed.set_exception(RuntimeError("no model"))
    pool.prepared_by(failed)
    scoring = asyncio.ensure_future(pool.score(cases("abc")))
    await asyncio.sleep(0.3)
    assert not scoring.done() and pool._pool is None
    scoring.cancel()  # the worker's stop
    with pytest.raises(asyncio.CancelledError):
        await scoring
