"""Final aggregate messages of closed windows, computed where the caller chooses.

A final aggregate carries a bootstrap interval per metric and the worst cases of the
gated metrics: a few milliseconds of arithmetic per window, which on a long backlog
(hundreds of windows closing) took a third of the worker's event loop and held the
per-case results behind it. The window stage hands a marker's closed windows to a
scoring child (`final_messages`, pure: states in, messages out) and awaits them, so the
loop publishes results meanwhile.
"""

from __future__ import annotations

import pickle
from collections.abc import Mapping, Sequence
from datetime import datetime

from schemas.outputs import Aggregate
from worker.aggregation.message import to_message
from worker.suites import registry
from worker.suites.base import State


def pack_states(states: Sequence[State]) -> bytes:
    """The states as one picklable value, taken now: the caller's windows may change
    while another process reads them."""
    return pickle.dumps(list(states), protocol=pickle.HIGHEST_PROTOCOL)


def final_messages(
    packed: bytes, emitted_at: datetime, worst_metrics: Mapping[str, Sequence[str]]
) -> list[Aggregate | None]:
    """The final message of each packed state (`pack_states`), in order. None for a
    state whose suite this process does not know (a suite registered at run time by the
    caller only): the caller builds that one itself."""
    messages: list[Aggregate | None] = []
    for state in pickle.loads(packed):  # our own bytes, from this worker
        suite = state["suite"]
        if registry.find(suite) is None:
            messages.append(None)
            continue
        messages.append(
            to_message(
                state,
                True,
                emitted_at,
                registry.AGGREGATORS[suite],
                confidence_intervals=True,
                worst_metrics=worst_metrics.get(suite, ()),
            )
        )
    return messages
