"""The one start-up line: where a worker's start went, stage by stage."""

from __future__ import annotations

from worker.ops.startup import StartupStages, seconds_since_launch


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_each_stage_and_the_total_from_the_launch() -> None:
    clock = FakeClock()
    stages = StartupStages(clock, launched=1.5)  # interpreter and imports before
    with stages.stage("settings"):
        clock.now += 0.25
    clock.now += 0.5  # untimed work between stages is not a stage's, but is in the total
    with stages.stage("models"):
        clock.now += 2.0
    clock.now += 3.0  # joining the group: ends in a callback
    stages.mark("joining the group")
    assert stages.total == 1.5 + 0.25 + 0.5 + 2.0 + 3.0
    assert stages.summary() == (
        "start-up 7.2 s: interpreter and imports 1.5 s, settings 0.2 s, models 2.0 s, "
        "joining the group 3.0 s"
    )


def test_a_stage_that_raises_is_still_timed() -> None:
    clock = FakeClock()
    stages = StartupStages(clock)
    try:
        with stages.stage("topics"):
            clock.now += 1.0
            raise RuntimeError("broker gone")
    except RuntimeError:
        pass
    assert stages.summary() == "start-up 1.0 s: topics 1.0 s"


def test_this_process_has_run_for_a_while() -> None:
    ran = seconds_since_launch()
    assert ran is None or 0.0 <= ran < 3600.0


def test_a_stage_that_ran_beside_others_is_timed_from_its_own_beginning() -> None:
    # the worker joins its group while its models load in another thread: the join is
    # timed from when it began, and the total is the wall time, not the sum of stages
    clock = FakeClock()
    stages = StartupStages(clock)
    joining_from = stages.now()
    with stages.stage("models"):
        clock.now += 1.5
    clock.now += 2.5
    stages.mark("joining the group", since=joining_from)
    assert stages.total == 4.0
    assert stages.summary() == "start-up 4.0 s: models 1.5 s, joining the group 4.0 s"
