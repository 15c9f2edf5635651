"""Final aggregate messages of closed windows, computed where the caller chooses.

A final aggregate carries a bootstrap interval per metric and the worst cases of the
gated metrics: a few milliseconds of arithmetic per window, which on a long backlog
(hundreds of windows closing) took 17.5 % of the worker's event loop and held the
per-case results behind it; merging each closed window's panes took about 7 % more.
The window stage hands a marker's closed windows, as their panes, to a scoring
child (`final_messages`, pure: panes in, messages out) and awaits them, so the loop
publishes results meanwhile.
"""

from __future__ import annotations

import pickle
from collections.abc import Mapping, Sequence
from datetime import datetime

from schemas.outputs import Aggregate
from worker.aggregation.message import to_message
from worker.aggregation.state import compact, merge_panes
from worker.suites import registry
from worker.suites.base import State


def pack_windows(windows: Sequence[tuple[State, Sequence[State]]]) -> bytes:
    """Closed windows, each its empty state and its panes' states, as one picklable
    value taken now: the panes change in place once the caller goes on."""
    packed = [(empty, [compact(pane) for pane in panes]) for empty, panes in windows]
    return pickle.dumps(packed, protocol=pickle.HIGHEST_PROTOCOL)


def final_messages(
    packed: bytes, emitted_at: datetime, worst_metrics: Mapping[str, Sequence[str]]
) -> list[Aggregate | None]:
    """The final message of each packed window (`pack_windows`), in order: its panes
    merged (`merge_panes`), then its summary. None for a window whose suite this process
    does not know (a suite registered at run time by the caller only): the caller builds
    that one itself."""
    messages: list[Aggregate | None] = []
    for empty, panes in pickle.loads(packed):  # our own bytes, from this worker
        suite = empty["suite"]
        if registry.find(suite) is None:
            messages.append(None)
            continue
        aggregator = registry.AGGREGATORS[suite]
        messages.append(
            to_message(
                merge_panes(empty, panes, aggregator),
                True,
                emitted_at,
                aggregator,
                confidence_intervals=True,
                worst_metrics=worst_metrics.get(suite, ()),
            )
        )
    return messages
