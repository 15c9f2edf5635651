"""The worker's topics are reported gone only when two checks in a row miss them, never
while the broker cannot be asked, and only while the worker is active; the stop that
follows ends the process by its deadline if it hangs."""

from __future__ import annotations

import asyncio
import threading

from worker.ops.topic_watch import StopDeadline, TopicWatch, missing_topics, topic_check


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


class Exits:
    """What a `StopDeadline` did, in order, with an event set by its exit."""

    def __init__(self, fail_before_exit: bool = False) -> None:
        self.calls: list[str | int] = []
        self.exited = threading.Event()
        self.fail_before_exit = fail_before_exit

    def before_exit(self) -> None:
        self.calls.append("helpers stopped")
        if self.fail_before_exit:
            raise RuntimeError("a helper would not stop")

    def exit(self, code: int) -> None:
        self.calls.append(code)
        self.exited.set()


def test_a_stop_that_hangs_past_its_deadline_stops_the_helpers_then_exits_with_its_code() -> None:
    exits = Exits()
    deadline = StopDeadline(0.05, 3, exits.before_exit, exits.exit)
    deadline.arm()
    deadline.arm()  # a second report of the missing topics: still one deadline
    assert exits.exited.wait(5)
    assert exits.calls == ["helpers stopped", 3]


def test_a_helper_that_fails_to_stop_does_not_keep_the_process_alive() -> None:
    exits = Exits(fail_before_exit=True)
    StopDeadline(0.01, 3, exits.before_exit, exits.exit).arm()
    assert exits.exited.wait(5)
    assert exits.calls == ["helpers stopped", 3]


def test_a_stop_that_ends_in_time_exits_as_it_would_have() -> None:
    exits = Exits()
    deadline = StopDeadline(0.2, 3, exits.before_exit, exits.exit)
    deadline.arm()
    deadline.cancel()
    assert not exits.exited.wait(0.5)
    assert exits.calls == []
    StopDeadline(0.01, 3, exits.before_exit, exits.exit).cancel()  # never armed: nothing to do
