"""The input first: how many input records wait for the score stage, and the session
stage giving way while there are too many.

Both stages share the event loop and the scoring processes. Past the worker's capacity
on the suite that keeps sessions, the session stage (the costlier per turn) took as much
of them as the score stage, the score stage fell behind the input too (tens of seconds
at 2x capacity, `bench/overload.py`), and with it the sample of turns the provisional
gate verdicts are judged on (`worker.gates.early`): the page came late. The score stage
now reports, per micro-batch, how many records of its input partitions are still
waiting (each partition's high watermark past the batch's last offset); while more than
`stream.input_backlog` wait, the session stage holds each of its micro-batches back
until they are taken, for at most `stream.input_backlog_hold` (so sessions still move,
a batch at least every hold). The turns it holds back wait in Kafka and get their full
results once the input is read; nothing is dropped or reordered.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable


class InputBacklog:
    """The input records waiting for the score stage, per input partition (as of the
    score stage's last micro-batch from it), and the wait of a stage that gives way to it.
    `limit` None: nobody gives way."""

    def __init__(
        self,
        limit: int | None,
        hold: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limit = limit
        self.hold = hold
        self.clock = clock
        self._waiting: dict[int, int] = {}
        self._clear = asyncio.Event()
        self._clear.set()
        self.held_seconds = 0.0  # in all, by `give_way`

    @property
    def waiting(self) -> int:
        """Input records waiting, over the partitions seen since the last `forget`."""
        return sum(self._waiting.values())

    @property
    def behind(self) -> bool:
        """More than `limit` input records wait."""
        return self.limit is not None and self.waiting > self.limit

    def observe(self, partition: int, highwater: int | None, last_offset: int) -> None:
        """A micro-batch took `partition` up to `last_offset`; `highwater`: the partition's
        end offset as the consumer last heard it (None: unknown, nothing counted)."""
        self._waiting[partition] = 0 if highwater is None else max(0, highwater - last_offset - 1)
        self._update()

    def forget(self) -> None:
        """The partitions were reassigned: nothing is known to wait."""
        self._waiting.clear()
        self._update()

    def _update(self) -> None:
        if self.behind:
            self._clear.clear()
        else:
            self._clear.set()

    async def give_way(self) -> float:
        """Wait while the input is `behind`, at most `hold` seconds; the seconds waited."""
        if not self.behind:
            return 0.0
        started = self.clock()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._clear.wait(), self.hold)
        held = self.clock() - started
        self.held_seconds += held
        return held


__all__ = ["InputBacklog"]
