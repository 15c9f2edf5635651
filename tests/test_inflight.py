"""Poison-pill marks: a batch marks its range, a crash inside it sends the next attempt
record by record, and a record the worker died on too often is a poison pill."""

from __future__ import annotations

from typing import Any

from worker.stream.inflight import InflightGuard

KEY = "in|0"


def test_a_finished_batch_leaves_nothing_suspect() -> None:
    guard = InflightGuard({}, limit=2)
    assert not guard.begin_batch(KEY, 0, 99)
    guard.end(KEY)
    assert not guard.begin_batch(KEY, 50, 149)  # a replay after a clean restart


def test_a_crash_inside_a_batch_makes_its_replay_go_record_by_record() -> None:
    marks: dict[str, Any] = {}
    InflightGuard(marks, limit=2).begin_batch(KEY, 100, 199)  # the worker dies in it
    restarted = InflightGuard(marks, limit=2)
    assert restarted.begin_batch(KEY, 90, 250)  # the replay overlaps: suspect
    assert restarted.begin_record(KEY, 90) == 1  # before the range: a first attempt
    assert restarted.begin_record(KEY, 100) == 2  # inside it: the batch was attempt one
    assert not InflightGuard(marks, limit=2).begin_batch(KEY, 300, 399)


def test_a_record_the_worker_dies_on_twice_is_a_poison_pill_on_the_third_try() -> None:
    marks: dict[str, Any] = {}
    InflightGuard(marks, limit=2).begin_batch(KEY, 0, 9)  # dies on offset 5
    second = InflightGuard(marks, limit=2)
    assert second.begin_batch(KEY, 0, 9)
    for offset in range(5):  # each record of the crashed batch had one attempt already
        assert second.begin_record(KEY, offset) == 2
    assert second.begin_record(KEY, 5) == 2  # dies again
    third = InflightGuard(marks, limit=2)
    assert third.begin_batch(KEY, 5, 9)
    assert third.begin_record(KEY, 5) == 3  # over the limit: dead-lettered, marked done
    assert marks[KEY]["done"]
    assert third.begin_record(KEY, 6) == 1


def test_only_the_range_the_worker_died_in_goes_record_by_record() -> None:
    marks: dict[str, Any] = {}
    InflightGuard(marks, limit=2).begin_batch(KEY, 100, 199)
    restarted = InflightGuard(marks, limit=2)
    assert restarted.begin_batch(KEY, 90, 400)
    assert [restarted.is_suspect(KEY, o) for o in (99, 100, 199, 200)] == [
        False,
        True,
        True,
        False,
    ]


def test_a_replay_whose_first_batch_ends_before_the_crash_still_finds_the_poison() -> None:
    """The CI failure: after the second crash (on offset 2) the next worker's first batch
    held offset 1 only; it used to overwrite the mark, and the poison ran a third time."""
    marks: dict[str, Any] = {}
    InflightGuard(marks, limit=2).begin_batch(KEY, 0, 3)  # dies on offset 2
    second = InflightGuard(marks, limit=2)
    assert second.begin_batch(KEY, 0, 3)
    assert [second.begin_record(KEY, offset) for offset in (0, 1, 2)] == [2, 2, 2]  # dies
    third = InflightGuard(marks, limit=2)
    assert not third.begin_batch(KEY, 1, 1)  # committed up to 1: a batch before the crash
    third.end(KEY)
    assert third.begin_batch(KEY, 2, 3)  # the crashed offset: record by record again
    assert third.is_suspect(KEY, 2) and not third.is_suspect(KEY, 3)
    assert third.begin_record(KEY, 2) == 3  # over the limit: a poison pill
    assert marks[KEY]["done"]
    assert not InflightGuard(marks, limit=2).begin_batch(KEY, 4, 9)  # past it: forgotten
    assert "ahead" not in marks[KEY]


def test_a_crash_before_a_range_kept_ahead_does_not_forget_it() -> None:
    marks: dict[str, Any] = {"in|0": {"first": 5, "last": 5, "attempts": 2, "done": False}}
    first = InflightGuard(marks, limit=2)
    assert not first.begin_batch(KEY, 1, 2)  # dies on offset 2 this time
    second = InflightGuard(marks, limit=2)
    assert second.begin_batch(KEY, 1, 9)
    assert [second.is_suspect(KEY, o) for o in (1, 2, 3, 5)] == [True, True, False, True]
    assert second.begin_record(KEY, 2) == 2  # and dies again on it
    third = InflightGuard(marks, limit=2)
    assert third.begin_batch(KEY, 2, 9)
    assert third.begin_record(KEY, 2) == 3  # a poison pill
    assert third.begin_record(KEY, 5) == 3  # the older one, still remembered


