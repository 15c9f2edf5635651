"""The one lateness policy: a window closes at end + grace; an event is in time, partly
late (some of its hopping windows closed) or late (all closed)."""

from __future__ import annotations

from worker.config import WindowConfig
from worker.windowing.lateness import LatenessPolicy, Timeliness

HOPPING = WindowConfig.model_validate({"size": "1h", "step": "5m"})
TUMBLING = WindowConfig.model_validate({"size": "1m"})


def test_a_window_closes_when_the_watermark_reaches_its_end_plus_grace() -> None:
    policy = LatenessPolicy(grace=10.0)
    assert not policy.is_closed(60.0, None)
    assert not policy.is_closed(60.0, 69.999)
    assert policy.is_closed(60.0, 70.0)
    assert policy.closes_at(60.0) == 70.0


def test_tumbling_events_are_in_time_until_their_window_closes_then_late() -> None:
    policy = LatenessPolicy(grace=10.0)
    assert policy.timeliness(30.0, TUMBLING, None) is Timeliness.IN_TIME
    assert policy.timeliness(30.0, TUMBLING, 69.0) is Timeliness.IN_TIME
    assert policy.timeliness(30.0, TUMBLING, 70.0) is Timeliness.LATE


def test_a_hopping_event_is_partly_late_while_its_newest_window_is_open() -> None:
    policy = LatenessPolicy(grace=0.0)
    event = 3600.0 + 30.0  # in the twelve 1h windows starting 0:05 ... 1:00
    assert policy.timeliness(event, HOPPING, 3600.0) is Timeliness.IN_TIME
    assert policy.timeliness(event, HOPPING, 3600.0 + 300.0) is Timeliness.PARTLY_LATE
    assert policy.timeliness(event, HOPPING, 7200.0) is Timeliness.LATE


def test_closed_through_is_the_last_pane_boundary_the_grace_allows() -> None:
    policy = LatenessPolicy(grace=10.0)
    assert policy.closed_through(70.0, 60.0) == 60.0
    assert policy.closed_through(69.0, 60.0) == 0.0
    assert policy.closed_through(615.0, 300.0) == 600.0
