"""The worker's topics are reported gone only when two checks in a row miss them, never
while the broker cannot be asked, and only while the worker is active."""

from __future__ import annotations

import asyncio

from worker.ops.topic_watch import TopicWatch, missing_topics, topic_check


def test_missing_topics_are_the_required_ones_not_listed_sorted() -> None:
    assert missing_topics({"b", "a", "c"}, ["c", "other"]) == ["a", "b"]
    assert missing_topics({"a"}, ["a", "b"]) == []


def test_one_miss_is_not_enough_two_in_a_row_are() -> None:
    watch = TopicWatch({"in", "out"})
    assert watch.check(["out"]) == []  # a broker still loading its topics
    assert watch.check(["in", "out"]) == []
    assert watch.check(["out"]) == []
    assert watch.check([]) == ["in", "out"]


async def test_the_timer_check_asks_only_while_active_and_reports_confirmed_misses() -> None:
    answers: list[list[str] | Exception] = [[], TimeoutError(), []]
    gone: list[list[str]] = []
    active = False

    async def list_topics() -> list[str]:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    check = topic_check(TopicWatch({"in"}), list_topics, lambda: active, gone.append, 1)
    await check()
    assert len(answers) == 3  # not ready yet: the broker is not asked
    active = True
    await check()  # first miss
    await check()  # unreachable: no verdict either way
    assert gone == []
    await check()  # second miss
    assert gone == [["in"]] and answers == []


async def test_a_broker_that_does_not_answer_in_time_gives_no_verdict() -> None:
    gone: list[list[str]] = []

    async def silent() -> list[str]:
        await asyncio.sleep(10)
        return []

    watch = TopicWatch({"in"}, confirmations=1)
    check = topic_check(watch, silent, lambda: True, gone.append, 0.05)
    await check()
    assert gone == []