def test_reached_is_the_furthest_offset_ever_begun_and_never_moves_back() -> None:
    marks: dict[str, Any] = {}
    assert InflightGuard(marks, limit=2).reached(KEY) is None  # nothing begun: a backlog folds
    first = InflightGuard(marks, limit=2)
    assert not first.begin_batch(KEY, 0, 99)  # its outputs may be out when it dies at 40
    assert first.reached(KEY) == 99
    second = InflightGuard(marks, limit=2)
    assert second.begin_batch(KEY, 0, 99)
    assert second.begin_record(KEY, 40) == 2  # record by record behind the batch's end
    assert second.reached(KEY) == 99  # still: 41..99 may have been contributed
    second.end(KEY)
    assert not InflightGuard(marks, limit=2).begin_batch(KEY, 100, 149)
    assert InflightGuard(marks, limit=2).reached(KEY) == 149


def test_a_batch_begun_while_the_one_before_finishes_covers_both_until_it_ends() -> None:
    """Overlapped batches (`worker/stream/overlap.py`): the worker begins 100..199 while
    0..99 is still being published; dying then sends both ranges record by record."""
    marks: dict[str, Any] = {}
    guard = InflightGuard(marks, limit=2)
    assert not guard.begin_batch(KEY, 0, 99)
    assert not guard.begin_batch(KEY, 100, 199)  # its own open batch is not a crash
    assert (marks[KEY]["first"], marks[KEY]["last"], marks[KEY]["done"]) == (0, 199, False)
    restarted = InflightGuard(dict(marks), limit=2)  # the worker dies before 0..99 ends
    assert restarted.begin_batch(KEY, 0, 199)
    assert all(restarted.is_suspect(KEY, offset) for offset in (0, 99, 100, 199))
    guard.end(KEY)  # 0..99 finished: the mark keeps the batch still open
    assert (marks[KEY]["first"], marks[KEY]["last"], marks[KEY]["done"]) == (100, 199, False)
    after = InflightGuard(dict(marks), limit=2)  # dying now: only 100..199 is suspect
    assert after.begin_batch(KEY, 0, 199)
    assert not after.is_suspect(KEY, 99) and after.is_suspect(KEY, 100)
    guard.end(KEY)
    assert marks[KEY]["done"] and marks[KEY]["reached"] == 199
    assert not InflightGuard(marks, limit=2).begin_batch(KEY, 150, 249)  # a clean replay


def test_overlapped_batches_keep_a_crashed_range_ahead_of_them() -> None:
    marks: dict[str, Any] = {KEY: {"first": 300, "last": 309, "attempts": 1, "done": False}}
    guard = InflightGuard(marks, limit=2)
    assert not guard.begin_batch(KEY, 0, 99)  # the crashed range lies ahead: kept
    assert not guard.begin_batch(KEY, 100, 199)
    assert marks[KEY]["ahead"]["first"] == 300
    assert guard.begin_batch(KEY, 200, 305)  # reaching it: record by record
    assert guard.is_suspect(KEY, 300) and not guard.is_suspect(KEY, 299)


def test_three_batches_in_hand_are_all_covered_until_each_ends() -> None:
    """`stream.score_batches_in_hand` 3: two batches begun while the first finishes; a
    crash at any point sends every range still open record by record, and only those."""
    marks: dict[str, Any] = {}
    guard = InflightGuard(marks, limit=2)
    for first in (0, 100, 200):
        assert not guard.begin_batch(KEY, first, first + 99)
    assert (marks[KEY]["first"], marks[KEY]["last"]) == (0, 299)
    for finished, still_open in ((0, 100), (100, 200)):
        guard.end(KEY)  # the oldest finished
        restarted = InflightGuard(dict(marks), limit=2)  # the worker dies now
        assert restarted.begin_batch(KEY, 0, 299)
        assert not restarted.is_suspect(KEY, finished + 99)
        assert all(restarted.is_suspect(KEY, o) for o in range(still_open, 300, 99))
    guard.end(KEY)
    assert marks[KEY]["done"] and marks[KEY]["reached"] == 299
