"""A commit that gets no answer is abandoned as not done after the bound, so a rebalance
or a stop that waits for it goes on; answers within the bound pass through unchanged."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

import pytest

from worker.stream.faust_patches.commit_bound import bound_commits, bounded


async def test_a_commit_that_never_ends_reports_not_done_after_the_bound() -> None:
    started = asyncio.Event()
    cancelled = asyncio.Event()

    async def never_answered(offsets: Mapping[Any, int]) -> bool:
        started.set()
        try:
            await asyncio.Event().wait()  # aiokafka retrying "unknown topic" for ever
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return True

    loop = asyncio.get_running_loop()
    began = loop.time()
    assert await bounded(never_answered, 0.2)({"tp": 5}) is False
    assert 0.2 <= loop.time() - began < 2
    assert started.is_set() and cancelled.is_set()  # the abandoned attempt does not linger


async def test_answers_within_the_bound_pass_through() -> None:
    async def answered(result: bool) -> bool:
        await asyncio.sleep(0.01)
        return result

    assert await bounded(lambda offsets: answered(True), 1.0)({}) is True
    assert await bounded(lambda offsets: answered(False), 1.0)({}) is False


async def test_errors_of_the_commit_are_not_swallowed() -> None:
    async def refused(offsets: Mapping[Any, int]) -> bool:
        raise RuntimeError("not authorised")

    with pytest.raises(RuntimeError, match="not authorised"):
        await bounded(refused, 1.0)({})


async def test_the_faust_consumer_thread_commits_through_the_bound() -> None:
    calls: list[Mapping[Any, int]] = []

    async def commit(offsets: Mapping[Any, int]) -> bool:
        calls.append(offsets)
        await asyncio.Event().wait()
        return True

    thread = SimpleNamespace(_commit=commit)
    bound_commits(SimpleNamespace(_thread=thread), 0.1)
    assert await thread._commit({"tp": 1}) is False
    assert calls == [{"tp": 1}]
